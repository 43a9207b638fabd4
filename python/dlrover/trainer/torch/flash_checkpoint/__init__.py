"""DLRover's flash checkpoint API over ``rover.checkpoint.Checkpointer``.

``ddp.DdpCheckpointer``, ``fsdp.FsdpShardCheckpointer`` and
``fsdp.FsdpFullCheckpointer`` save to the node agent's shared memory
(``StorageType.MEMORY``) or to memory and then, in the background, to the
job's checkpoint storage (``StorageType.DISK``). The DeepSpeed, Megatron-LM
and Hugging Face modules are not provided: importing them raises ImportError
saying so and what to use instead.
"""
