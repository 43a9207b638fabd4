package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent/nodecheckrun"
	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/proc"
)

// loop carries out decide's actions on the master's views, and reports the
// worker group's end, until the job ends or ctx is cancelled.
func (a *agent) loop(ctx context.Context) error {
	w := &workers{a: a, ctx: ctx, check: a.newCheckRunner()}
	defer w.check.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stop("agent stopping")
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.StopGracePeriod+30*time.Second)
			a.ckpt.PersistOnFailure(pctx)
			cancel()
			a.leave("agent stopped: " + context.Cause(ctx).Error())
			return context.Cause(ctx)

		case res := <-w.done():
			w.g = nil
			a.groupEnded(ctx, res)

		case <-a.views.notify:
			if end, err := a.react(ctx, w); end {
				return err
			}
		}
	}
}

// workers is the loop's worker group, if one runs, and the newest round it
// started workers for.
type workers struct {
	a           *agent
	ctx         context.Context
	g           *group
	lastStarted int
	check       *nodecheckrun.Runner // the node check's tasks
}

// done is the running group's result channel; nil (never ready) without one.
func (w *workers) done() <-chan groupResult {
	if w.g == nil {
		return nil
	}
	return w.g.done
}

// stop stops the running group, if any, and waits for it.
func (w *workers) stop(why string) {
	if w.g == nil {
		return
	}
	w.a.log.Info("stopping workers", "round", w.g.round, "why", why)
	cause := errors.New(why)
	if w.ctx.Err() != nil {
		cause = context.Cause(w.ctx) // the agent's own stop: maybe a signal to forward
	}
	res := w.g.stop(cause)
	w.g = nil
	// The round's pending saves and its last step (from the workers' step
	// slots) go out now: the master counts the steps the next round
	// computes again from it.
	w.a.life.groupEnded(int64(res.Round), res.Last)
}

// state is what decide needs to know.
func (w *workers) state(joinedRound int) agentState {
	s := agentState{running: w.g != nil, lastStarted: w.lastStarted, joinedRound: joinedRound, checked: w.check.Key()}
	if w.g != nil {
		s.groupRound = w.g.round
	}
	return s
}

// react carries out decide's actions on the newest view until one leaves
// the agent waiting for the next; end is true when the agent exits with err.
func (a *agent) react(ctx context.Context, w *workers) (end bool, err error) {
	v, sessionErr := a.views.get()
	// Before anything stops the workers: a hang's stacks are theirs.
	if h := v.GetHang(); a.hangs.Fresh(h) {
		a.onHang(ctx, h, w.g != nil)
	}
	w.check.Sync(v)
	for {
		_, joinedRound := a.joined.get()
		act := decide(v, sessionErr, w.state(joinedRound))
		switch act.kind {
		case actStop:
			w.stop(act.why) // then decide again, without workers
			// A new round: the world may change (a node lost, added or
			// replaced), and a newcomer holds nothing in memory, so no step
			// is common to every rank's memory. Making the newest snapshot
			// durable first lets every rank resume from it (the newcomer
			// from storage) instead of the last persisted step.
			a.ckpt.PersistOnFailure(ctx)
		case actStart:
			w.lastStarted = act.round
			spec := a.groupSpec(v)
			// This round's join went out: the flag has done its work.
			a.peerRestoreFailed.Store(false)
			a.startBackups(v.GetAssignment())
			if err := a.restoreFromPeers(ctx, v.GetAssignment()); err != nil {
				// Its ranks would resume at another step than the others'
				// (storage may not hold the agreed one): fail the round, and
				// the next one agrees without peers.
				a.peerRestoreFailed.Store(true)
				spec.Refuse = err
			}
			w.g = startGroup(ctx, spec)
			asg := v.GetAssignment()
			a.log.Info("starting workers", "round", act.round, "group_rank", asg.GetGroupRank(),
				"group_world_size", asg.GetGroupWorldSize(), "world_size", asg.GetWorldSize(), "restart_count", v.GetRestartCount())
			return false, nil
		case actRejoin:
			a.ckpt.Drain(ctx) // see ckptsaver's drain: the new workers must all find the same committed step
			err := a.join(ctx, act.round)
			if err == nil || ctx.Err() != nil || connect.CodeOf(err) == connect.CodeFailedPrecondition {
				// Stopping is handled by the loop; a job that ended says how in its next view.
				return false, nil
			}
			return true, err
		case actSucceeded:
			a.log.Info("job succeeded", "round", v.GetRound(), "restarts", v.GetRestartCount())
			return true, nil
		case actJobFailed:
			return true, a.jobFailed(v)
		case actMasterLost:
			return true, act.err
		case actCheck:
			w.check.Start(ctx, v)
			return false, nil
		case actExcluded:
			vd := v.GetNodeCheck().GetVerdict()
			a.log.Error("the node check excluded this node", "verdict", vd.GetVerdict(), "reason", vd.GetReason())
			a.leave("excluded by the node check")
			return true, excluded(vd)
		default:
			return false, nil
		}
	}
}

// groupEnded reports a finished worker group to the master.
func (a *agent) groupEnded(ctx context.Context, res groupResult) {
	round := int64(res.Round)
	a.life.groupEnded(round, res.Last)
	a.metrics.WorkersEnded(groupEndState(res))
	switch {
	case res.Stopped:
	case res.Succeeded:
		a.log.Info("workers finished", "round", res.Round)
		a.call(ctx, "report success", func(ctx context.Context) error {
			_, err := a.client.ReportSuccess(ctx, connect.NewRequest(&roverv1.ReportSuccessRequest{NodeId: a.nodeID, Round: round}))
			return err
		})
	default:
		// The group ends once its other workers are stopped: this line's
		// time is the end of the stop, exited the failure's detection
		// (the process reaped), for the restart's phases (make
		// bench-restart).
		failures := make([]*roverv1.WorkerFailure, 0, len(res.Failures)+1)
		for _, f := range res.Failures {
			failures = append(failures, failureProto(f))
			a.log.Warn("worker failed", "round", res.Round, "rank", f.Rank, "local_rank", f.LocalRank, "exit", f.Exit.String(),
				"exited", f.Exit.Time.UTC().Format(time.RFC3339Nano))
		}
		// Persist what the workers held in memory before anything restarts.
		a.ckpt.PersistOnFailure(ctx)
		if res.Err != nil {
			nodeRank, _ := a.joined.get()
			a.log.Error("could not start workers", "round", res.Round, "err", res.Err)
			f := &roverv1.WorkerFailure{
				Host: a.host, NodeRank: int32(nodeRank), ExitCode: -1,
				TimeUnixNanos: time.Now().UnixNano(), Message: res.Err.Error(), Rank: int32(res.StartRank),
			}
			f.RestoreFailed = errors.Is(res.Err, errPeerRestore)
			if res.StartFailed {
				f.ExitCode, f.Rank, f.LocalRank = int32(startFailureCode(res.Err)), int32(res.StartRank), int32(res.StartLocal)
				f.Message = "could not start the worker: " + res.Err.Error()
			}
			failures = append(failures, f)
		}
		a.log.Info("reporting the failure", "round", res.Round)
		a.call(ctx, "report the failure", func(ctx context.Context) error {
			_, err := a.client.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: a.nodeID, Round: round, Failures: failures}))
			return err
		})
	}
}

// jobFailed prints the failure report and returns the agent's error.
func (a *agent) jobFailed(v *roverv1.NodeView) error {
	var last int64
	for _, f := range v.GetFailures() {
		last = max(last, f.GetRound())
	}
	var fs []proc.Failure
	for _, f := range v.GetFailures() {
		if f.GetRound() == last {
			fs = append(fs, failureFromProto(f))
		}
	}
	title := filepath.Base(a.cfg.Entrypoint) + " FAILED"
	if len(fs) > 0 {
		fmt.Fprint(a.errOut, proc.FormatReport(title, fs))
		root, _ := proc.RootCause(fs)
		a.writeRootCause(root)
	}
	a.log.Error("job failed", "reason", v.GetReason())
	return exitErr(ExitJobFailed, "job failed: %s", v.GetReason())
}

func (a *agent) groupSpec(v *roverv1.NodeView) groupSpec {
	asg := v.GetAssignment()
	round := int(v.GetRound())
	p := placement{
		Round:          round,
		NodeRank:       int(asg.GetNodeRank()),
		GroupRank:      int(asg.GetGroupRank()),
		GroupWorldSize: int(asg.GetGroupWorldSize()),
		MaxNodes:       max(a.cfg.MaxNodes, int(asg.GetGroupWorldSize())),
		LocalWorldSize: int(asg.GetLocalWorldSize()),
		Rank:           int(asg.GetRankOffset()),
		WorldSize:      int(asg.GetWorldSize()),
		RestartCount:   int(v.GetRestartCount()),
		MaxRestarts:    int(v.GetMaxRestarts()),
		RunID:          a.cfg.RunID,
		Role:           a.cfg.Role,
		NodeID:         a.nodeID,
		Checkpoint:     a.ckpt.Storage(),
	}
	return groupSpec{
		Argv:      a.argv,
		Placement: p,
		// torchrun's attempt directory: a round of a membership change
		// reuses its restart count's, appending to its log files.
		Dir:            filepath.Join(a.logDir, "attempt_"+strconv.Itoa(int(v.GetRestartCount()))),
		Redirects:      a.cfg.Redirects,
		Tee:            a.cfg.Tee,
		Filter:         a.cfg.LocalRanksFilter,
		PrefixTemplate: a.opts.Getenv(prefixTemplateEnv),
		ConsoleOut:     a.out,
		ConsoleErr:     a.errOut,
		StopGrace:      a.cfg.StopGracePeriod,
		Host:           a.host,
		Rendezvous: func(ctx context.Context) (string, int, error) {
			return a.workersMaster(ctx, round, p.GroupRank)
		},
		Env:       a.local.env,
		Standby:   a.standby,
		StepSlots: stepSlotsDir(a.local.dir),
		Log:       a.log,
		Started:   func(p placement) { a.local.current.Store(&p) },
		Spawned: func(ws []stacks.Worker) {
			a.hangs.SetRunning(ws)
			a.metrics.WorkersStarted(metricsWorkers(ws))
			a.progress.workersStarted(workerPids(ws))
			a.life.workersStarted(int64(round), p.LocalWorldSize)
		},
	}
}

// workersMaster agrees on MASTER_ADDR and MASTER_PORT for a round: the node of
// group rank 0 picks a free port and publishes it in the master's key-value
// store; the others read it.
func (a *agent) workersMaster(ctx context.Context, round, groupRank int) (string, int, error) {
	key := fmt.Sprintf("rendezvous/round/%d/master_addr", round)
	if groupRank == 0 {
		host, port := a.host, a.cfg.MasterPort
		if a.cfg.MasterAddrSet {
			host = a.cfg.MasterAddr
		}
		if !a.cfg.MasterPortSet {
			var err error
			if port, err = freePort(); err != nil {
				return "", 0, err
			}
		}
		value := net.JoinHostPort(host, strconv.Itoa(port))
		err := a.callMaster(ctx, func(ctx context.Context) error {
			_, err := a.client.SetKey(ctx, connect.NewRequest(&roverv1.SetKeyRequest{Key: key, Value: []byte(value)}))
			return err
		})
		if err != nil {
			return "", 0, fmt.Errorf("publish %s: %w", key, err)
		}
		return host, port, nil
	}
	deadline := time.Now().Add(a.cfg.JoinTimeout)
	for time.Now().Before(deadline) {
		var resp *connect.Response[roverv1.GetKeyResponse]
		err := a.callMaster(ctx, func(ctx context.Context) error {
			var err error
			resp, err = a.client.GetKey(ctx, connect.NewRequest(&roverv1.GetKeyRequest{Key: key, WaitMillis: 5000}))
			return err
		})
		if err != nil {
			return "", 0, fmt.Errorf("read %s: %w", key, err)
		}
		if resp.Msg.GetFound() {
			host, portText, err := net.SplitHostPort(string(resp.Msg.GetValue()))
			if err != nil {
				return "", 0, fmt.Errorf("bad %s value %q: %w", key, resp.Msg.GetValue(), err)
			}
			port, err := strconv.Atoi(portText)
			if err != nil {
				return "", 0, fmt.Errorf("bad %s port %q: %w", key, portText, err)
			}
			return host, port, nil
		}
	}
	return "", 0, fmt.Errorf("group rank 0 did not publish %s within %s", key, a.cfg.JoinTimeout)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func failureProto(f proc.Failure) *roverv1.WorkerFailure {
	w := &roverv1.WorkerFailure{
		NodeRank:      int32(f.Node),
		Host:          f.Host,
		Rank:          int32(f.Rank),
		LocalRank:     int32(f.LocalRank),
		Pid:           int32(f.Pid),
		ExitCode:      int32(f.Exit.Code),
		Signal:        int32(f.Exit.Signal),
		TimeUnixNanos: f.Time.UnixNano(),
		ErrorFile:     f.ErrorFile,
		LogTail:       f.LogTail,
	}
	if f.Error != nil {
		w.Message, w.Traceback = f.Error.Message, f.Error.Traceback
	}
	return w
}

func failureFromProto(w *roverv1.WorkerFailure) proc.Failure {
	f := proc.Failure{
		Time:      time.Unix(0, w.GetTimeUnixNanos()),
		Host:      w.GetHost(),
		Node:      int(w.GetNodeRank()),
		Rank:      int(w.GetRank()),
		LocalRank: int(w.GetLocalRank()),
		Pid:       int(w.GetPid()),
		Exit:      proc.Exit{Code: int(w.GetExitCode()), Signal: sysSignal(w.GetSignal())},
		ErrorFile: w.GetErrorFile(),
		LogTail:   w.GetLogTail(),
	}
	if w.GetMessage() != "" || w.GetTraceback() != "" {
		f.Error = &proc.ErrorRecord{Message: w.GetMessage(), Traceback: w.GetTraceback(), Time: f.Time}
	}
	if w.GetCause() != "" {
		f.Diagnosis = w.GetCause() + " -> " + w.GetAction() + ": " + w.GetDiagnosis()
	}
	return f
}
