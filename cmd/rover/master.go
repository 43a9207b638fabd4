package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/roverml/rover/internal/master"
)

// masterConfig is the command line of `rover master`.
type masterConfig struct {
	Listen    string
	Job       string
	TokenFile string
	AddrFile  string
	StateDir  string
	Linger    time.Duration
	// Preset rendezvous; zero MaxNodes means "taken from the first agent".
	NNodes           string
	NodeUnit         int
	MaxRestarts      int
	LastCall         time.Duration
	JoinTimeout      time.Duration
	HeartbeatTimeout time.Duration
	DisconnectGrace  time.Duration
}

func parseMasterFlags(args []string, stderr io.Writer) (*masterConfig, error) {
	c := &masterConfig{}
	fs := flag.NewFlagSet("rover master", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:29400", "TCP address to serve on (port 0 picks one)")
	fs.StringVar(&c.Job, "job", "none", "job name (agents' --rdzv-id must match unless it is \"none\")")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the job's secret token; created (mode 0600) when missing. Default: $ROVER_TOKEN, else <job>.token in the working directory")
	fs.StringVar(&c.AddrFile, "addr-file", "", "write the address the master listens on to this file")
	fs.StringVar(&c.StateDir, "state-dir", "", "directory of the master's durable state (journal and snapshots); a master restarted on it resumes the job. Default: none (state in memory)")
	fs.DurationVar(&c.Linger, "linger", 5*time.Second, "how long to keep serving after the job ended, so every agent learns the outcome")
	fs.StringVar(&c.NNodes, "nnodes", "", "fix the rendezvous instead of taking the first agent's: N or MIN:MAX")
	fs.IntVar(&c.NodeUnit, "node-unit", 1, "with --nnodes: the world is a multiple of this many nodes")
	fs.IntVar(&c.MaxRestarts, "max-restarts", 0, "with --nnodes: failure restarts allowed per job")
	fs.DurationVar(&c.LastCall, "last-call-timeout", 30*time.Second, "with --nnodes: close a round this long after the last join once min nodes joined")
	fs.DurationVar(&c.JoinTimeout, "join-timeout", 600*time.Second, "with --nnodes: fail the job when a round stays below min nodes this long")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", 600*time.Second, "with --nnodes: a node without heartbeats this long is dead")
	fs.DurationVar(&c.DisconnectGrace, "disconnect-grace", 5*time.Second, "with --nnodes: a node whose push stream stays closed this long is dead")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("rover master takes no arguments, got %q", fs.Args())}
	}
	return c, nil
}

func (c *masterConfig) preset() (*master.RendezvousPreset, error) {
	if c.NNodes == "" {
		return nil, nil
	}
	var min, max int
	lo, hi, ok := strings.Cut(c.NNodes, ":")
	if _, err := fmt.Sscanf(lo, "%d", &min); err != nil {
		return nil, usageError{fmt.Errorf("--nnodes=%s: want N or MIN:MAX", c.NNodes)}
	}
	max = min
	if ok {
		if _, err := fmt.Sscanf(hi, "%d", &max); err != nil {
			return nil, usageError{fmt.Errorf("--nnodes=%s: want N or MIN:MAX", c.NNodes)}
		}
	}
	p := &master.RendezvousPreset{}
	p.Rendezvous.MinNodes, p.Rendezvous.MaxNodes = min, max
	p.Rendezvous.NodeUnit = c.NodeUnit
	p.Rendezvous.MaxRestarts = c.MaxRestarts
	p.Rendezvous.LastCall = c.LastCall
	p.Rendezvous.JoinTimeout = c.JoinTimeout
	p.Nodes.HeartbeatTimeout = c.HeartbeatTimeout
	p.Nodes.DisconnectGrace = c.DisconnectGrace
	if err := p.Rendezvous.Validate(); err != nil {
		return nil, usageError{err}
	}
	return p, nil
}

func runMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseMasterFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	preset, err := c.preset()
	if err != nil {
		return err
	}
	token := os.Getenv("ROVER_TOKEN")
	if token == "" {
		path := c.TokenFile
		if path == "" {
			path = c.Job + ".token"
		}
		if token, err = master.LoadOrCreateToken(path); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "rover master: job token in %s (pass --token-file %s to every agent)\n", path, path)
	}
	m, err := master.New(ctx, master.Config{
		Listen: c.Listen, Job: c.Job, Token: token, Preset: preset,
		AddrFile: c.AddrFile, StateDir: c.StateDir, Logger: newLogger(stderr),
	})
	if err != nil {
		return err
	}
	if path := os.Getenv("ROVER_CPU_PROFILE"); path != "" {
		stopProfile, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	out, werr := m.WaitFinished(runCtx)
	if werr == nil {
		// Keep serving a little so every agent receives the outcome.
		select {
		case <-time.After(c.Linger):
		case <-ctx.Done():
		}
	}
	cancel(nil)
	if err := <-done; err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	if !out.Succeeded {
		return fmt.Errorf("job failed: %s", out.Reason)
	}
	fmt.Fprintln(stdout, "rover master: job succeeded")
	return nil
}
