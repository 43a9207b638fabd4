// Package agent is the node agent behind `rover run`: it joins the job's
// rendezvous through the master, starts the node's worker processes with
// torchrun's environment contract, supervises them, reports failures with
// their root cause, and restarts them into new rounds when the master says
// so. It does not decide anything about the job; the master does.
//
// Two lifecycles are kept apart: stopping the agent (its context) stops the
// workers first and never orphans them; a worker group ending never stops
// the agent.
//
//	code, err := agent.Run(ctx, cfg, agent.Options{Stdout: os.Stdout, Stderr: os.Stderr})
package agent
