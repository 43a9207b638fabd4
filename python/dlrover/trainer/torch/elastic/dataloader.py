"""DLRover's ``ElasticDataLoader``: a ``torch.utils.data.DataLoader`` whose
batch size can change while the job runs, set by the script or by a JSON
config file.

    loader = ElasticDataLoader(dataset, batch_size=32, sampler=sampler)
    loader.update_batch_size(64)        # from the next batch on
    loader.update_batch_size()          # re-read the config file
    loader.get_batch_size()             # 64

The config file is DLRover's parallelism config: ``config_file``, else the
file named by ``DLROVER_PARAL_CONFIG_PATH``, else
``/tmp/dlrover/auto_paral_config.json``; a missing file is no config. Its
``{"dataloader": {"version": V, "batch_size": B}}`` sets the batch size to B
when V is above the version applied last (so an old file is applied once,
and a tool changes the batch size by writing a higher version). The file is
re-read only when its modification time or size changed. ``ElasticTrainer``
calls ``update_batch_size()`` after every step, as DLRover's does.

A new batch size takes effect at the next batch the loader draws from its
batch sampler (with ``num_workers`` above 0, after the batches already
prefetched), and ``loader.batch_size`` follows it, unlike DLRover's (whose
``batch_size`` attribute keeps the first value while ``get_batch_size()``
changes). Unlike DLRover's, the config file is never written.
"""

import json
import logging
import os

from torch.utils.data import DataLoader

__all__ = ["ElasticDataLoader"]

ENV_PARAL_CONFIG = "DLROVER_PARAL_CONFIG_PATH"
PARAL_CONFIG = "/tmp/dlrover/auto_paral_config.json"

_log = logging.getLogger(__name__)


class ElasticDataLoader(DataLoader):
    """A DataLoader whose batch size ``update_batch_size`` changes, from an
    argument or from the config file (``config_file``, else
    ``$DLROVER_PARAL_CONFIG_PATH``, else DLRover's default path). Every
    other argument is DataLoader's."""

    def __init__(self, *args, config_file=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._config_version = 0
        self._config_seen = None  # (mtime_ns, size) of the file last read
        self.config_file = config_file or os.environ.get(ENV_PARAL_CONFIG) or PARAL_CONFIG
        self.load_config(self.config_file)

    def _set(self, batch_size):
        if self.batch_sampler is None:
            raise ValueError("ElasticDataLoader: the batch size cannot change when batch_size=None "
                             "(automatic batching off); give the loader a batch_size")
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError(f"ElasticDataLoader: batch_size must be 1 or more, not {batch_size}")
        self.batch_sampler.batch_size = batch_size
        # DataLoader refuses to set batch_size after __init__; it describes
        # the batches drawn, so it follows the batch sampler.
        object.__setattr__(self, "batch_size", batch_size)

    def init_config(self, config_file=None):
        """Applies the config file's batch size (as load_config); kept for
        DLRover's API."""
        self.load_config(config_file)

    def load_config(self, config_file=None):
        """Applies ``{"dataloader": {"version": V, "batch_size": B}}`` from
        config_file (None: this loader's) when V is above the version
        applied last and B above 0. A missing file is nothing to apply; a
        file that is not such JSON is logged and ignored, as DLRover does."""
        path = config_file or self.config_file
        try:
            st = os.stat(path)
        except OSError:
            return
        seen = (path, st.st_mtime_ns, st.st_size)
        if seen == self._config_seen:
            return
        self._config_seen = seen
        try:
            with open(path) as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            _log.warning("ElasticDataLoader: cannot read the config file %s: %s", path, e)
            return
        dl = config.get("dataloader") if isinstance(config, dict) else None
        if not isinstance(dl, dict):
            return
        try:
            version, batch_size = int(dl.get("version", 0)), int(dl.get("batch_size", 0))
        except (TypeError, ValueError):
            _log.warning("ElasticDataLoader: %s: dataloader.version and dataloader.batch_size must be "
                         "integers, not %r", path, dl)
            return
        if version <= self._config_version:
            return
        self._config_version = version
        if batch_size > 0 and self.get_batch_size() != batch_size:
            self._set(batch_size)
            _log.info("ElasticDataLoader: batch size %d from %s (version %d)", batch_size, path, version)

    def update_batch_size(self, batch_size=None):
        """Sets the batch size to batch_size, or, when None, to what the
        config file says (load_config)."""
        if batch_size:
            self._set(batch_size)
        else:
            self.load_config(self.config_file)

    def get_batch_size(self):
        """The batch size of the next batch."""
        return self.batch_sampler.batch_size if self.batch_sampler is not None else None
