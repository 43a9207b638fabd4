package eventlog

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Kind names what happened. The set is small and fixed: a user (or the
// dashboard) can switch on it.
type Kind string

// The kinds of events.
const (
	// MasterStarted: the master started, afresh or resuming the job from
	// its journal.
	MasterStarted Kind = "master_started"
	// RendezvousCompleted: a round's world formed (Round, WorldSize, Nodes).
	RendezvousCompleted Kind = "rendezvous_completed"
	// WorkerFailed: a worker failed (Node, Rank, ExitCode, Cause, Action,
	// Excerpt), or a node's loss ended its world.
	WorkerFailed Kind = "worker_failed"
	// Restart: a new round opened after a world ended; the workers restart.
	Restart Kind = "restart"
	// NodeLost: a node's agent was lost (Reason).
	NodeLost Kind = "node_lost"
	// NodeRelaunched: the node manager replaced a node (Reason, and Cause:
	// one of nodemanager's relaunch causes, such as "oom").
	NodeRelaunched Kind = "node_relaunched"
	// NodeRightSized: a node was created (a relaunch, or a rank added by
	// scaling) with requests right-sizing changed from the configured ones
	// (Node, Reason: what changed and from what usage).
	NodeRightSized Kind = "node_right_sized"
	// CheckpointCommitted: every rank of a step is durable (Step).
	CheckpointCommitted Kind = "checkpoint_committed"
	// Hang: the job stopped making progress (Reason says where).
	Hang Kind = "hang"
	// Straggler: the set of nodes much slower than the others changed.
	Straggler Kind = "straggler"
	// NodeCheck: a node check gave a node its verdict (Verdict, Reason).
	NodeCheck Kind = "node_check"
	// ScaleDecision: a node group is scaled (Nodes, Reason).
	ScaleDecision Kind = "scale_decision"
	// JobSucceeded and JobFailed: the job ended (Reason).
	JobSucceeded Kind = "job_succeeded"
	JobFailed    Kind = "job_failed"
)

// Severity is Kubernetes's: Normal, or Warning for what went wrong.
type Severity string

// The severities.
const (
	Normal  Severity = "Normal"
	Warning Severity = "Warning"
)

// Event is one thing that happened to a job, as one line of events.jsonl
// (its JSON encoding, which must stay readable by later versions) and one
// message of the API. Strings that come from workers or users are data:
// bounded by Bound when appended, never markup (a reader that renders
// them escapes them).
type Event struct {
	// Seq numbers the job's events from 1, without gaps or repeats, across
	// master restarts.
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     Kind      `json:"kind"`
	Severity Severity  `json:"severity"`
	// Node is the node concerned ("" for the job), Round the rendezvous
	// round.
	Node  string `json:"node,omitempty"`
	Round int    `json:"round,omitempty"`
	// Message is one human-readable sentence.
	Message string `json:"message"`

	// The typed fields, set by the kinds that have them.
	Rank      *int   `json:"rank,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Cause     string `json:"cause,omitempty"`
	Action    string `json:"action,omitempty"`
	Excerpt   string `json:"excerpt,omitempty"` // of the message or traceback
	Reason    string `json:"reason,omitempty"`
	Step      *int64 `json:"step,omitempty"`
	WorldSize int    `json:"world_size,omitempty"`
	Nodes     int    `json:"nodes,omitempty"`
	Verdict   string `json:"verdict,omitempty"`
}

// The bounds of an event's strings, in bytes.
const (
	MaxMessage = 1024
	MaxExcerpt = 4096
	MaxShort   = 256 // node, cause, action, verdict, kind
	MaxReason  = 1024
)

// Bound returns e with every string cut to its bound (at a rune boundary,
// marked with "…") and made valid UTF-8.
func (e Event) Bound() Event {
	e.Kind = Kind(truncate(string(e.Kind), MaxShort))
	e.Severity = Severity(truncate(string(e.Severity), MaxShort))
	e.Node = truncate(e.Node, MaxShort)
	e.Message = truncate(e.Message, MaxMessage)
	e.Cause = truncate(e.Cause, MaxShort)
	e.Action = truncate(e.Action, MaxShort)
	e.Verdict = truncate(e.Verdict, MaxShort)
	e.Excerpt = truncate(e.Excerpt, MaxExcerpt)
	e.Reason = truncate(e.Reason, MaxReason)
	return e
}

const ellipsis = "…"

// truncate cuts s to at most max bytes of valid UTF-8.
func truncate(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// Int returns a pointer to v, for the optional fields.
func Int(v int) *int { return &v }

// Int64 returns a pointer to v, for the optional fields.
func Int64(v int64) *int64 { return &v }
