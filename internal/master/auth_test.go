package master

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// TestIdentityBeforeWork sends 150 concurrent unauthenticated requests of
// 7.8 MB each, as a hostile client would (Connect's JSON protocol over
// HTTP/1.1): every one is refused, the master reads none of the bodies, and
// its heap stays within 64 MB of where it was (reading them would take
// 1.1 GB). It still serves the job's own clients.
func TestIdentityBeforeWork(t *testing.T) {
	m, good := startMaster(t, Config{})
	const n, size = 150, 7_800_000
	body := bytes.Repeat([]byte("x"), size) // shared by every request: the client side costs nothing
	url := "http://" + m.Addr() + "/rover.v1.MasterService/GetJob"

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := before.HeapAlloc
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				codes[i] = -1 // the server may close the connection before the body is sent: also a refusal
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	close(done)
	<-sampled
	for i, c := range codes {
		if c != http.StatusUnauthorized && c != -1 {
			t.Errorf("request %d: status %d, want 401 (or the connection closed)", i, c)
		}
	}
	grew := int64(peak) - int64(before.HeapAlloc)
	t.Logf("heap grew by at most %.1f MB during %d unauthenticated requests of %.1f MB", float64(grew)/1e6, n, float64(size)/1e6)
	if grew > 64<<20 {
		t.Errorf("the master's heap grew by %d bytes for unauthenticated requests, over the 64 MB bound", grew)
	}
	if _, err := good.GetJob(context.Background(), connect.NewRequest(&roverv1.GetJobRequest{})); err != nil {
		t.Errorf("GetJob with the token after the flood: %v", err)
	}
}

// TestStrictJSON: over Connect's JSON protocol, an unknown enum name or a
// misspelt field is refused, naming it, instead of silently taking the
// zero value (an unknown shard mode used to register a LEASED dataset).
func TestStrictJSON(t *testing.T) {
	m, _ := startMaster(t, Config{})
	tests := []struct{ name, body, want string }{
		{"unknown enum name", `{"dataset":{"name":"d","size":"10","shardSize":"1","epochs":1,"mode":"SHARD_MODE_BOGUS"}}`, "SHARD_MODE_BOGUS"},
		{"misspelt field", `{"dataset":{"name":"d","size":"10","shardSize":"1","epochs":1,"shuffel":true}}`, "shuffel"},
		{"empty body", ``, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := rawCall(t, m, "RegisterDataset", tt.body)
			if status != http.StatusBadRequest || !strings.Contains(b, tt.want) {
				t.Errorf("status %d, body %s; want 400 naming %q", status, b, tt.want)
			}
		})
	}
}
