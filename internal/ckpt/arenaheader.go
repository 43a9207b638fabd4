package ckpt

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// The arena file is a 4096-byte header followed by two slots of SlotSize
// bytes each (slot i at HeaderSize + i*SlotSize). Every header field is a
// little-endian word at a fixed offset; fields that change after creation are
// 64-bit words read and written atomically (8-byte aligned), so that another
// process, or another language, can follow the same protocol:
//
//	offset  size  field
//	0       8     magic "ROVERARN"
//	8       4     version (1)
//	12      4     header size (4096)
//	16      8     slot size (a multiple of the page size; only grows)
//	24      8     newest: index+1 of the slot last committed, 0 if none (a hint)
//	32      8     commits: count of commits so far
//	64+64i  64    slot i's header (i = 0, 1):
//	  +0    8       gen: even while the slot is stable, odd while it is being
//	                written (from BeginWrite to Commit, or by a crashed writer)
//	  +8    8       state: 0 empty, 1 writing, 2 valid
//	  +16   8       step (int64)
//	  +24   8       payload length in bytes
//	  +32   8       CRC32C of the payload in bits 0-31, valid only when bit 63
//	                is set and bits 32-62 equal gen's low 31 bits
//	  +40   8       commit: the commits count when the slot was committed
//
// A slot holds a snapshot when its gen is even and its state is valid; of
// two such slots, the one with the larger commit is the newest. Readers use
// gen as a seqlock: read gen, the fields, gen again, and retry if it moved.
// The writer makes gen odd with an atomic read-modify-write before it writes
// a payload, and a reader confirms a payload it copied with an atomic
// read-modify-write of gen (adding zero): both are full barriers, which plain
// atomic loads and stores are not on every CPU (arm64).
const (
	arenaMagic      = "ROVERARN"
	arenaVersion    = 1
	arenaHeaderSize = 4096

	hdrVersion  = 8
	hdrSlotSize = 16
	hdrNewest   = 24
	hdrCommits  = 32
	hdrSlots    = 64
	slotHdrSize = 64

	slGen    = 0
	slState  = 8
	slStep   = 16
	slLength = 24
	slCRC    = 32
	slCommit = 40

	crcPresent = 1 << 63
)

// SlotState is the state of one arena slot.
type SlotState uint64

// Slot states.
const (
	SlotEmpty   SlotState = 0 // never written, or dropped by Resize
	SlotWriting SlotState = 1 // BeginWrite without Commit (yet, or ever)
	SlotValid   SlotState = 2 // committed
)

func (s SlotState) String() string {
	switch s {
	case SlotEmpty:
		return "empty"
	case SlotWriting:
		return "writing"
	case SlotValid:
		return "valid"
	}
	return fmt.Sprintf("SlotState(%d)", uint64(s))
}

// slotHdr is a consistent copy of one slot's header.
type slotHdr struct {
	gen    uint64
	state  SlotState
	step   int64
	length int64
	crc    uint64
	commit uint64
}

// holds reports whether the slot holds a committed snapshot that fits a slot
// of slotSize bytes.
func (h slotHdr) holds(slotSize int64) bool {
	return h.gen%2 == 0 && h.state == SlotValid && h.length >= 0 && h.length <= slotSize
}

// checksum returns the recorded CRC32C and whether one is recorded for this
// generation of the slot.
func (h slotHdr) checksum() (uint32, bool) {
	return crcOf(h.crc, h.gen)
}

func crcOf(word, gen uint64) (uint32, bool) {
	ok := word&crcPresent != 0 && (word>>32)&0x7fffffff == gen&0x7fffffff
	return uint32(word), ok
}

func crcWord(crc uint32, gen uint64) uint64 {
	return crcPresent | (gen&0x7fffffff)<<32 | uint64(crc)
}

// header is the arena header in mem, accessed atomically.
type header struct{ mem []byte }

func (h header) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&h.mem[off]))
}

func (h header) slotWord(i, off int) *atomic.Uint64 {
	return h.word(hdrSlots + i*slotHdrSize + off)
}

// beginChange makes slot i's gen odd, with an atomic read-modify-write, and
// returns it. The read-modify-write is a full barrier: the payload stores
// that follow cannot become visible before the odd gen. A gen that is odd
// already (an abandoned write) moves on by two, so that its token goes stale.
func (h header) beginChange(i int) uint64 {
	w := h.slotWord(i, slGen)
	if w.Load()%2 == 0 {
		return w.Add(1)
	}
	return w.Add(2)
}

// stableGen reads slot i's gen with an atomic read-modify-write (adding
// zero, which changes nothing even under a concurrent writer). Being a full
// barrier, it keeps the caller's earlier plain loads (of a payload) from
// being satisfied after it: if it returns the gen the caller started from,
// what the caller read was not being overwritten.
func (h header) stableGen(i int) uint64 { return h.slotWord(i, slGen).Add(0) }

// read returns a consistent copy of slot i's header and the slot size it was
// read under. It retries while a concurrent writer changes the header; the
// writer changes it in a handful of stores, so this ends quickly. ok is false
// if the header kept changing (treat the slot as unstable).
func (h header) read(i int) (s slotHdr, slotSize int64, ok bool) {
	for range 1000 {
		ss := h.word(hdrSlotSize).Load()
		g1 := h.slotWord(i, slGen).Load()
		s = slotHdr{
			gen:    g1,
			state:  SlotState(h.slotWord(i, slState).Load()),
			step:   int64(h.slotWord(i, slStep).Load()),
			length: int64(h.slotWord(i, slLength).Load()),
			crc:    h.slotWord(i, slCRC).Load(),
			commit: h.slotWord(i, slCommit).Load(),
		}
		if h.slotWord(i, slGen).Load() == g1 && h.word(hdrSlotSize).Load() == ss && ss <= math.MaxInt64 {
			return s, int64(ss), true
		}
		runtime.Gosched()
	}
	return slotHdr{}, 0, false
}

// newest returns the index of the slot holding the newest snapshot, and its
// header, or -1. stale is set when the header's slot size is not slotSize:
// the arena was resized and must be mapped again.
func (h header) newest(slotSize int64) (idx int, s slotHdr, stale bool) {
	idx = -1
	for i := range 2 {
		si, ss, ok := h.read(i)
		if ok && ss != slotSize {
			return -1, slotHdr{}, true
		}
		if ok && si.holds(slotSize) && (idx < 0 || si.commit > s.commit) {
			idx, s = i, si
		}
	}
	return idx, s, false
}

// arenaLayout is what parseArenaHeader learns from a header.
type arenaLayout struct {
	slotSize int64
}

// parseArenaHeader checks a header (at least arenaHeaderSize bytes) against
// the size of its file. It reads plain bytes: use it on a copy, or before
// anyone else can write.
func parseArenaHeader(b []byte, fileSize int64) (arenaLayout, error) {
	if len(b) < arenaHeaderSize || fileSize < arenaHeaderSize {
		return arenaLayout{}, fmt.Errorf("%w: file of %d bytes is smaller than the %d-byte header", ErrBadArena, fileSize, arenaHeaderSize)
	}
	le := binary.LittleEndian
	if string(b[:8]) != arenaMagic {
		return arenaLayout{}, fmt.Errorf("%w: magic %q, want %q", ErrBadArena, b[:8], arenaMagic)
	}
	if v := le.Uint32(b[hdrVersion:]); v != arenaVersion {
		return arenaLayout{}, fmt.Errorf("%w: version %d, this build reads version %d", ErrBadArena, v, arenaVersion)
	}
	if hs := le.Uint32(b[hdrVersion+4:]); hs != arenaHeaderSize {
		return arenaLayout{}, fmt.Errorf("%w: header size %d, want %d", ErrBadArena, hs, arenaHeaderSize)
	}
	ss := le.Uint64(b[hdrSlotSize:])
	if ss == 0 || ss%arenaPage != 0 || ss > uint64(fileSize-arenaHeaderSize)/2 {
		return arenaLayout{}, fmt.Errorf("%w: slot size %d does not fit a file of %d bytes in two page-aligned slots", ErrBadArena, ss, fileSize)
	}
	if n := le.Uint64(b[hdrNewest:]); n > 2 {
		return arenaLayout{}, fmt.Errorf("%w: newest slot %d", ErrBadArena, n)
	}
	for i := range 2 {
		off := hdrSlots + i*slotHdrSize
		state := SlotState(le.Uint64(b[off+slState:]))
		length := le.Uint64(b[off+slLength:])
		if state > SlotValid {
			return arenaLayout{}, fmt.Errorf("%w: slot %d has state %d", ErrBadArena, i, uint64(state))
		}
		if state == SlotValid && length > ss {
			return arenaLayout{}, fmt.Errorf("%w: slot %d holds %d bytes, more than its %d", ErrBadArena, i, length, ss)
		}
	}
	return arenaLayout{slotSize: int64(ss)}, nil
}

// initArenaHeader writes a fresh header for slots of slotSize bytes into b,
// which must be zero. The magic goes last, so that a reader never accepts a
// half-written header.
func initArenaHeader(b []byte, slotSize int64) {
	le := binary.LittleEndian
	le.PutUint32(b[hdrVersion:], arenaVersion)
	le.PutUint32(b[hdrVersion+4:], arenaHeaderSize)
	header{b}.word(hdrSlotSize).Store(uint64(slotSize))
	copy(b, arenaMagic)
}
