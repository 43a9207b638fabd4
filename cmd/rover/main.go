// Command rover is Rover's one binary: the node agent (`rover run`, also when
// invoked as dlrover-run), the job master (`rover master`), the Kubernetes
// operator (`rover operator`), job status and benchmarks. main only parses
// flags into typed configs and calls Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	_ "github.com/roverml/rover/internal/ckpt/cloudblob" // s3://, gs:// and azblob:// checkpoint storage
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `rover: elastic, fault-tolerant distributed training

Usage:
  rover run [options] SCRIPT [ARGS...]   start this node's agent and workers (torchrun-compatible)
  rover submit JOB.yaml | [options] SCRIPT [ARGS...]
                                         run a whole job on this machine: a master
                                         that starts, relaunches and stops its nodes
  rover master [options]                 run a job's master (control plane)
  rover operator [options]               run the Kubernetes operator of ElasticJobs
  rover status --master HOST:PORT        print a job's status
  rover events --master HOST:PORT [--follow] [--json] [--since N]
                                         print a job's events: worlds, failures, restarts, its end
  rover bench rendezvous --nodes N       benchmark the rendezvous at scale
  rover soak [--duration D] [--fault-rate F] [--faults worker,node,master,hang,slow] [--json]
                                         goodput of a real DDP job under faults, against torchrun's
  rover version                          print the version

"rover COMMAND --help" tells more. Invoked as dlrover-run, rover behaves as "rover run".
`

// usageError is a bad command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// signalError is the cause of a context cancelled by a signal.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return fmt.Sprintf("received %s", e.sig) }

// Signal makes the agent forward the signal to its workers.
func (e signalError) Signal() syscall.Signal { return e.sig }

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	name := filepath.Base(args[0])
	var cmd string
	rest := args[1:]
	if name == "dlrover-run" {
		cmd = "run"
	} else if len(rest) > 0 {
		cmd, rest = rest[0], rest[1:]
	}
	stopSignals := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if cmd == "run" {
		// torchrun's agent stops its workers on these too, forwarding them.
		stopSignals = append(stopSignals, syscall.SIGHUP, syscall.SIGQUIT)
		// A console that goes away (rover submit killed) must not kill the
		// agent with SIGPIPE before it has stopped its workers and removed
		// its shared memory: with SIGPIPE notified, writes fail instead.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	ctx, stop := signalContext(stopSignals...)
	defer stop()
	var err error
	switch cmd {
	case "run":
		err = runAgent(ctx, rest, stdout, stderr)
	case "master":
		err = runMaster(ctx, rest, stdout, stderr)
	case "operator":
		err = runOperator(ctx, rest, stdout, stderr)
	case "submit":
		err = runSubmit(ctx, rest, stdout, stderr)
	case "status":
		err = runStatus(ctx, rest, stdout, stderr)
	case "events":
		err = runEvents(ctx, rest, stdout, stderr)
	case "bench":
		err = runBench(ctx, rest, stdout, stderr)
	case "soak":
		err = runSoak(ctx, rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "rover", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "":
		fmt.Fprint(stderr, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "rover: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return exitCode(ctx, err, stderr)
}

// exitCode prints err and maps it to the documented exit codes.
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) && (err == nil || errors.Is(err, context.Canceled) || errors.As(err, &sig)) {
		fmt.Fprintf(stderr, "rover: stopped: %v\n", sig)
		return 128 + int(sig.sig)
	}
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rover: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "rover: %v\n", err)
	return codeOf(err)
}

// signalContext returns a context cancelled, with a signalError cause, by the
// first of sigs.
func signalContext(sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		if s, ok := <-ch; ok {
			cancel(signalError{sig: s.(syscall.Signal)})
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

// parseFlags parses args with fs: flag.ErrHelp for -h or --help (fs has
// printed the help), a usageError for a bad command line.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// helpIsNoError is err, or nil for flag.ErrHelp: the help asked for was
// printed, and the command succeeds.
func helpIsNoError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
