package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		f    frame
	}{
		{"record", frame{kind: kindRecord, seq: 7, prev: 6, payload: []byte(`{"type":"join"}`)}},
		{"empty record", frame{kind: kindRecord, seq: 1, payload: []byte{}}},
		{"snapshot", frame{kind: kindSnapshot, seq: 1 << 40, payload: bytes.Repeat([]byte("s"), 10000)}},
		{"counter", frame{kind: kindCounter, seq: 42, payload: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeRecord(tt.f)
			if len(b) != frameHeaderLen+len(tt.f.payload) {
				t.Errorf("encoded %d bytes, want %d", len(b), frameHeaderLen+len(tt.f.payload))
			}
			got, err := decodeRecord(b)
			if err != nil {
				t.Fatalf("decodeRecord: %v", err)
			}
			if diff := cmp.Diff(tt.f, got, cmp.AllowUnexported(frame{})); diff != "" {
				t.Errorf("decoded frame (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good := encodeRecord(frame{kind: kindRecord, seq: 3, prev: 2, payload: []byte("payload")})
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		in   []byte
		want string // in the error
	}{
		{"nil", nil, "shorter than"},
		{"header cut short", good[:frameHeaderLen-1], "shorter than"},
		{"payload cut short", good[:len(good)-1], "header says 7 payload bytes, there are 6"},
		{"trailing byte", append(append([]byte(nil), good...), 0), "there are 8"},
		{"unknown kind", edit(func(b []byte) []byte { b[0] = 9; return b }), "unknown kind 9"},
		{"zero kind", make([]byte, frameHeaderLen), "unknown kind 0"},
		{"huge length", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[17:21], 1<<32-1); return b }), "header says 4294967295"},
		{"payload flipped", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum mismatch"},
		{"seq flipped", edit(func(b []byte) []byte { b[8] ^= 0x80; return b }), "checksum mismatch"},
		{"prev flipped", edit(func(b []byte) []byte { b[16] ^= 1; return b }), "checksum mismatch"},
		{"crc flipped", edit(func(b []byte) []byte { b[crcOffset] ^= 1; return b }), "checksum mismatch"},
		{"kind changed", edit(func(b []byte) []byte { b[0] = kindSnapshot; return b }), "checksum mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeRecord(tt.in)
			if !errors.Is(err, errFrame) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeRecord = %v, want an errFrame saying %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeRecord checks that decodeRecord never panics, and that what it
// accepts is exactly what encodeRecord makes. The seeds run in every go test.
func FuzzDecodeRecord(f *testing.F) {
	good := encodeRecord(frame{kind: kindRecord, seq: 3, prev: 2, payload: []byte("payload")})
	f.Add([]byte(nil))
	f.Add(good)
	f.Add(good[:frameHeaderLen])
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), 'x'))
	f.Add(encodeRecord(frame{kind: kindSnapshot, seq: 1 << 63, payload: bytes.Repeat([]byte{0xff}, 300)}))
	f.Add(encodeRecord(frame{kind: kindCounter, seq: 1}))
	f.Add(make([]byte, frameHeaderLen))
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		fr, err := decodeRecord(b)
		if !bytes.Equal(in, b) {
			t.Fatalf("decodeRecord modified its input")
		}
		if err != nil {
			if !errors.Is(err, errFrame) {
				t.Fatalf("decodeRecord error %v does not wrap errFrame", err)
			}
			return
		}
		if re := encodeRecord(fr); !bytes.Equal(re, b) {
			t.Fatalf("decodeRecord accepted %x, which encodes back as %x", b, re)
		}
	})
}
