package kubemaster

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// masterStatus is the part of an ElasticJob's status the master owns: the
// operator writes the phase, conditions, times and its master relaunches.
type masterStatus struct {
	ReplicaStatuses map[elasticv1.ReplicaType]*replicaCounts `json:"replicaStatuses"`
	RestartCount    int32                                    `json:"restartCount"`
	RelaunchCount   int32                                    `json:"relaunchCount"`
	LastFailure     *elasticv1.Failure                       `json:"lastFailure,omitempty"`
}

// replicaCounts is elasticv1.ReplicaStatus without omitempty: the status
// is written with a merge patch, which keeps a field the patch leaves out,
// so a count that drops to zero must be written as 0.
type replicaCounts struct {
	Initial   int32 `json:"initial"`
	Pending   int32 `json:"pending"`
	Active    int32 `json:"active"`
	Succeeded int32 `json:"succeeded"`
	Failed    int32 `json:"failed"`
}

// statusWriter writes the master's view of the job to its ElasticJob's
// status, when it changed, with a merge patch of the master's fields only.
type statusWriter struct {
	client client.Client
	job    client.ObjectKey
	log    *slog.Logger
	last   []byte
}

func (w *statusWriter) write(ctx context.Context, j *roverv1.GetJobResponse) {
	body, err := json.Marshal(map[string]any{"status": statusOf(j)})
	if err != nil || string(body) == string(w.last) {
		return
	}
	obj := &elasticv1.ElasticJob{ObjectMeta: metav1.ObjectMeta{Namespace: w.job.Namespace, Name: w.job.Name}}
	if err := w.client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil {
		w.log.Warn("write the job's status", "job", w.job, "err", err)
		return
	}
	w.last = body
}

// statusOf is the master's fields of the status for j.
func statusOf(j *roverv1.GetJobResponse) masterStatus {
	st := masterStatus{
		RestartCount:  j.GetRestartCount(),
		RelaunchCount: j.GetRelaunches(),
	}
	// Every group's counts: a parameter-server job's ps, chief, worker
	// and evaluator; an allreduce job's worker, written even when it has
	// no node yet.
	st.ReplicaStatuses = map[elasticv1.ReplicaType]*replicaCounts{elasticv1.Worker: {}}
	for _, n := range j.GetManagedNodes() {
		g := elasticv1.ReplicaType(n.GetGroup())
		if g == "" {
			g = elasticv1.Worker
		}
		rs := st.ReplicaStatuses[g]
		if rs == nil {
			rs = &replicaCounts{}
			st.ReplicaStatuses[g] = rs
		}
		rs.Initial++
		switch n.GetState() {
		case "Pending":
			rs.Pending++
		case "Running":
			rs.Active++
		case "Succeeded":
			rs.Succeeded++
		case "Failed":
			rs.Failed++
		}
	}
	if fs := j.GetFailures(); len(fs) > 0 {
		f := fs[len(fs)-1]
		msg := f.GetDiagnosis()
		if msg == "" {
			msg = f.GetMessage()
		}
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		st.LastFailure = &elasticv1.Failure{
			Cause: f.GetCause(), Action: f.GetAction(), Message: msg, Node: f.GetNodeRank(),
			Time: metav1.NewTime(time.Unix(0, f.GetTimeUnixNanos()).UTC()),
		}
	}
	return st
}
