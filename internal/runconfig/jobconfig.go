package runconfig

import (
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/nodecheck"
	"github.com/roverml/rover/internal/rendezvous"
)

// JobConfig is the job configuration p asks for, without checkpoint
// storage (the launcher's --checkpoint-dir sets it).
func (p Policy) JobConfig() jobconfig.Config {
	return jobconfig.Config{
		Rendezvous: rendezvous.Config{
			MinNodes:    p.MinNodes,
			MaxNodes:    p.MaxNodes,
			NodeUnit:    p.NodeUnit,
			MaxRestarts: p.MaxRestarts,
			LastCall:    p.LastCallTimeout,
			JoinTimeout: p.JoinTimeout,
		},
		Nodes: liveness.Config{
			HeartbeatTimeout: p.HeartbeatTimeout,
			DisconnectGrace:  p.DisconnectGrace,
		},
		NodeCheck: p.nodeCheck(),
		Hang:      jobconfig.Hang{Timeout: p.HangTimeout, Policy: p.HangDetection},
	}
}

// nodeCheck is p's node check, nil when it is off.
func (p Policy) nodeCheck() *jobconfig.NodeCheck {
	if !p.NodeCheck.Enabled {
		return nil
	}
	return &jobconfig.NodeCheck{
		Config:   nodecheck.Config{ExcludeStragglers: p.NodeCheck.ExcludeStragglers, MinNodes: p.MinNodes},
		CommPerf: p.NodeCheck.CommPerf,
	}
}
