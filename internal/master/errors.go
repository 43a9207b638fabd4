package master

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/shard"
)

// ErrStoreFailed marks the error of a master whose store refused a write
// (a full or failed disk, a lost API server, a master fenced off by a newer
// one): nothing more can be made durable, so the master stops serving, and
// Run and WaitFinished return it at once. A master restarted on the same
// state resumes the job from what is durable.
var ErrStoreFailed = errors.New("the master's state store failed")

// ErrStopped is WaitFinished's error when Run returned before the job ended.
var ErrStopped = errors.New("the master stopped before the job ended")

var (
	// errInvalid marks a request with a bad field.
	errInvalid = jobstate.ErrInvalid
	// errNotConfigured is returned before the first agent configured the job.
	errNotConfigured = jobstate.ErrNotConfigured
	// errConfigMismatch is returned to an agent whose settings differ from the job's.
	errConfigMismatch = errors.New("rendezvous settings differ from the job's")
	// errLimit is returned when a request would take the job past one of
	// the master's limits on its state.
	errLimit = jobstate.ErrLimit
	// errNoStorage: a checkpoint was reported in a job without storage.
	errNoStorage = errors.New("no checkpoint storage")
	// errStaleRound: a checkpoint report names a round or node that is not
	// the job's current world.
	errStaleRound = jobstate.ErrStaleRound
	// errUnverified: a step's files in storage are not what was reported.
	errUnverified = errors.New("checkpoint files do not match the reports")
	// errUnauthenticated is returned for a missing or wrong token.
	errUnauthenticated = errors.New("missing or wrong job token: pass the job's token (--token-file or ROVER_TOKEN)")
)

// codes maps the core's errors to RPC codes: the one table every handler uses.
var codes = []struct {
	err  error
	code connect.Code
}{
	{errInvalid, connect.CodeInvalidArgument},
	{ErrStoreFailed, connect.CodeUnavailable},
	{rendezvous.ErrInvalidRequest, connect.CodeInvalidArgument},
	{errConfigMismatch, connect.CodeFailedPrecondition},
	{errNotConfigured, connect.CodeFailedPrecondition},
	{rendezvous.ErrJobFinished, connect.CodeFailedPrecondition},
	{rendezvous.ErrRankTaken, connect.CodeAlreadyExists},
	{rendezvous.ErrUnknownNode, connect.CodeNotFound},
	{errUnauthenticated, connect.CodeUnauthenticated},
	{errLimit, connect.CodeResourceExhausted},
	{errNoStorage, connect.CodeFailedPrecondition},
	{errStaleRound, connect.CodeFailedPrecondition},
	{errUnverified, connect.CodeFailedPrecondition},
	{jobstate.ErrStorageConflict, connect.CodeFailedPrecondition},
	{ckpt.ErrInvalidInput, connect.CodeInvalidArgument},
	{ckpt.ErrCorrupt, connect.CodeFailedPrecondition},
	{ckpt.ErrStorage, connect.CodeUnavailable},
	{shard.ErrInvalidDataset, connect.CodeInvalidArgument},
	{shard.ErrInvalidRequest, connect.CodeInvalidArgument},
	{shard.ErrBadState, connect.CodeInvalidArgument},
	{shard.ErrConflict, connect.CodeAlreadyExists},
	{shard.ErrUnknownDataset, connect.CodeNotFound},
	{shard.ErrWrongMode, connect.CodeFailedPrecondition},
	{shard.ErrSealed, connect.CodeFailedPrecondition},
	{shard.ErrStalePosition, connect.CodeFailedPrecondition},
	{shard.ErrUnknownLease, connect.CodeNotFound},
	{shard.ErrNotHolder, connect.CodePermissionDenied},
	{shard.ErrSuperseded, connect.CodeFailedPrecondition},
	{shard.ErrStaleRequest, connect.CodeFailedPrecondition},
	{context.Canceled, connect.CodeCanceled},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
}

// rpcError maps err to a connect error with the matching code.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return connect.NewError(c.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// isRequestError reports whether err rejects a request rather than signalling
// a fault of the master; such errors are expected when a journal is replayed.
func isRequestError(err error) bool {
	for _, c := range codes {
		if errors.Is(err, c.err) && c.code != connect.CodeInternal {
			return true
		}
	}
	return false
}

// errUnknownEvent is a journal record of a type this master does not know:
// a newer master wrote it.
var errUnknownEvent = jobstate.ErrUnknownEvent
