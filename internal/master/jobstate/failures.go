package jobstate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/rendezvous"
)

// The job's record of its failures: what each failed round's reports say,
// annotated with their diagnosis, and the blame a lost node takes for the
// failures its loss caused.

// MaxFailuresKept bounds the failure records a job keeps for reports.
const MaxFailuresKept = 64

// Failure is one failed worker, as its agent reported it (or as the master
// recorded a lost node or a hung world), annotated with its round's
// diagnosis. It has the fields of the protocol's WorkerFailure, which the
// master converts it to and from.
type Failure struct {
	NodeID        string
	NodeRank      int
	Host          string
	Rank          int
	LocalRank     int
	PID           int
	ExitCode      int
	Signal        int
	TimeUnixNanos int64
	ErrorFile     string
	Message       string
	Traceback     string
	LogTail       string
	Round         int64
	// Cause, Action and Diagnosis are its round's diagnosis.
	Cause     string
	Action    string
	Diagnosis string
	// RestoreFailed: the agent started no workers, for want of the round's
	// agreed checkpoint from a peer.
	RestoreFailed bool
}

func (f Failure) report() diagnosis.Report {
	return diagnosis.Report{
		Host: f.Host, NodeRank: f.NodeRank, Rank: f.Rank, LocalRank: f.LocalRank, Round: f.Round,
		TimeUnixNanos: f.TimeUnixNanos, ExitCode: f.ExitCode, Signal: f.Signal,
		Message: f.Message, Traceback: f.Traceback, LogTail: f.LogTail, RestoreFailed: f.RestoreFailed,
	}
}

// Failures is the job's failure records, the last MaxFailuresKept, and the
// diagnoses of the rounds that failed.
type Failures struct {
	records []Failure
	history diagnosis.History
	// added counts the records kept since this value was made (not
	// journaled: a caller compares it before and after an event).
	added int
}

// NewFailures returns the record of a job without failures.
func NewFailures() *Failures { return &Failures{} }

// RestoreFailures returns the record that Records and History described.
func RestoreFailures(records []Failure, history diagnosis.History) *Failures {
	return &Failures{records: records, history: history}
}

// Record applies the failure reports of round, a closed round: each is
// annotated with the round's diagnosis (internal/diagnosis) and kept. It
// returns the diagnosis (FailFast: the job must fail now rather than
// restart). The diagnosis depends only on the reports, the history of
// earlier rounds' diagnoses and caps, so a replay annotates alike.
func (fs *Failures) Record(round int, reports []Failure, caps diagnosis.Caps) (d diagnosis.Decision) {
	if len(reports) > 0 {
		in := make([]diagnosis.Failure, len(reports))
		for i, f := range reports {
			in[i] = diagnosis.FromReport(f.report())
		}
		d = diagnosis.DecideRound(fs.history, in, caps)
		fs.history = fs.history.Record(int64(round), d)
		for i := range reports {
			reports[i].Cause, reports[i].Action, reports[i].Diagnosis = d.Cause.String(), d.ActionName(), d.Reason
		}
	}
	fs.keep(reports...)
	return d
}

// Loss is a lost node that ended its world's round.
type Loss struct {
	Node   string
	Member rendezvous.Member // the node in the world it ended
	Round  int               // the world's round
	Reason string
	Time   time.Time
	// Relaunched: the master owns the job's nodes and relaunches this one.
	Relaunched bool
}

// Blame records that a lost node ended its world's round: the failures
// the other members reported for that round were the loss's consequences
// (their collectives broke), so they are dropped, and the lost node is
// named instead.
func (fs *Failures) Blame(l Loss) {
	fs.records = slices.DeleteFunc(fs.records, func(f Failure) bool {
		return f.Round == int64(l.Round) && f.NodeID != l.Node
	})
	msg := fmt.Sprintf("node %s (node rank %d) was lost: %s", l.Node, l.Member.NodeRank, cmp.Or(l.Reason, "its agent is gone"))
	f := Failure{
		NodeID: l.Node, NodeRank: l.Member.NodeRank, Host: l.Member.Addr, Rank: l.Member.RankOffset,
		ExitCode: -1, TimeUnixNanos: l.Time.UnixNano(), Round: int64(l.Round), Message: msg,
		Cause: lossCause(l.Reason).String(), Action: "re-form-world",
		Diagnosis: msg + "; its world ends, and the others restart in a new round without spending a restart",
	}
	if l.Relaunched {
		f.Action = diagnosis.RelaunchNode.String()
		f.Diagnosis = msg + "; the node manager relaunches it while its relaunch budget lasts, and the others restart in a new round without spending a restart"
	}
	fs.keep(f)
}

func (fs *Failures) keep(f ...Failure) {
	fs.added += len(f)
	fs.records = append(fs.records, f...)
	if n := len(fs.records); n > MaxFailuresKept {
		fs.records = append([]Failure(nil), fs.records[n-MaxFailuresKept:]...)
	}
}

// Records is the failures kept, oldest first; it is not to be changed.
func (fs *Failures) Records() []Failure { return fs.records }

// Added counts the records kept so far by this value (not restored from
// a snapshot): the difference across an event is what it added.
func (fs *Failures) Added() int { return fs.added }

// Newest returns a copy of the newest n records kept (fewer if fewer are).
func (fs *Failures) Newest(n int) []Failure {
	n = min(n, len(fs.records))
	if n <= 0 {
		return nil
	}
	return append([]Failure(nil), fs.records[len(fs.records)-n:]...)
}

// History is the diagnoses of the rounds that failed.
func (fs *Failures) History() diagnosis.History { return fs.history }

// lossCause classifies why a node was lost, from the words of its reason.
func lossCause(reason string) diagnosis.Cause {
	switch {
	case strings.Contains(reason, "Evicted"), strings.Contains(reason, "Preempted"):
		return diagnosis.Preempted
	case strings.Contains(reason, "OOMKilled"):
		return diagnosis.OutOfMemory
	case strings.Contains(reason, "signal"), strings.Contains(reason, "exited"):
		return diagnosis.Killed
	}
	return diagnosis.Unknown
}
