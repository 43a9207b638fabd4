package master

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/rendezvous"
)

// A job's checkpoint storage is job configuration. A launcher names it
// (`rover master --checkpoint-dir`, the first agent's `rover run
// --checkpoint-dir`, the job spec); when none does, the job's own script
// may declare it: a worker's Checkpointer(dir, keep) asks its agent, which
// forwards the declaration here. The first declaration sets the job's
// storage, journaled like the rest of its configuration, so that a
// restarted master keeps it and every node and rank sees the same; a later
// one must agree with it. The rule, location and keep:
//
//   - a job without storage takes the declared location, with the declared
//     keep (or the default, which a later declaration may still set);
//   - a job with storage accepts the same location (or none), and refuses
//     another, saying what the job has and what was asked;
//   - a declared keep replaces a launcher's default keep once (no
//     --checkpoint-keep was given), and must equal a keep that was given
//     or already declared.

// errStorageConflict: a checkpointer declared storage other than the job's.
var errStorageConflict = errors.New("checkpoint storage conflict")

// storageDeclaration is one checkpointer's declaration, as its agent
// forwarded it; Keep nil names none.
type storageDeclaration struct {
	Node string `json:"node"`
	URL  string `json:"url,omitempty"`
	Keep *int   `json:"keep,omitempty"`
}

// declareStorage applies d to the job's storage: the storage after it,
// whether that changed, or why d is refused. It does no I/O.
func declareStorage(job jobconfig.CheckpointStorage, d storageDeclaration) (jobconfig.CheckpointStorage, bool, error) {
	out, changed := job, false
	switch {
	case d.URL == "":
	case job.URL == "":
		out = jobconfig.CheckpointStorage{URL: d.URL, Keep: jobconfig.DefaultCheckpointKeep, KeepDefault: true, Declared: true}
		changed = true
	case !ckpt.SameLocation(job.URL, d.URL):
		return job, false, fmt.Errorf("%w: the job's script asks for checkpoint storage %s, but the job's checkpoints go to %s (%s): "+
			"give that location to the Checkpointer, or none", errStorageConflict, d.URL, job.URL, storageOrigin(job))
	}
	if d.Keep == nil || out.URL == "" {
		return out, changed, nil // keep means nothing without storage
	}
	switch {
	case out.KeepDefault:
		out.Keep, out.KeepDefault, changed = *d.Keep, false, true
	case out.Keep != *d.Keep:
		return job, false, fmt.Errorf("%w: the job's script asks to keep %d committed checkpoint steps, but the job keeps %d "+
			"(set by --checkpoint-keep, or by the job's first Checkpointer that gave keep): give keep=%d, or none",
			errStorageConflict, *d.Keep, out.Keep, out.Keep)
	}
	return out, changed, nil
}

// storageOrigin says who set the job's storage, for messages.
func storageOrigin(s jobconfig.CheckpointStorage) string {
	if s.Declared {
		return "declared by the job's first Checkpointer"
	}
	return "the launcher's --checkpoint-dir"
}

// declareLocked is the declaration event's check and transition.
func (c *core) declareLocked(d *storageDeclaration, apply bool) error {
	if c.cfg == nil {
		return errNotConfigured
	}
	if _, ok := c.addrs[d.Node]; !ok {
		return fmt.Errorf("declare checkpoint storage from node %q, which has not joined the job: %w", d.Node, rendezvous.ErrUnknownNode)
	}
	out, changed, err := declareStorage(c.cfg.Checkpoint, *d)
	if err != nil || !changed || !apply {
		return err
	}
	cfg := *c.cfg
	cfg.Checkpoint = out
	c.cfg = &cfg
	return nil
}

// declareStorage declares a checkpointer's storage: journaled when it
// changes the job's, answered from the state when it does not. It returns
// the job's storage after it.
func (c *core) declareStorage(ctx context.Context, d storageDeclaration) (jobconfig.CheckpointStorage, error) {
	c.mu.Lock()
	err := c.declareLocked(&d, false)
	var job jobconfig.CheckpointStorage
	changed := false
	if err == nil {
		job, changed, _ = declareStorage(c.cfg.Checkpoint, d)
	}
	c.mu.Unlock()
	if err != nil || !changed {
		return job, err
	}
	err = c.propose(ctx, &event{Type: eventDeclareStorage, Declare: &d}, func(error) {
		job = c.cfg.Checkpoint // another declaration may have come first
	})
	return job, err
}

func (s *service) DeclareCheckpoint(ctx context.Context, req *connect.Request[roverv1.DeclareCheckpointRequest]) (*connect.Response[roverv1.DeclareCheckpointResponse], error) {
	r := req.Msg
	d := storageDeclaration{Node: r.GetNodeId(), URL: r.GetUrl()}
	errs := []error{checkNodeID(r.GetNodeId())}
	if d.URL != "" {
		errs = append(errs, checkStorage(jobconfig.CheckpointStorage{URL: d.URL}, ckpt.FromAgent))
	}
	if r.Keep != nil {
		k := int(r.GetKeep())
		if k < 0 || k > maxCheckpointKeep {
			errs = append(errs, invalid("keep %d is out of range (0 for all, to %d)", k, maxCheckpointKeep))
		}
		d.Keep = &k
	}
	if err := errors.Join(errs...); err != nil {
		return nil, rpcError(err)
	}
	job, err := s.core.declareStorage(ctx, d)
	if err != nil {
		return nil, rpcError(err)
	}
	// Workers are running: only steps below a commit may be tidied.
	s.checkpoints.prepare(ctx, job, false)
	return connect.NewResponse(&roverv1.DeclareCheckpointResponse{Checkpoint: configwire.StorageToProto(job)}), nil
}
