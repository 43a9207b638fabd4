"""A Connect-protocol (JSON over HTTP/1.1) client of the job's master, for
the processes that run without a rover agent: the roles of a
parameter-server job (ps, worker, chief, evaluator), which the master
starts directly on every platform.

Standard library only. Such a process has the master's address
(ROVER_MASTER_ADDR, host:port, plain HTTP), the job's token (ROVER_TOKEN)
and its node id (ROVER_NODE_ID) in its environment. Only the shard calls
go this way (data.ShardClient): the master names the worker
"<node_id>/<LOCAL_RANK or 0>", and returns its leases to the queue when
the platform reports its node ended, as it does for an agent's workers.
"""

import http.client
import json
import os

from ._agent import AgentError

# The shard methods a process without an agent may call on the master.
SHARD_METHODS = ("RegisterDataset", "LeaseShards", "CompleteShards", "GetDatasetState")


def available():
    """True when this process has no agent but may reach the master."""
    return (not os.environ.get("ROVER_AGENT_SOCKET") and bool(os.environ.get("ROVER_MASTER_ADDR"))
            and bool(os.environ.get("ROVER_TOKEN")) and bool(os.environ.get("ROVER_NODE_ID")))


def worker_id(local):
    """The worker name the master keeps this process's leases under."""
    return "%s/%s" % (os.environ["ROVER_NODE_ID"], local or "0")


def call(method, request, timeout=60.0):
    """Calls MasterService.<method> with a JSON-able request; returns the
    reply. Errors are AgentError, as the agent's: code "unavailable" when
    the master cannot be reached."""
    if method not in SHARD_METHODS:
        raise AgentError("unimplemented", f"{method} needs a rover agent: start the process with `rover run`")
    addr = os.environ["ROVER_MASTER_ADDR"]
    if "://" in addr:
        raise AgentError("invalid_argument", f"ROVER_MASTER_ADDR {addr!r}: give host:port (plain HTTP)")
    host, _, port = addr.rpartition(":")
    body = json.dumps(request).encode()
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request("POST", "/rover.v1.MasterService/" + method, body=body, headers={
            "Content-Type": "application/json", "Connect-Protocol-Version": "1",
            "Authorization": "Bearer " + os.environ["ROVER_TOKEN"]})
        resp = conn.getresponse()
        status, data = resp.status, resp.read()
    except OSError as e:
        raise AgentError("unavailable", f"cannot reach the job's master at {addr}: {e}") from e
    finally:
        conn.close()
    if status != 200:
        try:
            err = json.loads(data)
        except ValueError:
            raise AgentError("unknown", f"the master answered HTTP {status}: {data[:200]!r}") from None
        raise AgentError(err.get("code", "unknown"), err.get("message", ""))
    return json.loads(data) if data else {}
