"""DLRover's ``dlrover.python.common``: ``storage`` (checkpoint deletion
strategies)."""
