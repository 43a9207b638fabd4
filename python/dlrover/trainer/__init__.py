"""DLRover's trainer API (``dlrover.trainer.torch``), served by Rover."""
