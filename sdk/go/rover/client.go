package rover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/retry"
)

// ErrNotUnderRover is returned by Connect outside a worker started by `rover run`.
var ErrNotUnderRover = errors.New("ROVER_AGENT_SOCKET is not set: start this program with `rover run`")

// Client talks to the local agent.
type Client struct {
	api       roverv1connect.AgentServiceClient
	localRank string
	// incarnation is the round this process was started in (0: unknown; the
	// agent fills in its worker group's).
	incarnation int64
}

// Connect returns a client of the agent that started this process, for the
// worker of LOCAL_RANK started in round ROVER_WORKER_INCARNATION.
func Connect() (*Client, error) {
	path := os.Getenv("ROVER_AGENT_SOCKET")
	if path == "" {
		return nil, ErrNotUnderRover
	}
	c, err := ConnectSocket(path, os.Getenv("LOCAL_RANK"))
	if err != nil {
		return nil, err
	}
	if v := os.Getenv("ROVER_WORKER_INCARNATION"); v != "" {
		if c.incarnation, err = strconv.ParseInt(v, 10, 64); err != nil || c.incarnation < 0 {
			return nil, fmt.Errorf("ROVER_WORKER_INCARNATION=%q is not a round number", v)
		}
	}
	return c, nil
}

// ConnectSocket returns a client of the agent listening on the unix socket
// path, for the worker of the given local rank.
func ConnectSocket(path, localRank string) (*Client, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reach the rover agent: %w", err)
	}
	if localRank == "" {
		localRank = "0"
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	return &Client{api: roverv1connect.NewAgentServiceClient(hc, "http://agent"), localRank: localRank}, nil
}

// Info describes the worker's place in the job.
func (c *Client) Info(ctx context.Context) (*roverv1.InfoResponse, error) {
	r, err := c.api.Info(ctx, connect.NewRequest(&roverv1.InfoRequest{Rank: -1}))
	if err != nil {
		return nil, fmt.Errorf("ask the agent for this worker's info: %w", err)
	}
	return r.Msg, nil
}

// DatasetSpec describes a dataset leased in shards.
type DatasetSpec struct {
	Name         string
	Size         int64
	BatchSize    int
	ShardSize    int64
	Epochs       int
	Shuffle      bool
	Seed         uint64
	Streaming    bool
	LeaseTimeout time.Duration
	MaxRetries   int
}

// Dataset leases the shards of one dataset for this worker. Its methods may
// be called from several goroutines.
type Dataset struct {
	c    *Client
	name string
	// Poll is the first wait when others hold the last shards of an epoch.
	Poll time.Duration
	// Retry is how long a lease or completion is sent again, unchanged,
	// while the agent cannot be reached (default 1 minute). A lease sent
	// again keeps its request ID, so the master answers it with the shards
	// the first delivery got, not new ones.
	Retry time.Duration

	// mu orders the lease requests, numbered client<<32 | seq: the master
	// refuses a number below the last it answered.
	mu     sync.Mutex
	client uint64
	seq    uint64
}

// Dataset registers (or joins) a leased dataset. The first registration of
// a name wins; a different spec for it is an error.
func (c *Client) Dataset(ctx context.Context, spec DatasetSpec) (*Dataset, error) {
	_, err := c.api.RegisterDataset(ctx, connect.NewRequest(&roverv1.RegisterDatasetRequest{Dataset: &roverv1.DatasetSpec{
		Name: spec.Name, Size: spec.Size, BatchSize: int32(max(spec.BatchSize, 1)), ShardSize: spec.ShardSize,
		Epochs: int32(spec.Epochs), Shuffle: spec.Shuffle, Seed: spec.Seed, Streaming: spec.Streaming,
		LeaseTimeoutMillis: spec.LeaseTimeout.Milliseconds(), MaxRetries: int32(spec.MaxRetries),
		Mode: roverv1.ShardMode_SHARD_MODE_LEASED,
	}}))
	if err != nil {
		return nil, fmt.Errorf("register dataset %q: %w", spec.Name, err)
	}
	return &Dataset{c: c, name: spec.Name, Poll: 50 * time.Millisecond, Retry: time.Minute, client: newClientID()}, nil
}

// Shard is a leased range of an epoch's samples.
type Shard struct {
	LeaseID    uint64
	Epoch      int
	Start, End int64
	samples    []int64
}

// Indices returns the shard's sample indices.
func (s *Shard) Indices() []int64 {
	if s.samples != nil {
		return append([]int64(nil), s.samples...)
	}
	out := make([]int64, 0, s.End-s.Start)
	for i := s.Start; i < s.End; i++ {
		out = append(out, i)
	}
	return out
}

// newClientID returns a random client number in the high 32 bits.
func newClientID() uint64 { return rand.Uint64() &^ (1<<32 - 1) }

// resend calls f until it succeeds, fails with an error other than
// Unavailable (the agent cannot be reached), or d.Retry passes.
func (d *Dataset) resend(ctx context.Context, f func(context.Context) error) error {
	unavailable := func(err error) bool { return connect.CodeOf(err) == connect.CodeUnavailable }
	return retry.Do(ctx, retry.Policy{Limit: d.Retry}, unavailable, f)
}

// lease makes one lease request, with its own number.
func (d *Dataset) lease(ctx context.Context) (*roverv1.LeaseShardsResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seq++; d.seq >= 1<<32 {
		d.client, d.seq = newClientID(), 1
	}
	req := &roverv1.LeaseShardsRequest{Dataset: d.name, Worker: d.c.localRank, Incarnation: d.c.incarnation, RequestId: d.client | d.seq, Max: 1}
	var r *connect.Response[roverv1.LeaseShardsResponse]
	err := d.resend(ctx, func(ctx context.Context) error {
		var err error
		r, err = d.c.api.LeaseShards(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

// Next leases the next shard, waiting while other workers hold the last
// shards of an epoch. It returns io.EOF when the dataset is finished. A
// worker of a round that has ended gets an error with the code
// FailedPrecondition: it must stop.
func (d *Dataset) Next(ctx context.Context) (*Shard, error) {
	wait := d.Poll
	for {
		r, err := d.lease(ctx)
		if err != nil {
			return nil, fmt.Errorf("lease a shard of %q: %w", d.name, err)
		}
		if ss := r.GetShards(); len(ss) > 0 {
			s := ss[0]
			return &Shard{LeaseID: s.GetLeaseId(), Epoch: int(s.GetEpoch()), Start: s.GetStart(), End: s.GetEnd(), samples: s.GetIndices()}, nil
		}
		if r.GetEnd() {
			return nil, io.EOF
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(wait*2, time.Second)
	}
}

// Complete reports a shard done (ok) or failed (it is retried, possibly by
// another worker). It returns false when the lease had expired and the shard
// went to another worker: the caller must then discard its results.
func (d *Dataset) Complete(ctx context.Context, s *Shard, ok bool) (bool, error) {
	req := &roverv1.CompleteShardsRequest{
		Dataset: d.name, Worker: d.c.localRank, Incarnation: d.c.incarnation, Results: []*roverv1.ShardResult{{LeaseId: s.LeaseID, Ok: ok}},
	}
	var r *connect.Response[roverv1.CompleteShardsResponse]
	err := d.resend(ctx, func(ctx context.Context) error { // completing twice is harmless
		var err error
		r, err = d.c.api.CompleteShards(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("complete shard %d of %q: %w", s.LeaseID, d.name, err)
	}
	for _, id := range r.Msg.GetUnknown() {
		if id == s.LeaseID {
			return false, nil
		}
	}
	return true, nil
}

// Append extends a streaming dataset by n samples (and ends it when seal);
// it returns the stream's end.
func (d *Dataset) Append(ctx context.Context, n int64, seal bool) (int64, error) {
	r, err := d.c.api.AppendStream(ctx, connect.NewRequest(&roverv1.AppendStreamRequest{Dataset: d.name, Samples: n, Seal: seal}))
	if err != nil {
		return 0, fmt.Errorf("append %d samples to %q: %w", n, d.name, err)
	}
	return r.Msg.GetEnd(), nil
}
