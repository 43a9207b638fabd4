package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FormatVersion is the layout of journal.db that this Rover writes and reads.
// A file of another version is refused, never rewritten.
const FormatVersion = 1

// The layout of a state dir:
//
//	journal.db        the bbolt file, mode 0600
//	  meta            bucket: "format" (FormatVersion, 8 bytes big-endian) and
//	                  "next" (a kindCounter frame: the next sequence number)
//	  journal         bucket: the records after the snapshot, keyed by their
//	                  sequence number (8 bytes big-endian), each a kindRecord frame
//	  snapshot        bucket: at most one key, the last sequence number the
//	                  snapshot covers, holding a kindSnapshot frame
//	journal.db.owner  "pid N on HOST" of the master holding the file, for the
//	                  error a second master gets; advisory only
//
// Sequence numbers start at 1 and are never reused, not across snapshots and
// not across a cut: the counter only goes up. The snapshot has a bucket of its
// own because bbolt rewrites a whole leaf, big values included, when any key
// in it changes.
const (
	fileName    = "journal.db"
	ownerName   = "journal.db.owner"
	lockTimeout = time.Second
)

var (
	bucketMeta     = []byte("meta")
	bucketJournal  = []byte("journal")
	bucketSnapshot = []byte("snapshot")
	keyFormat      = []byte("format")
	keyNext        = []byte("next")
)

// maxPayload is the largest record or snapshot Bolt stores: bbolt's largest
// value less the frame header.
const maxPayload = bolt.MaxValueSize - frameHeaderLen

// Options tune Open. The zero value is what a master wants.
type Options struct {
	// Logger receives the warnings of Open when it discards damage.
	// nil means slog.Default().
	Logger *slog.Logger
	// DiscardDamaged makes Open drop what it cannot trust of a damaged
	// file (see Open) instead of refusing it. It is the master's
	// --discard-state: never the default, since it drops state.
	DiscardDamaged bool
	// NoSync skips every fsync: Append and Snapshot return before their data
	// is on disk, and a machine crash can lose acknowledged records or leave
	// the file damaged beyond repair. For benchmarks only; never for a job.
	NoSync bool
}

// Stats describes a Bolt store's file.
type Stats struct {
	// FileBytes is the size of journal.db on disk. bbolt never shrinks the
	// file; pages freed by a snapshot are reused by later writes.
	FileBytes int64
	// Records is the number of records after the snapshot.
	Records int
	// SnapshotBytes is the size of the snapshot, 0 before the first.
	SnapshotBytes int
}

// Bolt is a journal kept in a bbolt file in a state dir. Append and Snapshot
// are each one bbolt transaction, so one fsync of the data and one of the
// meta page, whatever the number of records; a crash leaves the file as it was
// before or after the whole transaction. Load validates every record and refuses
// a damaged journal (see Load).
//
// The file stays bounded by roughly twice the snapshot plus the records since
// the last snapshot: a snapshot frees the pages of the records it drops and of
// the snapshot before it, and bbolt reuses them. The old snapshot's pages are
// in use until the new one commits, hence twice. bbolt never shrinks the file,
// so its size is the peak of that bound, not the current contents.
//
// A Bolt is safe for concurrent use; its methods are serialized.
type Bolt struct {
	dir  string
	path string
	log  *slog.Logger

	// discard is Options.DiscardDamaged; discarded is what Open dropped.
	discard   bool
	discarded *DamageError

	mu sync.Mutex
	db *bolt.DB // nil once closed
	// next is the sequence number of the next record.
	next uint64
	// last is the sequence number of the newest record, or the one the
	// snapshot covers when there are none after it, or 0: the predecessor
	// the next record names.
	last uint64
}

// Open opens the journal in dir, creating dir (mode 0700) and the journal
// file in it if missing (a missing file is a new job). It fails, after
// about a second, if another master has the journal open. It refuses, with
// a *DamageError, a file it cannot trust, since starting from it would drop
// state: empty, cut short, not a Rover journal, a damaged header, snapshot
// or record. With opts.DiscardDamaged it drops what cannot be trusted
// instead, logs what it dropped, and Discarded says so: the records from the
// first damaged one on, or the whole file, which is moved aside.
func Open(dir string, opts Options) (*Bolt, error) {
	if dir == "" {
		return nil, errors.New("open the state store: no state dir given: name a directory for the master's state")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	path := filepath.Join(dir, fileName)
	b, err := open(dir, path, opts, log)
	var de *DamageError
	if errors.As(err, &de) && de.Whole && opts.DiscardDamaged {
		if de.MovedTo, err = moveAside(path); err != nil {
			return nil, err
		}
		log.Warn("discarded the damaged state file, as asked: the job starts afresh (the file is kept, moved aside)",
			"file", path, "moved_to", de.MovedTo, "problem", de.Problem)
		if b, err = open(dir, path, opts, log); err == nil {
			b.discarded = de
		}
	}
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if err := os.WriteFile(filepath.Join(dir, ownerName), fmt.Appendf(nil, "pid %d on %s\n", os.Getpid(), host), 0o600); err != nil {
		log.Warn("could not note this master in the state dir; a second master will not learn its pid", "file", filepath.Join(dir, ownerName), "err", err)
	}
	return b, nil
}

// open is Open once, without discarding a whole file.
func open(dir, path string, opts Options, log *slog.Logger) (*Bolt, error) {
	exists, err := preflight(path)
	if errors.Is(err, errInUse) {
		return nil, fmt.Errorf("state dir %s is in use by another master (%s): stop that master, or give this one a state dir of its own: %w", dir, owner(dir), berrors.ErrTimeout)
	}
	var de *DamageError
	if errors.As(err, &de) && de.LastTxLost {
		// What a crash while bbolt writes a header leaves, which its two
		// headers are for: the write was not acknowledged, and bbolt starts
		// from the other header. Bit rot there looks the same, and drops the
		// last write; say so, loudly.
		log.Warn("one of the state file's two headers fails its checksum: starting from the other, as after a crash during a write; "+
			"if the master did not crash, the last write to the file (its newest records or snapshot) is lost",
			"file", path, "problem", de.Problem)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if !exists {
		if err := create(path, opts); err != nil {
			return nil, err
		}
	}
	// The freelist is synced (one more page per commit) rather than rebuilt
	// on open (NoFreelistSync): the rebuild walks the file in a goroutine of
	// bbolt's own, where a panic on a damaged file would kill the process
	// instead of coming back as an error. The map freelist allocates the runs
	// of pages a large snapshot needs faster than the array one.
	db, err := openBolt(path, boltOptions(opts))
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("state dir %s is in use by another master (%s): stop that master, or give this one a state dir of its own: %w", dir, owner(dir), err)
		case isDamaged(err):
			return nil, &DamageError{Path: path, Problem: "bbolt cannot open it", Err: err, Whole: true}
		default:
			return nil, fmt.Errorf("open state file %s: %w", path, err)
		}
	}
	b := &Bolt{dir: dir, path: path, log: log, db: db, discard: opts.DiscardDamaged}
	if err := b.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if _, err := b.load(false); err != nil {
		_ = db.Close()
		return nil, err
	}
	return b, nil
}

func boltOptions(opts Options) *bolt.Options {
	return &bolt.Options{
		Timeout:      lockTimeout,
		FreelistType: bolt.FreelistMapType,
		NoSync:       opts.NoSync,
		NoGrowSync:   opts.NoSync,
	}
}

// create lays out a new journal at path: in a file of its own, renamed into
// place once complete, so that a crash while creating it leaves no file, not
// an empty or half-written one that the next start would refuse.
func create(path string, opts Options) error {
	tmp := path + ".new"
	_ = os.Remove(tmp) // left by a crash while creating
	db, err := openBolt(tmp, boltOptions(opts))
	if err != nil {
		return fmt.Errorf("create state file %s: %w", tmp, err)
	}
	err = guard(func() error { return db.Update(layout) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil && !opts.NoSync {
		err = syncDir(path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("lay out new state file %s: %w", path, err)
	}
	return nil
}

// layout creates the buckets and counter of a new journal.
func layout(tx *bolt.Tx) error {
	m, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if err := m.Put(keyFormat, binary.BigEndian.AppendUint64(nil, FormatVersion)); err != nil {
		return err
	}
	if err := m.Put(keyNext, encodeRecord(frame{kind: kindCounter, seq: 1})); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(bucketJournal); err != nil {
		return err
	}
	_, err = tx.CreateBucket(bucketSnapshot)
	return err
}

// Discarded says what Open dropped of a damaged file, as asked
// (Options.DiscardDamaged); nil when it dropped nothing.
func (b *Bolt) Discarded() *DamageError { return b.discarded }

// openBolt opens a bbolt file, turning a bbolt panic (it has some for garbage
// files) into an error and closing the file. The file stays memory-mapped, and
// so locked, until the process exits: bbolt does not hand back what it mapped.
// A master exits on the error anyway.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	var f *os.File
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, perm)
		return f, err
	}
	err = guard(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, opts)
		return err
	})
	if err != nil && db == nil && f != nil && errors.Is(err, errPanic) {
		_ = f.Close()
	}
	return db, err
}

// errPanic marks a bbolt panic turned into an error.
var errPanic = errors.New("bbolt panicked")

// guard runs fn, turning a panic, or a fault on the memory-mapped file, into
// an error wrapping errPanic.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errPanic, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// isDamaged reports whether err from bbolt says the file is not a sound
// bbolt file.
func isDamaged(err error) bool {
	return errors.Is(err, errPanic) || errors.Is(err, berrors.ErrInvalid) ||
		errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrInvalidMapping) || strings.Contains(err.Error(), "file size too small")
}

// damaged returns the error for a state file that cannot be read.
func damaged(path, what string, err error) error {
	return &DamageError{Path: path, Problem: what, Err: err, Whole: true}
}

// owner returns what the owner file says of the master holding dir.
func owner(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ownerName))
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s
	}
	return "pid unknown"
}

// view and update run a bbolt transaction, turning a bbolt panic on a
// damaged file into an error.
func (b *Bolt) view(fn func(*bolt.Tx) error) error {
	return b.guarded(func() error { return b.db.View(fn) })
}

func (b *Bolt) update(fn func(*bolt.Tx) error) error {
	return b.guarded(func() error { return b.db.Update(fn) })
}

func (b *Bolt) guarded(fn func() error) error {
	err := guard(fn)
	if errors.Is(err, errPanic) {
		return damaged(b.path, "bbolt failed reading it", err)
	}
	return err
}

// init checks the format of the file and reads the sequence counter. A
// bbolt file without any bucket holds nothing to lose (an older Rover laid
// out its journal in place, and could crash before it did): it is laid out.
func (b *Bolt) init() error {
	fresh := false
	err := b.view(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			errOther := errors.New("other buckets")
			if err := tx.ForEach(func([]byte, *bolt.Bucket) error { return errOther }); err != nil {
				return &DamageError{Path: b.path, Problem: fmt.Sprintf("it is a bbolt file but not a Rover journal (no %q bucket): point the master at a state dir of its own", bucketMeta), Whole: true}
			}
			fresh = true
			return nil
		}
		if err := b.checkFormat(m.Get(keyFormat)); err != nil {
			return err
		}
		if tx.Bucket(bucketJournal) == nil || tx.Bucket(bucketSnapshot) == nil {
			return &DamageError{Path: b.path, Problem: "its journal or snapshot bucket is missing", Whole: true}
		}
		f, err := decodeRecord(m.Get(keyNext))
		if err == nil && f.kind != kindCounter {
			err = fmt.Errorf("%w: kind %d, not a counter", errFrame, f.kind)
		}
		if err != nil {
			return &DamageError{Path: b.path, Problem: "its sequence counter is unreadable", Err: err, Whole: true}
		}
		b.next = f.seq
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	if err := b.update(layout); err != nil {
		return fmt.Errorf("lay out new state file %s: %w", b.path, err)
	}
	b.next = 1
	return nil
}

// checkFormat checks the stored format version v. A newer format is
// refused, never discarded: the Rover that wrote it reads it.
func (b *Bolt) checkFormat(v []byte) error {
	if len(v) != 8 {
		return &DamageError{Path: b.path, Problem: fmt.Sprintf("it holds a journal of an unknown format (format value %x)", v), Whole: true}
	}
	switch f := binary.BigEndian.Uint64(v); {
	case f > FormatVersion:
		return fmt.Errorf("state dir %s was written by a newer Rover (format %d; this one reads %d): upgrade rover", b.dir, f, FormatVersion)
	case f < FormatVersion:
		return &DamageError{Path: b.path, Problem: fmt.Sprintf("it was written in format %d, which this Rover (format %d) does not read: run the Rover that wrote it", f, FormatVersion), Whole: true}
	}
	return nil
}

// Append adds records to the journal, in order, in one transaction: when it
// returns nil they are on disk (one fsync for the group). On an error none of
// them is.
func (b *Bolt) Append(ctx context.Context, recs [][]byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append %d records: %w", len(recs), err)
	}
	if len(recs) == 0 {
		return nil
	}
	for i, r := range recs {
		if len(r) > maxPayload {
			return fmt.Errorf("append %d records: record %d is %d bytes, over the journal's limit of %d: keep records small and put bulk state in snapshots", len(recs), i, len(r), maxPayload)
		}
	}
	seq, prev := b.next, b.last
	err := b.update(func(tx *bolt.Tx) error {
		j := tx.Bucket(bucketJournal)
		j.FillPercent = 1 // keys only ever grow: pack the leaves
		for _, r := range recs {
			if err := j.Put(seqKey(seq), encodeRecord(frame{kind: kindRecord, seq: seq, prev: prev, payload: r})); err != nil {
				return err
			}
			prev, seq = seq, seq+1
		}
		return tx.Bucket(bucketMeta).Put(keyNext, encodeRecord(frame{kind: kindCounter, seq: seq}))
	})
	if err != nil {
		return fmt.Errorf("append %d records to %s: %w", len(recs), b.path, err)
	}
	b.next, b.last = seq, prev
	return nil
}

// Snapshot replaces the snapshot with state, which must reflect every record
// appended so far, and drops those records, in one transaction.
func (b *Bolt) Snapshot(ctx context.Context, state []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if len(state) > maxPayload {
		return fmt.Errorf("snapshot: the state is %d bytes, over the journal's limit of %d", len(state), maxPayload)
	}
	covered := b.next - 1
	err := b.update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketJournal); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketJournal); err != nil {
			return err
		}
		s := tx.Bucket(bucketSnapshot)
		var old [][]byte
		if err := s.ForEach(func(k, _ []byte) error {
			old = append(old, append([]byte(nil), k...))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range old {
			if err := s.Delete(k); err != nil {
				return err
			}
		}
		return s.Put(seqKey(covered), encodeRecord(frame{kind: kindSnapshot, seq: covered, payload: state}))
	})
	if err != nil {
		return fmt.Errorf("snapshot %d bytes to %s: %w", len(state), b.path, err)
	}
	b.last = covered
	return nil
}

// Load returns the snapshot and the records after it. It validates every
// record, in sequence order: a record that fails its checksum or framing, or
// that does not name the record before it (one is missing), is damage, and
// Load returns a *DamageError saying what the records from it on are (they
// may depend on it). With Options.DiscardDamaged it cuts them instead, in one
// transaction, with one warning logged. A damaged snapshot is a *DamageError
// of the whole file. Open has done the same checks: Load finds damage only
// where the file changed since.
func (b *Bolt) Load(ctx context.Context) (Contents, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return Contents{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Contents{}, fmt.Errorf("load: %w", err)
	}
	return b.load(true)
}

// Stats returns the size of the file and of what it holds.
func (b *Bolt) Stats() (Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return Stats{}, ErrClosed
	}
	var st Stats
	err := b.view(func(tx *bolt.Tx) error {
		st.Records = tx.Bucket(bucketJournal).Stats().KeyN
		if _, v := tx.Bucket(bucketSnapshot).Cursor().First(); len(v) >= frameHeaderLen {
			st.SnapshotBytes = len(v) - frameHeaderLen
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", b.path, err)
	}
	fi, err := os.Stat(b.path)
	if err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", b.path, err)
	}
	st.FileBytes = fi.Size()
	return st, nil
}

// Close closes the file, releasing it for another master. Later calls of
// the other methods return ErrClosed; a second Close returns nil.
func (b *Bolt) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		return nil
	}
	_ = os.Remove(filepath.Join(b.dir, ownerName)) // before the lock goes
	err := b.db.Close()
	b.db = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", b.path, err)
	}
	return nil
}
