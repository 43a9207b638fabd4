package peer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/ckpt"
)

// memSource serves one snapshot from a byte slice: the node copy, or with
// shard the backup of rank's shard.
type memSource struct {
	step   int64
	data   []byte
	crc    uint32 // 0: the data's
	broken bool   // intact reports false
	shard  bool
	rank   int
}

func (s *memSource) Snapshot(step int64, rank int) ([]byte, uint32, func() bool, bool, error) {
	if step != s.step || s.shard != (rank >= 0) || (s.shard && rank != s.rank) {
		return nil, 0, nil, false, nil
	}
	crc := s.crc
	if crc == 0 {
		crc = ckpt.CRC32C(s.data)
	}
	return s.data, crc, func() bool { return !s.broken }, true, nil
}

// memSink is a receiver's memory: what was committed, by step.
type memSink struct {
	buf       []byte
	committed map[int64][]byte
	aborts    int
}

func (s *memSink) Begin(step, size int64) ([]byte, error) {
	s.buf = make([]byte, size)
	return s.buf, nil
}

func (s *memSink) Commit(step, size int64) error {
	if s.committed == nil {
		s.committed = map[int64][]byte{}
	}
	s.committed[step] = bytes.Clone(s.buf[:size])
	return nil
}

func (s *memSink) Abort() { s.aborts++ }

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestFetch(t *testing.T) {
	data := payload(9<<20 + 123) // more than two write chunks
	good := &Handler{Run: "job", Token: "secret", Src: &memSource{step: 25, data: data}}
	flipped := bytes.Clone(data)
	flipped[5<<20] ^= 0x40
	tests := []struct {
		name    string
		h       http.Handler
		req     Request
		wantErr error
	}{
		{"ok", good, Request{Run: "job", Token: "secret", Step: 25}, nil},
		{"wrong token", good, Request{Run: "job", Token: "guess", Step: 25}, ErrRefused},
		{"no token", good, Request{Run: "job", Step: 25}, ErrRefused},
		{"another job asks", good, Request{Run: "other", Token: "secret", Step: 25}, ErrRefused},
		{"step not held", good, Request{Run: "job", Token: "secret", Step: 24}, ErrRefused},
		{"too large", good, Request{Run: "job", Token: "secret", Step: 25, MaxBytes: 1 << 20}, ErrTooLarge},
		{"bytes flipped", &Handler{Run: "job", Token: "secret", Src: &memSource{step: 25, data: flipped, crc: ckpt.CRC32C(data)}},
			Request{Run: "job", Token: "secret", Step: 25}, ErrCorrupt},
		{"overwritten while sent", &Handler{Run: "job", Token: "secret", Src: &memSource{step: 25, data: data, broken: true}},
			Request{Run: "job", Token: "secret", Step: 25}, ErrCorrupt},
		{"check refuses", good, Request{Run: "job", Token: "secret", Step: 25,
			Check: func([]byte) error { return errors.New("step 24 in its metadata") }}, ErrCorrupt},
		{"answers for another job", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Set(HeaderRun, "job")
			(&Handler{Run: "job", Token: "secret", Src: &memSource{step: 25, data: data}}).ServeHTTP(&rewrite{w, "other"}, r)
		}), Request{Run: "job", Token: "secret", Step: 25}, ErrRefused},
		{"truncated", rawResponse(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 25\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n", ckpt.CRC32C(data), len(data)), data[:len(data)/2]),
			Request{Run: "job", Token: "secret", Step: 25}, ErrCorrupt},
		{"no CRC", rawResponse(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 25\r\nContent-Length: %d\r\n\r\n", len(data)), data),
			Request{Run: "job", Token: "secret", Step: 25}, ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &memSink{}
			tt.req.Addr = serve(t, tt.h)
			res, err := Fetch(context.Background(), tt.req, sink)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Fetch: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				if len(sink.committed) != 0 {
					t.Fatalf("committed %d snapshots after %v", len(sink.committed), err)
				}
				return
			}
			if !bytes.Equal(sink.committed[25], data) || res.Bytes != int64(len(data)) {
				t.Fatalf("committed %d bytes (%d reported), want the %d sent", len(sink.committed[25]), res.Bytes, len(data))
			}
		})
	}
}

// rewrite changes the run the handler answers for.
type rewrite struct {
	http.ResponseWriter
	run string
}

func (w *rewrite) WriteHeader(code int) {
	w.Header().Set(HeaderRun, w.run)
	w.ResponseWriter.WriteHeader(code)
}

// rawResponse answers every request with head and body and then cuts the
// connection: a peer that dies mid-transfer when body is short.
func rawResponse(head string, body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		bw.WriteString(head)
		bw.Write(body)
		bw.Flush()
	})
}

func TestFetchFirstFallsBack(t *testing.T) {
	data := payload(1 << 20)
	dead := serve(t, rawResponse(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 7\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n", ckpt.CRC32C(data), len(data)), data[:1000]))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: a lost peer
	good := serve(t, &Handler{Run: "job", Token: "t", Src: &memSource{step: 7, data: data}})
	sink := &memSink{}
	res, err := FetchFirst(context.Background(), []string{closed, dead, good}, Request{Run: "job", Token: "t", Step: 7}, sink)
	if err != nil {
		t.Fatalf("FetchFirst: %v", err)
	}
	if res.Addr != good || !bytes.Equal(sink.committed[7], data) {
		t.Fatalf("fetched from %s (%d bytes), want %s", res.Addr, len(sink.committed[7]), good)
	}
	if sink.aborts != 1 {
		t.Fatalf("%d aborted writes, want 1 (the peer that died mid-transfer)", sink.aborts)
	}
	if _, err := FetchFirst(context.Background(), []string{closed, dead}, Request{Run: "job", Token: "t", Step: 7}, &memSink{}); err == nil ||
		!strings.Contains(err.Error(), closed) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("FetchFirst with no good peer: %v, want both peers' errors", err)
	}
}

// FuzzFetch answers a fetch with arbitrary bytes: whatever they are,
// Fetch commits only a snapshot whose CRC32C matches what was announced
// and never more than the limit.
func FuzzFetch(f *testing.F) {
	data := []byte("snapshot bytes")
	f.Add([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 3\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n%s", ckpt.CRC32C(data), len(data), data)))
	f.Add([]byte("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 3\r\nRover-Crc32c: 0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, s := net.Pipe()
			go func() {
				defer s.Close()
				_, _ = http.ReadRequest(bufio.NewReader(s))
				_, _ = s.Write(raw)
			}()
			return c, nil
		}}}
		sink := &memSink{}
		_, err := Fetch(context.Background(), Request{Addr: "peer:1", Run: "job", Token: "t", Step: 3, MaxBytes: 1 << 16, Client: client}, sink)
		if err != nil {
			if len(sink.committed) != 0 {
				t.Fatalf("committed after %v", err)
			}
			return
		}
		got := sink.committed[3]
		resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if rerr != nil {
			t.Fatalf("Fetch accepted a response that does not parse: %v", rerr)
		}
		if len(got) > 1<<16 || ckpt.CRC32C(got) != ckptCRCParse(resp.Header.Get(HeaderCRC)) {
			t.Fatalf("committed %d bytes %q with CRC32C %08x; the response announced %s", len(got), got, ckpt.CRC32C(got), resp.Header.Get(HeaderCRC))
		}
	})
}

func ckptCRCParse(s string) uint32 {
	var v uint32
	fmt.Sscanf(s, "%x", &v)
	return v
}

func serveBench(b *testing.B, h http.Handler) string { return serve(b, h) }
