package jobplan

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/tfconfig"
)

// Role is one role of a parameter-server job and its replica count; the
// platform gives each replica an address (Plan.Roles).
type Role struct {
	Name  string // tfconfig.PS, Chief, Worker or Evaluator: the node group's name
	Nodes int
	// MaxNodes, above Nodes, is the most replicas the role may grow to
	// (an auto-scaled ps group): each has an address from the start.
	MaxNodes int
}

// Most is the most replicas r may have: MaxNodes, or Nodes.
func (r Role) Most() int { return max(r.Nodes, r.MaxNodes) }

// newParameterServer plans a ParameterServerStrategy job: one node group
// per role, in tfconfig.Roles order (the PS start first), whose nodes run
// the role's command directly, with no agent (GroupSpec.Agentless): they
// do not rendezvous. The platform adds each replica's TF_CONFIG and
// DLRover's variables when it creates the node. The chief's success ends
// the job, or, without a chief, all workers' (GroupSpec.DecidesJob); a PS
// or the chief failed past its budget fails it (critical ranks).
func newParameterServer(spec jobspec.JobSpec, t Target) (*Plan, error) {
	var errs []error
	if err := spec.Check(t.Capabilities); err != nil {
		errs = append(errs, err)
	}
	if spec.Replicas[jobspec.Worker] == nil || spec.Replicas[jobspec.PS] == nil {
		errs = append(errs, fmt.Errorf("%w: a parameter-server job needs a ps and a worker group", ErrBadSpec))
	}
	name := jobName(spec, &runconfig.Config{RunID: "none", Entrypoint: "ps-job"})
	p := &Plan{Name: name, Notes: spec.Notes(t.Capabilities)}
	p.Nodes = nodemanager.Spec{
		Job:             name,
		PendingTimeout:  spec.PendingTimeout,
		PendingStrategy: pendingStrategy(spec.PendingFailStrategy),
		MaxRelaunches:   0,
	}
	_, hasChief := spec.Replicas[jobspec.Chief]
	for _, role := range tfconfig.Roles {
		g := spec.Replicas[jobspec.ReplicaType(role)]
		if g == nil {
			continue
		}
		if len(g.Command) == 0 {
			errs = append(errs, fmt.Errorf("%w: the %s container has no command", ErrBadSpec, role))
			continue
		}
		env := map[string]string{}
		for _, e := range g.Env {
			if err := runconfig.CheckEnvVar("the "+role+" container's env", e.Name, e.Value); err != nil {
				errs = append(errs, fmt.Errorf("%w: %w", ErrBadSpec, err))
			}
			env[e.Name] = e.Value
		}
		if t.LocalFiles && g.WorkingDir != "" {
			if fi, err := os.Stat(g.WorkingDir); err != nil || !fi.IsDir() {
				errs = append(errs, fmt.Errorf("%w: the %s container's workingDir %s is not a directory here: give one that exists on this machine, or remove it", ErrBadSpec, role, g.WorkingDir))
			}
		}
		gs := nodemanager.GroupSpec{
			Name:         role,
			MinNodes:     g.Nodes,
			MaxNodes:     g.Nodes,
			Nodes:        g.Nodes,
			MemoryLimit:  memoryLimit(g),
			MilliCPU:     cpuRequest(g),
			RestartCount: restartCount(g.RestartCount),
			Argv:         t.psArgv(g),
			Env:          env,
			Agentless:    true,
			DecidesJob:   role == tfconfig.Chief || role == tfconfig.Worker && !hasChief,
		}
		most := g.Nodes
		if role == tfconfig.PS && g.AutoScale {
			// The PS scaling rule: PS migrated to more CPU, and added up
			// to maxReplicas (each with an address from the start).
			most = max(g.Nodes, g.MaxNodes)
			gs.MaxNodes = most
			cfg := spec.AutoScaleKnobs.PS
			cfg.MaxPS = most
			if q, ok := spec.ResourceLimits[jobspec.CPU]; ok && q.Milli > 0 {
				cfg.MaxMilliCPU = q.Milli / int64(most) // the job's CPU shared by its most PS
			}
			if err := cfg.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%w: auto-scaling the PS: %w", ErrBadSpec, err))
			}
			if gs.MilliCPU == 0 {
				p.Notes = append(p.Notes, "replicaSpecs.ps: autoScale needs the PS's CPU request (resources.requests.cpu) to judge them hot; without it they are never migrated or added")
			}
			p.PSScale = &cfg
		}
		switch role {
		case tfconfig.PS, tfconfig.Chief:
			// Without a PS nobody trains; without the chief nobody
			// decides: their loss past the budget fails the job.
			for r := range most {
				gs.CriticalRanks = append(gs.CriticalRanks, r)
			}
		case tfconfig.Worker:
			gs.MinNodes = 1 // the others carry on without a worker that used up its budget
		case tfconfig.Evaluator:
			gs.MinNodes = 0
		}
		p.Nodes.Groups = append(p.Nodes.Groups, gs)
		p.Roles = append(p.Roles, Role{Name: role, Nodes: g.Nodes, MaxNodes: most})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := p.Nodes.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	// The master's rendezvous is configured, but nobody joins it: it must
	// not time out waiting (JoinTimeout 0), and ends with the node
	// manager's verdict.
	nodes := 0
	for _, r := range p.Roles {
		nodes += r.Most()
	}
	p.Preset = jobconfig.Config{Rendezvous: rendezvous.Config{MinNodes: 1, MaxNodes: nodes, NodeUnit: 1, LastCall: defaultLastCall}}
	return p, nil
}

// defaultLastCall is the rendezvous last call a parameter-server job's
// unused rendezvous is configured with.
const defaultLastCall = 30 * time.Second

// psArgv is a role's command as its nodes run it: as written, started in
// the container's workingDir locally.
func (t Target) psArgv(g *jobspec.ReplicaGroup) []string {
	argv := slices.Clone(g.Command)
	if t.LocalFiles && g.WorkingDir != "" {
		argv = append([]string{"/bin/sh", "-c", `cd -- "$0" && exec "$@"`, g.WorkingDir}, argv...)
	}
	return argv
}
