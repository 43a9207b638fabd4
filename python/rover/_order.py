"""Epoch orders and rank batches, bit for bit as the master computes them
(internal/shard/order.go and sync.go): every rank derives what to train from
the dataset, the job's position and its rank, with no call per batch."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class _RNG:
    __slots__ = ("state",)

    def __init__(self, seed, epoch):
        self.state = (seed ^ _mix((epoch + _GOLDEN) & _MASK)) & _MASK

    def next(self):
        self.state = (self.state + _GOLDEN) & _MASK
        return _mix(self.state)

    def below(self, n):
        # Lemire's multiply-and-reject, as Go's bits.Mul64 version.
        m = self.next() * n
        lo = m & _MASK
        if lo < n:
            t = ((1 << 64) - n) % n
            while lo < t:
                m = self.next() * n
                lo = m & _MASK
        return m >> 64


def epoch_order(size, epoch, shuffle, seed):
    """The order of an epoch: range(size), or its seeded permutation."""
    if not shuffle:
        return range(size)
    p = list(range(size))
    r = _RNG(seed, epoch)
    for i in range(size - 1, 0, -1):
        j = r.below(i + 1)
        p[i], p[j] = p[j], p[i]
    return p


DROP_TAIL = "drop"
PAD_TAIL = "pad"


def rank_batch(size, batch_size, epochs, order, pos, world_size, rank, tail=DROP_TAIL):
    """The samples `rank` trains at position pos=(epoch, consumed), and the
    next position; None when the dataset is exhausted. `order` is a callable
    epoch -> order (cached by the caller). See internal/shard.RankBatch."""
    n, b = size, batch_size
    g = world_size * b
    e, c = pos
    if c == n or (tail == DROP_TAIL and n - c < g):
        e, c = e + 1, 0
    if (epochs > 0 and e >= epochs) or (tail == DROP_TAIL and n < g):
        return None, (e, c)
    o = order(e)
    p = c + rank * b
    indices = [o[(p + j) % n] for j in range(b)]
    nxt = (e, c + g)
    if nxt[1] >= n or (tail == DROP_TAIL and n - nxt[1] < g):
        nxt = (e + 1, 0)
    return indices, nxt
