// Package nodecheckrun is the agent's side of the pre-flight node check
// (docs/design/node-check.md): it runs the node's part of each stage the
// master's view asks for, one task at a time, and reports each group's
// result. It does not judge nodes or form groups (package nodecheck, in the
// master, does) and does not decide when to run (the agent's decide does).
//
// While the master checks the node's world, the node's view carries its
// groups for the current stage instead of its assignment; the runner runs
// them one after the other and reports each result. A group's leader (its
// first node) publishes the addresses of its link-probe listener and of
// the torch store in the job's key-value store; the others read them. Each
// group runs the Go link probe, then the check program (python/rover/
// nodecheck.py) with the job's Python, torch and backend. A newer stage, or
// the check's end, cancels a run that is still going.
package nodecheckrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/linkprobe"
)

// checkBlock is the link probe's block each way; commPerfBlock with
// --comm-perf-test.
const (
	checkBlock    = 1 << 20
	commPerfBlock = 16 << 20
)

// Key names a check task: the world's round and the stage.
func Key(nc *roverv1.NodeCheckView) string {
	return fmt.Sprintf("%d/%d", nc.GetRound(), nc.GetStage())
}

// Master is the part of the master's API the runner calls:
// roverv1connect.MasterServiceClient has it.
type Master interface {
	SetKey(context.Context, *connect.Request[roverv1.SetKeyRequest]) (*connect.Response[roverv1.SetKeyResponse], error)
	GetKey(context.Context, *connect.Request[roverv1.GetKeyRequest]) (*connect.Response[roverv1.GetKeyResponse], error)
	ReportNodeCheck(context.Context, *connect.Request[roverv1.ReportNodeCheckRequest]) (*connect.Response[roverv1.ReportNodeCheckResponse], error)
}

// Retry calls f until it succeeds, fails for good, or the master has been
// unreachable for as long as the agent waits for it: the agent's policy.
type Retry func(ctx context.Context, f func(context.Context) error) error

// Config is what a Runner needs of its agent.
type Config struct {
	NodeID string
	// Host is this node's address for the group's peers.
	Host string
	// PythonExec runs the check program.
	PythonExec string
	// Env adds to a base environment what the check program needs to
	// import rover (the workers' own additions).
	Env    func(base []string) []string
	Master Master
	Retry  Retry
	Log    *slog.Logger
	// FreePort picks a free TCP port on this node, for the check group's
	// store: the agent's, which picks its workers' master port the same way.
	FreePort func() (int, error)
}

// Runner runs the node's check tasks, one at a time.
type Runner struct {
	cfg    Config
	key    string // of the task running or last started
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a runner with no task started.
func New(cfg Config) *Runner { return &Runner{cfg: cfg} }

// Key is the key of the task running or last started ("" before the
// first).
func (c *Runner) Key() string { return c.key }

// Start cancels a running task and starts the view's.
func (c *Runner) Start(ctx context.Context, v *roverv1.NodeView) {
	c.Stop()
	nc := v.GetNodeCheck()
	c.key = Key(nc)
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.runCheck(ctx, nc)
	}()
}

// Sync cancels a running task that the view no longer asks for.
func (c *Runner) Sync(v *roverv1.NodeView) {
	nc := v.GetNodeCheck()
	if c.cancel != nil && (!nc.GetRunning() || Key(nc) != c.key) {
		c.Stop()
	}
}

// Stop cancels the running task, if any, and waits for it.
func (c *Runner) Stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cancel, c.done = nil, nil
}

// runCheck runs the node's groups of one stage and reports each.
func (c *Runner) runCheck(ctx context.Context, nc *roverv1.NodeCheckView) {
	round, stage := nc.GetRound(), nc.GetStage()
	timeout := time.Duration(nc.GetGroupTimeoutMillis()) * time.Millisecond
	for _, g := range nc.GetGroups() {
		c.cfg.Log.Info("node check: running", "round", round, "stage", stage, "group", g.GetId(), "nodes", g.GetNodeIds())
		res := c.checkGroup(ctx, round, stage, g, timeout, nc.GetCommPerf())
		if ctx.Err() != nil {
			return // the stage ended without this group's report
		}
		c.cfg.Log.Info("node check: done", "round", round, "stage", stage, "group", g.GetId(), "ok", res.GetOk(),
			"elapsed", time.Duration(res.GetElapsedMicros())*time.Microsecond, "bandwidth_mb_s", int(res.GetBandwidthBytesPerSec()/1e6), "error", res.GetError())
		c.report(ctx, func(ctx context.Context) error {
			_, err := c.cfg.Master.ReportNodeCheck(ctx, connect.NewRequest(&roverv1.ReportNodeCheckRequest{
				NodeId: c.cfg.NodeID, Round: round, Stage: stage, Group: g.GetId(), Result: res}))
			if connect.CodeOf(err) == connect.CodeFailedPrecondition {
				return nil // the stage is over
			}
			return err
		})
	}
}

// checkGroup runs one group's check: the link probe, then the program.
func (c *Runner) checkGroup(ctx context.Context, round int64, stage int32, g *roverv1.NodeCheckGroup, timeout time.Duration, commPerf bool) *roverv1.NodeCheckResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nodes := g.GetNodeIds()
	rank := slices.Index(nodes, c.cfg.NodeID)
	prefix := fmt.Sprintf("nodecheck/%d/%d/%d/", round, stage, g.GetId())
	res := &roverv1.NodeCheckResult{}
	fail := func(local bool, format string, args ...any) *roverv1.NodeCheckResult {
		res.Ok, res.Local, res.Error = false, local, fmt.Sprintf(format, args...)
		return res
	}
	storeAddr, storePort := c.cfg.Host, 0
	block := checkBlock
	if commPerf {
		block = commPerfBlock
	}
	var link linkprobe.Stats
	if len(nodes) > 1 {
		var err error
		if rank == 0 {
			link, storePort, err = c.leadCheckGroup(ctx, prefix, len(nodes)-1)
		} else {
			link, storeAddr, storePort, err = c.joinCheckGroup(ctx, prefix, block)
		}
		if err != nil {
			return fail(false, "%v", err)
		}
		res.LinkMicros, res.LatencyMicros, res.BandwidthBytesPerSec = link.Elapsed.Microseconds(), link.Latency.Microseconds(), link.Bandwidth
	}
	out, err := c.checkProgram(ctx, []string{
		"ROVER_NODECHECK_NODE_ID=" + c.cfg.NodeID,
		"ROVER_NODECHECK_RANK=" + strconv.Itoa(rank),
		"ROVER_NODECHECK_WORLD_SIZE=" + strconv.Itoa(len(nodes)),
		"ROVER_NODECHECK_STORE_ADDR=" + storeAddr,
		"ROVER_NODECHECK_STORE_PORT=" + strconv.Itoa(storePort),
		"ROVER_NODECHECK_TIMEOUT=" + strconv.Itoa(max(1, int(timeout.Seconds()))),
		"ROVER_NODECHECK_COMM_PERF=" + map[bool]string{true: "1", false: "0"}[commPerf],
	})
	if err != nil {
		return fail(true, "%v", err)
	}
	if !out.OK {
		// A failure before the collective is the node's own.
		return fail(out.Stage == "import" || out.Stage == "compute", "check program failed in %s: %s", out.Stage, out.Error)
	}
	compute := time.Duration(out.Compute * float64(time.Second))
	collective := time.Duration(out.Collective * float64(time.Second))
	res.Ok = true
	res.ComputeMicros, res.CollectiveMicros = compute.Microseconds(), collective.Microseconds()
	res.ElapsedMicros = (compute + collective + link.Elapsed).Microseconds()
	return res
}

// leadCheckGroup publishes the group's addresses and answers its peers'
// link probes; it returns the slowest probe's stats and the store's port.
func (c *Runner) leadCheckGroup(ctx context.Context, prefix string, peers int) (linkprobe.Stats, int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return linkprobe.Stats{}, 0, fmt.Errorf("listen for the link probe: %w", err)
	}
	storePort, err := c.cfg.FreePort()
	if err != nil {
		ln.Close()
		return linkprobe.Stats{}, 0, err
	}
	linkAddr := net.JoinHostPort(c.cfg.Host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	for k, val := range map[string]string{"link": linkAddr, "store": net.JoinHostPort(c.cfg.Host, strconv.Itoa(storePort))} {
		err := c.cfg.Retry(ctx, func(ctx context.Context) error {
			_, err := c.cfg.Master.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{Key: prefix + k, Value: []byte(val)}))
			return err
		})
		if err != nil {
			ln.Close()
			return linkprobe.Stats{}, 0, fmt.Errorf("publish %s%s: %w", prefix, k, err)
		}
	}
	st, err := linkprobe.Serve(ctx, ln, peers)
	return st, storePort, err
}

// joinCheckGroup reads the leader's addresses and probes its link.
func (c *Runner) joinCheckGroup(ctx context.Context, prefix string, block int) (linkprobe.Stats, string, int, error) {
	linkAddr, err := c.waitKey(ctx, prefix+"link")
	if err != nil {
		return linkprobe.Stats{}, "", 0, err
	}
	store, err := c.waitKey(ctx, prefix+"store")
	if err != nil {
		return linkprobe.Stats{}, "", 0, err
	}
	host, portText, err := net.SplitHostPort(store)
	if err != nil {
		return linkprobe.Stats{}, "", 0, fmt.Errorf("bad %sstore value %q: %w", prefix, store, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return linkprobe.Stats{}, "", 0, fmt.Errorf("bad %sstore port %q: %w", prefix, portText, err)
	}
	st, err := linkprobe.Probe(ctx, linkAddr, block)
	return st, host, port, err
}

// waitKey reads a key of the job's key-value store, waiting for it until
// ctx ends.
func (c *Runner) waitKey(ctx context.Context, key string) (string, error) {
	for {
		var resp *connect.Response[roverv1.GetKeyResponse]
		err := c.cfg.Retry(ctx, func(ctx context.Context) error {
			var err error
			resp, err = c.cfg.Master.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: key, WaitMillis: 5000}))
			return err
		})
		switch {
		case err != nil:
			return "", fmt.Errorf("read %s: %w", key, err)
		case resp.Msg.GetFound():
			return string(resp.Msg.GetValue()), nil
		case ctx.Err() != nil:
			return "", fmt.Errorf("the group's leader did not publish %s in time: %w", key, context.Cause(ctx))
		}
	}
}

// programResult is the check program's JSON line.
type programResult struct {
	OK         bool    `json:"ok"`
	Stage      string  `json:"stage"`
	Error      string  `json:"error"`
	Compute    float64 `json:"compute_s"`
	Collective float64 `json:"collective_s"`
}

// checkProgram runs the check program with the job's Python; an error
// means it could not run or died without a result.
func (c *Runner) checkProgram(ctx context.Context, env []string) (programResult, error) {
	cmd := exec.CommandContext(ctx, c.cfg.PythonExec, "-m", "rover.nodecheck")
	base := os.Environ()
	cmd.Env = append(append(base, c.cfg.Env(base)...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	var res programResult
	sc := bufio.NewScanner(&stdout)
	found := false
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &res) == nil {
			found = true
		}
	}
	if found {
		return res, nil
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("the check program did not finish within the group timeout: %w", context.Cause(ctx))
	}
	tail := strings.TrimSpace(stderr.String())
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	var exitErr *exec.ExitError
	if errors.As(runErr, &exitErr) {
		return res, fmt.Errorf("the check program (%s -m rover.nodecheck) %s without a result: %s", c.cfg.PythonExec, exitErr.ProcessState, tail)
	}
	return res, fmt.Errorf("run the check program (%s -m rover.nodecheck): %v %s", c.cfg.PythonExec, runErr, tail)
}

// report sends a check's result; a failure is only logged.
func (c *Runner) report(ctx context.Context, f func(context.Context) error) {
	if err := c.cfg.Retry(ctx, f); err != nil && ctx.Err() == nil {
		c.cfg.Log.Warn("could not report the node check", "err", err)
	}
}
