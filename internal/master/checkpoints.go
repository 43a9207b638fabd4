package master

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
)

// checkpoints commits flash-checkpoint steps: agents report each rank file
// they made durable, and once every rank a step needs is durable the master
// writes the step's manifest and then the latest marker (ckpt's commit
// protocol). Its state is storage itself: a restarted master loses only the
// reports of steps not yet committed, whose ranks persist again at the next
// save. It is kept apart from the core because it does storage I/O.
type checkpoints struct {
	clock Clock
	mu    sync.Mutex
	byURL map[string]*checkpointTarget
}

type checkpointTarget struct {
	bucket    *ckpt.Bucket
	commit    *ckpt.Commit
	worldSize int
	mode      ckpt.Mode
}

func newCheckpoints(clock Clock) *checkpoints {
	return &checkpoints{clock: clock, byURL: map[string]*checkpointTarget{}}
}

func (c *checkpoints) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.byURL {
		t.bucket.Close()
	}
}

func (c *checkpoints) durable(ctx context.Context, r *roverv1.CheckpointDurableRequest) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mode := ckpt.Mode(r.GetMode())
	t := c.byURL[r.GetUrl()]
	if t == nil {
		b, err := ckpt.OpenBucket(ctx, r.GetUrl())
		if err != nil {
			return false, fmt.Errorf("%w: %w", errInvalid, err)
		}
		t = &checkpointTarget{bucket: b}
		c.byURL[r.GetUrl()] = t
	}
	if t.commit == nil || t.worldSize != int(r.GetWorldSize()) || t.mode != mode {
		cm, err := ckpt.NewCommit(int(r.GetWorldSize()), mode)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errInvalid, err)
		}
		t.commit, t.worldSize, t.mode = cm, int(r.GetWorldSize()), mode
	}
	info := ckpt.FileInfo{Rank: int(r.GetRank()), Path: r.GetPath(), Size: r.GetSize(), CRC32C: r.GetCrc32C()}
	if err := t.commit.Durable(r.GetStep(), int(r.GetRank()), info); err != nil {
		return false, fmt.Errorf("%w: %w", errInvalid, err)
	}
	if !t.commit.Ready(r.GetStep()) {
		return false, nil
	}
	m, err := t.commit.Manifest(r.GetStep(), c.clock.Now())
	if err != nil {
		if errors.Is(err, ckpt.ErrNotReady) {
			return false, nil
		}
		return false, err
	}
	if err := ckpt.WriteManifestAndLatest(ctx, t.bucket, m); err != nil {
		return false, fmt.Errorf("commit checkpoint step %d to %s: %w", r.GetStep(), r.GetUrl(), err)
	}
	t.commit.Committed(r.GetStep())
	if k := int(r.GetKeep()); k > 0 {
		if _, err := ckpt.Keep(ctx, t.bucket, k); err != nil {
			return true, fmt.Errorf("delete old checkpoints in %s: %w", r.GetUrl(), err)
		}
	}
	return true, nil
}

func (s *service) CheckpointDurable(ctx context.Context, req *connect.Request[roverv1.CheckpointDurableRequest]) (*connect.Response[roverv1.CheckpointDurableResponse], error) {
	r := req.Msg
	switch {
	case r.GetUrl() == "" || len(r.GetUrl()) > maxAddrLen:
		return nil, rpcError(invalid("url must be 1 to %d bytes", maxAddrLen))
	case r.GetStep() < 0 || r.GetRank() < 0 || r.GetWorldSize() < 1 || r.GetRank() >= r.GetWorldSize():
		return nil, rpcError(invalid("step %d, rank %d of world size %d are out of range", r.GetStep(), r.GetRank(), r.GetWorldSize()))
	case r.GetKeep() < 0:
		return nil, rpcError(invalid("keep %d is negative", r.GetKeep()))
	}
	committed, err := s.checkpoints.durable(ctx, r)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&roverv1.CheckpointDurableResponse{Committed: committed}), nil
}
