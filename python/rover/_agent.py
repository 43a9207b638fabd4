"""A Connect-protocol (JSON over HTTP/1.1) client of the local rover agent.

Standard library only. The agent listens on a unix socket whose path is in
ROVER_AGENT_SOCKET; only the job's user can open it.
"""

import http.client
import json
import os
import socket

_SERVICE = "/rover.v1.AgentService/"


class AgentError(RuntimeError):
    """A call to the local agent failed; ``code`` is the Connect error code."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def under_rover():
    """True when this process was started by ``rover run``."""
    return bool(os.environ.get("ROVER_AGENT_SOCKET"))


def call(method, request, timeout=60.0):
    """Calls AgentService.<method> with a JSON-able request; returns the reply."""
    path = os.environ.get("ROVER_AGENT_SOCKET")
    if not path:
        raise AgentError("unavailable", "ROVER_AGENT_SOCKET is not set: start this script with `rover run`")
    conn = _UnixConnection(path, timeout)
    try:
        body = json.dumps(request).encode()
        conn.request("POST", _SERVICE + method, body=body,
                     headers={"Content-Type": "application/json", "Connect-Protocol-Version": "1"})
        resp = conn.getresponse()
        data = resp.read()
    except OSError as e:
        raise AgentError("unavailable", f"cannot reach the rover agent at {path}: {e}") from e
    finally:
        conn.close()
    if resp.status != 200:
        try:
            err = json.loads(data)
            raise AgentError(err.get("code", "unknown"), err.get("message", ""))
        except ValueError:
            raise AgentError("unknown", f"HTTP {resp.status}: {data[:200]!r}") from None
    return json.loads(data) if data else {}


def agent_info():
    """Describes this worker's place in the job, as the agent sees it."""
    rank = int(os.environ.get("RANK", "-1"))
    return call("Info", {"rank": rank})
