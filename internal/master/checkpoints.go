package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/jobconfig"
)

// maxCheckpointKeep bounds the committed steps a job may keep.
const maxCheckpointKeep = 1 << 20

// checkpoints commits flash-checkpoint steps in the job's checkpoint
// storage, the one its configuration names: requests name a step and a
// rank, never a location. Agents report each rank file they made durable;
// once every rank of one round's world has reported a step, the master
// checks the files in storage (size and header), then writes the step's
// manifest and the latest marker (ckpt's commit protocol), and prunes only
// steps older than the one it just verified.
//
// Its state is storage itself: a restarted master loses only the reports
// of steps not yet committed, whose ranks persist again at the next save.
// It is kept apart from the core because it does storage I/O.
type checkpoints struct {
	clock Clock
	log   *slog.Logger

	mu      sync.Mutex
	storage jobconfig.CheckpointStorage // URL "": not configured (yet)
	bucket  *ckpt.Bucket                // nil until opened
	latest  int64                       // newest committed step, -1: none
	round   int                         // the world round commit tracks
	mode    ckpt.Mode
	commit  *ckpt.Commit
}

func newCheckpoints(clock Clock, log *slog.Logger) *checkpoints {
	return &checkpoints{clock: clock, log: log, latest: -1}
}

// latestStep is the newest committed step this master knows, -1 none.
func (c *checkpoints) latestStep() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

func (c *checkpoints) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bucket != nil {
		c.bucket.Close()
		c.bucket = nil
	}
}

// prepare opens the job's storage once its configuration is known, and
// removes what cannot be committed any more: step directories without a
// manifest below the latest commit, and when fresh (a job starting, before
// any of its workers ran) every uncommitted one. A storage that cannot be
// opened now is logged and tried again at the first report.
func (c *checkpoints) prepare(ctx context.Context, storage jobconfig.CheckpointStorage, fresh bool) {
	if storage.URL == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storage.URL != "" {
		return
	}
	c.storage = storage
	if err := c.openLocked(ctx); err != nil {
		c.log.Warn("could not open the job's checkpoint storage; trying again at the first checkpoint", "url", storage.URL, "err", err)
		return
	}
	removed, err := ckpt.RemoveUncommitted(ctx, c.bucket, fresh)
	if err != nil {
		c.log.Warn("could not remove uncommitted checkpoints", "url", storage.URL, "err", err)
	}
	if len(removed) > 0 {
		c.log.Info("removed checkpoint steps that were never committed", "url", storage.URL, "steps", removed)
	}
}

// openLocked opens the bucket and reads the latest commit.
func (c *checkpoints) openLocked(ctx context.Context) error {
	if c.bucket != nil {
		return nil
	}
	b, err := ckpt.OpenBucket(ctx, c.storage.URL)
	if err != nil {
		return err
	}
	latest, err := ckpt.LatestStep(ctx, b)
	switch {
	case errors.Is(err, ckpt.ErrNoCheckpoint):
		latest = -1
	case err != nil:
		b.Close()
		return err
	}
	c.bucket, c.latest = b, latest
	return nil
}

// report is one validated CheckpointDurable request with the world it
// claims, as the core knows it.
type report struct {
	step      int64
	rank      int
	mode      ckpt.Mode
	size      int64
	crc32c    uint32
	round     int
	worldSize int
}

// durable records a rank's durable file and commits its step once every
// rank the step needs has reported in the same round and the files check
// out. It returns whether this report committed the step, and the newest
// committed step.
func (c *checkpoints) durable(ctx context.Context, storage jobconfig.CheckpointStorage, r report) (bool, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if storage.URL == "" {
		return false, c.latest, fmt.Errorf("%w: this job has no checkpoint storage: start it with --checkpoint-dir DIR_OR_URL "+
			"(on `rover master`, or on every `rover run`)", errNoStorage)
	}
	c.storage = storage
	if err := c.openLocked(ctx); err != nil {
		return false, c.latest, err
	}
	switch {
	case r.round < c.round:
		return false, c.latest, fmt.Errorf("%w: step %d was reported for round %d, but the job is in round %d", errStaleRound, r.step, r.round, c.round)
	case r.round > c.round || c.commit == nil || c.mode != r.mode:
		if c.commit != nil && r.round == c.round && len(c.commit.Pending()) > 0 {
			return false, c.latest, invalid("mode %q: round %d's checkpoints are %q", r.mode, r.round, c.mode)
		}
		cm, err := ckpt.NewCommit(r.worldSize, r.mode)
		if err != nil {
			return false, c.latest, fmt.Errorf("%w: %w", errInvalid, err)
		}
		c.commit, c.round, c.mode = cm, r.round, r.mode
	}
	if r.step <= c.latest {
		// An older step can never be the newest again: committing it
		// would move latest back and let pruning delete newer work.
		return false, c.latest, nil
	}
	info := ckpt.FileInfo{Rank: r.rank, Path: ckpt.RankPath(r.step, r.rank), Size: r.size, CRC32C: r.crc32c}
	if err := c.commit.Durable(r.step, r.rank, info); err != nil {
		return false, c.latest, fmt.Errorf("%w: %w", errInvalid, err)
	}
	if !c.commit.Ready(r.step) {
		return false, c.latest, nil
	}
	m, err := c.commit.Manifest(r.step, c.clock.Now())
	if err != nil {
		return false, c.latest, err
	}
	if bad, err := ckpt.VerifyFiles(ctx, c.bucket, m); err != nil {
		for _, rank := range bad {
			c.commit.Forget(r.step, rank) // only a report of a new file counts
		}
		if len(bad) > 0 {
			return false, c.latest, fmt.Errorf("%w: not committing checkpoint step %d: %w", errUnverified, r.step, err)
		}
		return false, c.latest, fmt.Errorf("check checkpoint step %d in %s: %w", r.step, c.storage.URL, err)
	}
	if err := ckpt.WriteManifestAndLatest(ctx, c.bucket, m); err != nil {
		return false, c.latest, fmt.Errorf("commit checkpoint step %d to %s: %w", r.step, c.storage.URL, err)
	}
	c.commit.Committed(r.step)
	c.latest = r.step
	c.log.Info("committed checkpoint step", "step", r.step, "round", r.round, "files", len(m.Files))
	if err := c.pruneLocked(ctx); err != nil {
		return true, c.latest, fmt.Errorf("delete old checkpoints in %s: %w", c.storage.URL, err)
	}
	return true, c.latest, nil
}

// pruneLocked keeps the newest committed steps the job's configuration
// asks for (all for 0); everything it deletes is older than the step just
// verified and committed. Uncommitted steps below it go too.
func (c *checkpoints) pruneLocked(ctx context.Context) error {
	if c.storage.Keep > 0 {
		_, err := ckpt.Keep(ctx, c.bucket, c.storage.Keep)
		return err
	}
	_, err := ckpt.RemoveUncommitted(ctx, c.bucket, false)
	return err
}

// checkpointAgrees compares an agent's checkpoint storage with the job's:
// an agent that names none takes the job's, and one that gave no
// --checkpoint-keep takes the job's keep.
func checkpointAgrees(job, asked jobconfig.CheckpointStorage) []error {
	switch {
	case asked.URL == "":
		return nil
	case job.URL == "":
		return []error{fmt.Errorf("--checkpoint-dir=%s, but the job runs without checkpoint storage", asked.URL)}
	case !ckpt.SameLocation(job.URL, asked.URL):
		return []error{fmt.Errorf("--checkpoint-dir=%s, but the job's checkpoints go to %s", asked.URL, job.URL)}
	case asked.Keep != job.Keep && !asked.KeepDefault:
		return []error{fmt.Errorf("--checkpoint-keep=%d, but the job keeps %d", asked.Keep, job.Keep)}
	}
	return nil
}

// checkStorage checks a checkpoint storage configuration.
func checkStorage(s jobconfig.CheckpointStorage, from ckpt.Location) error {
	if s.URL == "" {
		if s.Keep != 0 {
			return invalid("checkpoint keep %d is set without a checkpoint storage", s.Keep)
		}
		return nil
	}
	if s.Keep < 0 || s.Keep > maxCheckpointKeep {
		return invalid("checkpoint keep %d is out of range (0 for all, to %d)", s.Keep, maxCheckpointKeep)
	}
	if err := ckpt.CheckLocation(s.URL, from); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	return nil
}

func (s *service) CheckpointDurable(ctx context.Context, req *connect.Request[roverv1.CheckpointDurableRequest]) (*connect.Response[roverv1.CheckpointDurableResponse], error) {
	r := req.Msg
	var errs []error
	errs = append(errs, checkNodeID(r.GetNodeId()), checkRound(r.GetRound()))
	mode := ckpt.Mode(r.GetMode())
	switch {
	case r.GetStep() < 0 || r.GetRank() < 0:
		errs = append(errs, invalid("step %d and rank %d must not be negative", r.GetStep(), r.GetRank()))
	case r.GetSize() < 8:
		errs = append(errs, invalid("size %d is too small for a checkpoint file", r.GetSize()))
	case mode != ckpt.Sharded && mode != ckpt.Replicated:
		errs = append(errs, invalid("mode %q: want %q or %q", mode, ckpt.Sharded, ckpt.Replicated))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, rpcError(err)
	}
	storage, world, err := s.core.checkpointWorld(r.GetNodeId(), int(r.GetRound()), int(r.GetRank()))
	if err != nil {
		return nil, rpcError(err)
	}
	committed, latest, err := s.checkpoints.durable(ctx, storage, report{
		step: r.GetStep(), rank: int(r.GetRank()), mode: mode, size: r.GetSize(), crc32c: r.GetCrc32C(),
		round: int(r.GetRound()), worldSize: world,
	})
	if err != nil {
		return nil, rpcError(err)
	}
	if committed {
		now := s.clock.Now()
		s.core.goodputDurable(r.GetNodeId(), int(r.GetRound()), r.GetStep(), now)
		s.core.logEvents(eventlog.Event{Time: now, Kind: eventlog.CheckpointCommitted, Severity: eventlog.Normal,
			Round: int(r.GetRound()), Step: eventlog.Int64(r.GetStep()),
			Message: fmt.Sprintf("checkpoint step %d committed: every rank of it is durable", r.GetStep())})
	}
	return connect.NewResponse(&roverv1.CheckpointDurableResponse{Committed: committed, LatestCommitted: latest}), nil
}
