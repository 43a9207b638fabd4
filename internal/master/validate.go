package master

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
)

// Limits on request fields.
const (
	maxNodeIDLen      = 253
	maxAddrLen        = 1024
	maxLocalWorldSize = 4096
	maxNodes          = 1 << 20
	maxKeyLen         = 512
	maxValueLen       = 1 << 20
	// The key-value store's limits (jobstate.Keys).
	maxKeys     = jobstate.MaxKeys
	maxKeyBytes = jobstate.MaxKeyBytes
	// maxDatasets bounds the datasets of one job.
	maxDatasets    = 256
	maxWait        = 30 * time.Minute
	maxFailures    = 4096
	maxFailureText = 64 << 10
	maxTimeout     = 30 * 24 * time.Hour
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

func checkNodeID(id string) error {
	switch {
	case id == "":
		return invalid("node_id is empty")
	case len(id) > maxNodeIDLen:
		return invalid("node_id is %d bytes long, at most %d are allowed", len(id), maxNodeIDLen)
	case !utf8.ValidString(id):
		return invalid("node_id is not valid UTF-8")
	}
	return nil
}

func checkRound(round int64) error {
	if round < 0 || round > 1<<31 {
		return invalid("round %d is out of range", round)
	}
	return nil
}

func millis(name string, v int64) (time.Duration, error) {
	if v < 0 || v > maxTimeout.Milliseconds() { // compared in ms: v*1e6 could overflow
		return 0, invalid("%s=%dms is out of range (0 to %s)", name, v, maxTimeout)
	}
	return time.Duration(v) * time.Millisecond, nil
}

// validateJoin checks a join request and converts it.
func validateJoin(r *roverv1.JoinRequest) (rendezvous.JoinRequest, *jobconfig.Config, error) {
	var errs []error
	errs = append(errs, checkNodeID(r.GetNodeId()), checkRound(r.GetRound()))
	if r.GetRequestedRank() < -1 || r.GetRequestedRank() >= maxNodes {
		errs = append(errs, invalid("requested_rank %d is out of range (-1 for any, or 0 to %d)", r.GetRequestedRank(), maxNodes-1))
	}
	if n := r.GetLocalWorldSize(); n < 1 || n > maxLocalWorldSize {
		errs = append(errs, invalid("local_world_size %d is out of range (1 to %d)", n, maxLocalWorldSize))
	}
	if a := r.GetAddr(); a == "" || len(a) > maxAddrLen || !utf8.ValidString(a) {
		errs = append(errs, invalid("addr %.64q must be a host name or address of at most %d bytes", a, maxAddrLen))
	}
	if len(r.GetRunId()) > maxNodeIDLen {
		errs = append(errs, invalid("run_id is longer than %d bytes", maxNodeIDLen))
	}
	cfg, err := validateRendezvous(r.GetRendezvous())
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return rendezvous.JoinRequest{}, nil, err
	}
	return rendezvous.JoinRequest{
		NodeID:         r.GetNodeId(),
		RequestedRank:  int(r.GetRequestedRank()),
		LocalWorldSize: int(r.GetLocalWorldSize()),
		Addr:           r.GetAddr(),
	}, cfg, nil
}

func validateRendezvous(r *roverv1.RendezvousConfig) (*jobconfig.Config, error) {
	if r == nil {
		return nil, invalid("rendezvous configuration is missing")
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"last_call_millis", r.GetLastCallMillis()},
		{"join_timeout_millis", r.GetJoinTimeoutMillis()},
		{"heartbeat_timeout_millis", r.GetHeartbeatTimeoutMillis()},
		{"disconnect_grace_millis", r.GetDisconnectGraceMillis()},
	} {
		_, err := millis(f.name, f.v)
		errs = append(errs, err)
	}
	c := configwire.FromProto(r)
	cfg := &c
	if r.GetMaxNodes() > maxNodes {
		errs = append(errs, invalid("max_nodes %d is more than %d", r.GetMaxNodes(), maxNodes))
	}
	if err := cfg.Rendezvous.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", errInvalid, err))
	}
	if t := r.GetHangTimeoutMillis(); t < 0 {
		errs = append(errs, invalid("hang_timeout_millis %d is negative (0 turns hang detection off)", t))
	}
	if p := r.GetHangDetection(); p < 0 || p > 2 {
		errs = append(errs, invalid("hang_detection %d is not 0 (log), 1 (warn) or 2 (restart the workers)", p))
	}
	if cfg.Nodes.HeartbeatTimeout <= 0 {
		errs = append(errs, invalid("heartbeat_timeout_millis must be positive"))
	}
	return cfg, errors.Join(errs...)
}

func validateFailures(r *roverv1.ReportFailureRequest) error {
	errs := []error{checkNodeID(r.GetNodeId()), checkRound(r.GetRound())}
	if len(r.GetFailures()) > maxFailures {
		errs = append(errs, invalid("%d failures in one report, at most %d are allowed", len(r.GetFailures()), maxFailures))
	}
	for i, f := range r.GetFailures() {
		n := len(f.GetMessage()) + len(f.GetTraceback()) + len(f.GetLogTail()) + len(f.GetErrorFile()) + len(f.GetHost()) + len(f.GetNodeId())
		if n > maxFailureText {
			errs = append(errs, invalid("failure %d carries %d bytes of text, at most %d are allowed", i, n, maxFailureText))
		}
		if f.GetRank() < 0 || f.GetLocalRank() < 0 {
			errs = append(errs, invalid("failure %d has a negative rank", i))
		}
	}
	return errors.Join(errs...)
}

func validateKey(k string) error {
	switch {
	case k == "":
		return invalid("key is empty")
	case len(k) > maxKeyLen:
		return invalid("key is %d bytes long, at most %d are allowed", len(k), maxKeyLen)
	case !utf8.ValidString(k):
		return invalid("key is not valid UTF-8")
	}
	return nil
}

func validateSetKey(r *roverv1.SetKeyRequest) error {
	if err := validateKey(r.GetKey()); err != nil {
		return err
	}
	if len(r.GetValue()) > maxValueLen {
		return invalid("value of %q is %d bytes, at most %d are allowed", r.GetKey(), len(r.GetValue()), maxValueLen)
	}
	return nil
}

func validateGetKey(r *roverv1.GetKeyRequest) (time.Duration, error) {
	if err := validateKey(r.GetKey()); err != nil {
		return 0, err
	}
	if r.GetWaitMillis() < 0 || r.GetWaitMillis() > maxWait.Milliseconds() { // compared in ms: no overflow
		return 0, invalid("wait_millis %d is out of range (0 to %d)", r.GetWaitMillis(), maxWait.Milliseconds())
	}
	return time.Duration(r.GetWaitMillis()) * time.Millisecond, nil
}
