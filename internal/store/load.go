package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// scan is what reading the journal found.
type scan struct {
	contents Contents
	// last is the sequence number of the last good record, or the one the
	// snapshot covers, or 0.
	last uint64
	// kept counts the good records.
	kept int
	// cut holds the keys of the first bad record and of every one after it.
	cut [][]byte
	// firstBad and reason describe the first bad record.
	firstBad uint64
	reason   string
	// dropped holds the payloads of the cut records that are intact.
	dropped [][]byte
}

// load reads the journal, cuts a damaged tail, and sets b.last. With full,
// it also validates the snapshot and returns the contents; without, it only
// validates the records (Open's check).
func (b *Bolt) load(full bool) (Contents, error) {
	var s scan
	err := b.view(func(tx *bolt.Tx) error {
		var err error
		s, err = b.read(tx, full)
		return err
	})
	if err != nil {
		return Contents{}, err
	}
	if len(s.cut) > 0 && !b.discard {
		return Contents{}, &DamageError{Path: b.path, Problem: fmt.Sprintf("record %d is bad: %s", s.firstBad, s.reason),
			Kept: s.kept, FirstBad: s.firstBad, DroppedRecords: len(s.cut), Dropped: s.dropped}
	}
	if len(s.cut) > 0 {
		err := b.update(func(tx *bolt.Tx) error {
			j := tx.Bucket(bucketJournal)
			for _, k := range s.cut {
				if err := j.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return Contents{}, fmt.Errorf("cut the damaged tail of the journal in %s: %w", b.path, err)
		}
		b.log.Warn("cut the journal at its last good record, as asked; the records from the first bad one on are lost",
			"file", b.path, "kept_records", s.kept, "cut_records", len(s.cut), "first_bad_seq", s.firstBad, "reason", s.reason)
		if b.discarded == nil {
			b.discarded = &DamageError{Path: b.path, Problem: fmt.Sprintf("record %d is bad: %s", s.firstBad, s.reason),
				Kept: s.kept, FirstBad: s.firstBad, DroppedRecords: len(s.cut), Dropped: s.dropped}
		}
	}
	b.last = s.last
	return s.contents, nil
}

// read validates what tx holds. It copies the payloads out when full.
func (b *Bolt) read(tx *bolt.Tx, full bool) (scan, error) {
	var s scan
	snap := tx.Bucket(bucketSnapshot)
	if snap == nil || tx.Bucket(bucketJournal) == nil {
		return s, damaged(b.path, "its journal or snapshot bucket is missing", nil)
	}
	c := snap.Cursor()
	if k, v := c.First(); k != nil {
		if len(k) != 8 {
			return s, damaged(b.path, fmt.Sprintf("its snapshot is stored under a malformed key %x", k), nil)
		}
		if k2, _ := c.Next(); k2 != nil {
			return s, damaged(b.path, "it holds two snapshots", nil)
		}
		s.last = binary.BigEndian.Uint64(k)
		f, err := decodeRecord(v)
		if err == nil && (f.kind != kindSnapshot || f.seq != s.last) {
			err = fmt.Errorf("%w: a kind %d frame of sequence %d, not the snapshot of %d", errFrame, f.kind, f.seq, s.last)
		}
		if err != nil {
			return s, damaged(b.path, fmt.Sprintf("its snapshot (of the state after record %d) is unreadable, and the records after it build on it", s.last), err)
		}
		if full {
			s.contents.Snapshot = append([]byte(nil), f.payload...)
		}
	}
	if full {
		s.contents.Records = [][]byte{}
	}
	c = tx.Bucket(bucketJournal).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if s.cut != nil {
			s.cut = append(s.cut, append([]byte(nil), k...))
			if f, err := decodeRecord(v); err == nil && f.kind == kindRecord {
				s.dropped = append(s.dropped, append([]byte(nil), f.payload...))
			}
			continue
		}
		f, reason := checkRecord(k, v, s.last, b.next)
		if reason != "" {
			s.cut = [][]byte{append([]byte(nil), k...)}
			s.firstBad, s.reason = f.seq, reason
			if f.kind == kindRecord { // intact but out of place
				s.dropped = append(s.dropped, append([]byte(nil), f.payload...))
			}
			continue
		}
		if full {
			s.contents.Records = append(s.contents.Records, append([]byte(nil), f.payload...))
		}
		s.last = f.seq
		s.kept++
	}
	return s, nil
}

// checkRecord checks the journal entry k, v given the sequence number of the
// good record (or snapshot) before it and the counter. It returns the decoded
// frame and "", or why the entry is bad with f.seq set to k's sequence number
// where k is well formed.
func checkRecord(k, v []byte, prev, next uint64) (frame, string) {
	if len(k) != 8 {
		return frame{}, fmt.Sprintf("malformed key %x", k)
	}
	seq := binary.BigEndian.Uint64(k)
	f, err := decodeRecord(v)
	switch {
	case err != nil:
		return frame{seq: seq}, err.Error()
	case f.kind != kindRecord:
		return frame{seq: seq}, fmt.Sprintf("a kind %d frame, not a record", f.kind)
	case f.seq != seq:
		return frame{seq: seq}, fmt.Sprintf("the value of record %d is stored under %d", f.seq, seq)
	case seq >= next:
		return f, fmt.Sprintf("record %d is past the sequence counter %d", seq, next)
	case seq <= prev:
		return f, fmt.Sprintf("record %d is not after record %d", seq, prev)
	case f.prev != prev:
		return f, fmt.Sprintf("record %d follows record %d but names %d as its predecessor: a record is missing", seq, prev, f.prev)
	}
	return f, ""
}
