"""A parameter-server job in PyTorch that reads its cluster from TF_CONFIG,
leases its data from the job's master and checkpoints its parameters.

Run it with `rover submit ps_job.yaml` (docs/parameter-server.md). Every
process of the job runs this script; TF_CONFIG says its role:

* ps: holds a slice of the model's parameters and applies the gradients
  the workers push (SGD), each batch once. It keeps its slice, its step
  (the updates applied) and the batches it applied in a
  rover.checkpoint.Checkpointer: a snapshot in memory every --save-every
  steps, persisted every --persist-every steps (and when the chief says
  training is over) to CKPT_DIR/ps-INDEX (--ckpt-dir, default
  $ROVER_CHECKPOINT_DIR; the newest --ckpt-keep steps are kept), from
  which it restores when it starts.
* worker: leases shards of the training set through
  rover.data.ShardClient (the master hands every shard of every epoch to
  one worker at a time), asks each ps which of the shard's batches it has
  applied already, and for the others pulls the parameters from every ps,
  computes the gradient of the batch and pushes each ps that lacks the
  batch its slice of it. A job that resumes from the PS's checkpoints
  thus trains exactly the batches they had not applied yet.
* chief: waits until every worker is done, has every ps persist its
  final step, evaluates the model on a held-out set and exits, which ends
  the job. (Without a chief the workers' success ends it, and the ps
  persist every --persist-every steps only.)

The processes talk over torch.distributed.rpc (TensorPipe), on the
addresses TF_CONFIG gives: the chief's address hosts the rpc world's store.
The model is a linear regression, small enough for a CPU; the data are
generated from --seed, sample i being row i (Regression).

The roles run without a rover agent: ShardClient calls the master itself
(ROVER_MASTER_ADDR, ROVER_TOKEN, ROVER_NODE_ID, which every node gets), and
the Checkpointer keeps its snapshot in the ps's own memory and persists it
synchronously to a local directory (docs/flash-checkpoint.md, "Without
`rover run`").
"""
import argparse
import hashlib
import json
import os
import sys
import threading

import torch
import torch.distributed.rpc as rpc

try:
    import rover  # noqa: F401
except ImportError:  # run from a checkout of Rover: its python/ directory
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from rover.checkpoint import Checkpointer  # noqa: E402
from rover.data import ShardClient  # noqa: E402

DIM = 16
DATASET = "ps-train"
HELD_OUT = 256  # samples of the held-out set


def log(line):
    print(line, flush=True)


def true_weights():
    g = torch.Generator().manual_seed(1234)
    return torch.randn(DIM, generator=g)


class Regression:
    """size samples (x, y), y = x . w*, x ~ N(0, I): the rows of one
    matrix drawn from seed, so sample i is the same in every process."""

    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, DIM, generator=g)
        self.y = self.x @ true_weights()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def batch(self, indices):
        idx = torch.tensor(indices, dtype=torch.int64)
        return self.x[idx], self.y[idx]

    def loss(self, w, indices=None):
        x, y = (self.x, self.y) if indices is None else self.batch(indices)
        return ((x @ w - y) ** 2).mean()


def slices(n_ps):
    """The indices of the parameters each ps holds."""
    return [list(range(j, DIM, n_ps)) for j in range(n_ps)]


def digest(w):
    """The SHA-256 of a slice's bytes, as the checkpoint file holds them."""
    return hashlib.sha256(w.contiguous().numpy().tobytes()).hexdigest()


# --- on the ps -------------------------------------------------------------

class ParameterServer:
    """One ps's slice, its step and the batches it applied, checkpointed.

    A batch is named by its epoch and the position of its first sample in
    the epoch's order (epoch * samples + position): the same in every run
    of a dataset of the same spec, whichever worker leases it."""

    def __init__(self, index, n_ps, ckpt_dir, keep, save_every, persist_every):
        self.index, self.lock = index, threading.Lock()
        self.save_every, self.persist_every = save_every, persist_every
        self.w, self.step, self.applied, self.spec = torch.zeros(len(slices(n_ps)[index])), 0, set(), None
        self.refused, self.durable = 0, None
        self.dir = os.path.join(ckpt_dir, "ps-%d" % index) if ckpt_dir else None
        self.ckpt = Checkpointer(self.dir, keep=keep)
        restored = self.ckpt.load()
        if restored:
            self.step, state = restored
            if state["w"].shape != self.w.shape:
                raise SystemExit("ps %d: the checkpoint in %s holds %d parameters, this job's ps %d holds %d: "
                                 "run with as many ps as the job that saved it, or another --ckpt-dir"
                                 % (index, self.dir, state["w"].numel(), index, self.w.numel()))
            self.w = state["w"].clone()
            self.applied = set(state["applied"].tolist())
            self.spec = tuple(state["data"]) if state.get("data") is not None else None
            self.durable = self.step
            log("ps %d restored step %d from %s (%s): %d batches applied, w sha256 %s"
                % (index, self.step, self.dir, self.ckpt.restored_from, len(self.applied), digest(self.w)))
        else:
            log("ps %d starts at step 0 (no checkpoint in %s)" % (index, self.dir or "memory"))
        self.initial = self.w.clone()

    def state(self):
        return {"w": self.w, "applied": torch.tensor(sorted(self.applied), dtype=torch.int64),
                "data": list(self.spec) if self.spec is not None else None}

    def save(self, persist):
        """A snapshot of the current step; with persist, made durable in
        the ps's directory (synchronously: the ps's lock is held)."""
        self.ckpt.save(self.step, self.state(), persist=persist)
        if persist:
            self.durable = self.step
            log("ps %d persisted step %d to %s: w sha256 %s" % (self.index, self.step, self.dir, digest(self.w)))

    def check_spec(self, spec):
        if self.spec is None:
            self.spec = spec
        elif self.spec != spec:
            raise ValueError("ps %d trains batches of a dataset of (samples, shard size, batch size, seed) %s, "
                             "from its checkpoint or this job's first worker; this worker's is %s, whose batches "
                             "are other samples: give every worker the data flags of the job that saved %s, "
                             "or another --ckpt-dir" % (self.index, self.spec, spec, self.dir or "nothing"))

    def push(self, grad, lr, batch):
        if batch in self.applied:
            self.refused += 1  # sent twice: its samples would be trained twice
            log("ps %d refused batch %d: applied already" % (self.index, batch))
            return False
        self.w -= lr * grad
        self.applied.add(batch)
        self.step += 1
        if self.dir and self.step % self.persist_every == 0:
            self.save(persist=True)
        elif self.step % self.save_every == 0:
            self.save(persist=False)
        return True

    def finish(self):
        """Training is over: persists the step unless it is durable."""
        if self.dir and self.durable != self.step:
            self.save(persist=True)
        return self.step, self.refused


_ps = None


def ps_pull():
    with _ps.lock:
        return _ps.w.clone()


def ps_initial():
    return _ps.initial


def ps_applied(spec, lo, hi):
    """The batches in [lo, hi) this ps has applied."""
    with _ps.lock:
        _ps.check_spec(tuple(spec))
        return sorted(b for b in _ps.applied if lo <= b < hi)


def ps_push(grad, lr, batch):
    with _ps.lock:
        return _ps.push(grad, lr, batch)


def ps_finish():
    with _ps.lock:
        return _ps.finish()


# --- on the chief ----------------------------------------------------------

_done = []           # (worker, final loss) as workers finish
_done_cv = threading.Condition()


def chief_worker_done(worker, loss):
    with _done_cv:
        _done.append((worker, loss))
        _done_cv.notify_all()


def chief(args, ps_names, n_workers):
    held = Regression(HELD_OUT, args.seed + 1_000_003)
    start = held.loss(assemble([rpc.rpc_sync(p, ps_initial) for p in ps_names])).item()
    with _done_cv:
        _done_cv.wait_for(lambda: len(_done) == n_workers)
    ends = [rpc.rpc_sync(p, ps_finish) for p in ps_names]
    final = held.loss(pull(ps_names)).item()
    log("chief: ps at steps %s, %d pushes refused as applied already"
        % (",".join(str(s) for s, _ in ends), sum(r for _, r in ends)))
    log("chief: %d workers done; held-out loss %.6g -> %.6g" % (n_workers, start, final))


# --- on the workers --------------------------------------------------------

def assemble(parts):
    w = torch.zeros(DIM)
    for idx, part in zip(slices(len(parts)), parts):
        w[idx] = part
    return w


def pull(ps_names):
    return assemble([f.wait() for f in [rpc.rpc_async(p, ps_pull) for p in ps_names]])


def work(args, index, ps_names):
    data = Regression(args.samples, args.seed)
    spec = (args.samples, args.shard_size, args.batch_size, args.seed)
    client = ShardClient(DATASET, size=args.samples, shard_size=args.shard_size, epochs=args.epochs,
                         shuffle=True, seed=args.seed)
    first = last = None
    trained = skipped = shards = 0
    for shard in client:
        idx, base = shard.indices(), shard.epoch * args.samples + shard.start
        have = [set(f.wait()) for f in [rpc.rpc_async(p, ps_applied, args=(spec, base, base + len(idx)))
                                          for p in ps_names]]
        for k in range(0, len(idx), args.batch_size):
            batch, samples = base + k, idx[k:k + args.batch_size]
            need = [j for j, h in enumerate(have) if batch not in h]
            if not need:  # every ps applied it before this run's lease
                skipped += 1
                if args.log_samples:
                    log("worker %d skipped epoch %d batch %d samples %s"
                        % (index, shard.epoch, batch, ",".join(map(str, samples))))
                continue
            w = pull(ps_names).requires_grad_()
            loss = data.loss(w, samples)
            loss.backward()
            futs = [rpc.rpc_async(ps_names[j], ps_push, args=(w.grad[slices(len(ps_names))[j]], args.lr, batch))
                    for j in need]
            if not all(f.wait() for f in futs):
                raise SystemExit("worker %d: a ps had applied batch %d already" % (index, batch))
            first = loss.item() if first is None else first
            last = loss.item()
            trained += 1
            if args.log_samples:
                log("worker %d trained epoch %d batch %d samples %s ps %s"
                    % (index, shard.epoch, batch, ",".join(map(str, samples)), ",".join(map(str, need))))
        shards += 1
        if not client.complete(shard):
            log("worker %d: the lease of %r had expired: another worker trains it" % (index, shard))
    log("worker %d: %d shards, %d batches trained, %d skipped; batch loss %s -> %s"
        % (index, shards, trained, skipped, "-" if first is None else "%.6g" % first,
           "-" if last is None else "%.6g" % last))
    return last


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2, help="epochs of the training set to train in all")
    ap.add_argument("--samples", type=int, default=600, help="samples of the training set")
    ap.add_argument("--shard-size", type=int, default=30, help="samples a shard (a multiple of --batch-size)")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="draws the data and shuffles each epoch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ckpt-dir", default=os.environ.get("ROVER_CHECKPOINT_DIR"),
                    help="ps: checkpoint to DIR/ps-INDEX (default $ROVER_CHECKPOINT_DIR; none: memory only)")
    ap.add_argument("--ckpt-keep", type=int, default=1, help="ps: committed steps kept (0: all)")
    ap.add_argument("--save-every", type=int, default=5, help="ps: a snapshot in memory every N steps")
    ap.add_argument("--persist-every", type=int, default=20, help="ps: a persisted checkpoint every N steps")
    ap.add_argument("--log-samples", action="store_true",
                    help="workers: log every batch (its id, samples and the ps that applied it)")
    args = ap.parse_args()
    for name in ("epochs", "samples", "shard_size", "batch_size", "save_every", "persist_every"):
        if getattr(args, name) < 1:
            ap.error("--%s must be 1 or more" % name.replace("_", "-"))
    if args.ckpt_keep < 0:
        ap.error("--ckpt-keep must be 0 (all) or more")
    if args.shard_size % args.batch_size:
        ap.error("--shard-size %d is not a multiple of --batch-size %d" % (args.shard_size, args.batch_size))

    cfg = json.loads(os.environ["TF_CONFIG"])
    cluster, role, index = cfg["cluster"], cfg["task"]["type"], cfg["task"]["index"]
    chiefs, ps, workers = cluster.get("chief", []), cluster["ps"], cluster.get("worker", [])
    # The rpc world: the chief (or worker 0) first, then the ps, then the workers.
    names = ["chief"] * len(chiefs) + ["ps%d" % j for j in range(len(ps))] + ["worker%d" % i for i in range(len(workers))]
    me = "chief" if role == "chief" else "%s%d" % (role, index)
    store = (chiefs or workers)[0]
    opts = rpc.TensorPipeRpcBackendOptions(init_method="tcp://" + store, rpc_timeout=120)
    ps_names = ["ps%d" % j for j in range(len(ps))]

    if role == "ps":  # restored before any worker can reach it
        global _ps
        _ps = ParameterServer(index, len(ps), args.ckpt_dir, args.ckpt_keep, args.save_every, args.persist_every)
    rpc.init_rpc(me, rank=names.index(me), world_size=len(names), rpc_backend_options=opts)

    if role == "worker":
        last = work(args, index, ps_names)
        if chiefs:
            rpc.rpc_sync("chief", chief_worker_done, args=(index, last))
    elif role == "chief":
        chief(args, ps_names, len(workers))
    # A graceful shutdown waits for every process: the ps serve until the
    # workers and the chief are done.
    rpc.shutdown()


if __name__ == "__main__":
    main()
