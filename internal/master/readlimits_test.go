package master

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
)

// answer is a master's answer to a raw request: a connect code ("" for
// success) and message.
type answer struct{ code, msg string }

// rawGRPC sends one gRPC message of size bytes (zeros, which do not decode)
// to procedure over h2c, and returns the status. Only the envelope's
// declared size matters to the read limit.
func rawGRPC(t *testing.T, hc *http.Client, addr, procedure string, size int) answer {
	t.Helper()
	body := make([]byte, 5+size)
	binary.BigEndian.PutUint32(body[1:5], uint32(size))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+procedure, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set(client.AuthHeader, client.AuthScheme+testToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("gRPC %s with %d bytes: %v", procedure, size, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	status, msg := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only answer
		status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		t.Fatalf("gRPC %s: status %q (HTTP %d)", procedure, status, resp.StatusCode)
	}
	msg, _ = url.PathUnescape(msg)
	if n == 0 {
		return answer{}
	}
	return answer{connect.Code(n).String(), msg}
}

// rawConnect sends a Connect unary request of size bytes (zeros) to
// procedure, declaring its length or (chunked) not.
func rawConnect(t *testing.T, addr, procedure string, size int, declared bool) answer {
	t.Helper()
	var body io.Reader = bytes.NewReader(make([]byte, size))
	if !declared {
		body = io.MultiReader(body) // hides the length: sent chunked
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+procedure, body)
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set(client.AuthHeader, client.AuthScheme+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("Connect %s with %d bytes: %v", procedure, size, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return answer{}
	}
	var e struct{ Code, Message string }
	_ = json.Unmarshal(b, &e)
	return answer{e.Code, e.Message}
}

// TestReadLimits: every method of the service has a read limit; a request
// of exactly the limit passes it (and fails to decode, being zeros), and one
// byte more is ResourceExhausted naming the limit, over gRPC and over
// Connect, declared or not.
func TestReadLimits(t *testing.T) {
	m, _ := startMaster(t, Config{})
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	methods := roverv1.File_api_rover_v1_master_proto.Services().ByName("MasterService").Methods()
	if len(readLimits) != methods.Len() {
		t.Errorf("readLimits has %d entries for %d methods", len(readLimits), methods.Len())
	}
	for i := range methods.Len() {
		md := methods.Get(i)
		procedure := "/" + roverv1connect.MasterServiceName + "/" + string(md.Name())
		t.Run(string(md.Name()), func(t *testing.T) {
			limit, ok := readLimits[procedure]
			if !ok {
				t.Fatalf("%s has no read limit: add one to readLimits", md.Name())
			}
			under := rawGRPC(t, hc, m.Addr(), procedure, limit)
			if under.code == "resource_exhausted" {
				t.Errorf("gRPC at the limit (%d bytes): %v", limit, under)
			}
			over := rawGRPC(t, hc, m.Addr(), procedure, limit+1)
			if over.code != "resource_exhausted" || !strings.Contains(over.msg, strconv.Itoa(limit)) {
				t.Errorf("gRPC over the limit: %+v; want resource_exhausted naming %d", over, limit)
			}
			if md.IsStreamingClient() || md.IsStreamingServer() {
				return // Connect unary does not apply: streams are enveloped, as gRPC's
			}
			under = rawConnect(t, m.Addr(), procedure, limit, true)
			if under.code == "resource_exhausted" {
				t.Errorf("Connect at the limit (%d bytes): %+v", limit, under)
			}
			for _, declared := range []bool{true, false} {
				over := rawConnect(t, m.Addr(), procedure, limit+1, declared)
				if over.code != "resource_exhausted" || !strings.Contains(over.msg, strconv.Itoa(limit)) {
					t.Errorf("Connect over the limit (length declared: %v): %+v; want resource_exhausted naming %d", declared, over, limit)
				}
			}
		})
	}
}

// TestLargestValidRequestsFit sends the largest request the validators
// accept of each method with a large limit, through the agents' client:
// none is refused for its size.
func TestLargestValidRequestsFit(t *testing.T) {
	_, c := startMaster(t, Config{})
	ctx := context.Background()
	snaps := make([]*roverv1.MemorySnapshot, maxSnapshotsPerRank*maxLocalWorldSize)
	for i := range snaps {
		snaps[i] = &roverv1.MemorySnapshot{LocalRank: maxLocalWorldSize - 1, Step: 1 << 62, Rank: maxNodes - 1, WorldSize: maxNodes, Mode: jobstate.ModeReplicated}
	}
	join := joinReq(strings.Repeat("n", maxNodeIDLen), rdzvConfig(1, 1))
	join.Msg.LocalWorldSize, join.Msg.Addr, join.Msg.Snapshots = maxLocalWorldSize, strings.Repeat("a", maxAddrLen), snaps
	results := make([]*roverv1.ShardResult, maxResultsPerCall)
	for i := range results {
		results[i] = &roverv1.ShardResult{LeaseId: 1<<64 - 1, Ok: true}
	}
	dataset, worker := strings.Repeat("d", maxKeyLen), strings.Repeat("w", shard.MaxNameLen)
	calls := []struct {
		name string
		call func() error
	}{
		{"Join", func() error { _, err := c.Join(ctx, join); return err }},
		{"Session", func() error {
			s := c.Session(ctx)
			defer s.CloseResponse()
			if err := s.Send(&roverv1.SessionRequest{Msg: &roverv1.SessionRequest_Join{Join: join.Msg}}); err != nil {
				return err
			}
			_, err := s.Receive()
			return err
		}},
		{"SetKey", func() error {
			_, err := c.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{Key: strings.Repeat("k", maxKeyLen), Value: make([]byte, maxValueLen)}))
			return err
		}},
		{"Leave", func() error {
			_, err := c.Leave(ctx, connect.NewRequest(&roverv1.LeaveRequest{NodeId: "n", Reason: strings.Repeat("r", maxFailureText)}))
			return err
		}},
		{"CompleteShards", func() error {
			_, err := c.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{Dataset: dataset, Worker: worker, Results: results}))
			return err
		}},
		{"RestoreDataset", func() error {
			_, err := c.RestoreDataset(ctx, connect.NewRequest(&roverv1.RestoreDatasetRequest{Dataset: dataset, State: make([]byte, client.ReadMaxBytes-64)}))
			return err
		}},
		{"ReportFailure", func() error {
			fs := make([]*roverv1.WorkerFailure, 127)
			for i := range fs {
				fs[i] = &roverv1.WorkerFailure{NodeId: "n", Message: strings.Repeat("m", maxFailureText-1)}
			}
			_, err := c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "n", Failures: fs}))
			return err
		}},
	}
	for _, tt := range calls {
		// Any other outcome (an unknown dataset or node) means the size
		// was accepted.
		if err := tt.call(); connect.CodeOf(err) == connect.CodeResourceExhausted {
			t.Errorf("%s: %.300v", tt.name, err)
		}
	}
}

// TestEnvelopeLimit: the reader of enveloped messages hands on every byte of
// messages within the limit, however the reads split the envelopes, and
// fails right after the header of the first message over it.
func TestEnvelopeLimit(t *testing.T) {
	envelopes := func(sizes ...int) []byte {
		var b []byte
		for i, n := range sizes {
			h := make([]byte, 5)
			binary.BigEndian.PutUint32(h[1:], uint32(n))
			b = append(append(b, h...), bytes.Repeat([]byte{byte(i)}, n)...)
		}
		return b
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	}
	tests := []struct {
		name    string
		sizes   []int
		wantLen int // bytes handed on before the error; -1: all, no error
	}{
		{"within the limit", []int{0, 1, 10, 3}, -1},
		{"the first over it", []int{11, 1}, 5},
		{"a later one over it", []int{10, 2, 4096}, 5 + 10 + 5 + 2 + 5},
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				in := envelopes(tt.sizes...)
				e := &envelopeLimit{ReadCloser: io.NopCloser(wrap(bytes.NewReader(in))), limit: 10,
					tooLarge: func(size string) *connect.Error {
						return connect.NewError(connect.CodeResourceExhausted, errors.New(size))
					}}
				got, err := io.ReadAll(e)
				if tt.wantLen < 0 {
					if err != nil || !bytes.Equal(got, in) {
						t.Errorf("read %d of %d bytes, %v", len(got), len(in), err)
					}
					return
				}
				if connect.CodeOf(err) != connect.CodeResourceExhausted || !bytes.Equal(got, in[:tt.wantLen]) {
					t.Errorf("read %d bytes, %v; want %d bytes, then resource_exhausted", len(got), err, tt.wantLen)
				}
			})
		}
	}
}
