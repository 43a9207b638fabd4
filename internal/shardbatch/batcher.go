package shardbatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Master is the part of the master's API a Batcher calls. The single calls
// serve a master that predates BatchShards.
type Master interface {
	BatchShards(context.Context, *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error)
	LeaseShards(context.Context, *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error)
	CompleteShards(context.Context, *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error)
}

// Options bound the batches. Zero values take the defaults.
type Options struct {
	// MaxOps is the most calls in one batch (default 256; the master accepts
	// up to master.MaxBatchOps).
	MaxOps int
	// MaxLeases bounds the shards the lease calls of one batch may ask for
	// together, and so the size of the answer (default 4096, what one
	// LeaseShards call may ask for). A batch always holds at least one call.
	MaxLeases int
	// MaxResults bounds the shard results the complete calls of one batch
	// carry together (default 65536, what one CompleteShards call may carry).
	MaxResults int
	// Timeout bounds one BatchShards call (default 30s).
	Timeout time.Duration
	// InFlight is how many batches may be on their way to the master at
	// once (default 1). With a durable master every batch waits for a disk
	// write; a second batch in flight keeps the agent's workers busy
	// meanwhile. A worker's own calls stay in order: it waits for each
	// answer before its next call.
	InFlight int
}

// ErrStopped is returned for calls made after Run returned.
var ErrStopped = connect.NewError(connect.CodeUnavailable, errors.New("the agent is stopping: its shard calls to the master have ended"))

// errUnbatched tells a caller to make its call alone: the master has no
// BatchShards.
var errUnbatched = errors.New("the master does not batch shard calls")

// Batcher batches shard calls to the master. Run sends the batches; Lease
// and Complete may be called from any goroutine.
type Batcher struct {
	m    Master
	opts Options
	// kick wakes Run; size one, since one pending wake-up covers any number
	// of queued calls.
	kick chan struct{}
	// single is set once the master answered Unimplemented.
	single atomic.Bool

	mu      sync.Mutex
	queue   []*call
	stopped bool
}

// call is one worker call waiting for its answer.
type call struct {
	op   *roverv1.ShardOp
	done chan struct{} // closed when res or err is set
	res  *roverv1.ShardOpResult
	err  error
}

// New returns a Batcher that calls m.
func New(m Master, opts Options) *Batcher {
	if opts.MaxOps <= 0 {
		opts.MaxOps = 256
	}
	if opts.MaxLeases <= 0 {
		opts.MaxLeases = 4096
	}
	if opts.MaxResults <= 0 {
		opts.MaxResults = 65536
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	opts.InFlight = max(opts.InFlight, 1)
	return &Batcher{m: m, opts: opts, kick: make(chan struct{}, 1)}
}

// Run sends batches until ctx is done, then fails the queued calls and any
// later ones with ErrStopped.
func (b *Batcher) Run(ctx context.Context) {
	defer b.stop()
	var senders sync.WaitGroup
	for range b.opts.InFlight - 1 {
		senders.Go(func() { b.sendLoop(ctx) })
	}
	b.sendLoop(ctx)
	senders.Wait()
}

// sendLoop sends one batch at a time: the queue when woken, then whatever
// queued meanwhile, until the queue is empty.
func (b *Batcher) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		}
		for ctx.Err() == nil {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.send(ctx, batch)
		}
	}
}

// Lease makes a LeaseShards call through the batcher.
func (b *Batcher) Lease(ctx context.Context, req *roverv1.LeaseShardsRequest) (*roverv1.LeaseShardsResponse, error) {
	res, err := b.do(ctx, &roverv1.ShardOp{Op: &roverv1.ShardOp_Lease{Lease: req}})
	if errors.Is(err, errUnbatched) {
		r, err := b.m.LeaseShards(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	if err != nil {
		return nil, err
	}
	if r := res.GetLease(); r != nil {
		return r, nil
	}
	return nil, opError(res)
}

// Complete makes a CompleteShards call through the batcher.
func (b *Batcher) Complete(ctx context.Context, req *roverv1.CompleteShardsRequest) (*roverv1.CompleteShardsResponse, error) {
	res, err := b.do(ctx, &roverv1.ShardOp{Op: &roverv1.ShardOp_Complete{Complete: req}})
	if errors.Is(err, errUnbatched) {
		r, err := b.m.CompleteShards(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	if err != nil {
		return nil, err
	}
	if r := res.GetComplete(); r != nil {
		return r, nil
	}
	return nil, opError(res)
}

// do queues op and waits for its result. A caller that gives up while its
// call is queued takes it out of the queue; once sent, the call takes
// effect on the master like a single call whose caller went away.
func (b *Batcher) do(ctx context.Context, op *roverv1.ShardOp) (*roverv1.ShardOpResult, error) {
	if b.single.Load() {
		return nil, errUnbatched
	}
	c := &call{op: op, done: make(chan struct{})}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, ErrStopped
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default: // Run is already woken
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		b.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Queued returns how many calls wait for a batch (not those on their way
// to the master).
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// take removes the next batch from the queue: calls in order, within the
// bounds, at least one.
func (b *Batcher) take() []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	leases, results, n := 0, 0, 0
	for ; n < len(b.queue) && n < b.opts.MaxOps; n++ {
		l := int(b.queue[n].op.GetLease().GetMax())
		r := len(b.queue[n].op.GetComplete().GetResults())
		if n > 0 && (leases+l > b.opts.MaxLeases || results+r > b.opts.MaxResults) {
			break
		}
		leases += l
		results += r
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	return batch
}

// send makes one BatchShards call and answers every call of the batch.
func (b *Batcher) send(ctx context.Context, batch []*call) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	req := &roverv1.BatchShardsRequest{Ops: make([]*roverv1.ShardOp, len(batch))}
	for i, c := range batch {
		req.Ops[i] = c.op
	}
	resp, err := b.m.BatchShards(ctx, connect.NewRequest(req))
	switch {
	case connect.CodeOf(err) == connect.CodeUnimplemented:
		b.single.Store(true)
		err = errUnbatched
	case err == nil && len(resp.Msg.GetResults()) != len(batch):
		err = connect.NewError(connect.CodeInternal, fmt.Errorf("the master answered %d of %d batched shard calls", len(resp.Msg.GetResults()), len(batch)))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = resp.Msg.GetResults()[i]
		}
		close(c.done)
	}
}

func (b *Batcher) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	for _, c := range b.queue {
		c.err = ErrStopped
		close(c.done)
	}
	b.queue = nil
}

// opError turns an op's error result into the error the single call would
// have returned.
func opError(res *roverv1.ShardOpResult) error {
	e := res.GetError()
	if e == nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("the master answered a batched shard call with %v", res))
	}
	code := connect.Code(e.GetCode())
	if code < connect.CodeCanceled || code > connect.CodeUnauthenticated {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(e.GetMessage()))
}
