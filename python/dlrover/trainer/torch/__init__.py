"""DLRover's PyTorch trainer API: flash checkpoint and the elastic sampler.

The package is named ``torch`` as DLRover's is; inside it, ``import torch``
is still PyTorch (absolute imports).
"""
