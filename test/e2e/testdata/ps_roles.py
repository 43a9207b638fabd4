"""A parameter-server job's roles for the e2e test, stdlib only.

Every replica reads its role from TF_CONFIG. A ps serves, at its TF_CONFIG
address (on every interface when the address is a name, such as a
Kubernetes Service's), a total that workers add to: "ADD W S" adds worker W's step S once
(a step already applied is not counted again) and answers the total; "LAST
W" answers the last step of W it applied. It saves its total and the steps
applied to OUT/ps-INDEX.ckpt after every add and restores them when it comes
back. A worker first asks every ps where it left off (a relaunched worker
resumes there: no step lost or counted twice), then sends its remaining
steps of STEPS, alternating over the ps, holding one connection to each;
after PAUSE steps it waits for the file OUT/go; when a ps connection breaks
it reconnects, at the same address, and logs the cluster version it then
reads. Before each step a worker reads the cluster version; when it went
up it reads the cluster (ROVER_CLUSTER_FILE) again and spreads its
steps over the PS listed there (a PS was added). The chief waits for every
worker to finish, asks each ps its total, writes OUT/result and exits 0,
which ends the job. Each replica appends what it does to OUT/events, one
line per event.

Environment: PS_ROLES_HOT, a comma-separated list of ps indexes, makes
those PS busy half of every 0.1 s (about half a core) besides serving;
PS_ROLES_STEP_SLEEP, seconds, is how long a worker waits between steps.
PS_ROLES_SHARDS=N,K switches the workers to leased data: they lease
shards of a dataset of N samples, K a shard, through rover.data.ShardClient
(the master serves the roles, which run without an agent), ask the ps of
the shard (shard index modulo the PS) whether it applied the shard already
("HAS START"), send it ("ADDS W START COUNT") if not, and complete the
lease; a dead worker's leases go to the others. The worker PS_ROLES_HOLD
names keeps its third shard leased without training it (until killed). The chief then waits
until the PS hold N samples in all. A ps counts a step or a shard it was
sent twice as a duplicate (a sample trained twice), except a step sent
again after a broken connection (marked RETRY: its first delivery may not
have been acknowledged); "DUPS" answers the count, and the chief writes
it to OUT/result.
PS_ROLES_TIMES=1 makes each ps append "ps INDEX start|add TIME" (Unix
seconds) to OUT/times when it starts serving and after each add it
applies, for the benchmarks.
"""
import json
import os
import socket
import sys
import time

OUT, STEPS, PAUSE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
CFG = json.loads(os.environ["TF_CONFIG"])
ROLE, INDEX = CFG["task"]["type"], CFG["task"]["index"]
PS = CFG["cluster"]["ps"]


def event(line):
    with open(os.path.join(OUT, "events"), "a") as f:
        f.write("%s %d %s\n" % (ROLE, INDEX, line))


def version():
    with open(os.environ["ROVER_CLUSTER_VERSION_FILE"]) as f:
        return int(f.read())


def cluster_ps():
    with open(os.environ["ROVER_CLUSTER_FILE"]) as f:
        return json.load(f)["ps"]


def burn():
    """Keeps about half a core busy: the hot PS of PS_ROLES_HOT."""
    while True:
        end = time.time() + 0.05
        while time.time() < end:
            pass
        time.sleep(0.05)


def times(what):
    if os.environ.get("PS_ROLES_TIMES"):
        with open(os.path.join(OUT, "times"), "a") as f:
            f.write("ps %d %s %.6f\n" % (INDEX, what, time.time()))


def split(addr):
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def serve():
    ckpt = os.path.join(OUT, "ps-%d.ckpt" % INDEX)
    total, applied, shards, dups = 0, {}, {}, 0
    if os.path.exists(ckpt):
        with open(ckpt) as c:
            saved = json.load(c)
        total, applied = saved["total"], {w: set(st) for w, st in saved["applied"].items()}
        shards, dups = saved.get("shards", {}), saved.get("dups", 0)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host, port = split(PS[INDEX])
    try:
        socket.inet_aton(host)
    except OSError:
        host = ""  # a name (a Service's) is how others reach it: listen on every interface
    srv.bind((host, port))
    srv.listen(16)
    times("start")
    event("start version %s total %d addr %s cpu %s" % (os.environ["ROVER_CLUSTER_VERSION"], total, PS[INDEX],
                                                       os.environ.get("ROVER_CPU_REQUEST_MILLI", "-")))
    import threading
    lock = threading.Lock()
    if str(INDEX) in os.environ.get("PS_ROLES_HOT", "").split(","):
        threading.Thread(target=burn, daemon=True).start()

    def save():
        with open(ckpt + ".tmp", "w") as c:
            json.dump({"total": total, "applied": {w: sorted(st) for w, st in applied.items()},
                       "shards": shards, "dups": dups}, c)
        os.replace(ckpt + ".tmp", ckpt)

    def handle(conn):
        nonlocal total, dups
        f = conn.makefile("rw")
        for line in f:
            cmd, *args = line.split()
            retry = args[-1:] == ["RETRY"]
            with lock:
                reply = total
                if cmd == "ADD" and int(args[1]) not in applied.setdefault(args[0], set()):
                    total += 1
                    reply = total
                    applied[args[0]].add(int(args[1]))
                    save()
                    times("add")
                elif cmd == "ADD" and not retry:
                    dups += 1  # a step sent twice: trained twice
                    save()
                elif cmd == "ADDS" and args[1] not in shards:
                    shards[args[1]] = args[0]
                    total += int(args[2])
                    reply = total
                    save()
                    times("add")
                elif cmd == "ADDS" and not retry:
                    dups += 1  # a shard sent twice: its samples trained twice
                    save()
                elif cmd == "HAS":
                    reply = 1 if args[0] in shards else 0
                elif cmd == "DUPS":
                    reply = dups
                elif cmd == "LAST":
                    reply = max(applied.get(args[0], {-1}))
                f.write("%d\n" % reply)
                f.flush()

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def connect(addr):
    while True:
        try:
            s = socket.create_connection(split(addr), timeout=5)
            return s.makefile("rw")
        except OSError:
            time.sleep(0.05)


def call(conns, j, line):
    sent = line
    for _ in range(100):
        try:
            conns[j].write(sent + "\n")
            conns[j].flush()
            reply = conns[j].readline()
            if reply:
                return int(reply)
        except OSError:
            pass
        conns[j] = connect(PS[j])
        event("reconnected ps %d version %d" % (j, version()))
        sent = line + " RETRY"  # its first delivery may have been applied
    raise SystemExit("ps %d does not answer" % j)


def work_shards(spec):
    from rover.data import ShardClient
    global PS
    PS = cluster_ps()
    n, k = (int(x) for x in spec.split(","))
    conns = [connect(a) for a in PS]
    client = ShardClient("ps-data", size=n, shard_size=k, prefetch=1)
    event("start version %s shards" % os.environ["ROVER_CLUSTER_VERSION"])
    pause = float(os.environ.get("PS_ROLES_STEP_SLEEP", "0"))
    held = 0
    for shard in client:
        held += 1
        if held == 3 and os.environ.get("PS_ROLES_HOLD") == str(INDEX):
            event("holding shard %d" % shard.start)  # until the test kills it
            time.sleep(3600)
        j = (shard.start // k) % len(PS)
        if call(conns, j, "HAS %d" % shard.start) == 0:
            call(conns, j, "ADDS %d %d %d" % (INDEX, shard.start, len(shard)))
            event("applied shard %d" % shard.start)
        else:
            event("skipped shard %d" % shard.start)  # applied before its lease came back
        client.complete(shard)
        time.sleep(pause)
    event("done")


def work():
    if os.environ.get("PS_ROLES_SHARDS"):
        return work_shards(os.environ["PS_ROLES_SHARDS"])
    global PS
    known = int(os.environ["ROVER_CLUSTER_VERSION"])
    PS = cluster_ps()
    conns = [connect(a) for a in PS]
    first = 1 + max(call(conns, j, "LAST %d" % INDEX) for j in range(len(PS)))
    event("start version %d resume at %d" % (known, first))
    pause = float(os.environ.get("PS_ROLES_STEP_SLEEP", "0"))
    for step in range(first, STEPS):
        if step == PAUSE:
            event("paused")
            while not os.path.exists(os.path.join(OUT, "go")):
                time.sleep(0.05)
        v = version()
        if v > known:
            known, grown = v, cluster_ps()
            if len(grown) > len(PS):
                PS = grown
                conns += [connect(a) for a in PS[len(conns):]]
                event("cluster version %d ps %d" % (v, len(PS)))
        call(conns, step % len(PS), "ADD %d %d" % (INDEX, step))
        time.sleep(pause)
    event("done")


def chief():
    global PS
    workers = len(CFG["cluster"]["worker"])
    path = os.path.join(OUT, "events")
    shards = os.environ.get("PS_ROLES_SHARDS")
    while not shards:
        done = set()
        if os.path.exists(path):
            with open(path) as f:
                done = {l.split()[1] for l in f if l.startswith("worker ") and l.split()[2] == "done"}
        if len(done) == workers:
            break
        time.sleep(0.05)
    PS = cluster_ps()
    conns = [connect(a) for a in PS]
    while shards:  # leased data: done when the PS hold every sample
        if sum(call(conns, j, "GET") for j in range(len(PS))) >= int(shards.split(",")[0]):
            break
        time.sleep(0.1)
    totals = [call(conns, j, "GET") for j in range(len(PS))]
    dups = [call(conns, j, "DUPS") for j in range(len(PS))]
    with open(os.path.join(OUT, "result"), "w") as f:
        json.dump({"totals": totals, "dups": dups, "tf_config": CFG}, f)
    event("finished totals %s dups %s" % (totals, dups))


with open(os.path.join(OUT, "pid-%s-%d" % (ROLE, INDEX)), "w") as f:
    f.write(str(os.getpid()))
with open(os.path.join(OUT, "env-%s-%d-%d" % (ROLE, INDEX, os.getpid())), "w") as f:
    json.dump({k: os.environ[k] for k in sorted(os.environ) if k == "TF_CONFIG" or k.startswith(("NODE_", "WORKER_", "ROVER_CLUSTER", "ROVER_CPU"))}, f)
{"ps": serve, "worker": work, "chief": chief}[ROLE]()
