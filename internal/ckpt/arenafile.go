package ckpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultArenaDir is where arenas go when CreateArena or OpenArena get "".
const DefaultArenaDir = "/dev/shm"

// arenaPage is the alignment of slot sizes (and so of slot offsets).
const arenaPage = 4096

// fallocate is unix.Fallocate; tests replace it to simulate a full /dev/shm.
var fallocate = unix.Fallocate

// CreateArena creates the arena file dir/name (dir "" is [DefaultArenaDir])
// for snapshots of up to slotSize bytes, rounded up to a multiple of 4096:
// a 4 KiB header and two slots, reserved up front with fallocate and mapped
// shared. Every page is faulted in now so that the first save runs at
// memory speed. If the file system has too little room, the error wraps
// ErrShmTooSmall and says how much was needed and how much is free.
//
// The file is created with mode 0600, and fails if it exists (OpenArena it,
// or Remove the old one). A missing dir is created with mode 0700; an
// existing one must not be writable by every user unless it has the sticky
// bit, as /dev/shm and /tmp do, since then anyone could replace the file.
func CreateArena(dir, name string, slotSize int64) (*Arena, error) {
	return createArena(dir, name, slotSize, true)
}

func createArena(dir, name string, slotSize int64, populate bool) (_ *Arena, err error) {
	path, err := arenaPath(dir, name)
	if err != nil {
		return nil, err
	}
	ss, err := roundSlot(slotSize)
	if err != nil {
		return nil, err
	}
	if err := ensureArenaDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating arena: %w (OpenArena it, or Remove it first)", err)
		}
		return nil, fmt.Errorf("creating arena: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	size := arenaHeaderSize + 2*ss
	if err := reserve(f, path, size, 0, fmt.Sprintf("a 4 KiB header and two slots of %s", fmtBytes(ss))); err != nil {
		return nil, err
	}
	mem, err := mapFile(f, size)
	if err != nil {
		return nil, err
	}
	initArenaHeader(mem, ss)
	if populate {
		prefault(f, mem)
	}
	return &Arena{path: path, f: f, mem: mem, slotSize: ss, unmap: unix.Munmap}, nil
}

// OpenArena maps the existing arena dir/name (dir "" is [DefaultArenaDir]):
// an agent that restarted, a worker restoring, or a reader in another
// process. The file must be a regular file owned by this user and closed to
// everyone else (mode 0600), and its header must be valid (ErrBadArena).
func OpenArena(dir, name string) (_ *Arena, err error) {
	path, err := arenaPath(dir, name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("opening arena: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening arena: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadArena, path)
	case st != nil && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%w: %s is owned by uid %d, not this process's uid %d; run the agent and the workers as one user", ErrBadArena, path, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has mode %v, open to other users; it must be 0600", ErrBadArena, path, fi.Mode().Perm())
	}
	if fi.Size() < arenaHeaderSize {
		return nil, fmt.Errorf("%w: %s has %d bytes, less than a header", ErrBadArena, path, fi.Size())
	}
	mem, err := mapFile(f, fi.Size())
	if err != nil {
		return nil, err
	}
	lay, err := parseArenaHeader(append([]byte(nil), mem[:arenaHeaderSize]...), fi.Size())
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	prefault(f, mem)
	return &Arena{path: path, f: f, mem: mem, slotSize: lay.slotSize, unmap: unix.Munmap}, nil
}

// Resize grows the slots to hold slotSize bytes (rounded up to 4096), for a
// state that outgrew them. The newest snapshot is kept (it always fits a
// larger slot; it is moved to slot 0 if it was in slot 1); the older one is
// dropped. The file grows in place, so that other processes' mappings stay
// valid: their next call notices the new size and maps the file again.
// Arenas never shrink: a slotSize that fits already is a no-op (to shrink,
// Remove the arena and create a new one, losing its snapshots). Resize is a
// writer operation; a write begun before it must start again
// (ErrStaleToken). If the file system cannot hold the larger file, the
// error wraps ErrShmTooSmall and the arena is left as it was.
func (a *Arena) Resize(slotSize int64) error {
	ss, err := roundSlot(slotSize)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.remapLocked(); err != nil {
		return err
	}
	if ss <= a.slotSize {
		return nil
	}
	fi, err := a.f.Stat()
	if err != nil {
		return fmt.Errorf("resizing arena: %w", err)
	}
	size := arenaHeaderSize + 2*ss
	if err := reserve(a.f, a.path, size, fi.Size(), fmt.Sprintf("to grow to two slots of %s", fmtBytes(ss))); err != nil {
		return err
	}
	mem, err := mapFile(a.f, size)
	if err != nil {
		return err
	}
	prefault(a.f, mem)
	// Every step below leaves a header that is consistent on its own, so a
	// crash anywhere loses at most the older snapshot.
	h, old := header{mem}, a.slotSize
	if idx, s, _ := h.newest(old); idx == 1 {
		g := h.beginChange(0) // slot 0 is being written
		h.slotWord(0, slState).Store(uint64(SlotWriting))
		copy(mem[arenaHeaderSize:arenaHeaderSize+s.length], mem[arenaHeaderSize+old:arenaHeaderSize+old+s.length])
		var crc uint64
		if sum, ok := s.checksum(); ok {
			crc = crcWord(sum, g+1)
		}
		h.slotWord(0, slStep).Store(uint64(s.step))
		h.slotWord(0, slLength).Store(uint64(s.length))
		h.slotWord(0, slCRC).Store(crc)
		h.slotWord(0, slCommit).Store(h.word(hdrCommits).Add(1))
		h.slotWord(0, slState).Store(uint64(SlotValid))
		h.slotWord(0, slGen).Store(g + 1)
		h.word(hdrNewest).Store(1)
	}
	g := h.beginChange(1) // slot 1 is dropped
	h.slotWord(1, slState).Store(uint64(SlotEmpty))
	for _, off := range []int{slStep, slLength, slCRC, slCommit} {
		h.slotWord(1, off).Store(0)
	}
	h.word(hdrSlotSize).Store(uint64(ss)) // the new layout takes effect
	h.slotWord(1, slGen).Store(g + 1)
	a.retired = append(a.retired, a.mem)
	a.mem, a.slotSize = mem, ss
	return nil
}

// remap maps the file again after another handle resized it.
func (a *Arena) remap() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.remapLocked()
}

// remapLocked brings the mapping up to the header's slot size. The old
// mapping is kept until Close: snapshots taken from it stay readable (the
// file only grows), and Check tells whether they are still current.
func (a *Arena) remapLocked() error {
	if a.closed {
		return ErrClosed
	}
	ss := int64(header{a.mem}.word(hdrSlotSize).Load())
	if ss == a.slotSize {
		return nil
	}
	fi, err := a.f.Stat()
	if err != nil {
		return fmt.Errorf("remapping arena: %w", err)
	}
	if ss < a.slotSize || ss%arenaPage != 0 || ss > (fi.Size()-arenaHeaderSize)/2 {
		return fmt.Errorf("%w: %s: slot size changed from %d to %d in a file of %d bytes", ErrBadArena, a.path, a.slotSize, ss, fi.Size())
	}
	mem, err := mapFile(a.f, fi.Size())
	if err != nil {
		return err
	}
	prefault(a.f, mem)
	a.retired = append(a.retired, a.mem)
	a.mem, a.slotSize = mem, ss
	return nil
}

// reserve allocates the file's first size bytes with fallocate. have is the
// current size, what is the allocation in words, for the error message.
func reserve(f *os.File, path string, size, have int64, what string) error {
	err := fallocate(int(f.Fd()), 0, 0, size)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EFBIG):
		free := "an unknown amount"
		var st unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &st) == nil {
			free = fmtBytes(int64(st.Bavail) * st.Bsize)
		}
		return fmt.Errorf("%w: arena %s needs %s more (%s), but only %s is free in %s (%v); "+
			"mount a larger /dev/shm, e.g. --shm-size for docker or a memory-backed emptyDir "+
			"(medium: Memory) with a sizeLimit in Kubernetes",
			ErrShmTooSmall, path, fmtBytes(size-have), what, free, filepath.Dir(path), err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("arena %s: the file system does not support fallocate, so space cannot be reserved; put the arena on tmpfs (/dev/shm): %w", path, err)
	}
	return fmt.Errorf("arena %s: reserving %s: %w", path, fmtBytes(size), err)
}

func mapFile(f *os.File, size int64) ([]byte, error) {
	if size > math.MaxInt {
		return nil, fmt.Errorf("arena of %d bytes does not fit the address space", size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping arena %s (%s): %w", f.Name(), fmtBytes(size), err)
	}
	return mem, nil
}

// prefault faults in every page of mem so that the first save does not pay
// for it. On tmpfs: MADV_POPULATE_WRITE (kernel 5.14+) maps every page in
// one call, then an atomic add of zero to one word per page writes each
// page for real. The second pass matters in VMs whose memory the host backs
// lazily (Firecracker, free page reporting): there the populate only sets
// up the guest's page tables, and the first write of each page still traps
// to the host, ~10x slower than the copy itself. Adding zero atomically
// changes nothing, even under a concurrent writer in another process.
// Elsewhere (a disk file system, where writing would dirty the whole file
// for writeback) pages are only populated for reading.
func prefault(f *os.File, mem []byte) {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) == nil && st.Type == unix.TMPFS_MAGIC {
		_ = unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
		touchPagesWrite(mem)
		return
	}
	if unix.Madvise(mem, unix.MADV_POPULATE_READ) != nil {
		touchPages(mem)
	}
}

// touchPages reads one byte per page.
func touchPages(mem []byte) {
	var x byte
	for i := 0; i < len(mem); i += os.Getpagesize() {
		x ^= mem[i]
	}
	runtime.KeepAlive(x) // keeps the reads from being optimised away
}

// touchPagesWrite adds zero atomically to the first word of every page.
func touchPagesWrite(mem []byte) {
	h := header{mem}
	for i := 0; i+8 <= len(mem); i += os.Getpagesize() {
		h.word(i).Add(0)
	}
}

func arenaPath(dir, name string) (string, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return "", invalidf("checkpoint arenas need a little-endian host")
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", invalidf("arena name %q: want a plain file name", name)
	}
	if dir == "" {
		dir = DefaultArenaDir
	}
	return filepath.Join(dir, name), nil
}

func roundSlot(slotSize int64) (int64, error) {
	const most = (math.MaxInt64 - arenaHeaderSize) / 2 / arenaPage * arenaPage
	if slotSize <= 0 || slotSize > most {
		return 0, invalidf("slot size %d: want 1..%d bytes", slotSize, most)
	}
	return (slotSize + arenaPage - 1) / arenaPage * arenaPage, nil
}

// ensureArenaDir creates dir with mode 0700 if it is missing, or checks that
// no other user can replace files in it.
func ensureArenaDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating arena directory: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("arena directory: %w", err)
	}
	if !fi.IsDir() {
		return invalidf("arena directory %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o002 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return invalidf("arena directory %s (mode %v) is writable by every user and not sticky, so anyone could replace the arena; use a directory of mode 0700, or /dev/shm", dir, fi.Mode())
	}
	return nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	}
	return fmt.Sprintf("%d bytes", n)
}
