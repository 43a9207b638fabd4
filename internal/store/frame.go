package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Every value Bolt stores is framed so that a torn or damaged value is found
// on Load rather than handed to the master. A frame is, big-endian:
//
//	kind     1 byte   kindRecord, kindSnapshot or kindCounter
//	seq      8 bytes  the record's sequence number; for a snapshot, the last
//	                  sequence number it covers; for the counter, its value
//	prev     8 bytes  for a record, the sequence number of the one before it
//	                  (or of the snapshot, or 0); 0 otherwise
//	length   4 bytes  of the payload
//	crc      4 bytes  CRC-32C (Castagnoli) of the 21 bytes above and the payload
//	payload  length bytes
//
// prev lets Load find a missing record even where sequence numbers jump, as
// they do after a cut (numbers are never reused).
const (
	kindRecord   byte = 1
	kindSnapshot byte = 2
	kindCounter  byte = 3

	frameHeaderLen = 1 + 8 + 8 + 4 + 4
	crcOffset      = frameHeaderLen - 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is a decoded stored value. payload aliases the bytes it was decoded
// from.
type frame struct {
	kind    byte
	seq     uint64
	prev    uint64
	payload []byte
}

// errFrame marks a value that is not a well-formed frame.
var errFrame = errors.New("malformed frame")

// encodeRecord returns f framed. It does not check f.kind.
func encodeRecord(f frame) []byte {
	b := make([]byte, frameHeaderLen+len(f.payload))
	b[0] = f.kind
	binary.BigEndian.PutUint64(b[1:9], f.seq)
	binary.BigEndian.PutUint64(b[9:17], f.prev)
	binary.BigEndian.PutUint32(b[17:21], uint32(len(f.payload)))
	copy(b[frameHeaderLen:], f.payload)
	crc := crc32.Update(crc32.Checksum(b[:crcOffset], castagnoli), castagnoli, b[frameHeaderLen:])
	binary.BigEndian.PutUint32(b[crcOffset:frameHeaderLen], crc)
	return b
}

// decodeRecord parses a frame made by encodeRecord. Any other input, whatever
// its bytes, gives an error wrapping errFrame; it never panics. The payload
// of the result aliases b.
func decodeRecord(b []byte) (frame, error) {
	if len(b) < frameHeaderLen {
		return frame{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", errFrame, len(b), frameHeaderLen)
	}
	f := frame{
		kind: b[0],
		seq:  binary.BigEndian.Uint64(b[1:9]),
		prev: binary.BigEndian.Uint64(b[9:17]),
	}
	if f.kind != kindRecord && f.kind != kindSnapshot && f.kind != kindCounter {
		return frame{}, fmt.Errorf("%w: unknown kind %d", errFrame, f.kind)
	}
	n := binary.BigEndian.Uint32(b[17:21])
	if uint64(n) != uint64(len(b)-frameHeaderLen) {
		return frame{}, fmt.Errorf("%w: header says %d payload bytes, there are %d", errFrame, n, len(b)-frameHeaderLen)
	}
	want := binary.BigEndian.Uint32(b[crcOffset:frameHeaderLen])
	got := crc32.Update(crc32.Checksum(b[:crcOffset], castagnoli), castagnoli, b[frameHeaderLen:])
	if got != want {
		return frame{}, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", errFrame, want, got)
	}
	f.payload = b[frameHeaderLen:]
	return f, nil
}

// seqKey returns the journal key of sequence number seq.
func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}
