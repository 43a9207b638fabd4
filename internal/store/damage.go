package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrDamaged marks, wrapped in a *DamageError, a state file that Open will
// not start from, because starting would drop state: a file that is empty,
// cut short, garbage, a directory, of another format, with a damaged
// header, snapshot or record. A missing file is no damage: it is a new job.
var ErrDamaged = errors.New("the state file is damaged")

// DamageError says what is wrong with a state file and what starting from
// it would drop. Open returns it, unless Options.DiscardDamaged, in which
// case Open drops that much, logs it, and Bolt.Discarded returns it.
type DamageError struct {
	// Path is the file.
	Path string
	// Problem says what is wrong, for a person.
	Problem string
	// Err is the underlying error, if any.
	Err error
	// Whole is set when nothing of the file can be trusted: starting drops
	// the job's whole state. Discarding moves the file aside (MovedTo).
	Whole bool
	// For damage in the journal (not Whole): Kept records before the
	// damage stay; DroppedRecords from sequence number FirstBad on would be
	// dropped, of which Dropped holds the payloads of those that are still
	// intact, in order (a caller can say what they recorded).
	Kept           int
	FirstBad       uint64
	DroppedRecords int
	Dropped        [][]byte
	// LastTxLost is set for one damaged file header: bbolt falls back to
	// its other header, dropping the last transaction (one Append or
	// Snapshot). A crash during a commit leaves the same, with that
	// transaction never acknowledged, so Open warns and goes on.
	LastTxLost bool
	// MovedTo is where a discarded whole file went (it is kept, not deleted).
	MovedTo string
}

func (e *DamageError) Error() string {
	s := fmt.Sprintf("state file %s is damaged: %s", e.Path, e.Problem)
	if e.Err != nil {
		s += fmt.Sprintf(" (%v)", e.Err)
	}
	switch {
	case e.Whole:
		s += "; nothing in it can be trusted: starting would drop the job's whole state"
	case e.LastTxLost:
		s += "; starting would fall back to the file's other header and drop the last committed write (its records or snapshot)"
	default:
		s += fmt.Sprintf("; starting would drop records %d on (%d records, %d of them still intact), keeping the %d before them",
			e.FirstBad, e.DroppedRecords, len(e.Dropped), e.Kept)
	}
	return s
}

func (e *DamageError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrDamaged}
	}
	return []error{ErrDamaged, e.Err}
}

// preflight checks what is at path before bbolt opens it: bbolt lays out a
// new database in an empty file, so an empty file would silently become a
// new job. It returns exists=false for no file at all.
func preflight(path string) (exists bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return true, fmt.Errorf("state file %s: %w", path, err)
	case fi.IsDir():
		return true, &DamageError{Path: path, Problem: "it is a directory, not a file", Whole: true}
	case !fi.Mode().IsRegular():
		return true, &DamageError{Path: path, Problem: fmt.Sprintf("it is not a regular file (%v)", fi.Mode().Type()), Whole: true}
	case fi.Size() == 0:
		return true, &DamageError{Path: path, Problem: "it is empty (0 bytes)", Whole: true}
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return true, fmt.Errorf("state file %s cannot be read by this master (uid %d): %w; nothing was changed: run the master as the file's owner, or give it access (the file is mode 0600)",
				path, os.Getuid(), err)
		}
		return true, fmt.Errorf("state file %s: %w", path, err)
	}
	defer f.Close()
	// A master holding the file (bbolt locks it exclusively) may be
	// writing it: what is read now proves nothing, and must not be
	// discarded. Wait as bbolt would, then report it in use.
	for deadline := time.Now().Add(lockTimeout); ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			break // locked, or a file system without locks: bbolt's own lock decides
		}
		if time.Now().After(deadline) {
			return true, fmt.Errorf("lock state file %s: %w", path, errInUse)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true, checkHeaders(f, path, fi.Size())
}

// errInUse: another process holds the state file.
var errInUse = errors.New("in use by another process")

// bbolt's file starts with two header (meta) pages, written in turn, each
// with a checksum. bbolt opens with the newer valid one, and falls back to
// the other when one fails its checksum: that silently drops the last
// transaction. checkHeaders checks both. The layout, little-endian: a page
// header of 16 bytes (id, flags, count, overflow), then magic (4), version
// (4), page size (4), flags (4), root bucket (16), freelist (8), high page
// (8), transaction id (8), and the FNV-1a 64 checksum of the 56 bytes
// before it.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeaderLen   = 16
	metaLen         = 56
	metaChecksumOff = pageHeaderLen + metaLen
)

func checkHeaders(f *os.File, path string, size int64) error {
	head := make([]byte, metaChecksumOff+8)
	if _, err := f.ReadAt(head, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return &DamageError{Path: path, Problem: fmt.Sprintf("it is cut short (%d bytes, shorter than its header)", size), Whole: true}
		}
		return fmt.Errorf("read state file %s: %w", path, err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[pageHeaderLen+8:]))
	if binary.LittleEndian.Uint32(head[pageHeaderLen:]) != boltMagic || pageSize < 512 || pageSize > 1<<20 || pageSize&(pageSize-1) != 0 {
		pageSize = int64(os.Getpagesize()) // the first header is damaged: look for the second where bbolt would
	}
	if size < 2*pageSize {
		return &DamageError{Path: path, Problem: fmt.Sprintf("it is cut short (%d bytes, shorter than its two %d-byte header pages)", size, pageSize), Whole: true}
	}
	var bad []int
	var pages, txid uint64 // of the newest valid header
	for i := range 2 {
		page := make([]byte, metaChecksumOff+8)
		if _, err := f.ReadAt(page, int64(i)*pageSize); err != nil {
			return fmt.Errorf("read state file %s: %w", path, err)
		}
		if !metaValid(page) {
			bad = append(bad, i)
			continue
		}
		if t := binary.LittleEndian.Uint64(page[pageHeaderLen+48:]); t >= txid {
			txid, pages = t, binary.LittleEndian.Uint64(page[pageHeaderLen+40:])
		}
	}
	if len(bad) == 2 {
		return &DamageError{Path: path, Problem: "neither of its two header pages is valid: it is not a bbolt file, or both headers are damaged", Whole: true}
	}
	// The header names the file's high-water page: a shorter file lost
	// pages that its tree may point into.
	if need := int64(pages) * pageSize; size < need {
		return &DamageError{Path: path, Problem: fmt.Sprintf("it is cut short (%d bytes; its header says %d)", size, need), Whole: true}
	}
	if len(bad) == 0 {
		return nil
	}
	return &DamageError{Path: path, Problem: fmt.Sprintf("its header page %d fails its checksum", bad[0]), LastTxLost: true}
}

func metaValid(page []byte) bool {
	m := page[pageHeaderLen:]
	if binary.LittleEndian.Uint32(m) != boltMagic || binary.LittleEndian.Uint32(m[4:]) != boltVersion {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:metaLen])
	return h.Sum64() == binary.LittleEndian.Uint64(page[metaChecksumOff:])
}

// moveAside renames the damaged file at path out of the way, keeping it for
// whoever wants to look at it, and returns its new name.
func moveAside(path string) (string, error) {
	to := path + ".discarded-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("move the damaged state file %s aside: %w", path, err)
	}
	return to, syncDir(path)
}

// syncDir fsyncs the directory of path, making a rename in it durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("sync the state dir %s: %w", filepath.Dir(path), err)
	}
	return nil
}
