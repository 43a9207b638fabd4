"""DLRover's ``dlrover.python`` namespace, as far as training scripts import
it: ``common.storage``'s checkpoint deletion strategies."""
