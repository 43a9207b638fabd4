"""Epoch orders and rank batches, bit for bit as the master computes them
(internal/shard/order.go and sync.go): every rank derives what to train from
the dataset, the job's position and its rank, with no call per batch."""

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


_ROUNDS = 8

# ORDER_VERSION names the shuffled orders of this module in saved positions:
# 2 is the Feistel network below; positions saved without it (1) refer to
# the Fisher–Yates permutations of earlier Rovers.
ORDER_VERSION = 2


class _Permutation:
    """A shuffled epoch order: a keyed Feistel network with cycle-walking,
    bit for bit as shard.EpochOrder (internal/shard/order.go documents the
    algorithm). O(1) memory; indexing computes one sample."""

    __slots__ = ("size", "_half", "_mask", "_keys")

    def __init__(self, size, epoch, seed):
        self.size = size
        self._half = max(1, ((size - 1).bit_length() + 1) // 2)
        self._mask = (1 << self._half) - 1
        state = (seed ^ _mix((epoch + _GOLDEN) & _MASK)) & _MASK
        keys = []
        for _ in range(_ROUNDS):
            state = (state + _GOLDEN) & _MASK
            keys.append(_mix(state))
        self._keys = tuple(keys)

    def _encrypt(self, x):
        h, mask = self._half, self._mask
        left, right = x >> h, x & mask
        for k in self._keys:
            left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << h) | right

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(f"position {i} outside an epoch of {self.size} samples")
        x = self._encrypt(i)
        while x >= self.size:
            x = self._encrypt(x)
        return x

    def __iter__(self):
        return (self[i] for i in range(self.size))


def epoch_order(size, epoch, shuffle, seed):
    """The order of an epoch: range(size), or its seeded permutation (a
    sequence that computes each sample when indexed, in O(1) memory)."""
    if not shuffle:
        return range(size)
    return _Permutation(size, epoch, seed)


DROP_TAIL = "drop"
PAD_TAIL = "pad"


def rank_share(global_batch, world_size, rank):
    """(offset, count) of rank's slice of a global batch: split as evenly
    as possible, the remainder to the lowest ranks, so that the ranks'
    slices are consecutive and sum to global_batch exactly."""
    q, rem = divmod(global_batch, world_size)
    return rank * q + min(rank, rem), q + (1 if rank < rem else 0)


def rank_batch(size, batch_size, epochs, order, pos, world_size, rank, tail=DROP_TAIL, global_batch=None):
    """The samples `rank` trains at position pos=(epoch, consumed), and the
    next position; None when the dataset is exhausted. `order` is a callable
    epoch -> order (cached by the caller). See internal/shard.RankBatch:
    with a per-rank batch_size the global batch is world_size*batch_size
    and rank r takes its r-th slice of batch_size; with global_batch the
    global batch is that, whatever the world size, and rank r takes its
    share (rank_share). Either way a step trains the positions
    [consumed, consumed+G) and moves on by G, so positions map to ranks'
    batches the same way through any sequence of world sizes."""
    n = size
    if global_batch is None:
        g, (off, b) = world_size * batch_size, (rank * batch_size, batch_size)
    else:
        g, (off, b) = global_batch, rank_share(global_batch, world_size, rank)
    e, c = pos
    if c == n or (tail == DROP_TAIL and n - c < g):
        e, c = e + 1, 0
    if (epochs > 0 and e >= epochs) or (tail == DROP_TAIL and n < g):
        return None, (e, c)
    o = order(e)
    p = c + off
    indices = [o[(p + j) % n] for j in range(b)]
    nxt = (e, c + g)
    if nxt[1] >= n or (tail == DROP_TAIL and n - nxt[1] < g):
        nxt = (e + 1, 0)
    return indices, nxt
