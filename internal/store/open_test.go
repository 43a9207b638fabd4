package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "job")
	mustOpen(t, dir, Options{})
	for _, c := range []struct {
		path string
		want os.FileMode
	}{
		{dir, os.ModeDir | 0o700},
		{filepath.Join(dir, fileName), 0o600},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.want {
			t.Errorf("%s has mode %v, want %v", c.path, fi.Mode(), c.want)
		}
	}
}

func TestOpenRefusesOtherFormats(t *testing.T) {
	tests := []struct {
		name  string
		write func(tx *bolt.Tx) error
		want  string
	}{
		{"newer", putFormat(99), "was written by a newer Rover (format 99; this one reads 1): upgrade rover"},
		{"older", putFormat(0), "was written in format 0, which this Rover (format 1) does not read"},
		{"unknown", func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("v1")) }, "a journal of an unknown format"},
		{"not a journal", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bucketMeta); err != nil {
				return err
			}
			_, err := tx.CreateBucket([]byte("someone else's"))
			return err
		}, `not a Rover journal (no "meta" bucket)`},
		{"no journal bucket", func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketJournal) }, "its journal or snapshot bucket is missing"},
		{"counter damaged", func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyNext, []byte("x")) }, "its sequence counter is unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, Options{})
			mustAppend(t, s, recs("a"))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			withBolt(t, filepath.Join(dir, fileName), tt.write)
			_, err := Open(dir, Options{Logger: discard()})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), dir) {
				t.Errorf("Open = %v, want an error naming %s and saying %q", err, dir, tt.want)
			}
		})
	}
}

func putFormat(v uint64) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, binary.BigEndian.AppendUint64(nil, v))
	}
}

// TestOpenRefusesDamagedFile checks that a file bbolt cannot make sense of
// gives an error naming it, from Open or Load, and no panic.
func TestOpenRefusesDamagedFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	// good is a store holding a snapshot and records.
	good := func(t *testing.T) ([]byte, int) {
		dir := t.TempDir()
		s := mustOpen(t, dir, Options{})
		mustAppend(t, s, recs("a", "b"))
		mustSnapshot(t, s, strings.Repeat("state", 3000))
		mustAppend(t, s, recs("c", "d"))
		pageSize := s.db.Info().PageSize
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return readFile(t, filepath.Join(dir, fileName)), pageSize
	}
	tests := []struct {
		name string
		file func(t *testing.T) []byte
	}{
		{"garbage", func(*testing.T) []byte { return garbage(64 << 10) }},
		{"a few bytes", func(*testing.T) []byte { return []byte("not a database") }},
		{"cut short", func(t *testing.T) []byte { b, _ := good(t); return b[:100] }},
		{"meta pages zeroed", func(t *testing.T) []byte {
			b, ps := good(t)
			clear(b[:2*ps])
			return b
		}},
		{"data pages zeroed", func(t *testing.T) []byte {
			b, ps := good(t)
			clear(b[2*ps:])
			return b
		}},
		{"data pages garbage", func(t *testing.T) []byte {
			b, ps := good(t)
			copy(b[2*ps:], garbage(len(b)-2*ps))
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, fileName)
			writeFile(t, path, tt.file(t))
			s, err := Open(dir, Options{Logger: discard()})
			if err == nil {
				defer s.Close()
				_, err = s.Load(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Open and Load = %v, want an error naming %s", err, path)
			}
		})
	}
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	_, err := Open(dir, Options{Logger: discard()})
	want := fmt.Sprintf("state dir %s is in use by another master (pid %d on ", dir, os.Getpid())
	if !errors.Is(err, berrors.ErrTimeout) || !strings.Contains(err.Error(), want) {
		t.Errorf("second Open = %v, want a timeout saying %q", err, want)
	}
	mustAppend(t, s, recs("a")) // the first is unharmed
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, Options{}) // and Close let the file go
	checkLoad(t, s, Contents{Records: recs("a")})
}

func TestBoltCanceledContext(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(ctx, recs("a")); !errors.Is(err, context.Canceled) {
		t.Errorf("Append = %v, want context.Canceled", err)
	}
	if err := s.Snapshot(ctx, []byte("s")); !errors.Is(err, context.Canceled) {
		t.Errorf("Snapshot = %v, want context.Canceled", err)
	}
	if _, err := s.Load(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Load = %v, want context.Canceled", err)
	}
	checkLoad(t, s, Contents{Records: [][]byte{}})
}

func TestStats(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	check := func(want Stats) {
		t.Helper()
		got, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if got.FileBytes <= 0 {
			t.Errorf("FileBytes = %d, want the file's size", got.FileBytes)
		}
		got.FileBytes = 0
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Stats (-want +got):\n%s", diff)
		}
	}
	check(Stats{})
	mustAppend(t, s, recs("a", "b", "c"))
	check(Stats{Records: 3})
	mustSnapshot(t, s, "state")
	check(Stats{SnapshotBytes: 5})
	mustAppend(t, s, recs("d"))
	check(Stats{Records: 1, SnapshotBytes: 5})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("Stats after Close = %v, want ErrClosed", err)
	}
}

// TestSnapshotsBoundTheFile checks that the file stays bounded by the state,
// not by everything ever appended: bbolt reuses the pages a snapshot frees.
// Sixty rounds append 3 MB of records and 3.8 MB of snapshots in all; the
// state at any time is a 64 KB snapshot and 50 KB of records.
func TestSnapshotsBoundTheFile(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{NoSync: true})
	const rounds = 60
	// The state times two (old and new snapshot coexist until a commit),
	// with room for bbolt's growth steps and fragmentation: a sixth of what
	// an unbounded file would reach.
	const limit = int64(1 << 20)
	var peak int64
	for round := range rounds {
		for g := range 5 {
			var r [][]byte
			for i := range 10 {
				r = append(r, fmt.Appendf(nil, "%d/%d/%d %1000s", round, g, i, ""))
			}
			mustAppend(t, s, r)
		}
		mustSnapshot(t, s, fmt.Sprintf("%d %64000s", round, ""))
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, st.FileBytes)
		if st.FileBytes > limit {
			t.Fatalf("after round %d the file is %d bytes, over %d", round, st.FileBytes, limit)
		}
	}
	t.Logf("peak file size over %d rounds: %d bytes", rounds, peak)
}
