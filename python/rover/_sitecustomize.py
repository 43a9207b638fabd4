"""Rover's startup hook for workers: ``rover run`` extracts this file as
``sitecustomize.py`` into the directory it puts first on the workers'
PYTHONPATH, so Python runs it at startup, before the training script.

It arranges for the worker's Python stacks to be written on SIGUSR1, which
the agent sends when the job hangs (docs/design/hang-and-stragglers.md):
``faulthandler.register(SIGUSR1, file=<$ROVER_STACKS_FILE>, all_threads=True)``.
faulthandler writes from its C signal handler, so the dump works while the
interpreter is stuck in native code or in an endless Python loop. Marker
lines in the file tell the agent whether it may send SIGUSR1 to a process:

    rover-stacks: registered pid=<pid>
    rover-stacks: released pid=<pid>

A process that had a SIGUSR1 handler already is left alone (no marker), and
one whose program installs its own SIGUSR1 handler later (``signal.signal``)
gets it, and the hook writes the "released" marker: the agent then sends it
no SIGUSR1. Without $ROVER_STACKS_FILE (not started by ``rover run``) the
hook does nothing. In a worker of ``rover run`` it also installs the
collective timing of ``rover/_colltime.py``. A user's own sitecustomize.py later on the path still
runs. Standard library only; every error is swallowed: a startup hook must
never break a worker.
"""


def _rover_stacks_hook():
    import os

    path = os.environ.get("ROVER_STACKS_FILE")
    if not path:
        return
    import faulthandler
    import signal

    if signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL:
        return
    f = open(path, "ab", buffering=0)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
    f.write(b"rover-stacks: registered pid=%d\n" % os.getpid())
    original = signal.signal

    def rover_signal(signum, handler):
        if signum == signal.SIGUSR1:
            try:
                faulthandler.unregister(signal.SIGUSR1)
                f.write(b"rover-stacks: released pid=%d\n" % os.getpid())
            except Exception:
                pass
        return original(signum, handler)

    rover_signal.__doc__ = original.__doc__
    rover_signal.__wrapped__ = original
    signal.signal = rover_signal
    globals()["_rover_stacks_file"] = f  # faulthandler needs it open


def _rover_collective_hook():
    """Times torch's collectives (rover/_colltime.py) in workers of rover run."""
    import os

    if not os.environ.get("ROVER_AGENT_SOCKET"):
        return
    from rover import _colltime

    _colltime.install()


def _rover_chain():
    """Runs the next sitecustomize on sys.path, which this file shadows."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


try:
    _rover_stacks_hook()
except Exception:
    pass
try:
    _rover_collective_hook()
except Exception:
    pass
try:
    _rover_chain()
except Exception as e:  # the user's own hook failed: say so, as Python would
    import sys

    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)
