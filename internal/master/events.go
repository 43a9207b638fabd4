package master

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
)

// The job's event log (internal/eventlog) is derived from what the state
// machines return, never emitted from inside them: deriveEvents reads an
// applied journal event, the membership's status before and after it and
// its effects, and takes its times from the event. The core collects the
// derived events under its lock while the journal is live (a replay
// derives nothing: its events were logged when they were new), and the
// commit's leader appends them to the log after the lock is released and
// before the proposals' callers are answered (flushEvents). So an event
// whose transition was acknowledged is in events.jsonl; a master killed
// between a batch's journal write and its log write (microseconds) loses
// that batch's events from the log but not its transitions, and the
// restarted master numbers on after the last event written: no number
// repeats and none is skipped.

// deriveEvents returns the events of one applied journal event.
func deriveEvents(e *jobstate.Event, before, after rendezvous.Status, fx jobstate.Effects) []eventlog.Event {
	var out []eventlog.Event
	add := func(ev eventlog.Event) {
		ev.Time = e.Time
		out = append(out, ev)
	}
	for _, f := range fx.Failures {
		add(failureLogEvent(f))
	}
	if e.Type == jobstate.EventNodeLost && before.Job == rendezvous.Running { // after the end, agents leave
		ev := eventlog.Event{Kind: eventlog.NodeLost, Severity: eventlog.Warning, Node: e.Node, Round: after.Round,
			Reason: e.Reason, Message: fmt.Sprintf("node %s was lost: %s", e.Node, cmp.Or(e.Reason, "its agent is gone"))}
		if e.Planned {
			ev.Severity, ev.Message = eventlog.Normal, fmt.Sprintf("node %s left: it was scaled away", e.Node)
		}
		add(ev)
	}
	if ch := fx.CheckEnded; ch != nil {
		for _, v := range ch.Verdicts {
			add(verdictEvent(ch.World, v))
		}
	}
	if before.Job == rendezvous.Running && after.Job == rendezvous.Running &&
		after.Round > before.Round && before.WorldRound > 0 {
		add(restartEvent(before, after))
	}
	if !after.Open && after.WorldRound > 0 && after.WorldRound != before.WorldRound {
		add(eventlog.Event{Kind: eventlog.RendezvousCompleted, Severity: eventlog.Normal, Round: after.WorldRound,
			WorldSize: after.WorldSize, Nodes: after.GroupWorldSize,
			Message: fmt.Sprintf("round %d: a world of %d nodes and %d workers formed", after.WorldRound, after.GroupWorldSize, after.WorldSize)})
	}
	if e.Type == jobstate.EventAutoScale && e.Decision != nil {
		add(autoScaleEvent(e.Decision))
	}
	if before.Job == rendezvous.Running && after.Job != rendezvous.Running {
		add(endEvent(after))
	}
	return out
}

// failureLogEvent is a failure record: a failed worker, with its round's
// diagnosis, or a lost node that took the blame.
func failureLogEvent(f jobstate.Failure) eventlog.Event {
	how := fmt.Sprintf("exited %d", f.ExitCode)
	if f.Signal > 0 {
		how = fmt.Sprintf("was killed by signal %d", f.Signal)
	}
	msg := fmt.Sprintf("rank %d on node %s %s", f.Rank, f.NodeID, how)
	if f.ExitCode < 0 && f.Signal == 0 {
		msg = f.Message // a lost node, or a hung world: the master's words
	}
	if f.Cause != "" {
		msg += "; cause " + f.Cause
	}
	if f.Action != "" {
		msg += ", action " + f.Action
	}
	return eventlog.Event{
		Kind: eventlog.WorkerFailed, Severity: eventlog.Warning, Node: f.NodeID, Round: int(f.Round), Message: msg,
		Rank: eventlog.Int(f.Rank), ExitCode: eventlog.Int(f.ExitCode), Cause: f.Cause, Action: f.Action,
		Reason: f.Diagnosis, Excerpt: excerpt(f),
	}
}

// excerpt is the end of what the failure says of itself: its traceback,
// else its message, else its log's tail. The end is where Python puts the
// exception; eventlog bounds it.
func excerpt(f jobstate.Failure) string {
	s := strings.TrimSpace(cmp.Or(f.Traceback, f.Message, f.LogTail))
	if len(s) > eventlog.MaxExcerpt {
		s = "…" + s[len(s)-eventlog.MaxExcerpt+len("…"):]
	}
	return s
}

func restartEvent(before, after rendezvous.Status) eventlog.Event {
	ev := eventlog.Event{Kind: eventlog.Restart, Severity: eventlog.Normal, Round: after.Round}
	if after.Restarts > before.Restarts {
		ev.Severity = eventlog.Warning
		ev.Message = fmt.Sprintf("round %d opens: the workers restart (restart %d of %d)", after.Round, after.Restarts, after.MaxRestarts)
	} else {
		ev.Message = fmt.Sprintf("round %d opens: the world changes, without spending a restart", after.Round)
	}
	return ev
}

func endEvent(after rendezvous.Status) eventlog.Event {
	if after.Job == rendezvous.Succeeded {
		return eventlog.Event{Kind: eventlog.JobSucceeded, Severity: eventlog.Normal, Round: after.Round,
			Reason: after.Reason, Message: "the job succeeded"}
	}
	return eventlog.Event{Kind: eventlog.JobFailed, Severity: eventlog.Warning, Round: after.Round,
		Reason: after.Reason, Message: "the job failed: " + cmp.Or(after.Reason, "no reason given")}
}

func verdictEvent(world int, v nodecheck.Verdict) eventlog.Event {
	ev := eventlog.Event{Kind: eventlog.NodeCheck, Severity: eventlog.Normal, Node: v.Node, Round: world,
		Verdict: string(v.Kind), Reason: v.Reason, Message: fmt.Sprintf("node check: node %s %s", v.Node, v.Kind)}
	if v.Kind != nodecheck.Passed {
		ev.Severity = eventlog.Warning
		ev.Message += ": " + v.Reason
	}
	if v.Excluded {
		ev.Message += "; it leaves the job"
	}
	return ev
}

// progressEvents are the events of a progress tick: the stragglers
// changed, a hang declared.
func progressEvents(tick jobstate.ProgressTick, round int, now time.Time) []eventlog.Event {
	var out []eventlog.Event
	if tick.StragglersChanged {
		ev := eventlog.Event{Time: now, Kind: eventlog.Straggler, Severity: eventlog.Normal, Round: round, Message: "no straggler any more"}
		if len(tick.Stragglers) > 0 {
			ev.Severity, ev.Reason, ev.Nodes = eventlog.Warning, tick.StragglerReason, len(tick.Stragglers)
			ev.Message = fmt.Sprintf("straggler: node %s steps much slower than the others", strings.Join(tick.Stragglers, ", "))
			if len(tick.Stragglers) == 1 {
				ev.Node = tick.Stragglers[0]
			}
		}
		out = append(out, ev)
	}
	if h := tick.Hang; h != nil {
		out = append(out, eventlog.Event{Time: now, Kind: eventlog.Hang, Severity: eventlog.Warning, Round: round, Reason: h.Reason,
			Action: h.Policy.String(), Message: "the job hangs: " + h.Reason})
	}
	return out
}

// startedEvent says the master started: afresh, or resuming the job from
// records of its journal, at its round.
func startedEvent(records int, st rendezvous.Status, now time.Time) eventlog.Event {
	ev := eventlog.Event{Time: now, Kind: eventlog.MasterStarted, Severity: eventlog.Normal, Message: "the master started a new job"}
	if records > 0 {
		ev.Round = st.Round
		ev.Message = fmt.Sprintf("the master restarted and resumed the job at round %d from its journal (%d records)", st.Round, records)
	}
	return ev
}

// commandEvents are the events of the node manager's commands: a node
// created again (a relaunch), a node scaled away.
func commandEvents(cmds []nodemanager.Command, now time.Time) []eventlog.Event {
	var out []eventlog.Event
	for _, c := range cmds {
		if c.Kind == nodemanager.CreateNode && len(c.RightSized) > 0 {
			out = append(out, eventlog.Event{Time: now, Kind: eventlog.NodeRightSized, Severity: eventlog.Normal, Node: c.NodeID,
				Reason: c.Reason, Message: fmt.Sprintf("node %s (node rank %d) asks for what its rank's workers used: %s", c.NodeID, c.Spec.Rank, rightSizedWords(c))})
		}
		switch {
		case c.Kind == nodemanager.CreateNode && c.Spec.Relaunch > 0:
			out = append(out, eventlog.Event{Time: now, Kind: eventlog.NodeRelaunched, Severity: eventlog.Warning, Node: c.NodeID,
				Cause: string(c.Cause), Reason: c.Reason, Message: relaunchMessage(c)})
		case c.Kind == nodemanager.DeleteNode && c.GivenUp:
			// The platform could not place the node: the job runs smaller.
			out = append(out, eventlog.Event{Time: now, Kind: eventlog.ScaleDecision, Severity: eventlog.Warning, Node: c.NodeID,
				Nodes: c.Nodes, Reason: c.Reason, Message: c.Reason})
		}
	}
	return out
}

// rightSizedWords is the right-sizing part of a create's reason.
func rightSizedWords(c nodemanager.Command) string {
	if i := strings.Index(c.Reason, "right-sized: "); i >= 0 {
		return c.Reason[i+len("right-sized: "):]
	}
	return c.Reason
}

// relaunchMessage is a node_relaunched event's sentence, with the
// relaunch's cause where the node manager gave one.
func relaunchMessage(c nodemanager.Command) string {
	if c.Cause == "" {
		return fmt.Sprintf("node %s (node rank %d) is relaunched: %s", c.NodeID, c.Spec.Rank, c.Reason)
	}
	return fmt.Sprintf("node %s (node rank %d) is relaunched (cause %s): %s", c.NodeID, c.Spec.Rank, c.Cause, c.Reason)
}

// newMemoryEvents is the event log of a master without a state dir.
func newMemoryEvents() *eventlog.Log {
	l, _ := eventlog.Open("", eventlog.Options{}) // no directory: nothing can fail
	return l
}

// flushEvents appends the events derived from the transitions applied
// since the last flush. Only the commit's leader calls it, so the log
// holds them in journal order.
func (c *core) flushEvents() {
	c.mu.Lock()
	evs := c.pendingEvents
	c.pendingEvents = nil
	c.mu.Unlock()
	c.logEvents(evs...)
}

// logEvents appends events to the job's event log. A log that cannot be
// written (a full disk) is logged, not fatal: the journal, not the event
// log, is the job's state.
func (c *core) logEvents(evs ...eventlog.Event) {
	if len(evs) == 0 {
		return
	}
	if _, err := c.events.Append(evs...); err != nil {
		c.log.Warn("the job's event log misses events", "events", len(evs), "err", err)
	}
}
