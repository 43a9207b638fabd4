package shardbatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// fakeMaster answers each lease with one shard whose start is the number
// after the worker's "w", and records the batches it was sent. A batch waits
// for gate, when set, before it is answered.
type fakeMaster struct {
	gate     chan struct{}
	received chan int // the size of each batch, when set
	fail     error    // returned for every batch, when set
	failOp   string   // the worker whose ops fail with NotFound

	mu      sync.Mutex
	batches [][]*roverv1.ShardOp
	singles int
}

func (f *fakeMaster) BatchShards(ctx context.Context, req *connect.Request[roverv1.BatchShardsRequest]) (*connect.Response[roverv1.BatchShardsResponse], error) {
	f.mu.Lock()
	f.batches = append(f.batches, req.Msg.GetOps())
	f.mu.Unlock()
	if f.received != nil {
		f.received <- len(req.Msg.GetOps())
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail != nil {
		return nil, f.fail
	}
	resp := &roverv1.BatchShardsResponse{}
	for _, op := range req.Msg.GetOps() {
		var r *roverv1.ShardOpResult
		switch {
		case f.failOp != "" && (op.GetLease().GetWorker() == f.failOp || op.GetComplete().GetWorker() == f.failOp):
			r = &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Error{Error: &roverv1.ShardOpError{Code: uint32(connect.CodeNotFound), Message: "no such dataset"}}}
		case op.GetLease() != nil:
			r = &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Lease{Lease: lease(op.GetLease())}}
		default:
			r = &roverv1.ShardOpResult{Result: &roverv1.ShardOpResult_Complete{Complete: &roverv1.CompleteShardsResponse{}}}
		}
		resp.Results = append(resp.Results, r)
	}
	return connect.NewResponse(resp), nil
}

func lease(r *roverv1.LeaseShardsRequest) *roverv1.LeaseShardsResponse {
	var n int64
	fmt.Sscanf(r.GetWorker(), "w%d", &n)
	return &roverv1.LeaseShardsResponse{Shards: []*roverv1.Shard{{Start: n, End: n + 1}}}
}

func (f *fakeMaster) LeaseShards(_ context.Context, req *connect.Request[roverv1.LeaseShardsRequest]) (*connect.Response[roverv1.LeaseShardsResponse], error) {
	f.mu.Lock()
	f.singles++
	f.mu.Unlock()
	return connect.NewResponse(lease(req.Msg)), nil
}

func (f *fakeMaster) CompleteShards(context.Context, *connect.Request[roverv1.CompleteShardsRequest]) (*connect.Response[roverv1.CompleteShardsResponse], error) {
	f.mu.Lock()
	f.singles++
	f.mu.Unlock()
	return connect.NewResponse(&roverv1.CompleteShardsResponse{}), nil
}

func (f *fakeMaster) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, b := range f.batches {
		out = append(out, len(b))
	}
	return out
}

func start(t *testing.T, f *fakeMaster, opts Options) (*Batcher, context.CancelFunc) {
	t.Helper()
	b := New(f, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, cancel
}

// waitQueued waits until n calls are queued behind the batch in flight.
func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("%d calls never got queued", n)
}

type answer struct {
	worker string
	resp   *roverv1.LeaseShardsResponse
	err    error
}

// leaseAsync makes a lease call for worker in a goroutine.
func leaseAsync(ctx context.Context, b *Batcher, worker string, out chan<- answer) {
	go func() {
		r, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "d", Worker: worker, Max: 1})
		out <- answer{worker, r, err}
	}()
}

func checkAnswer(t *testing.T, a answer) {
	t.Helper()
	var n int64
	fmt.Sscanf(a.worker, "w%d", &n)
	if a.err != nil || len(a.resp.GetShards()) != 1 || a.resp.GetShards()[0].GetStart() != n {
		t.Errorf("worker %s got %v, %v; want its own shard %d", a.worker, a.resp, a.err, n)
	}
}

// TestGroupCommit: the first call goes at once; the calls made while it is
// in flight go together in the next batch, and each gets its own answer.
func TestGroupCommit(t *testing.T) {
	f := &fakeMaster{gate: make(chan struct{}), received: make(chan int)}
	b, _ := start(t, f, Options{})
	ctx := context.Background()
	answers := make(chan answer)
	leaseAsync(ctx, b, "w0", answers)
	if n := <-f.received; n != 1 {
		t.Fatalf("first batch has %d calls, want 1", n)
	}
	const queued = 20
	for i := 1; i <= queued; i++ {
		leaseAsync(ctx, b, fmt.Sprintf("w%d", i), answers)
	}
	waitQueued(t, b, queued)
	f.gate <- struct{}{}
	checkAnswer(t, <-answers)
	if n := <-f.received; n != queued {
		t.Fatalf("second batch has %d calls, want %d", n, queued)
	}
	f.gate <- struct{}{}
	for range queued {
		checkAnswer(t, <-answers)
	}
}

// TestTwoInFlight: with InFlight 2, a call made while one batch is in flight
// goes at once in a second batch; the calls made while both are in flight go
// together in the next, when either returns.
func TestTwoInFlight(t *testing.T) {
	f := &fakeMaster{gate: make(chan struct{}), received: make(chan int)}
	b, _ := start(t, f, Options{InFlight: 2})
	ctx := context.Background()
	answers := make(chan answer)
	leaseAsync(ctx, b, "w0", answers)
	if n := <-f.received; n != 1 {
		t.Fatalf("first batch has %d calls, want 1", n)
	}
	leaseAsync(ctx, b, "w1", answers)
	if n := <-f.received; n != 1 {
		t.Fatalf("second batch has %d calls, want 1: it must not wait for the first", n)
	}
	const queued = 10
	for i := 2; i < 2+queued; i++ {
		leaseAsync(ctx, b, fmt.Sprintf("w%d", i), answers)
	}
	waitQueued(t, b, queued)
	f.gate <- struct{}{} // one of the two in flight returns
	checkAnswer(t, <-answers)
	if n := <-f.received; n != queued {
		t.Fatalf("third batch has %d calls, want %d", n, queued)
	}
	f.gate <- struct{}{}
	f.gate <- struct{}{}
	for range queued + 1 {
		checkAnswer(t, <-answers)
	}
}

// TestBounds: a long queue is cut into batches within the bounds.
func TestBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		max  int32
		want []int
	}{
		{"ops", Options{MaxOps: 3}, 1, []int{1, 3, 3, 1}},
		{"leases", Options{MaxLeases: 5}, 2, []int{1, 2, 2, 2, 1}},
		{"a call over the bound goes alone", Options{MaxLeases: 5}, 7, []int{1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMaster{gate: make(chan struct{}), received: make(chan int, 16)}
			b, _ := start(t, f, tc.opts)
			ctx := context.Background()
			answers := make(chan answer)
			call := func(i int) {
				go func() {
					r, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "d", Worker: fmt.Sprintf("w%d", i), Max: tc.max})
					answers <- answer{fmt.Sprintf("w%d", i), r, err}
				}()
			}
			call(0)
			<-f.received
			for i := 1; i < 8; i++ {
				call(i)
			}
			waitQueued(t, b, 7)
			close(f.gate)
			for range 8 {
				checkAnswer(t, <-answers)
			}
			if got := f.sizes(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("batch sizes %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCallerGivesUp: a caller whose context ends while queued leaves the
// queue; the others are answered.
func TestCallerGivesUp(t *testing.T) {
	f := &fakeMaster{gate: make(chan struct{}), received: make(chan int)}
	b, _ := start(t, f, Options{})
	ctx := context.Background()
	answers := make(chan answer)
	leaseAsync(ctx, b, "w0", answers)
	<-f.received
	leaseAsync(ctx, b, "w1", answers)
	quit, cancel := context.WithCancel(ctx)
	leaseAsync(quit, b, "w2", answers)
	leaseAsync(ctx, b, "w3", answers)
	waitQueued(t, b, 3)
	cancel()
	waitQueued(t, b, 2)
	f.gate <- struct{}{}
	if n := <-f.received; n != 2 {
		t.Errorf("second batch has %d calls, want the 2 still waiting", n)
	}
	f.gate <- struct{}{}
	for range 4 {
		a := <-answers
		if a.worker == "w2" {
			if !errors.Is(a.err, context.Canceled) {
				t.Errorf("the caller that gave up got %v, %v", a.resp, a.err)
			}
			continue
		}
		checkAnswer(t, a)
	}
}

// TestErrors: an op's error reaches its caller alone, with its code; an
// error of the whole batch reaches every caller of the batch.
func TestErrors(t *testing.T) {
	f := &fakeMaster{failOp: "bad"}
	b, _ := start(t, f, Options{})
	ctx := context.Background()
	_, err := b.Complete(ctx, &roverv1.CompleteShardsRequest{Dataset: "d", Worker: "bad"})
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "no such dataset") {
		t.Errorf("failing op: %v, want NotFound with the master's message", err)
	}
	if _, err := b.Complete(ctx, &roverv1.CompleteShardsRequest{Dataset: "d", Worker: "w1"}); err != nil {
		t.Errorf("good op: %v", err)
	}

	f = &fakeMaster{fail: connect.NewError(connect.CodeUnavailable, errors.New("master restarting"))}
	b, _ = start(t, f, Options{})
	if _, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "d", Worker: "w1", Max: 1}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("failed batch: %v, want Unavailable", err)
	}
}

// TestOldMaster: against a master without BatchShards, calls go alone.
func TestOldMaster(t *testing.T) {
	f := &fakeMaster{fail: connect.NewError(connect.CodeUnimplemented, errors.New("no such method"))}
	b, _ := start(t, f, Options{})
	ctx := context.Background()
	for i := range 3 {
		r, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "d", Worker: fmt.Sprintf("w%d", i), Max: 1})
		checkAnswer(t, answer{fmt.Sprintf("w%d", i), r, err})
	}
	if n := len(f.sizes()); n != 1 {
		t.Errorf("%d batches tried, want 1", n)
	}
	if f.singles != 3 {
		t.Errorf("%d single calls, want 3", f.singles)
	}
}

// TestStopped: when Run ends, queued and later calls fail with ErrStopped.
func TestStopped(t *testing.T) {
	f := &fakeMaster{gate: make(chan struct{}), received: make(chan int, 1)}
	b, stop := start(t, f, Options{})
	ctx := context.Background()
	answers := make(chan answer)
	leaseAsync(ctx, b, "w0", answers)
	<-f.received
	leaseAsync(ctx, b, "w1", answers)
	waitQueued(t, b, 1)
	stop()
	for range 2 {
		a := <-answers
		if a.worker == "w1" && !errors.Is(a.err, ErrStopped) {
			t.Errorf("call queued at the stop: %v, want ErrStopped", a.err)
		}
		if a.worker == "w0" && a.err == nil {
			t.Errorf("call in flight at the stop: no error")
		}
	}
	if _, err := b.Lease(ctx, &roverv1.LeaseShardsRequest{Dataset: "d", Worker: "w2", Max: 1}); !errors.Is(err, ErrStopped) {
		t.Errorf("call after the stop: %v, want ErrStopped", err)
	}
}
