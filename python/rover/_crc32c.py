"""CRC32C (Castagnoli), the checksum of persisted checkpoint files, in pure
Python at about 1 GB/s.

The manifest of a persisted step records each file's CRC32C
(internal/ckpt/manifest.go), so a checkpoint written without the agent needs
one. The standard library has none (zlib.crc32 is another polynomial), and a
table-driven loop over bytes runs at about 13 MB/s: over a minute per GiB.

The fast path uses two facts. A CRC is linear over GF(2), so XOR-ing into the
message a bit pattern whose own CRC is zero leaves the message's CRC as it
was: x^17201 + x^316 + x^304 + 1 is a multiple of the CRC32C polynomial
(found by a search; its squares, x^(17201 * 2^s) + ..., are multiples too),
which means that a block of bits, copied forward by 17201 * 2^s bits and by
two nearby shifts, can be cleared from the front of the message without
changing its CRC. And Python's big integers do shifts and XORs of whole
blocks at C speed. So `_raw` takes the message one cache-sized block at a
time (int.from_bytes), folds it into the next block with two shifts and three
XORs, and is left with a few KiB at the end, which the table takes. The
result is checked against Go's hash/crc32 by python/crc32c_test.go.

    crc32c(b"123456789") == 0xE3069283
    crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")

Standard library only.
"""

__all__ = ["crc32c"]

_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reflected


def _make_table():
    table = []
    for v in range(256):
        c = v
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _raw_table(data):
    """The raw CRC (initial value 0, no final XOR) of data, a byte at a time."""
    c = 0
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


def _multmodp(a, b):
    """a * b modulo the polynomial, both bit-reflected (as zlib's crc32.c)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


_X2N = [1 << 30]  # x^(2^k) modulo the polynomial
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def _shift(crc, nbytes):
    """The raw CRC state crc after nbytes zero bytes: crc * x^(8 nbytes)."""
    p, k = 1 << 31, 3
    while nbytes:
        if nbytes & 1:
            p = _multmodp(_X2N[k & 31], p)
        nbytes >>= 1
        k += 1
    return _multmodp(p, crc)


# Multiples x^v + x^a + x^b + 1 of the polynomial (v > a > b > 0). In message
# order (int.from_bytes(..., "little") numbers the bits as the CRC reads
# them), the pattern has bits at offsets 0, v - a, v - b and v. CRC32C has
# Hamming distance 6 up to 5243 bits, so no such pattern is much shorter.
_PATTERNS = ((6777, 484, 100), (17201, 316, 304))

# The block fold: blocks of _BLOCK bits, the pattern (17201, 316, 304) scaled
# by 2^5: 67 KiB, which stays in the L2 cache, and under glibc's 128 KiB
# threshold above which malloc maps (and the kernel zero-fills) fresh pages
# for every integer; 135 KiB blocks run at a sixth of the speed.
_V, _A, _B = _PATTERNS[1]
_SCALE = 5
_BLOCK = (_V - _A) << _SCALE
_D1 = (_A - _B) << _SCALE
_D2 = _A << _SCALE
_MASK = (1 << _BLOCK) - 1


_warm = False


def _raw(mv):
    """The raw CRC of the bytes of memoryview mv."""
    global _warm
    if not _warm:
        # glibc gives the top of the heap back to the kernel once more than
        # its trim threshold (128 KiB) is free there, so every block's
        # integers would fault in fresh zeroed pages: a third of the speed,
        # most of it system time. Freeing one 4 MiB allocation makes glibc
        # raise its mmap threshold to 4 MiB and its trim threshold to 8 MiB
        # (their dynamic adjustment), once per process; a process that
        # freed a large buffer (torch) has that already.
        bytearray(4 << 20)
        _warm = True
    step = _BLOCK >> 3
    n, pos, carry = len(mv) * 8, 0, 0
    # Clearing a block copies it to offsets _BLOCK, _BLOCK + _D1 and
    # _BLOCK + _D2 from its start: the next block, and _D2 bits into the one
    # after, which must exist.
    while n - pos * 8 >= 2 * _BLOCK + _D2:
        cur = int.from_bytes(mv[pos:pos + step], "little") ^ carry
        head = cur & _MASK
        carry = head ^ (head << _D1) ^ (head << _D2) ^ (cur >> _BLOCK)
        pos += step
    rest = int.from_bytes(mv[pos:], "little") ^ carry
    n -= pos * 8
    # Halve what is left with the largest scaled pattern that fits, until
    # none does; then the table. Leading zero bits do not change a raw CRC,
    # so the fold may leave a length that is not whole bytes.
    while True:
        best = None
        for v, a, b in _PATTERNS:
            s = (n // (2 * v - a)).bit_length() - 1
            if s >= 0 and (best is None or (v - a) << s > best[0]):
                best = ((v - a) << s, (a - b) << s, a << s)
        if best is None:
            break
        h, d1, d2 = best
        head = rest & ((1 << h) - 1)
        rest = (rest >> h) ^ head ^ (head << d1) ^ (head << d2)
        n -= h
    pad = -n % 8
    return _raw_table((rest << pad).to_bytes((n + pad) >> 3, "little"))


def crc32c(data, crc=0):
    """The CRC32C of data (bytes-like), continuing from crc: the CRC32C of
    the bytes before it, as zlib.crc32 does."""
    mv = memoryview(data).cast("B")
    return _raw(mv) ^ _shift(crc ^ 0xFFFFFFFF, len(mv)) ^ 0xFFFFFFFF
