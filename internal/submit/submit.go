// Package submit runs a job on this machine the way a cluster would: an
// embedded master that owns the job's nodes through the local platform
// (package platform/local), which starts each node's agent (`rover run`)
// as a child process. It is `rover submit`: it shows the job's progress,
// relaunches nodes that die (the master's node manager decides), and ends
// with the job's outcome and a summary. Cancelling its context (Ctrl-C)
// stops every node and leaves no process and no shared memory behind; so
// does its death by SIGKILL, through the local platform: each agent gets
// SIGTERM when this process dies and stops as on Ctrl-C (see
// docs/user-guide.md, "What a job leaves behind").
package submit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/jobview"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/local"
)

// Options configure a submitted job.
type Options struct {
	// Dir is the job's directory: node logs in Dir/nodes/<node id>, the
	// master's state in Dir/master. It is created if missing.
	Dir string
	// Console, when set, shows every node's output, each line prefixed
	// with its node id.
	Console io.Writer
	// Progress receives progress lines while the job runs and the summary
	// at the end.
	Progress io.Writer
	// Logger is the master's log.
	Logger *slog.Logger
	// Env is the nodes' base environment (nil: this process's).
	Env []string
	// StopGrace is how long a node's agent has to stop after SIGTERM
	// before SIGKILL (default 30s).
	StopGrace time.Duration
	// ProgressEvery is how often the job's status is checked for the
	// progress line (default 1s).
	ProgressEvery time.Duration
	// MaxNodes, when above 0, is the most nodes run at once on this
	// machine (rover submit --max-nodes-here): the local platform's
	// capacity; the nodes beyond it stay pending.
	MaxNodes int
}

// Result is how a submitted job ended.
type Result struct {
	Succeeded bool
	Reason    string
	// Status is the master's last view of the job.
	Status *roverv1.GetJobResponse
	Took   time.Duration
}

// Run runs the job of plan until it ends or ctx does; then it stops every
// node, removes what their agents left in shared memory, and writes the
// summary. The error is ctx's cause when the job was cancelled, or a
// failure to run the job at all; a job that failed is a Result, not an
// error.
func Run(ctx context.Context, plan *jobplan.Plan, o Options) (Result, error) {
	start := time.Now()
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if ents, err := os.ReadDir(o.Dir); err == nil && len(ents) > 0 {
		return Result{}, fmt.Errorf("%w: the job directory %s is not empty (an earlier job's logs and state?): give another --job-dir, or remove it", jobplan.ErrBadSpec, o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("create the job directory: %w", err)
	}
	token := master.NewToken()
	// A node's agent killed with SIGKILL cannot remove its shared memory:
	// it goes as soon as the agent is reaped, not when the job ends.
	removeArenas := func(node string) {
		if n := ckptsaver.RemoveJobArenas(plan.Name, token); n > 0 {
			o.Logger.Info("removed shared memory that killed agents left", "directories", n, "after", node)
		}
	}
	plat, err := local.New(local.Options{Dir: filepath.Join(o.Dir, "nodes"), Console: o.Console, Env: o.Env, Grace: o.StopGrace, AfterExit: removeArenas, MaxNodes: o.MaxNodes})
	if err != nil {
		return Result{}, err
	}
	defer plat.Close()
	nodes := &withMaster{Platform: plat}
	var created platform.Platform = nodes
	if plan.Roles != nil {
		cluster, err := assignAddrs(plan.Roles)
		if err != nil {
			return Result{}, err
		}
		if created, err = newPSNodes(ctx, nodes, plan.Name, o.Dir, cluster, plan.Roles[0].Nodes); err != nil {
			return Result{}, err
		}
		for _, r := range plan.Roles {
			for i := range r.Most() {
				addr, _ := cluster.Addr(r.Name, i)
				more := ""
				if i >= r.Nodes {
					more = " (when the PS scaling rule adds it)"
				}
				fmt.Fprintf(o.Progress, "rover submit: %s %d at %s%s\n", r.Name, i, addr, more)
			}
		}
	}
	preset := plan.Preset
	m, err := master.New(ctx, master.Config{
		Listen: "127.0.0.1:0", Job: plan.Name, Token: token, Preset: &preset, Checkpoint: plan.Checkpoint,
		StateDir: filepath.Join(o.Dir, "master"), Logger: o.Logger,
		Nodes:     &master.NodesConfig{Platform: created, Name: "local", Spec: plan.Nodes, CPU: plat},
		AutoScale: plan.AutoScale, PSScale: plan.PSScale,
	})
	if err != nil {
		return Result{}, fmt.Errorf("start the job's master: %w", err)
	}
	nodes.env = map[string]string{"ROVER_MASTER_ADDR": m.Addr(), "ROVER_TOKEN": token, "PET_LOCAL_ADDR": "127.0.0.1"}
	nodes.tee = o.Console != nil && !slices.ContainsFunc(o.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "PET_TEE=") || strings.HasPrefix(kv, "PET_REDIRECTS=")
	})
	tokenFile := filepath.Join(o.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return Result{}, fmt.Errorf("write the job's token: %w", err)
	}
	fmt.Fprintf(o.Progress, "rover submit: job %s, master at %s, %s, logs in %s\n",
		plan.Name, m.Addr(), nodeCount(plan), filepath.Join(o.Dir, "nodes"))
	fmt.Fprintf(o.Progress, "rover submit: rover status --master %s --token-file %s\n", m.Addr(), tokenFile)

	mctx, stopMaster := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMaster()
	served := make(chan error, 1)
	go func() { served <- m.Run(mctx) }()

	outcome, waitErr := watch(ctx, m, o)
	if waitErr != nil && ctx.Err() == nil {
		// The master stopped on its own (its state store failed): the job
		// cannot go on; stopping the master deletes its nodes.
		fmt.Fprintf(o.Progress, "rover submit: job %s failed: %v\n", plan.Name, waitErr)
		outcome = master.Outcome{Reason: waitErr.Error()}
	} else if waitErr != nil {
		fmt.Fprintf(o.Progress, "rover submit: stopping job %s: %v\n", plan.Name, context.Cause(ctx))
		stop(m, "stopped by its user: "+context.Cause(ctx).Error(), o.stopGrace()+10*time.Second)
		outcome = master.Outcome{Reason: m.Status().GetReason()}
	}
	stopMaster() // deletes every node that is left, then stops serving
	serveErr := <-served
	plat.Close()
	removeArenas("the job's end")
	res := Result{Succeeded: outcome.Succeeded, Reason: outcome.Reason, Status: m.Status(), Took: time.Since(start)}
	if waitErr == nil && serveErr != nil {
		waitErr = fmt.Errorf("the job's master: %w", serveErr)
	}
	if err := jobview.Summary(o.Progress, res.Status, res.Took); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Progress, "logs: %s\n", filepath.Join(o.Dir, "nodes"))
	return res, waitErr
}

// stop ends the job for reason and waits, at most wait, for its nodes to
// stop their workers and exit on their own (as for any failure), then for
// the master to delete them. Past wait, stopping the master deletes them.
func stop(m *master.Master, reason string, wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := m.Cancel(ctx, reason); err != nil {
		return
	}
	select {
	case <-m.NodesGone():
	case <-ctx.Done():
	}
}

func (o Options) stopGrace() time.Duration {
	if o.StopGrace > 0 {
		return o.StopGrace
	}
	return 30 * time.Second
}

// watch shows the job's progress until it ends and its nodes are gone, or
// ctx ends (then it returns ctx's error).
func watch(ctx context.Context, m *master.Master, o Options) (master.Outcome, error) {
	finished := make(chan master.Outcome, 1)
	broken := make(chan error, 1) // the master stopped before the job ended
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		out, err := m.WaitFinished(wctx)
		switch {
		case err == nil:
			finished <- out
		case wctx.Err() == nil:
			broken <- err
		}
	}()
	tick := time.NewTicker(o.ProgressEvery)
	defer tick.Stop()
	last := ""
	show := func() {
		if line := jobview.Progress(m.Status()); line != last {
			fmt.Fprintln(o.Progress, line)
			last = line
		}
	}
	var outcome master.Outcome
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return outcome, ctx.Err()
		case outcome = <-finished:
			done = true
		case err := <-broken:
			show()
			return outcome, fmt.Errorf("the job's master: %w", err)
		case <-tick.C:
			show()
		}
	}
	show()
	select { // the nodes exit on their own once they learn the outcome
	case <-m.NodesGone():
		return outcome, nil
	case <-ctx.Done():
		return outcome, ctx.Err()
	}
}

func nodeCount(p *jobplan.Plan) string {
	if p.Launch == nil {
		var parts []string
		for _, r := range p.Roles {
			parts = append(parts, fmt.Sprintf("%d %s", r.Nodes, r.Name))
		}
		return "parameter-server roles " + strings.Join(parts, ", ")
	}
	g := p.Nodes.Groups[0]
	if g.MinNodes == g.MaxNodes {
		return fmt.Sprintf("%d nodes of %d processes", g.MaxNodes, p.Launch.NprocPerNode)
	}
	return fmt.Sprintf("%d to %d nodes of %d processes", g.MinNodes, g.MaxNodes, p.Launch.NprocPerNode)
}

// withMaster gives every node the master's address and the job's token,
// which exist only once the master listens, and which stay out of the
// master's journal (the node manager's spec is journaled).
type withMaster struct {
	platform.Platform
	env map[string]string
	// tee makes the agents tee their workers' output (PET_TEE=3) unless a
	// node's command line chooses (--tee, --redirects): the nodes share one
	// console, where torchrun's "[default0]:" prefixes tell the ranks apart.
	tee bool
}

func (w *withMaster) Create(ctx context.Context, spec platform.NodeSpec) error {
	if spec.Env == nil {
		spec.Env = map[string]string{}
	} else {
		spec.Env = maps.Clone(spec.Env)
	}
	maps.Copy(spec.Env, w.env)
	if w.tee && !choosesOutput(spec.Argv) {
		if _, ok := spec.Env["PET_TEE"]; !ok {
			spec.Env["PET_TEE"] = "3"
		}
	}
	return w.Platform.Create(ctx, spec)
}

// choosesOutput reports whether an agent's command line gives --tee or
// --redirects (also -t, -r, -t3, -r=3, --tee=3).
func choosesOutput(argv []string) bool {
	return slices.ContainsFunc(argv, func(a string) bool {
		if !strings.HasPrefix(a, "-") {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "--") {
			return name == "tee" || name == "redirects"
		}
		return strings.HasPrefix(name, "t") || strings.HasPrefix(name, "r")
	})
}
