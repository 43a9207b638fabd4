package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/agent/standalone"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/nvml"
	"github.com/roverml/rover/internal/runconfig"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	agent.Version = version
	cfg, err := runconfig.Parse(args, os.Getenv)
	if errors.Is(err, runconfig.ErrHelp) {
		fmt.Fprint(stdout, runconfig.Usage())
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	log := newLogger(stderr)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	opts := agent.Options{Stdout: stdout, Stderr: stderr, Logger: log, StartMaster: standalone.Start}
	if m, err := nvml.Open(); err == nil {
		defer m.Close()
		opts.Devices = m
		log.Info("sampling the node's GPUs through NVML for the master's diagnosis")
	} else {
		log.Debug("no GPU health", "why", err)
	}
	return agent.Run(ctx, cfg, opts)
}

func newLogger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("ROVER_LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func codeOf(err error) int {
	var ae *agent.ExitError
	if errors.As(err, &ae) {
		return ae.Code
	}
	if errors.Is(err, master.ErrStoreFailed) {
		return agent.ExitStateFailed // rover master, rover submit, a master pod
	}
	return agent.ExitCode(err)
}

var _ agent.SignalCause = signalError{}
