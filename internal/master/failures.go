package master

import (
	"encoding/json"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"google.golang.org/protobuf/encoding/protojson"
)

// The core's side of the job's failure record (jobstate.Failures): the
// failures a report or a loss adds, and their conversion to and from the
// protocol's WorkerFailure, as the journal, the snapshot and the views
// carry them.

// failureCodec is the protobuf JSON of a WorkerFailure, as the journal and
// the snapshot carry failures (jobstate.FailureCodec).
type failureCodec struct{}

func (failureCodec) Encode(f jobstate.Failure) (json.RawMessage, error) {
	return protojson.Marshal(failureProto(f))
}

func (failureCodec) Decode(b json.RawMessage) (jobstate.Failure, error) {
	w := &roverv1.WorkerFailure{}
	if err := protojson.Unmarshal(b, w); err != nil {
		return jobstate.Failure{}, err
	}
	return failureFromProto(w), nil
}

// failuresProto is the wire form of the job's failures.
func failuresProto(fs []jobstate.Failure) []*roverv1.WorkerFailure {
	if len(fs) == 0 {
		return nil
	}
	out := make([]*roverv1.WorkerFailure, len(fs))
	for i, f := range fs {
		out[i] = failureProto(f)
	}
	return out
}

func failureProto(f jobstate.Failure) *roverv1.WorkerFailure {
	return &roverv1.WorkerFailure{
		NodeId: f.NodeID, NodeRank: int32(f.NodeRank), Host: f.Host, Rank: int32(f.Rank), LocalRank: int32(f.LocalRank),
		Pid: int32(f.PID), ExitCode: int32(f.ExitCode), Signal: int32(f.Signal), TimeUnixNanos: f.TimeUnixNanos,
		ErrorFile: f.ErrorFile, Message: f.Message, Traceback: f.Traceback, LogTail: f.LogTail, Round: f.Round,
		Cause: f.Cause, Action: f.Action, Diagnosis: f.Diagnosis, RestoreFailed: f.RestoreFailed,
	}
}

func failureFromProto(w *roverv1.WorkerFailure) jobstate.Failure {
	return jobstate.Failure{
		NodeID: w.GetNodeId(), NodeRank: int(w.GetNodeRank()), Host: w.GetHost(), Rank: int(w.GetRank()), LocalRank: int(w.GetLocalRank()),
		PID: int(w.GetPid()), ExitCode: int(w.GetExitCode()), Signal: int(w.GetSignal()), TimeUnixNanos: w.GetTimeUnixNanos(),
		ErrorFile: w.GetErrorFile(), Message: w.GetMessage(), Traceback: w.GetTraceback(), LogTail: w.GetLogTail(), Round: w.GetRound(),
		Cause: w.GetCause(), Action: w.GetAction(), Diagnosis: w.GetDiagnosis(), RestoreFailed: w.GetRestoreFailed(),
	}
}
