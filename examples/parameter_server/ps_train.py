"""A parameter-server job in PyTorch that reads its cluster from TF_CONFIG.

Run it with `rover submit ps_job.yaml` (docs/parameter-server.md). Every
process of the job runs this script; TF_CONFIG says its role:

* ps: holds a slice of the model's parameters, applies the gradients the
  workers push (SGD), and saves its slice to CKPT_DIR/ps-INDEX.pt every few
  updates, from which it restores when it starts again;
* worker: pulls the parameters from every ps, computes the gradient of its
  own batches and pushes each ps its slice of it;
* chief: waits until every worker is done, then evaluates the model and
  prints the final loss; its success ends the job.

The processes talk over torch.distributed.rpc (TensorPipe), on the
addresses TF_CONFIG gives: the chief's address hosts the rpc world's store.
The model is a linear regression on synthetic data, small enough for a CPU.
"""
import argparse
import json
import os
import threading

import torch
import torch.distributed.rpc as rpc

DIM = 16

_lock = threading.Lock()
_state = {}          # the ps's slice: "w", "updates", "ckpt"
_done = []           # the chief's: (worker, final loss) as workers finish
_done_cv = threading.Condition()


def true_weights():
    g = torch.Generator().manual_seed(1234)
    return torch.randn(DIM, generator=g)


def batch(worker, step, size=64):
    g = torch.Generator().manual_seed(worker * 100003 + step)
    x = torch.randn(size, DIM, generator=g)
    return x, x @ true_weights()


def slices(n_ps):
    """The indices of the parameters each ps holds."""
    return [list(range(j, DIM, n_ps)) for j in range(n_ps)]


# --- on the ps -------------------------------------------------------------

def ps_start(index, n_ps, ckpt_dir):
    path = os.path.join(ckpt_dir, "ps-%d.pt" % index)
    w, updates = torch.zeros(len(slices(n_ps)[index])), 0
    if os.path.exists(path):
        saved = torch.load(path)
        w, updates = saved["w"], saved["updates"]
        print("ps %d restored update %d from %s" % (index, updates, path), flush=True)
    _state.update(w=w, updates=updates, ckpt=path)


def ps_get():
    with _lock:
        return _state["w"].clone()


def ps_push(grad, lr):
    with _lock:
        _state["w"] -= lr * grad
        _state["updates"] += 1
        if _state["updates"] % 10 == 0:
            tmp = _state["ckpt"] + ".tmp"
            torch.save({"w": _state["w"], "updates": _state["updates"]}, tmp)
            os.replace(tmp, _state["ckpt"])
        return _state["updates"]


# --- on the chief ----------------------------------------------------------

def chief_worker_done(worker, loss):
    with _done_cv:
        _done.append((worker, loss))
        _done_cv.notify_all()


# --- everywhere --------------------------------------------------------------

def pull(ps_names, n_ps):
    w = torch.zeros(DIM)
    for j, idx in enumerate(slices(n_ps)):
        w[idx] = rpc.rpc_sync(ps_names[j], ps_get)
    return w


def loss_of(w, worker, step):
    x, y = batch(worker, step)
    return ((x @ w - y) ** 2).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "ps-ckpt"))
    args = ap.parse_args()

    cfg = json.loads(os.environ["TF_CONFIG"])
    cluster, role, index = cfg["cluster"], cfg["task"]["type"], cfg["task"]["index"]
    chiefs, ps, workers = cluster.get("chief", []), cluster["ps"], cluster.get("worker", [])
    # The rpc world: the chief (or worker 0) first, then the ps, then the workers.
    names = ["chief"] * len(chiefs) + ["ps%d" % j for j in range(len(ps))] + ["worker%d" % i for i in range(len(workers))]
    me = "chief" if role == "chief" else "%s%d" % (role, index)
    store = (chiefs or workers)[0]
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://" + store, rpc_timeout=120)
    ps_names = ["ps%d" % j for j in range(len(ps))]

    if role == "ps":
        os.makedirs(args.ckpt_dir, exist_ok=True)
        ps_start(index, len(ps), args.ckpt_dir)
    rpc.init_rpc(me, rank=names.index(me), world_size=len(names), rpc_backend_options=opts)

    if role == "worker":
        w = pull(ps_names, len(ps))
        first = loss_of(w, index, 0).item()
        for step in range(args.steps):
            w = pull(ps_names, len(ps)).requires_grad_()
            loss = loss_of(w, index, step)
            loss.backward()
            for j, idx in enumerate(slices(len(ps))):
                rpc.rpc_sync(ps_names[j], ps_push, args=(w.grad[idx], args.lr))
        last = loss.item()
        print("worker %d: loss %.4f -> %.4f" % (index, first, last), flush=True)
        if chiefs:
            rpc.rpc_sync("chief", chief_worker_done, args=(index, last))
    elif role == "chief":
        w0 = torch.zeros(DIM)
        start = loss_of(w0, 999, 0).item()
        with _done_cv:
            _done_cv.wait_for(lambda: len(_done) == len(workers))
        final = loss_of(pull(ps_names, len(ps)), 999, 0).item()
        print("chief: %d workers done; held-out loss %.4f -> %.4f" % (len(workers), start, final), flush=True)
    # A graceful shutdown waits for every process: the ps serve until the
    # workers and the chief are done.
    rpc.shutdown()


if __name__ == "__main__":
    main()
