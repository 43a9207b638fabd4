// Package jobplan turns a job spec into how a master runs it on a
// platform: the rendezvous it presets, the checkpoint storage, and the node
// manager's spec, whose nodes run `rover run` with the job's launcher
// flags. `rover submit` (the local platform) and `rover master --platform
// kubernetes` both start from it.
package jobplan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/runconfig"
)

// Plan is how a job spec runs: the master's settings and the node manager's
// spec, whose nodes run `rover run` with the job's launcher flags.
type Plan struct {
	// Name is the job's name: the master's job and the agents' run id,
	// and the prefix of node ids.
	Name string
	// Launch is the agents' command line, parsed as they parse it; nil
	// for a parameter-server job, whose nodes run no agent.
	Launch *runconfig.Config
	// Roles, for a parameter-server job, are its roles in the order of
	// Nodes.Groups: the platform gives every replica an address and
	// TF_CONFIG (package tfconfig). Nil for an allreduce job.
	Roles []Role
	// Nodes is the node manager's spec.
	Nodes nodemanager.Spec
	// Preset is the job's rendezvous, fixed before any agent joins.
	Preset jobconfig.Config
	// Checkpoint is the job's checkpoint storage (URL "" for none).
	Checkpoint jobconfig.CheckpointStorage
	// AutoScale, when the worker group asks for it (autoScale: true,
	// rover submit --auto-scale), is the master's scaling policy's knobs.
	AutoScale *autoscale.Config
	// PSScale, when a parameter-server job's ps group asks for it
	// (autoScale: true), is the PS scaling rule's settings.
	PSScale *autoscale.PSConfig
	// Notes are what the platform ignores or changes of the spec
	// (jobspec.JobSpec.Notes), for warnings.
	Notes []string
}

// ErrBadSpec is wrapped by NewPlan's errors.
var ErrBadSpec = errors.New("the job cannot be submitted")

// refused are the launcher flags a submitted job may not carry: the
// platform gives every node its master, rank, identity and token.
var refused = []struct {
	set       func(*runconfig.Config) bool
	flag, why string
}{
	{func(c *runconfig.Config) bool { return c.RdzvEndpoint != "" }, "--rdzv-endpoint", "rover submit runs the job's master itself"},
	{func(c *runconfig.Config) bool { return c.Standalone }, "--standalone", "rover submit runs the job's master itself; use rover run --standalone for a one-node job without one"},
	{func(c *runconfig.Config) bool { return c.NodeRank >= 0 }, "--node-rank", "the master gives each node its rank"},
	{func(c *runconfig.Config) bool { return c.NodeID != "" }, "--node-id", "the master names each node"},
	{func(c *runconfig.Config) bool { return c.TokenFile != "" }, "--token-file", "rover submit makes the job's token and hands it to its nodes"},
	{func(c *runconfig.Config) bool { return c.TLSCA != "" || c.TLSServerName != "" }, "--tls-ca/--tls-server-name", "the platform connects the nodes to their master"},
}

// Target is where a plan runs.
type Target struct {
	// Capabilities are what the platform honours; the spec is checked
	// against them.
	Capabilities jobspec.Capabilities
	// RoverExe is the rover binary the nodes run ("rover" on the image's
	// PATH for Kubernetes).
	RoverExe string
	// LocalFiles says the nodes run on this machine, in this directory:
	// the training script must exist here.
	LocalFiles bool
}

// Local is the target of rover submit: the local platform, with this
// rover binary.
func Local(roverExe string) Target {
	return Target{Capabilities: jobspec.LocalCapabilities, RoverExe: roverExe, LocalFiles: true}
}

// Kubernetes is the target of rover master --platform kubernetes and of
// the operator's admission: worker pods from the template, running rover
// from the image's PATH.
var Kubernetes = Target{Capabilities: jobspec.KubernetesCapabilities, RoverExe: "rover"}

// Check reads doc, an ElasticJob or its spec in YAML or JSON, and plans it
// for t: what rover submit --dry-run checks, with every problem at once
// (those of reading the spec and of t's capabilities, then the plan's).
// The operator's admission webhook and its late InvalidSpec refusal check
// an ElasticJob with it, and the Kubernetes master plans one with it.
func Check(doc []byte, t Target) (*Plan, error) {
	spec, err := jobspec.ParseFor(doc, t.Capabilities)
	if err != nil {
		return nil, err
	}
	return New(*spec, t)
}

// New checks spec against what the target can do and returns how to run
// it. Every problem is reported at once, each wrapping ErrBadSpec (or
// jobspec.ErrUnsupported for fields the platform cannot honour).
func New(spec jobspec.JobSpec, t Target) (*Plan, error) {
	if spec.IsParameterServer() {
		return newParameterServer(spec, t)
	}
	var errs []error // every problem at once: the platform's, then the plan's
	if err := spec.Check(t.Capabilities); err != nil {
		errs = append(errs, err)
	}
	g := spec.Replicas[jobspec.Worker]
	if g == nil {
		return nil, errors.Join(append(errs, fmt.Errorf("%w: the job has no worker group", ErrBadSpec))...)
	}
	args, err := launchArgs(spec, g)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	cfg, err := jobspec.ParseLaunchArgs(args)
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("%w: the worker command: %w", ErrBadSpec, err))...)
	}
	for _, e := range g.Env {
		// The kernel refuses such an environment when each node starts:
		// refuse it here, naming it, rather than relaunch after relaunch.
		if err := runconfig.CheckEnvVar("the worker's env", e.Name, e.Value); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrBadSpec, err))
		}
	}
	for _, r := range refused {
		if r.set(cfg) {
			errs = append(errs, fmt.Errorf("%w: remove %s: %s", ErrBadSpec, r.flag, r.why))
		}
	}
	dir := t.dir(g)
	if t.LocalFiles && !cfg.Module && !cfg.NoPython {
		// The local platform's nodes run here: a script that is not
		// here would fail every node, relaunch after relaunch.
		script := cfg.Entrypoint
		if !filepath.IsAbs(script) {
			script = filepath.Join(dir, script)
		}
		if _, err := os.Stat(script); err != nil {
			errs = append(errs, fmt.Errorf("%w: the script %s: %w", ErrBadSpec, cfg.Entrypoint, scriptHint(err, g)))
		}
	}
	if t.LocalFiles && g.WorkingDir != "" {
		if fi, err := os.Stat(g.WorkingDir); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%w: the worker container's workingDir %s is not a directory here: give one that exists on this machine, or remove it", ErrBadSpec, g.WorkingDir))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	name := jobName(spec, cfg)
	if cfg.RunID != "none" && cfg.RunID != name {
		return nil, fmt.Errorf("%w: --rdzv-id=%s names the job, but it is %q: give the same name, or leave --rdzv-id out", ErrBadSpec, cfg.RunID, name)
	}
	p := &Plan{Name: name, Launch: cfg, Notes: spec.Notes(t.Capabilities)}
	p.Preset = cfg.Policy().JobConfig()
	if cfg.CheckpointDir != "" {
		dir := cfg.CheckpointDir
		if !strings.Contains(dir, "://") {
			if !filepath.IsAbs(dir) && t.LocalFiles {
				dir = filepath.Join(t.dir(g), dir)
			}
			if dir, err = filepath.Abs(dir); err != nil {
				return nil, fmt.Errorf("%w: --checkpoint-dir: %w", ErrBadSpec, err)
			}
		}
		p.Checkpoint = jobconfig.CheckpointStorage{URL: dir, Keep: cfg.CheckpointKeep, KeepDefault: !cfg.CheckpointKeepSet}
	}
	env := map[string]string{}
	for _, e := range g.Env {
		env[e.Name] = e.Value
	}
	if cfg.RunID == "none" {
		env["PET_RDZV_ID"] = name
	}
	// DLRover's node counts, which job scripts and shell lines read
	// ($NODE_NUM); a relaunched or scaled node keeps them.
	for _, k := range []string{"NODE_NUM", "WORKER_NUM"} {
		if _, set := env[k]; !set {
			env[k] = strconv.Itoa(cfg.MaxNodes)
		}
	}
	p.Nodes = nodemanager.Spec{
		Job: name,
		Groups: []nodemanager.GroupSpec{{
			Name:          string(jobspec.Worker),
			MinNodes:      cfg.MinNodes,
			MaxNodes:      cfg.MaxNodes,
			Nodes:         startNodes(g.Nodes, cfg, g.AutoScale),
			MemoryLimit:   memoryLimit(g),
			MilliCPU:      cpuRequest(g),
			RestartCount:  restartCount(g.RestartCount),
			CriticalRanks: criticalRanks(g.CriticalNodes),
			RestartCounts: criticalBudgets(g.CriticalNodes),
			Argv:          t.argv(g, args),
			Env:           env,
		}},
		PendingTimeout:  spec.PendingTimeout,
		PendingStrategy: pendingStrategy(spec.PendingFailStrategy),
		RightSize:       t.Capabilities.RightSize,
		ResourceLimits:  resourceLimits(spec.ResourceLimits),
	}
	if err := p.Nodes.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	if g.AutoScale {
		knobs := spec.AutoScaleKnobs
		check := knobs
		check.MinNodes, check.MaxNodes, check.NodeUnit = cfg.MinNodes, cfg.MaxNodes, cfg.NodeUnit
		if err := check.Validate(); err != nil {
			return nil, fmt.Errorf("%w: auto-scaling: %w", ErrBadSpec, err)
		}
		if cfg.MinNodes == cfg.MaxNodes {
			p.Notes = append(p.Notes, fmt.Sprintf("auto-scaling has nothing to decide: the job runs exactly %d nodes; give --nnodes MIN:MAX", cfg.MinNodes))
		}
		p.AutoScale = &knobs
		p.Nodes.PendingRetry = knobs.CapacityRetry
	}
	return p, nil
}

// argv is the nodes' command line: `rover run ARGS`, or the container's
// shell line with `rover run` in place of its launcher; locally, started
// in the container's workingDir.
func (t Target) argv(g *jobspec.ReplicaGroup, args []string) []string {
	argv := append([]string{t.RoverExe, "run"}, args...)
	if g.Shell != nil {
		argv = g.Shell.Command(jobspec.ShellQuote(t.RoverExe) + " run")
	}
	if t.LocalFiles && g.WorkingDir != "" {
		// As the container would: the agent and its workers start there.
		argv = append([]string{"/bin/sh", "-c", `cd -- "$0" && exec "$@"`, g.WorkingDir}, argv...)
	}
	return argv
}

// dir is where a local node's launcher looks for a relative script: the
// container's workingDir, then where the shell line's cd commands lead.
func (t Target) dir(g *jobspec.ReplicaGroup) string {
	dir := g.WorkingDir
	if g.Shell != nil && g.Shell.Dir != "" {
		if filepath.IsAbs(g.Shell.Dir) {
			return g.Shell.Dir
		}
		dir = filepath.Join(dir, g.Shell.Dir)
	}
	return dir
}

func scriptHint(err error, g *jobspec.ReplicaGroup) error {
	if g.WorkingDir == "" && (g.Shell == nil || g.Shell.Dir == "") {
		return err
	}
	return fmt.Errorf("%w (a relative script is looked up in the container's workingDir and where the line's cd leads)", err)
}

// launchArgs returns the arguments of the nodes' `rover run`: the
// launcher's own when the command runs one, else flags that run the
// command NprocPerNode times per node.
func launchArgs(spec jobspec.JobSpec, g *jobspec.ReplicaGroup) ([]string, error) {
	if g.LaunchArgs != nil {
		return slices.Clone(g.LaunchArgs), nil
	}
	if g.Launch != nil {
		return nil, fmt.Errorf("%w: the worker group was built from parsed flags without their command line (jobspec.FromRunConfig); use jobspec.FromLaunchArgs", ErrBadSpec)
	}
	if len(g.Command) == 0 {
		return nil, fmt.Errorf("%w: the worker container has no command", ErrBadSpec)
	}
	nnodes := strconv.Itoa(g.MaxNodes)
	if g.MinNodes != g.MaxNodes {
		nnodes = fmt.Sprintf("%d:%d", g.MinNodes, g.MaxNodes)
	}
	args := []string{"--nnodes=" + nnodes, "--nproc-per-node=" + strconv.Itoa(max(g.NprocPerNode, 1)),
		"--max-restarts=" + strconv.Itoa(spec.MaxRestarts), "--node-unit=" + strconv.Itoa(max(spec.NodeUnit, 1)), "--no-python"}
	return append(args, g.Command...), nil
}

// restartCount maps the spec's per-node relaunch budget (0: never) to the
// node manager's (-1: never).
func restartCount(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// startNodes is how many nodes start: the spec's replicas when the
// launcher's --nnodes allows them, else the launcher's most, or its
// least under auto-scaling.
func startNodes(n int, cfg *runconfig.Config, autoScale bool) int {
	switch {
	case n >= cfg.MinNodes && n <= cfg.MaxNodes:
		return n
	case autoScale:
		return cfg.MinNodes // the policy grows the job as its nodes pay
	}
	return cfg.MaxNodes
}

// memoryLimit is the training container's memory limit (else request) in
// bytes, 0 when it has none: what a node killed for memory grows from.
func memoryLimit(g *jobspec.ReplicaGroup) int64 {
	for _, l := range []jobspec.ResourceList{g.Limits, g.Requests} {
		if q, ok := l[jobspec.Memory]; ok && q.Milli > 0 {
			return q.Milli / 1000
		}
	}
	return 0
}

// cpuRequest is each node's CPU in milli-CPU as its template asks for it
// (requests, else limits), for right-sizing; 0 when unset.
func cpuRequest(g *jobspec.ReplicaGroup) int64 {
	for _, l := range []jobspec.ResourceList{g.Requests, g.Limits} {
		if q, ok := l[jobspec.CPU]; ok && q.Milli > 0 {
			return q.Milli
		}
	}
	return 0
}

// resourceLimits is spec.resourceLimits for the node manager: the most
// the whole job may use, bounding right-sized nodes.
func resourceLimits(l jobspec.ResourceList) platform.Resources {
	var r platform.Resources
	if q, ok := l[jobspec.CPU]; ok {
		r.MilliCPU = q.Milli
	}
	if q, ok := l[jobspec.Memory]; ok {
		r.MemoryBytes = q.Milli / 1000
	}
	if q, ok := l[jobspec.GPU]; ok {
		r.GPUs = int(q.Value())
	}
	return r
}

// pendingStrategy maps DLRover's pending_fail_strategy to the node
// manager's.
func pendingStrategy(s int) nodemanager.PendingStrategy {
	switch s {
	case -1, 0:
		return nodemanager.PendingSkip
	case 2:
		return nodemanager.PendingAll
	}
	return nodemanager.PendingNecessary
}

// criticalBudgets are the critical nodes' own relaunch budgets, by rank.
func criticalBudgets(cs []jobspec.CriticalNode) map[int]int {
	var out map[int]int
	for _, c := range cs {
		if c.Relaunches < 0 {
			continue // the group's budget
		}
		if out == nil {
			out = map[int]int{}
		}
		out[c.ID] = restartCount(c.Relaunches)
	}
	return out
}

func criticalRanks(cs []jobspec.CriticalNode) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// jobName is the spec's name, else --rdzv-id, else the script's base name,
// made a DNS label short enough for node ids.
func jobName(spec jobspec.JobSpec, cfg *runconfig.Config) string {
	name := spec.Name
	if name == "" && cfg.RunID != "none" {
		name = cfg.RunID
	}
	if name == "" {
		base := filepath.Base(cfg.Entrypoint)
		name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	name = strings.Trim(notLabel.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "job-" + name
	}
	return strings.TrimRight(name, "-")
}
