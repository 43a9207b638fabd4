"""A Connect-protocol (JSON over HTTP/1.1) client of the local rover agent.

Standard library only. The agent listens on a unix socket whose path is in
ROVER_AGENT_SOCKET; only the job's user can open it. Connections are kept
open between calls (one per concurrent caller, none shared with a forked
child).
"""

import json
import os
import socket
import threading



class AgentError(RuntimeError):
    """A call to the local agent failed; ``code`` is the Connect error code."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _Connection:
    """One HTTP/1.1 connection to the agent's unix socket, kept open between
    calls. A minimal client of the agent's own server (Go's net/http): a
    POST with a Content-Length, and a reply with a Content-Length or
    chunked; it costs a third of http.client's time per call."""

    def __init__(self, path, timeout):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self._buf = b""
        self.open = True  # False once the agent said it closes the connection

    def close(self):
        self.open = False
        self.sock.close()

    def settimeout(self, timeout):
        self.sock.settimeout(timeout)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Disconnected("the rover agent closed the connection")
        self._buf += chunk

    def _line(self):
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line, self._buf = self._buf[:i], self._buf[i + 2:]
                return line
            if len(self._buf) > _MAX_HEAD:
                raise OSError("the rover agent's reply has an overlong line")
            self._fill()

    def _take(self, n):
        while len(self._buf) < n:
            self._fill()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def post(self, method, body):
        """(status, reply body) of a POST of body to AgentService.<method>."""
        head = _HEAD % (method.encode(), len(body))
        self.sock.sendall(head + body)
        status_line = self._line()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise OSError(f"the rover agent's reply begins {status_line[:80]!r}")
        status, length, chunked = int(parts[1]), None, False
        while True:
            line = self._line()
            if not line:
                break
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value == b"chunked"
            elif name == b"connection" and value == b"close":
                self.open = False
        if chunked:
            data = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():  # trailers
                        pass
                    break
                data.append(self._take(size))
                self._take(2)
            return status, b"".join(data)
        if length is None:  # the body runs to the end of the connection
            self.open = False
            while True:
                try:
                    self._fill()
                except _Disconnected:
                    break
            data, self._buf = self._buf, b""
            return status, data
        return status, self._take(length)


class _Disconnected(ConnectionError):
    """The agent closed the connection."""


_HEAD = (b"POST /rover.v1.AgentService/%s HTTP/1.1\r\nHost: localhost\r\n"
         b"Content-Type: application/json\r\nConnect-Protocol-Version: 1\r\nContent-Length: %d\r\n\r\n")
_MAX_HEAD = 64 << 10


def under_rover():
    """True when this process was started by ``rover run``."""
    return bool(os.environ.get("ROVER_AGENT_SOCKET"))


# Connections to the agent, kept open between calls: a call on a kept
# connection costs a quarter of one that connects first, and a flash
# checkpoint save makes two. Each is used by one call at a time; a forked
# child opens its own.
_lock = threading.Lock()
_idle = []
_idle_pid = os.getpid()
_KEEP = 4  # idle connections kept at most (the caller's threads rarely need more)


def _take(path, timeout):
    """An idle connection to path (and True), else a new one (and False)."""
    global _idle_pid
    with _lock:
        if _idle_pid != os.getpid():
            _idle.clear()  # the parent's: never shared with a child
            _idle_pid = os.getpid()
        while _idle:
            conn = _idle.pop()
            if conn.path == path and conn.open:
                conn.settimeout(timeout)
                return conn, True
            conn.close()
    return _Connection(path, timeout), False


def _give_back(conn):
    with _lock:
        if _idle_pid == os.getpid() and len(_idle) < _KEEP:
            _idle.append(conn)
            return
    conn.close()


def call(method, request, timeout=60.0):
    """Calls AgentService.<method> with a JSON-able request; returns the reply."""
    path = os.environ.get("ROVER_AGENT_SOCKET")
    if not path:
        raise AgentError("unavailable", "ROVER_AGENT_SOCKET is not set: start this script with `rover run`")
    body = json.dumps(request).encode()
    conn = None
    try:
        conn, kept = _take(path, timeout)
        try:
            status, data = conn.post(method, body)
        except (_Disconnected, BrokenPipeError, ConnectionResetError):
            if not kept:
                raise
            # The agent closed the kept connection (it restarted, or shut
            # down idle ones) before it read the request: once more on a
            # new one.
            conn.close()
            conn = _Connection(path, timeout)
            status, data = conn.post(method, body)
    except OSError as e:
        if conn is not None:
            conn.close()
        raise AgentError("unavailable", f"cannot reach the rover agent at {path}: {e}") from e
    except BaseException:
        if conn is not None:
            conn.close()  # interrupted mid-call: what it holds is unknown
        raise
    if conn.open:
        _give_back(conn)
    else:
        conn.close()
    if status != 200:
        try:
            err = json.loads(data)
            raise AgentError(err.get("code", "unknown"), err.get("message", ""))
        except ValueError:
            raise AgentError("unknown", f"HTTP {status}: {data[:200]!r}") from None
    return json.loads(data) if data else {}


def agent_info():
    """Describes this worker's place in the job, as the agent sees it."""
    rank = int(os.environ.get("RANK", "-1"))
    return call("Info", {"rank": rank})
