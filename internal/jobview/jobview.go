// Package jobview renders a job's status, as the master reports it in
// roverv1.GetJobResponse, for people: the tables of `rover status`, the
// one-line progress of a terminal that follows a running job, and the final
// report of `rover submit`. It only formats what it is given; asking the
// master, deciding when to print and exit codes belong to the caller.
package jobview

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Status writes what `rover status` prints: the job line, the round line,
// the node table, the managed-node table when the master runs the nodes
// (platform != ""), the node check when the job runs one, the progress, the
// goodput with the latest restarts' phases, and the failure history.
func Status(w io.Writer, j *roverv1.GetJobResponse) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "job %s: %s", j.GetRunId(), state(j))
	if j.GetReason() != "" {
		fmt.Fprintf(&b, " (%s)", oneLine(j.GetReason()))
	}
	// The round line says what the round does even once the job has ended,
	// as it always has: the job line says that it ended.
	roundPhase := "training"
	if j.GetRoundOpen() {
		roundPhase = "collecting nodes"
	}
	fmt.Fprintf(&b, "\nround %d (%s), world size %d, restarts %d of %d", j.GetRound(), roundPhase, j.GetWorldSize(),
		j.GetRestartCount(), j.GetMaxRestarts())
	if j.GetPlatform() != "" {
		fmt.Fprintf(&b, ", relaunches %d%s", j.GetRelaunches(), relaunchCauses(j))
	}
	if j.GetCheckpointStep() >= 0 {
		fmt.Fprintf(&b, ", checkpoint step %d", j.GetCheckpointStep())
	}
	b.WriteString("\n\n")
	writeNodes(&b, j.GetNodes())
	if j.GetPlatform() != "" {
		fmt.Fprintf(&b, "\nnodes on %s:\n", j.GetPlatform())
		writeManaged(&b, j.GetManagedNodes())
		writeRightSize(&b, j.GetManagedNodes())
	}
	writeNodeCheck(&b, j.GetNodeCheck())
	writeProgress(&b, j.GetProgress())
	writeAutoScale(&b, j.GetAutoScale())
	writeGoodput(&b, j.GetGoodput())
	writeFailures(&b, j.GetFailures())
	return flush(w, &b, "status")
}

// Progress is one line for a terminal showing a running job, e.g.
//
//	job train: round 3 training, 2 of 2 nodes, restarts 1 of 3, relaunches 1, checkpoint step 40
//
// The phase is "collecting nodes" while the round is open, and the job's
// state once it has ended. Nodes count the Running managed nodes of all of
// them when the master runs the nodes, else the nodes not lost of those the
// master knows. The checkpoint part is left out when there is none.
func Progress(j *roverv1.GetJobResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: round %d %s, ", j.GetRunId(), j.GetRound(), phase(j))
	up, all := 0, 0
	if j.GetPlatform() != "" || len(j.GetManagedNodes()) > 0 {
		for _, n := range j.GetManagedNodes() {
			all++
			if n.GetState() == "Running" {
				up++
			}
		}
	} else {
		for _, n := range j.GetNodes() {
			all++
			if !n.GetLost() {
				up++
			}
		}
	}
	fmt.Fprintf(&b, "%d of %d nodes, restarts %d of %d, relaunches %d", up, all, j.GetRestartCount(),
		j.GetMaxRestarts(), j.GetRelaunches())
	if j.GetCheckpointStep() >= 0 {
		fmt.Fprintf(&b, ", checkpoint step %d", j.GetCheckpointStep())
	}
	b.WriteString(progressNote(j.GetProgress()))
	return b.String()
}

// Summary writes the final report of `rover submit` when the job has ended:
// the outcome (succeeded or failed, and the reason) and how long it took,
// the rounds, restarts used of the budget, node relaunches, the last
// committed checkpoint step, the managed node table, the goodput with the
// latest restarts' phases, and the failure history with each round's cause,
// action and why. For a failed job it ends with the
// root failure's traceback (that of the last failure that has one),
// indented.
func Summary(w io.Writer, j *roverv1.GetJobResponse, took time.Duration) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "job %s %s after %s", j.GetRunId(), state(j), duration(took))
	if j.GetReason() != "" {
		fmt.Fprintf(&b, ": %s", oneLine(j.GetReason()))
	}
	ckpt := "none"
	if j.GetCheckpointStep() >= 0 {
		ckpt = fmt.Sprintf("step %d", j.GetCheckpointStep())
	}
	fmt.Fprintf(&b, "\nrounds %d, restarts %d of %d, node relaunches %d%s, last checkpoint %s%s\n",
		j.GetRound(), j.GetRestartCount(), j.GetMaxRestarts(), j.GetRelaunches(), relaunchCauses(j), ckpt, progressNote(j.GetProgress()))
	if r := j.GetProgress().GetStragglerReason(); r != "" {
		fmt.Fprintf(&b, "straggler: %s\n", oneLine(r))
	}
	if len(j.GetManagedNodes()) > 0 {
		if j.GetPlatform() != "" {
			fmt.Fprintf(&b, "\nnodes on %s:\n", j.GetPlatform())
		} else {
			b.WriteString("\nnodes:\n")
		}
		writeManaged(&b, j.GetManagedNodes())
	}
	writeNodeCheck(&b, j.GetNodeCheck())
	writeAutoScale(&b, j.GetAutoScale())
	writeGoodput(&b, j.GetGoodput())
	writeFailures(&b, j.GetFailures())
	if j.GetJobState() == roverv1.JobState_JOB_STATE_FAILED {
		if f := rootFailure(j.GetFailures()); f != nil {
			fmt.Fprintf(&b, "\nroot failure: round %d, node %s, rank %d:\n", f.GetRound(), f.GetNodeId(), f.GetRank())
			b.WriteString(indent(f.GetTraceback(), "    "))
		}
	}
	return flush(w, &b, "summary")
}

// state is the job's state in words: running, succeeded, failed.
func state(j *roverv1.GetJobResponse) string {
	return strings.ToLower(strings.TrimPrefix(j.GetJobState().String(), "JOB_STATE_"))
}

// phase is what Progress says the job's round is doing: collecting nodes or
// training while the job runs, else the job's state.
func phase(j *roverv1.GetJobResponse) string {
	switch {
	case j.GetJobState() != roverv1.JobState_JOB_STATE_RUNNING:
		return state(j)
	case j.GetRoundOpen():
		return "collecting nodes"
	default:
		return "training"
	}
}

// rootFailure is the last failure with a traceback, or nil.
func rootFailure(fs []*roverv1.WorkerFailure) *roverv1.WorkerFailure {
	for i := len(fs) - 1; i >= 0; i-- {
		if strings.TrimSpace(fs[i].GetTraceback()) != "" {
			return fs[i]
		}
	}
	return nil
}

// indent prefixes each line of s with pre and ends it with a newline.
func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(pre + l + "\n")
	}
	return b.String()
}

// duration rounds d for people: to the second from a second up, else to
// the millisecond.
func duration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// flush writes what was rendered to w in one call.
func flush(w io.Writer, b *bytes.Buffer, what string) error {
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write job %s: %w", what, err)
	}
	return nil
}

// relaunchCauses is " (node_lost 1, oom 2)": the job's relaunches by
// cause, by name; "" for none.
func relaunchCauses(j *roverv1.GetJobResponse) string {
	causes := j.GetRelaunchCauses()
	if len(causes) == 0 {
		return ""
	}
	parts := make([]string, 0, len(causes))
	for _, c := range slices.Sorted(maps.Keys(causes)) {
		parts = append(parts, fmt.Sprintf("%s %d", c, causes[c]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
