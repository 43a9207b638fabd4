package kubestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/roverml/rover/internal/store"
)

// The head holds the records appended since the snapshot as binaryData
// entries, one per Append, keyed "j-" and the entry's sequence number in 16
// digits (so that the keys sort in order). Sequence numbers continue across
// snapshots; the head's journal-start says where the entries begin. An entry
// is, big-endian:
//
//	crc      4 bytes  CRC-32C (Castagnoli) of everything after it
//	count    uvarint  records in the entry
//	records  count times: uvarint length, then the record
const entryPrefix = "j-"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func entryKey(seq uint64) string { return fmt.Sprintf("%s%016d", entryPrefix, seq) }

// encodeEntry frames recs as one entry.
func encodeEntry(recs [][]byte) []byte {
	n := 4 + binary.MaxVarintLen64
	for _, r := range recs {
		n += binary.MaxVarintLen64 + len(r)
	}
	b := make([]byte, 4, n)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	binary.BigEndian.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
	return b
}

// decodeEntry returns the records of an entry, copied; an empty record is
// nil. Whatever b holds, it returns an error rather than panic.
func decodeEntry(b []byte) ([][]byte, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes, shorter than any entry", len(b))
	}
	if want, got := binary.BigEndian.Uint32(b), crc32.Checksum(b[4:], castagnoli); want != got {
		return nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	b = b[4:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("malformed record count")
	}
	b = b[n:]
	recs := make([][]byte, 0, count)
	for i := range count {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("record %d of %d overruns the entry", i, count)
		}
		var r []byte
		if l > 0 {
			r = bytes.Clone(b[n : n+int(l)])
		}
		recs = append(recs, r)
		b = b[n+int(l):]
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("%d bytes after the last record", len(b))
	}
	return recs, nil
}

// journalKeys returns the head's entry keys in order, checking that they
// are the consecutive sequence numbers from start.
func journalKeys(cm *corev1.ConfigMap, start uint64) ([]string, error) {
	keys := slices.Sorted(maps.Keys(cm.BinaryData))
	for i, k := range keys {
		seq, err := strconv.ParseUint(strings.TrimPrefix(k, entryPrefix), 10, 64)
		if !strings.HasPrefix(k, entryPrefix) || err != nil || k != entryKey(seq) {
			return nil, fmt.Errorf("%w: the head %s has an unknown binaryData key %q", errDamaged, cm.Name, k)
		}
		if want := start + uint64(i); seq != want {
			return nil, fmt.Errorf("%w: the head %s lacks journal entry %d (the next it has is %d)", errDamaged, cm.Name, want, seq)
		}
	}
	return keys, nil
}

// Append adds recs to the head as one entry, with a compare-and-swap on its
// resourceVersion: the records are durable, in etcd, when it returns. It
// fails with an error wrapping store.ErrFull, writing nothing, when the
// entry does not fit in Options.JournalBytes with the records since the
// snapshot, and with one wrapping ErrFenced when another store has taken
// the state over.
func (s *Store) Append(ctx context.Context, recs [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	key, entry := entryKey(s.next), encodeEntry(recs)
	if n := s.bytes + len(key) + len(entry); n > s.budget {
		return fmt.Errorf("append %d records (%d bytes) to the head %s, which holds %d bytes of records of its %d: %w",
			len(recs), len(entry), s.opts.Name, s.bytes, s.budget, store.ErrFull)
	}
	for attempt := 0; ; attempt++ {
		cm := s.head.DeepCopy()
		if cm.BinaryData == nil {
			cm.BinaryData = map[string][]byte{}
		}
		cm.BinaryData[key] = entry
		cm, err := s.cm.Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil {
			if err := s.adopt(cm); err != nil {
				return fmt.Errorf("append %d records: %w", len(recs), err)
			}
			return nil
		}
		if err := s.lost(ctx, err, attempt); err != nil {
			return fmt.Errorf("append %d records to the head %s: %w", len(recs), s.opts.Name, err)
		}
	}
}

// lost handles a failed write of the head: it returns nil when the write is
// worth trying again (a conflict with a change that left the state alone,
// such as a label added), an error wrapping ErrFenced when another store owns
// the head, and err otherwise.
func (s *Store) lost(ctx context.Context, err error, attempt int) error {
	if apierrors.IsNotFound(err) {
		return s.fenced(nil)
	}
	if !apierrors.IsConflict(err) {
		return err
	}
	cur, rerr := s.reread(ctx)
	if rerr != nil {
		return rerr
	}
	if !maps.Equal(cur.Data, s.head.Data) || !maps.EqualFunc(cur.BinaryData, s.head.BinaryData, bytes.Equal) {
		return fmt.Errorf("%w: the head %s changed under its owner (resourceVersion %s, then %s)",
			errDamaged, s.opts.Name, s.head.ResourceVersion, cur.ResourceVersion)
	}
	if attempt >= 2 {
		return err
	}
	s.head = cur
	return nil
}

// Load returns the snapshot, reassembled from its chunks and checked against
// the head's size and CRC-32C, and the records after it in order. A missing
// head is an empty store; a chunk missing or damaged is an error, never an
// empty start.
func (s *Store) Load(ctx context.Context) (store.Contents, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return store.Contents{}, err
	}
	cm, err := s.cm.Get(ctx, s.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return store.Contents{Records: [][]byte{}}, nil
	}
	if err != nil {
		return store.Contents{}, fmt.Errorf("load the master's state: read the head %s: %w", s.opts.Name, err)
	}
	if cm.Data[keyOwner] != s.token {
		return store.Contents{}, fmt.Errorf("load the master's state: %w", s.fenced(cm))
	}
	c, err := s.read(ctx, cm)
	if err != nil {
		return store.Contents{}, fmt.Errorf("load the master's state from %s/%s: %w", s.opts.Namespace, s.opts.Name, err)
	}
	return c, s.adopt(cm)
}

// read returns what the head cm and the chunks it names hold.
func (s *Store) read(ctx context.Context, cm *corev1.ConfigMap) (store.Contents, error) {
	h, err := parseHead(cm)
	if err != nil {
		return store.Contents{}, err
	}
	keys, err := journalKeys(cm, h.start)
	if err != nil {
		return store.Contents{}, err
	}
	c := store.Contents{Records: [][]byte{}}
	if c.Snapshot, err = s.readSnapshot(ctx, h); err != nil {
		return store.Contents{}, err
	}
	for _, k := range keys {
		recs, err := decodeEntry(cm.BinaryData[k])
		if err != nil {
			return store.Contents{}, fmt.Errorf("%w: journal entry %s of the head %s: %v", errDamaged, k, cm.Name, err)
		}
		c.Records = append(c.Records, recs...)
	}
	return c, nil
}
