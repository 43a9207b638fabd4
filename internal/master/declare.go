package master

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/master/jobstate"
)

// A checkpointer's declaration of the job's checkpoint storage (the rule:
// jobstate.DeclareStorage): its RPC and its proposal.

// declareStorage declares a checkpointer's storage: journaled when it
// changes the job's, answered from the state when it does not. It returns
// the job's storage after it.
func (c *core) declareStorage(ctx context.Context, d jobstate.StorageDeclaration) (jobconfig.CheckpointStorage, error) {
	c.mu.Lock()
	job, changed, err := c.st.Members.CheckDeclare(d)
	c.mu.Unlock()
	if err != nil || !changed {
		return job, err
	}
	err = c.propose(ctx, &jobstate.Event{Type: jobstate.EventDeclareStorage, Declare: &d}, func(error) {
		job = c.st.Members.Config().Checkpoint // another declaration may have come first
	})
	return job, err
}

func (s *service) DeclareCheckpoint(ctx context.Context, req *connect.Request[roverv1.DeclareCheckpointRequest]) (*connect.Response[roverv1.DeclareCheckpointResponse], error) {
	r := req.Msg
	d := jobstate.StorageDeclaration{Node: r.GetNodeId(), URL: r.GetUrl()}
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
