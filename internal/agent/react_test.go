package agent

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// view builds a NodeView of round; assigned, when not 0, is the round of
// the node's assignment.
func view(round int, open bool, assigned int) *roverv1.NodeView {
	v := &roverv1.NodeView{Round: int64(round), RoundOpen: open, JobState: roverv1.JobState_JOB_STATE_RUNNING}
	if assigned != 0 {
		v.Assignment = &roverv1.Assignment{Round: int64(assigned), GroupWorldSize: 1, LocalWorldSize: 1, WorldSize: 1}
	}
	return v
}

func ended(state roverv1.JobState, round int) *roverv1.NodeView {
	v := view(round, false, round)
	v.JobState = state
	return v
}

var cmpAction = cmp.Options{cmp.AllowUnexported(action{}), cmpopts.EquateErrors()}

func TestDecide(t *testing.T) {
	lost := errors.New("lost the master")
	running := func(round, joined int) agentState {
		return agentState{running: true, groupRound: round, lastStarted: round, joinedRound: joined}
	}
	idle := func(lastStarted, joined int) agentState {
		return agentState{lastStarted: lastStarted, joinedRound: joined}
	}
	tests := []struct {
		name       string
		v          *roverv1.NodeView
		sessionErr error
		s          agentState
		want       action
	}{
		// The session ended for good.
		{"master lost while workers run", view(1, false, 1), lost, running(1, 1), action{kind: actStop, why: "master lost"}},
		{"master lost without workers", view(1, false, 1), lost, idle(1, 1), action{kind: actMasterLost, err: lost}},
		{"master lost before any view", nil, lost, idle(0, 0), action{kind: actMasterLost, err: lost}},
		{"no view yet", nil, nil, idle(0, 0), action{}},

		// The job ended.
		{"job succeeded while workers run", ended(roverv1.JobState_JOB_STATE_SUCCEEDED, 1), nil, running(1, 1),
			action{kind: actStop, why: "job succeeded"}},
		{"job succeeded", ended(roverv1.JobState_JOB_STATE_SUCCEEDED, 1), nil, idle(1, 1), action{kind: actSucceeded}},
		{"job failed while workers run", ended(roverv1.JobState_JOB_STATE_FAILED, 2), nil, running(1, 1),
			action{kind: actStop, why: "job failed"}},
		{"job failed", ended(roverv1.JobState_JOB_STATE_FAILED, 2), nil, idle(1, 1), action{kind: actJobFailed}},
		{"job failed before this node ran", ended(roverv1.JobState_JOB_STATE_FAILED, 1), nil, idle(0, 1), action{kind: actJobFailed}},

		// Workers run.
		{"round opened while running", view(2, true, 0), nil, running(1, 1), action{kind: actStop, why: "round 2 opened"}},
		{"newer round closed without this node while running", view(3, false, 0), nil, running(1, 1),
			action{kind: actStop, why: "round 3 opened"}},
		{"newer round closed with this node while running", view(2, false, 2), nil, running(1, 2),
			action{kind: actStop, why: "round 2 opened"}},
		{"the running round's view again", view(1, false, 1), nil, running(1, 1), action{}},
		{"a restarted master's view of the running round", view(4, false, 4), nil, running(4, 4), action{}},
		{"stale view while running", view(1, false, 1), nil, running(2, 2), action{}},

		// No workers run.
		{"assignment for the current closed round", view(1, false, 1), nil, idle(0, 1), action{kind: actStart, round: 1}},
		{"assignment for a restart round", view(2, false, 2), nil, idle(1, 2), action{kind: actStart, round: 2}},
		{"assignment for a round the node has run", view(1, false, 1), nil, idle(1, 1), action{}},
		{"a restarted master's view after the workers ended", view(3, false, 3), nil, idle(3, 3), action{}},
		{"stale assignment: joined a newer round since", view(1, false, 1), nil, idle(0, 2), action{}},
		{"round opened", view(2, true, 0), nil, idle(1, 1), action{kind: actRejoin, round: 2}},
		{"open round already joined", view(2, true, 0), nil, idle(1, 2), action{}},
		{"stale open round", view(1, true, 0), nil, idle(1, 2), action{}},
		{"closed round without this node", view(2, false, 0), nil, idle(1, 2), action{kind: actRejoin, round: 2}},
		{"closed round with an older assignment", view(3, false, 2), nil, idle(2, 2), action{kind: actRejoin, round: 3}},
		{"stale closed round without this node", view(2, false, 0), nil, idle(1, 3), action{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.v, tt.sessionErr, tt.s)
			if diff := cmp.Diff(tt.want, got, cmpAction); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideAfterStop: a stop is followed by a second decision on the same
// view, without workers, as the loop carries it out.
func TestDecideAfterStop(t *testing.T) {
	lost := errors.New("lost the master")
	tests := []struct {
		name       string
		v          *roverv1.NodeView
		sessionErr error
		s          agentState
		want       []action
	}{
		{"round opened: stop, then rejoin", view(2, true, 0), nil,
			agentState{running: true, groupRound: 1, lastStarted: 1, joinedRound: 1},
			[]action{{kind: actStop, why: "round 2 opened"}, {kind: actRejoin, round: 2}}},
		{"a newer round closed with this node already in it: stop, then start", view(2, false, 2), nil,
			agentState{running: true, groupRound: 1, lastStarted: 1, joinedRound: 2},
			[]action{{kind: actStop, why: "round 2 opened"}, {kind: actStart, round: 2}}},
		{"job succeeded: stop, then exit", ended(roverv1.JobState_JOB_STATE_SUCCEEDED, 1), nil,
			agentState{running: true, groupRound: 1, lastStarted: 1, joinedRound: 1},
			[]action{{kind: actStop, why: "job succeeded"}, {kind: actSucceeded}}},
		{"master lost: stop, then exit", view(1, false, 1), lost,
			agentState{running: true, groupRound: 1, lastStarted: 1, joinedRound: 1},
			[]action{{kind: actStop, why: "master lost"}, {kind: actMasterLost, err: lost}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []action
			s := tt.s
			for range 3 {
				act := decide(tt.v, tt.sessionErr, s)
				got = append(got, act)
				if act.kind != actStop {
					break
				}
				s.running, s.groupRound = false, 0
			}
			if diff := cmp.Diff(tt.want, got, cmpAction); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideNodeCheck(t *testing.T) {
	checking := func(stage int32, groups bool) *roverv1.NodeView {
		v := &roverv1.NodeView{JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 1,
			NodeCheck: &roverv1.NodeCheckView{Round: 1, Stage: stage, Running: true}}
		if groups {
			v.NodeCheck.Groups = []*roverv1.NodeCheckGroup{{Id: 0, NodeIds: []string{"a", "b"}}}
		}
		return v
	}
	excludedView := &roverv1.NodeView{JobState: roverv1.JobState_JOB_STATE_RUNNING, Round: 2, RoundOpen: true,
		NodeCheck: &roverv1.NodeCheckView{Round: 1, Stage: 2, Verdict: &roverv1.NodeCheckVerdict{NodeId: "a", Verdict: "faulty", Excluded: true}}}
	passed := view(1, false, 1)
	passed.NodeCheck = &roverv1.NodeCheckView{Round: 1, Stage: 1, Verdict: &roverv1.NodeCheckVerdict{NodeId: "a", Verdict: "passed"}}
	tests := []struct {
		name string
		v    *roverv1.NodeView
		s    agentState
		want action
	}{
		{"the world is checked: run the task", checking(1, true), agentState{joinedRound: 1}, action{kind: actCheck, round: 1}},
		{"the task runs already", checking(1, true), agentState{joinedRound: 1, checked: "1/1"}, action{}},
		{"stage 2 replaces stage 1", checking(2, true), agentState{joinedRound: 1, checked: "1/1"}, action{kind: actCheck, round: 1}},
		{"sitting stage 2 out: wait, do not rejoin", checking(2, false), agentState{joinedRound: 1, checked: "1/1"}, action{}},
		{"excluded: exit rather than rejoin", excludedView, agentState{joinedRound: 1, checked: "1/2"}, action{kind: actExcluded}},
		{"passed: start the workers", passed, agentState{joinedRound: 1, checked: "1/1"}, action{kind: actStart, round: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.v, nil, tt.s); got.kind != tt.want.kind || got.round != tt.want.round {
				t.Errorf("decide = %v round %d, want %v round %d", got.kind, got.round, tt.want.kind, tt.want.round)
			}
		})
	}
}
