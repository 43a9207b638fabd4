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
	"sync"
	"testing"
	"time"

	"github.com/roverml/rover/internal/ckpt"
)

// memStore keeps pushed backups in memory.
type memStore struct {
	mu        sync.Mutex
	budget    int64 // 0: any size
	refuse    error // Open's error, when set
	check     func([]byte) error
	committed map[Backup][]byte
	aborts    int
	aborted   chan struct{} // when set, told of each abort
}

func (s *memStore) Open(b Backup, size int64) (Sink, func([]byte) error, error) {
	if s.refuse != nil {
		return nil, nil, s.refuse
	}
	if s.budget > 0 && size > s.budget {
		return nil, nil, fmt.Errorf("%w: %d bytes, the budget is %d", ErrTooLarge, size, s.budget)
	}
	return &storeSink{s: s, b: b}, s.check, nil
}

func (s *memStore) get(b Backup) ([]byte, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed[b], len(s.committed)
}

type storeSink struct {
	s   *memStore
	b   Backup
	buf []byte
}

func (k *storeSink) Begin(step, size int64) ([]byte, error) {
	k.buf = make([]byte, size)
	return k.buf, nil
}

func (k *storeSink) Commit(step, size int64) error {
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.s.committed == nil {
		k.s.committed = map[Backup][]byte{}
	}
	k.s.committed[k.b] = bytes.Clone(k.buf[:size])
	return nil
}

func (k *storeSink) Abort() {
	k.s.mu.Lock()
	k.s.aborts++
	k.s.mu.Unlock()
	if k.s.aborted != nil {
		k.s.aborted <- struct{}{}
	}
}

func TestFetchShard(t *testing.T) {
	data := payload(3<<20 + 5)
	h := &Handler{Run: "job", Token: "t", Src: &memSource{step: 9, data: data, shard: true, rank: 3}}
	addr := serve(t, h)
	tests := []struct {
		name    string
		req     Request
		wantErr error
	}{
		{"its shard", Request{Step: 9, Shard: true, Rank: 3}, nil},
		{"another rank's", Request{Step: 9, Shard: true, Rank: 2}, ErrRefused},
		{"the node copy", Request{Step: 9}, ErrRefused},
		{"another step", Request{Step: 8, Shard: true, Rank: 3}, ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &memSink{}
			tt.req.Addr, tt.req.Run, tt.req.Token = addr, "job", "t"
			_, err := Fetch(context.Background(), tt.req, sink)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Fetch: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !bytes.Equal(sink.committed[9], data) {
				t.Fatalf("committed %d bytes, want the %d sent", len(sink.committed[9]), len(data))
			}
			if tt.wantErr != nil && len(sink.committed) != 0 {
				t.Fatalf("committed after %v", err)
			}
		})
	}
	// A peer that answers with another rank's shard is refused.
	other := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		q.Set("rank", "4")
		r.URL.RawQuery = q.Encode()
		(&Handler{Run: "job", Token: "t", Src: &memSource{step: 9, data: data, shard: true, rank: 4}}).ServeHTTP(w, r)
	}))
	sink := &memSink{}
	if _, err := Fetch(context.Background(), Request{Addr: other, Run: "job", Token: "t", Step: 9, Shard: true, Rank: 3}, sink); !errors.Is(err, ErrRefused) || len(sink.committed) != 0 {
		t.Fatalf("Fetch from a peer that sends rank 4 for rank 3: %v (committed %d), want ErrRefused", err, len(sink.committed))
	}
}

func TestPush(t *testing.T) {
	data := payload(9<<20 + 77) // more than two write chunks
	b := Backup{From: "node-1", Round: 4, Step: 30, Rank: 3, Local: 1}
	ok := func() *memStore { return &memStore{} }
	tests := []struct {
		name    string
		store   *memStore // nil: the handler keeps no backups
		edit    func(*PushRequest)
		wantErr error
	}{
		{"kept", ok(), nil, nil},
		{"wrong token", ok(), func(r *PushRequest) { r.Token = "guess" }, ErrRefused},
		{"another job", ok(), func(r *PushRequest) { r.Run = "other" }, ErrRefused},
		{"no store", nil, nil, ErrRefused},
		{"not this node's source", &memStore{refuse: errors.New("node-1 is not the node this one backs up")}, nil, ErrRefused},
		{"busy", &memStore{refuse: fmt.Errorf("%w: local rank 1", ErrBusy)}, nil, ErrBusy},
		{"over the budget", &memStore{budget: 1 << 20}, nil, ErrTooLarge},
		{"wrong CRC32C", ok(), func(r *PushRequest) { r.CRC ^= 1 }, ErrRefused},
		{"check refuses", &memStore{check: func([]byte) error { return errors.New("rank 2 in its metadata") }}, nil, ErrRefused},
		{"overwritten while sent", ok(), func(r *PushRequest) { r.Intact = func() bool { return false } }, ErrChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Handler{Run: "job", Token: "t", Src: &memSource{}}
			if tt.store != nil {
				h.Backups = tt.store
			}
			req := PushRequest{Addr: serve(t, h), Run: "job", Token: "t", Backup: b, Data: data, CRC: ckpt.CRC32C(data)}
			if tt.edit != nil {
				tt.edit(&req)
			}
			err := Push(context.Background(), req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Push: %v, want %v", err, tt.wantErr)
			}
			if tt.store == nil {
				return
			}
			got, n := tt.store.get(b)
			if tt.wantErr != nil && n != 0 {
				t.Fatalf("the peer committed a backup after %v", err)
			}
			if tt.wantErr == nil && !bytes.Equal(got, data) {
				t.Fatalf("the peer committed %d bytes, want the %d pushed", len(got), len(data))
			}
		})
	}
}

// TestPushSenderDies: a sender that dies mid-body leaves nothing committed.
func TestPushSenderDies(t *testing.T) {
	data := payload(2 << 20)
	store := &memStore{aborted: make(chan struct{}, 4)}
	srv := httptest.NewServer(&Handler{Run: "job", Token: "t", Src: &memSource{}, Backups: store})
	defer srv.Close()
	for _, cut := range []int{0, 1, len(data) / 2, len(data) - 1} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT %s?step=5&rank=0&local=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nRover-Run: job\r\n"+
			"Rover-Node: n\r\nRover-Round: 1\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n", BackupPath, ckpt.CRC32C(data), len(data))
		conn.Write(data[:cut])
		conn.Close()
	}
	// The handler runs after the connection is gone: wait for every abort.
	waitAborts(t, store, 4)
	if _, n := store.get(Backup{}); n != 0 {
		t.Fatalf("committed %d backups from senders that died mid-body", n)
	}
}

func waitAborts(t *testing.T, s *memStore, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for range n {
		select {
		case <-s.aborted:
		case <-deadline:
			t.Fatalf("fewer than %d aborted backups", n)
		}
	}
}

// FuzzBackupRequest hands the backup endpoint arbitrary requests: whatever
// they are, the store commits only a backup whose bytes have the CRC32C
// and size the request announced, from a request with the job's token and
// run, within the store's budget.
func FuzzBackupRequest(f *testing.F) {
	data := []byte("snapshot bytes")
	good := fmt.Sprintf("PUT %s?step=3&rank=1&local=0 HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer t\r\nRover-Run: job\r\nRover-Node: n\r\n"+
		"Rover-Round: 2\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n%s", BackupPath, ckpt.CRC32C(data), len(data), data)
	f.Add([]byte(good))
	f.Add([]byte(strings.Replace(good, "Content-Length: 14", "Transfer-Encoding: chunked", 1)))
	f.Add([]byte(strings.Replace(good, "rank=1", "rank=-1", 1)))
	f.Add([]byte(good[:len(good)-3]))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		store := &memStore{budget: 1 << 10}
		h := &Handler{Run: "job", Token: "t", Src: &memSource{}, Backups: store}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		store.mu.Lock()
		defer store.mu.Unlock()
		if len(store.committed) == 0 {
			return
		}
		if rec.Code != http.StatusNoContent {
			t.Fatalf("committed a backup but answered %d", rec.Code)
		}
		if req.Header.Get("Authorization") != "Bearer t" || req.Header.Get(HeaderRun) != "job" {
			t.Fatalf("committed a backup of a request without the job's token and run")
		}
		for _, got := range store.committed {
			if int64(len(got)) != req.ContentLength || len(got) > 1<<10 || ckpt.CRC32C(got) != ckptCRCParse(req.Header.Get(HeaderCRC)) {
				t.Fatalf("committed %d bytes with CRC32C %08x; the request announced %d bytes, %s", len(got), ckpt.CRC32C(got), req.ContentLength, req.Header.Get(HeaderCRC))
			}
		}
	})
}

// FuzzFetchShard answers a shard's fetch with arbitrary bytes: Fetch
// commits only a snapshot of the rank asked for whose CRC32C matches what
// was announced.
func FuzzFetchShard(f *testing.F) {
	data := []byte("shard bytes")
	f.Add([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 3\r\nRover-Rank: 2\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n%s", ckpt.CRC32C(data), len(data), data)))
	f.Add([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nRover-Run: job\r\nRover-Step: 3\r\nRover-Rank: 1\r\nRover-Crc32c: %08x\r\nContent-Length: %d\r\n\r\n%s", ckpt.CRC32C(data), len(data), data)))
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
		_, err := Fetch(context.Background(), Request{Addr: "peer:1", Run: "job", Token: "t", Step: 3, Shard: true, Rank: 2, MaxBytes: 1 << 16, Client: client}, sink)
		if err != nil {
			if len(sink.committed) != 0 {
				t.Fatalf("committed after %v", err)
			}
			return
		}
		resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if rerr != nil {
			t.Fatalf("Fetch accepted a response that does not parse: %v", rerr)
		}
		got := sink.committed[3]
		if resp.Header.Get(HeaderRank) != "2" || ckpt.CRC32C(got) != ckptCRCParse(resp.Header.Get(HeaderCRC)) {
			t.Fatalf("committed %d bytes for rank %q with CRC32C %08x; the response announced %s", len(got), resp.Header.Get(HeaderRank), ckpt.CRC32C(got), resp.Header.Get(HeaderCRC))
		}
	})
}
