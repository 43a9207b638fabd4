package agent

import (
	"fmt"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent/nodecheckrun"
)

// The agent's reaction to the master is decide, a pure function of the
// newest view and of what the agent runs; the loop only carries out its
// actions. Views are level-triggered: the same view twice, or a view a
// restarted master sends for the round the workers already run, changes
// nothing.

// actionKind is what the loop does next.
type actionKind int

const (
	actNone       actionKind = iota
	actStart                 // start the workers of round
	actStop                  // stop the running workers (why), then decide again
	actRejoin                // join round
	actSucceeded             // the job succeeded: exit 0
	actJobFailed             // the job failed: print the report, exit 1
	actMasterLost            // the session ended for good: exit with err
	actCheck                 // run the node's part of the node check's current stage
	actExcluded              // the node check excluded this node: exit
)

func (k actionKind) String() string {
	return [...]string{"none", "start", "stop", "rejoin", "succeeded", "job failed", "master lost", "check", "excluded"}[k]
}

// action is one step for the loop.
type action struct {
	kind  actionKind
	round int    // actStart, actRejoin
	why   string // actStop
	err   error  // actMasterLost
}

// agentState is what decide needs to know of the agent.
type agentState struct {
	running     bool   // a worker group runs
	groupRound  int    // the round it runs, when running
	lastStarted int    // the newest round workers were started for; 0 for none
	joinedRound int    // the round of the agent's newest join
	checked     string // the node check task last started (nodecheckrun.Key)
}

// decide returns what the agent does about the newest view v, or about the
// session's end (sessionErr, set once the master is lost for good). When it
// returns actStop, the loop stops the workers and asks again.
func decide(v *roverv1.NodeView, sessionErr error, s agentState) action {
	if sessionErr != nil {
		if s.running {
			return action{kind: actStop, why: "master lost"}
		}
		return action{kind: actMasterLost, err: sessionErr}
	}
	if v == nil {
		return action{}
	}
	round := int(v.GetRound())
	switch v.GetJobState() {
	case roverv1.JobState_JOB_STATE_SUCCEEDED:
		if s.running {
			return action{kind: actStop, why: "job succeeded"}
		}
		return action{kind: actSucceeded}
	case roverv1.JobState_JOB_STATE_FAILED:
		if s.running {
			return action{kind: actStop, why: "job failed"}
		}
		return action{kind: actJobFailed}
	}
	if nc := v.GetNodeCheck(); nc != nil && !s.running {
		if vd := nc.GetVerdict(); vd.GetExcluded() {
			return action{kind: actExcluded}
		}
		if nc.GetRunning() && int(nc.GetRound()) == round && !v.GetRoundOpen() {
			// The node's world is being checked; its assignment comes after.
			if len(nc.GetGroups()) > 0 && nodecheckrun.Key(nc) != s.checked {
				return action{kind: actCheck, round: round}
			}
			return action{}
		}
	}
	if s.running {
		if round > s.groupRound {
			return action{kind: actStop, why: fmt.Sprintf("round %d opened", round)}
		}
		return action{} // the workers run this round (or the view is stale)
	}
	asg := v.GetAssignment()
	open := v.GetRoundOpen()
	assigned := asg != nil && int(asg.GetRound()) == round
	switch {
	case !open && assigned && round > s.lastStarted && round >= s.joinedRound:
		// A closed round this node belongs to and has not run yet.
		return action{kind: actStart, round: round}
	case open && s.joinedRound < round:
		// A new round collects nodes.
		return action{kind: actRejoin, round: round}
	case !open && !assigned && s.joinedRound <= round:
		// A closed round without this node: wait in the next.
		return action{kind: actRejoin, round: round}
	}
	return action{}
}
