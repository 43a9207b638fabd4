package rover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
)

// ErrNotUnderRover is returned by Connect outside a worker started by `rover run`.
var ErrNotUnderRover = errors.New("ROVER_AGENT_SOCKET is not set: start this program with `rover run`")

// Client talks to the local agent.
type Client struct {
	api       roverv1connect.AgentServiceClient
	localRank string
}

// Connect returns a client of the agent that started this process.
func Connect() (*Client, error) {
	path := os.Getenv("ROVER_AGENT_SOCKET")
	if path == "" {
		return nil, ErrNotUnderRover
	}
	return ConnectSocket(path, os.Getenv("LOCAL_RANK"))
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

// Dataset leases the shards of one dataset for this worker.
type Dataset struct {
	c    *Client
	name string
	// Poll is the first wait when others hold the last shards of an epoch.
	Poll time.Duration
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
	return &Dataset{c: c, name: spec.Name, Poll: 50 * time.Millisecond}, nil
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

// Next leases the next shard, waiting while other workers hold the last
// shards of an epoch. It returns io.EOF when the dataset is finished.
func (d *Dataset) Next(ctx context.Context) (*Shard, error) {
	wait := d.Poll
	for {
		r, err := d.c.api.LeaseShards(ctx, connect.NewRequest(&roverv1.LeaseShardsRequest{Dataset: d.name, Worker: d.c.localRank, Max: 1}))
		if err != nil {
			return nil, fmt.Errorf("lease a shard of %q: %w", d.name, err)
		}
		if ss := r.Msg.GetShards(); len(ss) > 0 {
			s := ss[0]
			return &Shard{LeaseID: s.GetLeaseId(), Epoch: int(s.GetEpoch()), Start: s.GetStart(), End: s.GetEnd(), samples: s.GetIndices()}, nil
		}
		if r.Msg.GetEnd() {
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
	r, err := d.c.api.CompleteShards(ctx, connect.NewRequest(&roverv1.CompleteShardsRequest{
		Dataset: d.name, Worker: d.c.localRank, Results: []*roverv1.ShardResult{{LeaseId: s.LeaseID, Ok: ok}},
	}))
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
