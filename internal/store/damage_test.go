package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestOpenRefusesDamage damages a journal of records 1-4, a snapshot and
// records 5-10 in each way a disk or a person can, and checks that Open
// refuses it with a *DamageError naming the file, what is wrong and what
// would be dropped, leaving the file as it was; and that with
// DiscardDamaged it starts from what can be trusted, saying what it dropped.
func TestOpenRefusesDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir, path string)
		want   string // in the error
		// whole: nothing can be trusted; else the records kept and cut.
		whole bool
		kept  []int
		cut   int
	}{
		{"empty file", func(t *testing.T, _, path string) { writeFile(t, path, nil) }, "it is empty (0 bytes)", true, nil, 0},
		{"cut short", func(t *testing.T, _, path string) {
			b := readFile(t, path)
			writeFile(t, path, b[:len(b)/2])
		}, "it is cut short", true, nil, 0},
		{"cut inside the header", func(t *testing.T, _, path string) { writeFile(t, path, readFile(t, path)[:50]) }, "cut short", true, nil, 0},
		{"both headers flipped", func(t *testing.T, _, path string) {
			editFile(t, path, func(b []byte) {
				ps := pageSizeOf(t, b)
				b[pageHeaderLen+40] ^= 0x55
				b[ps+pageHeaderLen+40] ^= 0x55
			})
		}, "neither of its two header pages is valid", true, nil, 0},
		{"early record flipped", func(t *testing.T, _, path string) { flipAt(t, path, 5, 2) }, "record 5 is bad: malformed frame: checksum mismatch", false, nil, 6},
		{"late record flipped", func(t *testing.T, _, path string) { flipAt(t, path, 10, 2) }, "record 10 is bad", false, []int{5, 6, 7, 8, 9}, 1},
		{"snapshot flipped", func(t *testing.T, _, path string) {
			editFile(t, path, func(b []byte) {
				for i := bytes.Index(b, []byte("state after 4")); i >= 0; i = bytes.Index(b, []byte("state after 4")) {
					b[i] ^= 1
				}
			})
		}, "its snapshot (of the state after record 4) is unreadable", true, nil, 0},
		{"older format", func(t *testing.T, _, path string) { withBolt(t, path, putFormat(0)) }, "written in format 0", true, nil, 0},
		{"not a bbolt file", func(t *testing.T, _, path string) { writeFile(t, path, bytes.Repeat([]byte("not a database "), 2000)) }, "", true, nil, 0},
		{"another program's bbolt file", func(t *testing.T, _, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			withBolt(t, path, func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
		}, "not a Rover journal", true, nil, 0},
		{"a directory", func(t *testing.T, _, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "it is a directory, not a file", true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, fileName)
			writeDamageJournal(t, dir)
			tt.damage(t, dir, path)
			before := snapshotPath(t, path)

			_, err := Open(dir, Options{Logger: discard()})
			var de *DamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("Open = %v, want a *DamageError", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open = %v, want it to name %s and say %q", err, path, tt.want)
			}
			if de.Whole != tt.whole || (!tt.whole && (de.Kept != len(tt.kept) || de.DroppedRecords != tt.cut)) {
				t.Errorf("Open = %+v, want whole=%v, or %d records kept and %d dropped", de, tt.whole, len(tt.kept), tt.cut)
			}
			if tt.whole && !strings.Contains(err.Error(), "starting would drop the job's whole state") {
				t.Errorf("Open = %v, want it to say the whole state would be dropped", err)
			}
			if after := snapshotPath(t, path); after != before {
				t.Fatal("Open changed the file it refused")
			}

			var logs bytes.Buffer
			s := mustOpen(t, dir, Options{DiscardDamaged: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			d := s.Discarded()
			if d == nil || d.Whole != tt.whole {
				t.Fatalf("Discarded = %+v, want what was dropped", d)
			}
			if !strings.Contains(logs.String(), path) {
				t.Errorf("the discard logged %q, want it to name %s", logs.String(), path)
			}
			want := Contents{Records: [][]byte{}}
			if tt.whole {
				if got := snapshotPath(t, d.MovedTo); got != before {
					t.Errorf("the discarded file at %q is not the damaged one", d.MovedTo)
				}
			} else {
				want.Snapshot = []byte("state after 4")
				for _, seq := range tt.kept {
					want.Records = append(want.Records, payload(seq))
				}
			}
			checkLoad(t, s, want)
		})
	}
}

// pageSizeOf reads the page size from a bbolt file's first header.
func pageSizeOf(t *testing.T, b []byte) int {
	t.Helper()
	return int(binary.LittleEndian.Uint32(b[pageHeaderLen+8:]))
}

// snapshotPath returns the bytes of the file at path, or "dir" for a
// directory.
func snapshotPath(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		return "dir"
	}
	return string(readFile(t, path))
}

// TestOpenOneHeaderFlipped: one of bbolt's two headers failing its checksum
// is also what a crash while writing it leaves (the write was not
// acknowledged), so Open starts from the other header, as bbolt does, and
// warns that the last write is lost if there was no crash.
func TestOpenOneHeaderFlipped(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName)
	writeDamageJournal(t, dir)
	editFile(t, path, func(b []byte) {
		ps := pageSizeOf(t, b)
		txid := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off+pageHeaderLen+48:]) }
		newer := 0
		if txid(ps) > txid(0) {
			newer = ps
		}
		b[newer+pageHeaderLen+40] ^= 0x55
	})
	var logs bytes.Buffer
	s := mustOpen(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "headers fails its checksum") || !strings.Contains(logs.String(), path) {
		t.Errorf("Open logged %q, want a warning naming %s", logs.String(), path)
	}
	// The last transaction appended records 9 and 10.
	checkLoad(t, s, Contents{Snapshot: []byte("state after 4"), Records: [][]byte{payload(5), payload(6), payload(7), payload(8)}})
}

// TestOpenNewerFormatNotDiscarded: a journal of a newer Rover is refused
// even with DiscardDamaged: it is not damaged, the newer Rover reads it.
func TestOpenNewerFormatNotDiscarded(t *testing.T) {
	dir := t.TempDir()
	writeDamageJournal(t, dir)
	withBolt(t, filepath.Join(dir, fileName), putFormat(99))
	_, err := Open(dir, Options{DiscardDamaged: true, Logger: discard()})
	if err == nil || errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "upgrade rover") {
		t.Errorf("Open = %v, want a refusal saying to upgrade rover", err)
	}
}

// TestOpenLeftoverCreation: a crash while creating a journal leaves a
// half-written journal.db.new and no journal.db: a new job, as before.
func TestOpenLeftoverCreation(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, fileName+".new"), []byte("half a file"))
	s := mustOpen(t, dir, Options{})
	checkLoad(t, s, Contents{Records: [][]byte{}})
	if _, err := os.Stat(filepath.Join(dir, fileName+".new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal.db.new left behind: %v", err)
	}
}

// TestOpenUnreadable runs Open in a process of an unprivileged user (the
// tests run as root, which reads any file) on a journal it may not read: it
// fails saying so and changes nothing, with or without DiscardDamaged; a
// permission is not damage.
func TestOpenUnreadable(t *testing.T) {
	if dir := os.Getenv("ROVER_STORE_OPEN_DIR"); dir != "" {
		_, err := Open(dir, Options{DiscardDamaged: true, Logger: discard()})
		if err == nil {
			t.Fatal("Open succeeded")
		}
		if errors.Is(err, ErrDamaged) {
			t.Fatalf("Open = %v, want no damage", err)
		}
		_, _ = io.WriteString(os.Stdout, "OPEN ERROR: "+err.Error()+"\n")
		return
	}
	if os.Getuid() != 0 {
		t.Fatal("this test runs Open as another user, which needs root")
	}
	base, err := os.MkdirTemp("", "rover-store-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "store.test")
	writeFile(t, bin, readFile(t, exe))
	dir := filepath.Join(base, "state")
	writeDamageJournal(t, dir)
	for _, p := range []string{base, dir} {
		if err := os.Chmod(p, 0o777); err != nil { // the user may write the dir, not read the file
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fileName)
	before := readFile(t, path)
	cmd := exec.Command(bin, "-test.run=^TestOpenUnreadable$", "-test.v")
	cmd.Env = append(os.Environ(), "ROVER_STORE_OPEN_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Open as uid 65534: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "OPEN ERROR: state file "+path+" cannot be read by this master (uid 65534)") ||
		!strings.Contains(string(out), "permission denied") {
		t.Errorf("Open as uid 65534 said:\n%s\nwant it to name %s and the permission", out, path)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("the unreadable file was changed")
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the unreadable file was moved: %v", err)
	}
}

// TestDiscardSparesALiveMaster: a second master started with
// DiscardDamaged on the state dir of a running one reads nothing into the
// file it is writing, discards nothing, and is told the dir is in use.
func TestDiscardSparesALiveMaster(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	mustAppend(t, s, recs("a"))
	_, err := Open(dir, Options{DiscardDamaged: true, Logger: discard()})
	if err == nil || errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "is in use by another master") {
		t.Errorf("second Open = %v, want the dir in use", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, fileName+".discarded-*")); len(left) > 0 {
		t.Errorf("the live master's file was moved aside: %v", left)
	}
	mustAppend(t, s, recs("b"))
	checkLoad(t, s, Contents{Records: recs("a", "b")})
}
