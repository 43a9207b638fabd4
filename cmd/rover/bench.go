package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/roverml/rover/internal/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "rendezvous" {
		return usageError{errors.New("usage: rover bench rendezvous --nodes N [--conns C] [--heartbeat-period D] [--periods P]")}
	}
	cfg := bench.RendezvousConfig{}
	fs := flag.NewFlagSet("rover bench rendezvous", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Nodes, "nodes", 1000, "simulated node agents")
	fs.IntVar(&cfg.Conns, "conns", 16, "HTTP/2 connections the agents share")
	fs.DurationVar(&cfg.HeartbeatPeriod, "heartbeat-period", time.Second, "heartbeat period of every agent")
	fs.IntVar(&cfg.Periods, "periods", 3, "heartbeat periods to measure")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if cfg.Nodes < 1 {
		return usageError{fmt.Errorf("--nodes must be at least 1, got %d", cfg.Nodes)}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the rover binary: %w", err)
	}
	cfg.Rover = exe
	_, err = bench.Rendezvous(ctx, cfg, stdout)
	return err
}
