"""Rover's standby worker interpreter (docs/design/restart.md).

``rover run`` starts one of these per local rank, as

    PYTHON <the worker's interpreter flags> -c <loader> <this file> <fd>

with the worker's environment less its per-round variables. It imports
torch, says it is ready on the control socket ``fd`` (one end of a socket
pair the agent holds the other end of), and waits. A restart then hands it,
over that socket, the new worker's command line, environment, working
directory and standard output and error (as file descriptors), and this
process becomes the worker: it runs the script as ``python SCRIPT`` or
``python -m MODULE`` would, in the ``__main__`` module, with the same
``sys.argv``, ``sys.path``, ``os.environ``, signal dispositions and exit
status, and /proc/PID/cmdline rewritten to the cold command line (the
agent pads the standby's with empty arguments to make room). The accepted
differences from a cold start: torch (and what it imports) is already in
``sys.modules``, /proc/PID/cmdline ends in NUL bytes where the cold command
line is shorter than the standby's, and a traceback printed by an
exception hook the script installs itself may start with this file's
frames.

Standard library only. It is not imported as part of the ``rover`` package:
the loader compiles it straight into ``__main__``, whose namespace is
emptied before the script runs.
"""


def _rover_standby_main():
    import sys

    before = set(sys.modules)
    import os
    import threading

    ctl_fd = int(sys.argv[2])

    def warm():
        # The import runs at a low priority (nice 10), in a thread of its
        # own, so that the job's running workers keep most of the CPUs;
        # Linux's nice value is per thread, and this thread ends with the
        # import, so the worker's own threads keep the normal one.
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        try:
            import torch  # noqa: F401  (the point of a standby)
        except ImportError:
            pass

    t = threading.Thread(target=warm, name="rover-standby-import")
    t.start()
    t.join()
    del t, warm
    # What stays imported: what the interpreter's startup imported, and
    # torch with what it imports (threading and socket among them).
    keep = before | set(sys.modules) if "torch" in sys.modules else before
    loader_class = sys.modules["_frozen_importlib_external"].SourceFileLoader
    import socket

    ctl = socket.socket(fileno=ctl_fd)
    ctl.sendall(b"R")
    head, fds, _, _ = socket.recv_fds(ctl, 8, 2)
    while 0 < len(head) < 8:
        more = ctl.recv(8 - len(head))
        if not more:
            break
        head += more
    if len(head) < 8 or len(fds) != 2:  # the agent closed the socket: no restart for us
        os._exit(0)
    size = int.from_bytes(head, "big")
    payload = bytearray()
    while len(payload) < size:
        chunk = ctl.recv(min(size - len(payload), 1 << 20))
        if not chunk:
            os._exit(0)
        payload += chunk
    ctl.close()
    del ctl
    fields = bytes(payload).split(b"\0")
    kind, cwd = fields[0], fields[1]
    n_orig = int(fields[2])
    orig_argv = fields[3 : 3 + n_orig]
    n_argv = int(fields[3 + n_orig])
    argv = fields[4 + n_orig : 4 + n_orig + n_argv]
    env = fields[4 + n_orig + n_argv : -1]

    # The streams: fd 1 and 2 become the worker's; fd 0 stays /dev/null.
    for target, fd in zip((1, 2), fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)

    os.chdir(cwd)
    environb = os.environb
    environb.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        environb[k] = v

    _rover_standby_set_cmdline(orig_argv)
    sys.orig_argv = [os.fsdecode(a) for a in orig_argv]
    sys.argv = [os.fsdecode(a) for a in argv]
    for name in set(sys.modules) - keep:
        del sys.modules[name]

    hook = getattr(sys.modules.get("sitecustomize"), "_rover_stacks_hook", None)
    if hook is not None:  # rover's startup hook, now that ROVER_STACKS_FILE is set
        try:
            hook()
        except Exception:
            pass

    g = sys.modules["__main__"].__dict__
    kept = {k: g[k] for k in ("__name__", "__package__", "__spec__", "__builtins__") if k in g}
    g.clear()
    g.update(kept)
    g["__doc__"] = None
    g["__annotations__"] = {}

    if kind == b"module":
        if not sys.flags.safe_path:  # -c put "" first, as -m puts the directory
            sys.path[0] = os.getcwd()
        module = sys.argv[0]
        sys.argv[0] = "-m"
        import runpy

        runpy._run_module_as_main(module, alter_argv=True)
        return
    script = sys.argv[0]
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    if not sys.flags.safe_path:  # -c put "" first, as a script puts its directory
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write(f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    g["__loader__"] = loader_class("__main__", path)
    g["__file__"] = path
    g["__cached__"] = None
    code = compile(source, path, "exec", dont_inherit=True)
    del source, fields, payload, env, argv, orig_argv
    exec(code, g)


def _rover_standby_set_cmdline(args):
    """Writes args over this process's argument area, the memory the kernel
    shows as /proc/PID/cmdline, NUL-separated and NUL-padded (cut, if they
    do not fit, ending in a NUL, which keeps the kernel from reading on
    into the environment). Best effort: a kernel that hides the area's
    bounds leaves the standby's command line."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Fields after the command name, which may hold spaces and ")":
        # the first is field 3 (state); arg_start and arg_end are 48 and 49.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])
        if not 0 < start < end:
            return
        data = b"\0".join(args)[: end - start - 1]
        data += b"\0" * (end - start - len(data))
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(data)
    except (OSError, ValueError, IndexError):
        pass


def _rover_standby_run(run, own_file):
    """Runs run as the top of a script: an uncaught exception ends the
    process as it would a cold one, with its traceback printed without
    this file's frames."""
    import sys

    try:
        run()
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == own_file:
            tb = tb.tb_next
        e.__traceback__ = tb
        try:
            sys.excepthook(type(e), e, tb)
        except BaseException:
            pass
        # Python's own end of an uncaught exception (exit status 1, or
        # death by SIGINT for KeyboardInterrupt), with nothing more printed.
        sys.excepthook = lambda *args: None
        raise


_rover_standby_run(_rover_standby_main, __import__("sys").argv[1])
