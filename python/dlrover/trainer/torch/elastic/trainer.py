"""DLRover's ``ElasticTrainer``: gradient accumulation that keeps the global
batch size of the largest world as the world shrinks.

    trainer = ElasticTrainer(model, dataloader=loader)   # model: a DDP module
    optimizer, scheduler = trainer.prepare(optimizer, scheduler)
    for epoch in range(start_epoch, epochs):
        with trainer.epoch(epoch):                       # or trainer.reset()
            for x, y in loader:
                with trainer.step(fix_total_batch_size=True):
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                    optimizer.zero_grad()

``prepare`` sets ``gradient_accumulation_steps`` to the number of ranks of
the largest world divided by the ranks of now: the largest world is
``WORKER_NUM`` (DLRover's node count) when set, else the ``--nnodes`` MAX
that ``rover run`` started with (``ROVER_MAX_NODES``), else this world's
node count, times ``LOCAL_WORLD_SIZE``. Inside ``step(True)`` the wrapped
optimizer's ``step`` and ``zero_grad`` act only on every
``gradient_accumulation_steps``-th call, and the other calls run under the
model's ``no_sync()`` (DDP: no allreduce), so gradients add up over the
micro-batches and are synchronized once. ``step()`` (the default,
``fix_total_batch_size=False``) steps every time. After each step the
dataloader (an ``ElasticDataLoader``) re-reads its config file.

Where DLRover's differs: when the largest world is not a multiple of this
one, DLRover gives the first ranks one accumulation step more than the
others, so ranks synchronize on different calls and a DDP job hangs or
mixes gradients of different steps; here every rank accumulates the same
ceil(largest / now) steps (the global batch is then at most a rank's
micro-batches larger than the largest world's). DLRover's also computes 0
steps, and divides by zero, when ``WORKER_NUM`` is unset on a world of more
than one node; here the fallbacks above apply and the least is 1. Each
trainer keeps its own counts (DLRover's share one across all trainers of a
process). Synchronized steps are reported to Rover's step progress
(``rover.progress``: hang and straggler detection) instead of DLRover's
runtime-metrics file.
"""

import contextlib
import logging
import math
import os

import torch
import torch.distributed as dist

from .dataloader import ElasticDataLoader

__all__ = ["ElasticTrainer", "GradientState"]

_log = logging.getLogger(__name__)


class GradientState:
    """Whether this call of ``ElasticTrainer.step`` synchronizes gradients
    (``sync_gradients``), the calls so far (``num_backward_steps``) and the
    synchronized ones since the last reset (``num_steps``)."""

    def __init__(self):
        self.sync_gradients = True
        self.num_backward_steps = 0
        self.num_steps = 0
        self.total_steps = 0  # synchronized steps, never reset: what progress reports

    def check_sync_gradient(self, gradient_accumulation_steps):
        """Synchronizes on every gradient_accumulation_steps-th call."""
        self.sync_gradients = self.num_backward_steps % max(int(gradient_accumulation_steps), 1) == 0


class _ElasticOptimizer(torch.optim.Optimizer):
    """optimizer, stepping and zeroing only on the calls that synchronize
    gradients. It is a torch Optimizer (isinstance holds) whose state,
    param_groups and state dicts are the wrapped optimizer's."""

    def __init__(self, optimizer, gradient_state):  # pylint: disable=super-init-not-called
        self.optimizer = optimizer
        self.gradient_state = gradient_state

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, state):
        self.optimizer.state = state

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, param_groups):
        self.optimizer.param_groups = param_groups

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, defaults):
        self.optimizer.defaults = defaults

    def add_param_group(self, param_group):
        self.optimizer.add_param_group(param_group)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none=False):
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none)

    def step(self, closure=None):
        if self.gradient_state.sync_gradients:
            return self.optimizer.step(closure)
        return None

    def __repr__(self):
        return f"ElasticOptimizer({self.optimizer!r})"

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)


class _ElasticLRScheduler:
    """A learning-rate scheduler whose methods are the wrapped one's (as
    DLRover's, its ``step`` steps whenever called)."""

    def __init__(self, scheduler, gradient_state):
        self.scheduler = scheduler
        self.gradient_state = gradient_state

    def step(self, *args, **kwargs):
        return self.scheduler.step(*args, **kwargs)

    def get_last_lr(self):
        return self.scheduler.get_last_lr()

    def get_lr(self):
        return self.scheduler.get_lr()

    def state_dict(self):
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict):
        self.scheduler.load_state_dict(state_dict)

    def print_lr(self, *args, **kwargs):
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name):  # last_epoch, base_lrs, ...
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)


def max_world_ranks():
    """The ranks of the largest world of this job: its node count (WORKER_NUM,
    else ROVER_MAX_NODES, else GROUP_WORLD_SIZE) times LOCAL_WORLD_SIZE."""
    nodes = 0
    for name in ("WORKER_NUM", "ROVER_MAX_NODES", "GROUP_WORLD_SIZE"):
        value = os.environ.get(name, "")
        try:
            nodes = int(value)
        except ValueError:
            if value:
                raise ValueError(f"ElasticTrainer: {name}={value!r} is not a node count; "
                                 "unset it or give an integer") from None
            continue
        if nodes > 0:
            break
    return max(nodes, 1) * max(int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1), 1)


class ElasticTrainer:
    """Keeps the global batch size of the largest world by accumulating
    gradients (``gradient_accumulation_steps``) in a smaller one.

    model: the module trained (a DDP module: its ``no_sync`` skips the
    allreduce of the accumulating steps). dataloader: an ElasticDataLoader,
    whose batch size follows its config file after each step (any other
    loader is used as it is, with a warning)."""

    def __init__(self, model, dataloader=None):
        self.model = model
        self.dataloader = dataloader
        self.gradient_state = GradientState()
        self.gradient_accumulation_steps = 1
        if dataloader is not None and not isinstance(dataloader, ElasticDataLoader):
            _log.warning("ElasticTrainer: the dataloader is a %s, not an ElasticDataLoader: its batch size "
                         "cannot follow the config file", type(dataloader).__name__)

    def prepare(self, optimizer, lr_scheduler=None):
        """Sets gradient_accumulation_steps for the world of now, and returns
        the optimizer (and lr_scheduler, when given) wrapped to step only
        when gradients are synchronized."""
        self._set_gradient_accumulation_steps()
        optimizer = _ElasticOptimizer(optimizer, self.gradient_state)
        if lr_scheduler is not None:
            return optimizer, _ElasticLRScheduler(lr_scheduler, self.gradient_state)
        return optimizer

    def _set_gradient_accumulation_steps(self):
        largest = max_world_ranks()
        world, rank = 1, 0
        if dist.is_available() and dist.is_initialized():
            world, rank = dist.get_world_size(), dist.get_rank()
        else:
            world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.gradient_accumulation_steps = max(math.ceil(largest / max(world, 1)), 1)
        _log.info("ElasticTrainer: rank %d of %d, largest world %d: %d gradient accumulation steps",
                  rank, world, largest, self.gradient_accumulation_steps)

    @contextlib.contextmanager
    def epoch(self, num_epochs=None):
        """An epoch's context: resets num_steps on entry (older DLRover's
        ``with trainer.epoch(i):``)."""
        self.reset()
        yield

    @contextlib.contextmanager
    def step(self, fix_total_batch_size=False):
        """One micro-batch's context. With fix_total_batch_size, gradients
        are synchronized (and the optimizer steps) on every
        gradient_accumulation_steps-th call only, the others run under the
        model's no_sync(); without, every call synchronizes."""
        state = self.gradient_state
        state.num_backward_steps += 1
        if fix_total_batch_size:
            state.check_sync_gradient(self.gradient_accumulation_steps)
        else:
            state.sync_gradients = True
        context = contextlib.nullcontext
        if not state.sync_gradients:
            context = getattr(self.model, "no_sync", context)
        with context():
            yield
        self._after_step()

    def _after_step(self):
        state = self.gradient_state
        if state.sync_gradients:
            state.num_steps += 1
            state.total_steps += 1
            self.report_training_step()
        if isinstance(self.dataloader, ElasticDataLoader):
            self.dataloader.update_batch_size()

    def reset(self):
        """Sets num_steps to 0 (DLRover's scripts call it at each epoch)."""
        self.gradient_state.num_steps = 0

    @property
    def num_steps(self):
        """The synchronized steps since the last reset."""
        return self.gradient_state.num_steps

    def report_training_step(self):
        """Reports the synchronized steps so far to Rover's step progress (a
        no-op outside ``rover run``)."""
        try:
            from rover import progress
        except ImportError:  # the dlrover package used without rover beside it
            return
        progress.step(self.gradient_state.total_steps)
