// Package proc spawns, signals and reaps worker processes for the node agent.
//
// It owns everything between "run this argv" and "here is why it failed":
// starting children in their own process group with a parent-death signal
// ([Start], [Process]), killing whatever inherited a tag in its
// environment once its parent is gone ([KillTagged]), classifying how they ended ([Exit], [Classify]),
// plumbing their output to the console (prefixed lines for teed streams)
// and per-worker log files with torchrun's redirect/tee semantics
// ([OpenOutput], [NewPrefixWriter]),
// reading the error files written by torch's @record decorator
// ([ReadErrorFile]) and rendering torchrun's failure report ([FormatReport]).
// It knows nothing about rendezvous; ranks appear only as labels.
//
// Typical use by an agent, for one worker:
//
//	consoleOut := proc.NewSyncWriter(os.Stdout) // shared by all workers
//	consoleErr := proc.NewSyncWriter(os.Stderr)
//	out, err := proc.OpenOutput(proc.OutputSpec{
//		Dir:        filepath.Join(logDir, "attempt_0", "0"),
//		Tee:        proc.Stderr,
//		Console:    true,
//		Prefix:     "[default0]:",
//		ConsoleOut: consoleOut,
//		ConsoleErr: consoleErr,
//	})
//	if err != nil {
//		return err
//	}
//	p, err := proc.Start(proc.Spec{
//		Argv:   []string{"python", "train.py"},
//		Env:    env,
//		Stdout: out.Stdout(),
//		Stderr: out.Stderr(),
//	})
//	if err != nil {
//		out.Close()
//		return err
//	}
//	select {
//	case <-p.Done():
//	case <-ctx.Done():
//		p.Stop(30 * time.Second)
//	}
//	out.Close() // after Done: all output has been copied
//	if e := p.Exit(); !e.Success() {
//		log.Printf("worker %d: %v (%v)", p.Pid(), e, proc.Classify(e))
//	}
package proc
