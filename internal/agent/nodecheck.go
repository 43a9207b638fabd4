package agent

import (
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/agent/nodecheckrun"
)

var _ nodecheckrun.Master = roverv1connect.MasterServiceClient(nil)

// newCheckRunner returns the runner of the node's node-check tasks
// (package nodecheckrun).
func (a *agent) newCheckRunner() *nodecheckrun.Runner {
	return nodecheckrun.New(nodecheckrun.Config{NodeID: a.nodeID, Host: a.host, PythonExec: a.opts.PythonExec,
		Env: a.local.env, Master: a.client, Retry: a.callMaster, Log: a.log, FreePort: freePort})
}

// excluded is the agent's error when the node check excluded its node.
func excluded(v *roverv1.NodeCheckVerdict) error {
	return exitErr(ExitNodeCheck, "the node check excluded this node (%s): %s; check the node's hardware and network, or start the job without --network-check",
		v.GetVerdict(), v.GetReason())
}
