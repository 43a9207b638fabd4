package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/jobspec"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/submit"
)

const submitUsage = `Usage:
  rover submit [SUBMIT OPTIONS] JOB.yaml
  rover submit [SUBMIT OPTIONS] [RUN OPTIONS] SCRIPT [ARGS...]

Runs a job on this machine as a cluster would: an embedded master starts
each node's agent ("rover run") as a child process, relaunches nodes that
die, shows the job's progress, and ends with the job's outcome and a summary.
JOB.yaml is a DLRover ElasticJob or its spec (docs/job-spec.md); RUN OPTIONS
are those of "rover run" (see rover run --help), less those the master gives
each node (--rdzv-endpoint, --node-rank, --node-id, --token-file,
--standalone). Ctrl-C stops every node and leaves nothing behind.

Submit options (before anything else):
  --job-dir DIR   where node logs (DIR/nodes/<node id>) and the master's
                  state go (default: $TMPDIR/rover-jobs/<job>-<time>)
  --max-nodes-here N
                  run at most N nodes at once on this machine (default: no
                  limit); the nodes beyond stay pending, and one pending past
                  the pending timeout is given up when the job can run
                  without it (--nnodes MIN)
  --pending-timeout DURATION
                  how long a node may stay pending before it is given up, or
                  the job fails when it cannot run without it: seconds (600)
                  or a duration (10m); the job file's pendingTimeout
                  otherwise (default 15m)
  --quiet         do not show the nodes' output, only progress and summary
  --dry-run       check the job and print its plan, and every problem, without
                  running anything (exit 0: it would run; 2: it would not)
  --auto-scale[=NAME=VALUE,...]
                  let the master decide the node count within --nnodes
                  MIN:MAX from the job's measured throughput (as autoScale:
                  true does in a job file); the optional knobs tune the
                  policy, e.g. --auto-scale=cool-down=30s,min-gain=0.4
                  (docs/autoscaling.md lists them)
  -h, --help      show this help
`

// submitConfig is the command line of `rover submit`.
type submitConfig struct {
	JobDir string
	Quiet  bool
	DryRun bool
	// MaxNodesHere is the local platform's capacity (--max-nodes-here);
	// 0: no limit.
	MaxNodesHere int
	// PendingTimeout (--pending-timeout) overrides the spec's; 0: the
	// spec's.
	PendingTimeout time.Duration
	Spec           jobspec.JobSpec
	// AutoScale is set by --auto-scale, with its knobs.
	AutoScale *autoscale.Config
	fromFile  bool // the job is a job file, not a launcher command line
}

// parseSubmitArgs reads submit's own options, then a job file or a launcher
// command line.
func parseSubmitArgs(args []string) (*submitConfig, error) {
	c := &submitConfig{}
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "-h" || a == "--help":
			return nil, errHelp
		case a == "--quiet":
			c.Quiet = true
		case a == "--dry-run":
			c.DryRun = true
		case a == "--auto-scale" || strings.HasPrefix(a, "--auto-scale="):
			knobs, err := autoscale.ParseKnobs(strings.TrimPrefix(strings.TrimPrefix(a, "--auto-scale"), "="))
			if err != nil {
				return nil, fmt.Errorf("--auto-scale: %w", err)
			}
			c.AutoScale = &knobs
		case a == "--job-dir":
			if len(args) < 2 || args[1] == "" {
				return nil, errors.New("--job-dir needs a directory")
			}
			c.JobDir, args = args[1], args[1:]
		case strings.HasPrefix(a, "--job-dir="):
			if c.JobDir = strings.TrimPrefix(a, "--job-dir="); c.JobDir == "" {
				return nil, errors.New("--job-dir needs a directory")
			}
		case a == "--max-nodes-here" || strings.HasPrefix(a, "--max-nodes-here="),
			a == "--pending-timeout" || strings.HasPrefix(a, "--pending-timeout="):
			name, v, inline := strings.Cut(a, "=")
			if !inline {
				if len(args) < 2 {
					return nil, fmt.Errorf("%s needs a value", name)
				}
				v, args = args[1], args[1:]
			}
			if err := c.setOption(name, v); err != nil {
				return nil, err
			}
		default:
			if err := c.parseJob(args); err != nil {
				return nil, err
			}
			if c.AutoScale != nil && c.Spec.IsParameterServer() {
				// The PS scaling rule: PS migrated to more CPU, and added
				// up to the ps group's maxReplicas.
				c.Spec.Replicas[jobspec.PS].AutoScale = true
				c.Spec.AutoScaleKnobs = *c.AutoScale
			} else if c.AutoScale != nil {
				g := c.Spec.Replicas[jobspec.Worker]
				g.AutoScale = true
				c.Spec.AutoScaleKnobs = *c.AutoScale
				if !c.fromFile {
					g.Nodes = g.MinNodes // the policy grows the job; a job file's replicas start as they say
				}
			}
			if c.PendingTimeout > 0 {
				c.Spec.PendingTimeout = c.PendingTimeout
			}
			return c, nil
		}
		args = args[1:]
	}
	return nil, errors.New("rover submit needs a job: JOB.yaml, or rover run's options and a SCRIPT (see rover submit --help)")
}

func (c *submitConfig) parseJob(args []string) error {
	if ext := strings.ToLower(filepath.Ext(args[0])); !strings.HasPrefix(args[0], "-") && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
		if len(args) > 1 {
			return fmt.Errorf("%s is a job file: it takes no other arguments (found %q); put the script's arguments in the file's command", args[0], args[1:])
		}
		spec, err := jobspec.ParseFileFor(args[0], jobspec.LocalCapabilities)
		if err != nil {
			return err
		}
		c.Spec, c.fromFile = *spec, true
		return nil
	}
	spec, err := jobspec.FromLaunchArgs(args)
	if err != nil {
		return err
	}
	c.Spec = spec
	return nil
}

// setOption reads --max-nodes-here or --pending-timeout.
func (c *submitConfig) setOption(name, v string) error {
	if name == "--max-nodes-here" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--max-nodes-here %q: give the most nodes to run at once on this machine, a whole number of 1 or more (leave it out for no limit)", v)
		}
		c.MaxNodesHere = n
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		d, err = runconfig.ParseSeconds(v)
	}
	if err == nil {
		err = runconfig.CheckDuration("--pending-timeout "+v, d, false)
	}
	if err != nil {
		return fmt.Errorf("--pending-timeout %q: give seconds (600) or a duration (10m), more than 0: %w", v, err)
	}
	c.PendingTimeout = d
	return nil
}

var errHelp = errors.New("help requested")

// runSubmit is `rover submit`: it parses the command line into a
// submitConfig, plans the job (which checks it), and runs it or, with
// --dry-run, prints the plan.
func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseSubmitArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, submitUsage)
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	plan, err := planJob(c, stderr)
	if err != nil {
		return err
	}
	if c.DryRun {
		printPlan(stdout, plan)
		return nil
	}
	return submitJob(ctx, c, plan, stdout, stderr)
}

// planJob plans c's job on this machine, each node an agent run by this
// binary, and warns of what the plan notes.
func planJob(c *submitConfig, stderr io.Writer) (*jobplan.Plan, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the rover binary for the nodes: %w", err)
	}
	plan, err := jobplan.New(c.Spec, jobplan.Local(exe))
	if err != nil {
		return nil, usageError{err}
	}
	if g := plan.Nodes.Groups[0]; c.MaxNodesHere > 0 && plan.Launch != nil && c.MaxNodesHere < g.MinNodes {
		return nil, usageError{fmt.Errorf("--max-nodes-here %d is below the job's minimum of %d nodes (--nnodes %s): it could never run; give %d or more",
			c.MaxNodesHere, g.MinNodes, plan.Launch.Policy().NNodesText(), g.MinNodes)}
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(stderr, "rover submit: warning: %s\n", n)
	}
	return plan, nil
}

// submitJob runs plan's job, its nodes' logs and the master's state in
// --job-dir, until it ends: a failed job is exit code 1.
func submitJob(ctx context.Context, c *submitConfig, plan *jobplan.Plan, stdout, stderr io.Writer) error {
	if c.JobDir == "" {
		c.JobDir = filepath.Join(os.TempDir(), "rover-jobs", plan.Name+"-"+time.Now().Format("20060102-150405"))
	}
	o := submit.Options{Dir: c.JobDir, Progress: stderr, Logger: newLogger(stderr), MaxNodes: c.MaxNodesHere}
	if !c.Quiet {
		o.Console = stdout
	}
	res, err := submit.Run(ctx, plan, o)
	if errors.Is(err, jobplan.ErrBadSpec) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if !res.Succeeded {
		return &agent.ExitError{Code: agent.ExitJobFailed, Err: fmt.Errorf("job %s failed: %s", plan.Name, res.Reason)}
	}
	return nil
}

// printPlan shows what the job would run, for --dry-run.
func printPlan(w io.Writer, p *jobplan.Plan) {
	if p.Launch == nil {
		printPSPlan(w, p)
		return
	}
	procs := "processes"
	if p.Launch.NprocPerNode == 1 {
		procs = "process"
	}
	fmt.Fprintf(w, "job %s: valid; it would run %d worker %s per node\n", p.Name, p.Launch.NprocPerNode, procs)
	for _, g := range p.Nodes.Groups {
		fmt.Fprintf(w, "group %s: nodes %d..%d (starting %d), relaunches per node %d\n", g.Name, g.MinNodes, g.MaxNodes, g.Nodes, max(g.RestartCount, 0))
		fmt.Fprintf(w, "  each node runs: %s\n", strings.Join(quoteAll(g.Argv), " "))
		for _, k := range slices.Sorted(maps.Keys(g.Env)) {
			fmt.Fprintf(w, "  env %s=%s\n", k, g.Env[k])
		}
	}
	fmt.Fprintf(w, "rendezvous: --nnodes=%s, max restarts %d\n", p.Launch.Policy().NNodesText(), p.Launch.MaxRestarts)
	if p.AutoScale != nil {
		fmt.Fprintf(w, "auto-scaling: the master decides the node count within --nnodes=%s\n", p.Launch.Policy().NNodesText())
	}
}

func quoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = jobspec.ShellQuote(a)
	}
	return out
}

// printPSPlan shows a parameter-server job's roles, for --dry-run.
func printPSPlan(w io.Writer, p *jobplan.Plan) {
	fmt.Fprintf(w, "job %s: valid; a parameter-server job: each replica runs its role's program once, with TF_CONFIG\n", p.Name)
	for _, g := range p.Nodes.Groups {
		decides := ""
		if g.DecidesJob {
			decides = "; its success ends the job"
		}
		grows := ""
		if g.MaxNodes > g.Nodes {
			grows = fmt.Sprintf(" (up to %d)", g.MaxNodes)
		}
		fmt.Fprintf(w, "role %s: %d replicas%s, relaunches per replica %d%s\n", g.Name, g.Nodes, grows, max(g.RestartCount, 0), decides)
		fmt.Fprintf(w, "  each replica runs: %s\n", strings.Join(quoteAll(g.Argv), " "))
		for _, k := range slices.Sorted(maps.Keys(g.Env)) {
			fmt.Fprintf(w, "  env %s=%s\n", k, g.Env[k])
		}
	}
	if c := p.PSScale; c != nil {
		fmt.Fprintf(w, "PS scaling: a PS above %s of its CPU request for %v is migrated to more CPU; a PS is added when all are while the workers wait (at most %d PS)\n",
			percent(c.Hot, autoscale.DefaultPSHot), durationOr(c.Window, autoscale.DefaultPSWindow), c.MaxPS)
	}
	fmt.Fprintln(w, "addresses: a fixed port on 127.0.0.1 per replica, chosen when the job starts")
}

// percent writes f, or def when f is 0, as a percentage.
func percent(f, def float64) string {
	if f == 0 {
		f = def
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// durationOr is d, or def when d is 0.
func durationOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
