// Package runconfig parses and validates the command line of "rover run".
//
// "rover run" accepts torchrun's command line, so existing launch scripts work
// unchanged: the same flags, both spellings of each long flag
// (--nproc-per-node and --nproc_per_node), --flag=value and --flag value,
// unique prefixes of long flags (--nproc), defaults from PET_<NAME>
// environment variables, and the rule that the first argument that is not an
// option is the training script and everything after it belongs to the
// script, even arguments that look like flags. A literal "--" also ends
// rover's options. On top of torchrun's flags it accepts every one of
// dlrover-run's extras (dlrover.go: each honoured, or, where it does nothing
// on this machine, accepted with a one-line note in Config.Warnings) and
// Rover's own flags, whose defaults come from ROVER_<NAME>. Every number and
// duration is bounded (limits.go), so that what parses is never refused
// later by the master.
//
// Precedence is: command line, then environment, then built-in default.
// Problems are reported all at once, each naming the flag (or environment
// variable) at fault and saying what to do.
//
// Usage:
//
//	cfg, err := runconfig.Parse(os.Args[2:], os.Getenv) // after "rover run"
//	if errors.Is(err, runconfig.ErrHelp) {
//		fmt.Print(runconfig.Usage())
//		return
//	}
//	if err != nil {
//		fmt.Fprintf(os.Stderr, "rover run: %v\n", err)
//		os.Exit(2)
//	}
//	argv := cfg.WorkerArgv("python3") // e.g. [python3 -u train.py --lr 0.1]
//	for rank := 0; rank < cfg.NprocPerNode; rank++ {
//		_ = cfg.Redirects.For(rank) // where this worker's output goes
//	}
//
// Tests and callers that need to control the machine (GPU count, CPU count,
// file lookups) use a [Parser] with those functions set.
package runconfig
