package ckptsaver

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
)

// persistJob is one snapshot to write to storage.
type persistJob struct {
	local int
	step  int64
	rank  int
	mode  string
	// round is the world round in which the workers saved the step: the
	// master commits a step from one round's reports only.
	round   int
	pinned  bool // the step's slot is pinned for this job
	attempt int  // failed attempts so far
}

// Persistence retries: a failed snapshot is tried again after 1, 2, 4, 8
// and 16 s (while it is still in memory and no newer one of its rank is
// queued), so that a storage outage of half a minute loses nothing. This is
// storage's policy, not the master's: a fixed number of tries of a whole
// persistence, each of which gives way to a newer snapshot of its rank.
// The report to the master within a try waits for an unreachable master
// with the agent's own policy (Config.Retry), up to the heartbeat timeout.
const (
	persistAttempts     = 6
	persistFirstBackoff = time.Second
)

// persister writes committed snapshots to storage in the background, one at
// a time, and reports each durable file to the master. When saves come
// faster than storage takes them, only the newest pending snapshot of a rank
// is kept: older ones are superseded.
type persister struct {
	cfg    Config // its log, node id and master
	arenas *arenas
	// storageURL is the job's checkpoint storage ("": none).
	storageURL func() string
	mu         sync.Mutex
	cond       *sync.Cond
	pending    map[int]persistJob
	busy       map[int]bool
	// retrying counts the failed jobs of each rank waiting for their retry.
	retrying map[int]int
	durable  map[int]int64
	lastErr  map[int]string
	// requested counts the persistences each rank asked for; failure is
	// why its last one failed, kept until one succeeds.
	requested map[int]int64
	failure   map[int]string
	// committed is the newest step committed in the job's storage, as the
	// master last answered (-1: none known).
	committed int64
	buckets   map[string]*ckpt.Bucket
	wake      chan struct{} // size 1: a pending job may be waiting
	stopped   bool          // run returned: nothing more will be persisted
	// target is where each rank's checkpoints go, from its latest commit
	// that named one: what persistOnFailure uses.
	target map[int]persistJob
}

func newPersister(arenas *arenas, cfg Config, storageURL func() string) *persister {
	p := &persister{cfg: cfg, arenas: arenas, storageURL: storageURL, pending: map[int]persistJob{}, busy: map[int]bool{}, retrying: map[int]int{}, durable: map[int]int64{},
		lastErr: map[int]string{}, requested: map[int]int64{}, failure: map[int]string{}, committed: -1,
		buckets: map[string]*ckpt.Bucket{}, wake: make(chan struct{}, 1), target: map[int]persistJob{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *persister) enqueue(j persistJob) {
	p.mu.Lock()
	p.requested[j.local]++
	if old, ok := p.pending[j.local]; ok && old.pinned {
		p.arenas.unpin(j.local) // superseded before it started
	}
	p.pending[j.local] = j
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run persists pending snapshots until ctx ends.
func (p *persister) run(ctx context.Context) {
	defer func() {
		p.mu.Lock()
		for url, b := range p.buckets {
			b.Close()
			delete(p.buckets, url)
		}
		p.stopped = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		var job persistJob
		found := false
		for local, j := range p.pending {
			job, found = j, true
			delete(p.pending, local)
			p.busy[local] = true
			break
		}
		p.mu.Unlock()
		if !found {
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		persisted, err := p.persist(ctx, job)
		p.mu.Lock()
		p.busy[job.local] = false
		if err != nil {
			p.lastErr[job.local] = err.Error()
			p.failure[job.local] = err.Error()
			job.attempt++
			if job.attempt < persistAttempts && ctx.Err() == nil {
				backoff := persistFirstBackoff << (job.attempt - 1)
				p.cfg.Log.Warn("could not persist a checkpoint; training goes on, retrying", "step", job.step, "rank", job.rank,
					"attempt", job.attempt, "retry_in", backoff, "err", err)
				p.retryLocked(ctx, job, backoff)
			} else {
				p.cfg.Log.Error("gave up persisting a checkpoint; training goes on", "step", job.step, "rank", job.rank,
					"attempts", job.attempt, "err", err)
			}
		} else if persisted {
			p.madeDurableLocked(job.local, job.step)
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// retryLocked queues job again after backoff, unless a newer snapshot of its
// rank was queued meanwhile.
func (p *persister) retryLocked(ctx context.Context, job persistJob, backoff time.Duration) {
	job.pinned = false // persist pins it again if it is still in memory
	p.retrying[job.local]++
	t := time.NewTimer(backoff)
	go func() {
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		p.mu.Lock()
		p.retrying[job.local]--
		_, newer := p.pending[job.local]
		if ctx.Err() == nil && !newer {
			p.pending[job.local] = job
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}()
}

// bucket opens the job's checkpoint storage (once).
func (p *persister) bucket(ctx context.Context) (*ckpt.Bucket, error) {
	url := p.storageURL()
	if url == "" {
		return nil, errNoStorage
	}
	p.mu.Lock()
	b, stopped := p.buckets[url], p.stopped
	p.mu.Unlock()
	if stopped {
		// run closed the buckets: nothing may be persisted after it returns.
		return nil, fmt.Errorf("checkpoint storage %s: %w", url, errPersisterStopped)
	}
	if b != nil {
		return b, nil
	}
	// Opened without the lock: a driver may take seconds (GCS probes for a
	// metadata server), and saves must not wait for it.
	opened, err := ckpt.OpenBucket(ctx, url)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.buckets[url]; b != nil || p.stopped {
		opened.Close()
		if b == nil {
			return nil, fmt.Errorf("checkpoint storage %s: %w", url, errPersisterStopped)
		}
		return b, nil
	}
	p.buckets[url] = opened
	return opened, nil
}

// persist writes a job's snapshot and reports it to the master; persisted
// is false (with no error) when newer saves replaced the snapshot in memory
// before its turn came.
func (p *persister) persist(ctx context.Context, j persistJob) (persisted bool, err error) {
	info, written, err := p.write(ctx, j)
	if err != nil || !written {
		return false, err
	}
	req := &roverv1.CheckpointDurableRequest{Step: j.step, Rank: int32(j.rank), Mode: j.mode, Size: info.Size,
		Crc32C: info.CRC32C, Round: int64(j.round), NodeId: p.cfg.NodeID}
	if err := p.report(ctx, req); err != nil {
		return false, err
	}
	if p.cfg.Durable != nil {
		p.cfg.Durable(j.local, j.step, j.round)
	}
	return true, nil
}

// madeDurableLocked records that the rank's step is durable and reported.
func (p *persister) madeDurableLocked(local int, step int64) {
	if d, ok := p.durable[local]; !ok || step > d {
		p.durable[local] = step
	}
	delete(p.lastErr, local) // a retry (or a newer snapshot) made it
	delete(p.failure, local)
}

// report tells the master a checkpoint file is durable. The file is in
// storage and the snapshot no longer pinned, so it can wait for a master
// that is away (restarting) as long as the agent keeps its workers without
// one: the heartbeat timeout.
func (p *persister) report(ctx context.Context, req *roverv1.CheckpointDurableRequest) error {
	var latest int64 = -1
	err := p.cfg.Retry(ctx, func(ctx context.Context) error {
		resp, err := p.cfg.Master.CheckpointDurable(ctx, connect.NewRequest(req))
		if err == nil {
			latest = resp.Msg.GetLatestCommitted()
		}
		return err
	})
	p.mu.Lock()
	p.committed = max(p.committed, latest)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("report step %d of rank %d durable to the master: %w", req.GetStep(), req.GetRank(), err)
	}
	return nil
}

// write writes a job's snapshot to storage, holding it pinned in memory
// meanwhile; written is false (with no error) when newer saves replaced it
// before its turn came.
func (p *persister) write(ctx context.Context, j persistJob) (info ckpt.FileInfo, written bool, err error) {
	arena := p.arenas.get(j.local)
	if arena == nil {
		return info, false, fmt.Errorf("local rank %d has no arena", j.local)
	}
	if !j.pinned {
		if _, ok := p.arenas.pin(j.local, j.step); !ok {
			p.cfg.Log.Info("a checkpoint was superseded in memory before it could be persisted", "step", j.step, "rank", j.rank)
			return info, false, nil
		}
	}
	defer p.arenas.unpin(j.local)
	snap, ok := arena.Valid(j.step)
	if !ok {
		return info, false, fmt.Errorf("step %d was overwritten in memory while pinned", j.step)
	}
	b, err := p.bucket(ctx)
	if err != nil {
		return info, false, err
	}
	// The CRC32C, the write with its fsync and the read-back: the work of
	// persistence, on a thread that yields to training.
	start := time.Now()
	yieldingRun(func() { info, err = ckpt.PersistRank(ctx, b, j.step, j.rank, snap.Data) })
	if err != nil {
		// What the failed write left (a partial file, its directory) goes,
		// so that storage that filled up has room for the next try.
		if rerr := ckpt.RemoveRankFile(context.WithoutCancel(ctx), b, j.step, j.rank); rerr != nil {
			p.cfg.Log.Warn("could not remove a partly persisted checkpoint file", "step", j.step, "rank", j.rank, "err", rerr)
		}
		return info, false, err
	}
	if err := arena.Check(snap); err != nil {
		return info, false, fmt.Errorf("step %d changed in memory while it was persisted: %w", j.step, err)
	}
	if p.cfg.Persisted != nil {
		p.cfg.Persisted(time.Since(start), info.Size)
	}
	return info, true, nil
}

// waitResult is what a worker's wait learns.
type waitResult struct {
	durable   int64 // newest step the rank made durable, -1: none
	err       string
	committed int64 // newest committed step the master reported, -1: none known
	requested int64
	failure   string
}

// wait blocks until the rank has nothing pending or being retried; it
// returns the newest durable step and the last error (which it clears),
// unless the retries made the newest queued snapshot durable after all.
func (p *persister) wait(local int) waitResult {
	durable, err := p.waitFor(local, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	return waitResult{durable: durable, err: err, committed: p.committed, requested: p.requested[local], failure: p.failure[local]}
}

// waitFor is wait; without retries, it does not wait for failed snapshots'
// retries (storage is failing: the caller has better things to do).
func (p *persister) waitFor(local int, retries bool) (int64, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if _, pending := p.pending[local]; p.stopped || !pending && !p.busy[local] && (!retries || p.retrying[local] == 0) {
			break
		}
		p.cond.Wait()
	}
	err := p.lastErr[local]
	delete(p.lastErr, local)
	if d, ok := p.durable[local]; ok {
		return d, err
	}
	return -1, err
}

// drain blocks until no rank has a persistence queued or running (failed
// ones waiting for a retry are not waited for), or ctx ends. The agent
// drains before it joins a new round: every member does, and the round
// closes only when all have joined, so no commit can land while the new
// workers read the newest committed step, and they all read the same one.
func (p *persister) drain(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for ctx.Err() == nil && !p.stopped && (len(p.pending) > 0 || p.anyBusyLocked()) {
		p.cond.Wait()
	}
}

func (p *persister) anyBusyLocked() bool {
	for _, b := range p.busy {
		if b {
			return true
		}
	}
	return false
}

// restore copies the newest committed step of the job's storage into the
// rank's arena.
func (p *persister) restore(ctx context.Context, local int, rank int) (*roverv1.CheckpointSnapshot, error) {
	b, err := p.bucket(ctx)
	if err != nil {
		return nil, err
	}
	m, err := ckpt.LoadLatest(ctx, b)
	if err != nil {
		return nil, err
	}
	if m.Mode == ckpt.Replicated {
		rank = m.Files[0].Rank
	}
	tensors, meta, err := ckpt.LoadRank(ctx, b, m, rank)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := ckpt.Encode(&buf, tensors, meta); err != nil {
		return nil, err
	}
	arena, _, slot, err := p.arenas.begin(local, m.Step, int64(buf.Len()))
	if err != nil {
		return nil, err
	}
	copy(slot, buf.Bytes())
	if err := p.arenas.commit(local, m.Step, int64(buf.Len())); err != nil {
		return nil, err
	}
	snap, ok := arena.Valid(m.Step)
	if !ok {
		return nil, fmt.Errorf("restored step %d vanished from memory", m.Step)
	}
	return &roverv1.CheckpointSnapshot{Step: snap.Step, Path: arena.Path(), Offset: snap.Offset, Length: int64(len(snap.Data))}, nil
}

// remember records where a rank's checkpoints go.
func (p *persister) remember(j persistJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target[j.local] = j
}

// persistOnFailure writes to storage, once the workers are stopped, every
// snapshot in memory newer than what each rank made durable: both slots, so
// that the newest step every rank holds is among them and the master can
// commit it. It runs before the workers restart (after they failed, or were
// stopped for a new round, whose world may hold a node with nothing in
// memory) and before the agent exits.
func (p *persister) persistOnFailure(ctx context.Context) {
	p.mu.Lock()
	targets := make([]persistJob, 0, len(p.target))
	for _, j := range p.target {
		targets = append(targets, j)
	}
	p.mu.Unlock()
	for _, t := range targets {
		durable, _ := p.waitFor(t.local, false)
		arena := p.arenas.get(t.local)
		if arena == nil {
			continue
		}
		slots, err := arena.Slots()
		if err != nil {
			continue
		}
		for _, si := range slots {
			if si.State != ckpt.SlotValid || si.Step <= durable {
				continue
			}
			j := t
			j.step = si.Step
			if _, ok := p.arenas.pin(j.local, j.step); !ok {
				continue
			}
			j.pinned = true
			persisted, err := p.persist(ctx, j)
			p.mu.Lock()
			if err != nil {
				p.lastErr[j.local] = err.Error()
				p.failure[j.local] = err.Error()
				p.cfg.Log.Warn("could not persist the checkpoint held in memory", "step", j.step, "rank", j.rank, "err", err)
			} else if persisted {
				p.madeDurableLocked(j.local, j.step)
				p.cfg.Log.Info("persisted the checkpoint held in memory after the workers stopped", "step", j.step, "rank", j.rank)
			}
			p.mu.Unlock()
		}
	}
}
