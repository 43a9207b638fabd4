// Package agent is the node agent behind `rover run`: it joins the job's
// rendezvous through the master, starts the node's worker processes with
// torchrun's environment contract, supervises them, reports failures with
// their root cause, and restarts them into new rounds when the master says
// so. It does not decide anything about the job; the master does.
//
// Its reaction to the master is decide, a pure function from the newest
// view to the next action, which the loop carries out. It reaches the master
// through package client only, and retries calls with package retry: while
// the master is unreachable (restarting), the workers keep running and the
// agent reconnects, for up to the heartbeat timeout. The embedded master of
// a standalone job, and the master one agent hosts for a job run without
// `rover master` (package hostmaster), are started by the program
// (Options.StartMaster, package standalone), so that this package links no
// master.
//
// The worker lifecycle is this package's (agent, run, session, loop,
// react, group), and so is what the master's goodput accounting hears of
// it: the node's lifecycle events (lifecycle, events), sent on the
// session's heartbeats; the other concerns are parts in packages of their own,
// which know nothing of the agent's struct and reach the master through
// small interfaces of their own (each a subset of the master's client, with
// the agent's retries): ckptsaver (the agent's side of flash checkpoint:
// arenas, persistence, the local API's checkpoint calls), nodecheckrun (the
// node's tasks of the pre-flight node check), stacks (the workers' stacks
// when the job hangs), hostmaster (whether this agent hosts a job's master,
// and its token) and privdir (the agent's private directories).
//
// Two lifecycles are kept apart: stopping the agent (its context) stops the
// workers first and never orphans them; a worker group ending never stops
// the agent.
//
//	err := agent.Run(ctx, cfg, agent.Options{Stdout: os.Stdout, Stderr: os.Stderr, StartMaster: standalone.Start})
//	os.Exit(agent.ExitCode(err))
package agent
