package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// payload returns the unique payload of record seq in the damaged journals
// below, so that the test can find it in the raw file.
func payload(seq int) []byte { return fmt.Appendf(nil, "<payload %02d of a record>", seq) }

// writeDamageJournal writes records 1-4, a snapshot, and records 5-10, in
// groups, to a journal in dir.
func writeDamageJournal(t *testing.T, dir string) {
	t.Helper()
	s := mustOpen(t, dir, Options{})
	for _, g := range [][]int{{1}, {2, 3}, {4}, nil, {5}, {6, 7}, {8}, {9, 10}} {
		if g == nil {
			mustSnapshot(t, s, "state after 4")
			continue
		}
		var r [][]byte
		for _, seq := range g {
			r = append(r, payload(seq))
		}
		mustAppend(t, s, r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// editFile rewrites the bytes of the file at path with edit.
func editFile(t *testing.T, path string, edit func(b []byte)) {
	t.Helper()
	b := readFile(t, path)
	edit(b)
	writeFile(t, path, b)
}

// flipAt flips one byte at offset off from every copy of record seq's
// payload in the file: bbolt copies pages on write, so freed pages hold stale
// copies, and the live one is among them.
func flipAt(t *testing.T, path string, seq, off int) {
	t.Helper()
	editFile(t, path, func(b []byte) {
		p, n := payload(seq), 0
		for i := 0; ; n++ {
			j := bytes.Index(b[i:], p)
			if j < 0 {
				break
			}
			b[i+j+off] ^= 0x55
			i += j + 1
		}
		if n == 0 {
			t.Fatalf("record %d is not in the file", seq)
		}
	})
}

// withBolt runs fn in a bbolt update of the file at path.
func withBolt(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// cutLog is the warning Load logs when it cuts the journal.
type cutLog struct {
	Level       string
	File        string
	KeptRecords int `json:"kept_records"`
	CutRecords  int `json:"cut_records"`
	FirstBadSeq int `json:"first_bad_seq"`
}

func TestLoadCutsDamagedJournal(t *testing.T) {
	tests := []struct {
		name     string
		damage   func(t *testing.T, path string)
		kept     []int // the records Load returns
		cut      int   // the records it cuts
		firstBad int
		reason   string // in the logged reason
	}{
		{"last record flipped", func(t *testing.T, path string) { flipAt(t, path, 10, 3) },
			[]int{5, 6, 7, 8, 9}, 1, 10, "checksum mismatch"},
		{"last two records flipped", func(t *testing.T, path string) { flipAt(t, path, 9, 3); flipAt(t, path, 10, 3) },
			[]int{5, 6, 7, 8}, 2, 9, "checksum mismatch"},
		// A record damaged in the middle costs every record after it.
		{"middle record flipped", func(t *testing.T, path string) { flipAt(t, path, 7, 0) },
			[]int{5, 6}, 4, 7, "checksum mismatch"},
		{"first record after the snapshot flipped", func(t *testing.T, path string) { flipAt(t, path, 5, 10) },
			nil, 6, 5, "checksum mismatch"},
		{"length in a header flipped", func(t *testing.T, path string) { flipAt(t, path, 9, -frameHeaderLen+20) },
			[]int{5, 6, 7, 8}, 2, 9, "payload bytes"},
		{"kind in a header flipped", func(t *testing.T, path string) { flipAt(t, path, 8, -frameHeaderLen) },
			[]int{5, 6, 7}, 3, 8, "unknown kind"},
		{"record missing", func(t *testing.T, path string) {
			withBolt(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketJournal).Delete(seqKey(7)) })
		}, []int{5, 6}, 3, 8, "a record is missing"},
		{"record under another's key", func(t *testing.T, path string) {
			withBolt(t, path, func(tx *bolt.Tx) error {
				j := tx.Bucket(bucketJournal)
				return j.Put(seqKey(9), append([]byte(nil), j.Get(seqKey(8))...))
			})
		}, []int{5, 6, 7, 8}, 2, 9, "stored under 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, fileName)
			writeDamageJournal(t, dir)
			tt.damage(t, path)

			// Refused, saying what would be dropped, and left as it was.
			before := readFile(t, path)
			_, err := Open(dir, Options{Logger: discard()})
			var de *DamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("Open = %v, want a *DamageError", err)
			}
			if de.Kept != len(tt.kept) || de.DroppedRecords != tt.cut || de.FirstBad != uint64(tt.firstBad) || de.Whole ||
				!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Open = %v (%+v), want it to name %s, say %q and drop %d records from %d, keeping %d",
					err, de, path, tt.reason, tt.cut, tt.firstBad, len(tt.kept))
			}
			for _, p := range de.Dropped {
				if !bytes.HasPrefix(p, []byte("<payload ")) {
					t.Errorf("a dropped record's payload is %q, want one of the records", p)
				}
			}
			if !bytes.Equal(before, readFile(t, path)) {
				t.Error("Open changed the file it refused")
			}

			var logs bytes.Buffer
			s := mustOpen(t, dir, Options{DiscardDamaged: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if d := s.Discarded(); d == nil || d.DroppedRecords != tt.cut {
				t.Errorf("Discarded = %+v, want the %d records cut", d, tt.cut)
			}
			want := Contents{Snapshot: []byte("state after 4"), Records: [][]byte{}}
			for _, seq := range tt.kept {
				want.Records = append(want.Records, payload(seq))
			}
			checkLoad(t, s, want)

			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("logged %q, want one warning", lines)
			}
			var got cutLog
			var raw map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(lines[0]), &raw)
			wantLog := cutLog{Level: "WARN", File: path, KeptRecords: len(tt.kept), CutRecords: tt.cut, FirstBadSeq: tt.firstBad}
			if diff := cmp.Diff(wantLog, got); diff != "" {
				t.Errorf("cut warning (-want +got):\n%s\nlogged: %s", diff, lines[0])
			}
			if r, _ := raw["reason"].(string); !strings.Contains(r, tt.reason) {
				t.Errorf("logged reason %q, want it to say %q", r, tt.reason)
			}
			if m, _ := raw["msg"].(string); !strings.Contains(m, "cut the journal at its last good record") {
				t.Errorf("logged message %q, want it to say the journal was cut", m)
			}

			// Appends go on with fresh sequence numbers, never the cut ones,
			// and a reopened store sees the cut journal with no new warning.
			mustAppend(t, s, [][]byte{payload(11)})
			mustAppend(t, s, [][]byte{payload(12)})
			want.Records = append(want.Records, payload(11), payload(12))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			logs.Reset()
			s = mustOpen(t, dir, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			checkLoad(t, s, want)
			if logs.Len() != 0 {
				t.Errorf("the reopened store logged %s, want nothing", logs.String())
			}
			var keys []uint64
			if err := s.db.View(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketJournal).ForEach(func(k, _ []byte) error {
					keys = append(keys, binary.BigEndian.Uint64(k))
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
			var wantKeys []uint64
			for _, seq := range tt.kept {
				wantKeys = append(wantKeys, uint64(seq))
			}
			wantKeys = append(wantKeys, 11, 12)
			if diff := cmp.Diff(wantKeys, keys); diff != "" {
				t.Errorf("journal keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadRefusesDamagedSnapshot(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"payload flipped", func(t *testing.T, path string) {
			editFile(t, path, func(b []byte) {
				for i := bytes.Index(b, []byte("state after 4")); i >= 0; i = bytes.Index(b, []byte("state after 4")) {
					b[i] ^= 1 // every copy, the live one among them
				}
			})
		}, "checksum mismatch"},
		{"stored under another sequence number", func(t *testing.T, path string) {
			withBolt(t, path, func(tx *bolt.Tx) error {
				s := tx.Bucket(bucketSnapshot)
				v := append([]byte(nil), s.Get(seqKey(4))...)
				if err := s.Delete(seqKey(4)); err != nil {
					return err
				}
				return s.Put(seqKey(3), v)
			})
		}, "not the snapshot of 3"},
		{"two snapshots", func(t *testing.T, path string) {
			withBolt(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketSnapshot).Put(seqKey(2), encodeRecord(frame{kind: kindSnapshot, seq: 2}))
			})
		}, "two snapshots"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, fileName)
			writeDamageJournal(t, dir)
			tt.damage(t, path)
			s, err := Open(dir, Options{Logger: discard()})
			if err != nil { // a damage Open sees is as good
				if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("Open: %v; want an error naming %s and saying %q", err, path, tt.want)
				}
				return
			}
			defer s.Close()
			for range 2 { // and not empty the second time
				c, err := s.Load(context.Background())
				if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("Load = %d records, error %v; want an error naming %s and saying %q", len(c.Records), err, path, tt.want)
				}
			}
		})
	}
}
