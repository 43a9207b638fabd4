package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/userfile"
)

// runMaster is `rover master`: it parses the command line (masterflags.go)
// and runs the master of the job, until the job ends.
func runMaster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseMasterFlags(args, stderr)
	if err != nil {
		return helpIsNoError(err)
	}
	if c.Platform == "kubernetes" {
		return runKubeMaster(ctx, c, stderr)
	}
	return runLocalMaster(ctx, c, stdout, stderr)
}

// runLocalMaster runs the master of a job whose agents are started by
// someone else, and says how the job ended.
func runLocalMaster(ctx context.Context, c *masterConfig, stdout, stderr io.Writer) error {
	// Before the token file is made: nothing is created for a bad command line.
	tc, err := c.tlsConfig()
	if err != nil {
		return err
	}
	token, err := announceToken(c, stderr)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	st, closeState, err := c.openState(ctx, log)
	if err != nil {
		return err
	}
	defer closeState()
	m, err := master.New(ctx, c.toMasterConfig(token, tc, st, log))
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
	out, err := m.RunJob(ctx, c.Linger)
	if err != nil {
		return err
	}
	if !out.Succeeded {
		return fmt.Errorf("job failed: %s", out.Reason)
	}
	fmt.Fprintln(stdout, "rover master: job succeeded")
	return nil
}

// tlsConfig loads --tls-cert and --tls-key; nil for cleartext HTTP/2.
func (c *masterConfig) tlsConfig() (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := master.LoadKeyPair(c.TLSCert, c.TLSKey, time.Now())
	if err != nil {
		return nil, usageError{err}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, nil
}

// announceToken returns the job's token (see masterToken) and tells the
// user which file to give the agents.
func announceToken(c *masterConfig, stderr io.Writer) (string, error) {
	token, file, err := masterToken(c, os.Getenv)
	if err != nil {
		return "", err
	}
	if file != "" {
		fmt.Fprintf(stderr, "rover master: job token in %s (pass --token-file %s to every agent)\n", file, file)
	}
	return token, nil
}

// masterToken is the job's token and the file it is in ("" for none): the
// file --token-file names (created when missing) wins over $ROVER_TOKEN;
// without either, <job>.token in the working directory (created when
// missing).
func masterToken(c *masterConfig, getenv func(string) string) (token, file string, err error) {
	file = c.TokenFile
	if file == "" {
		t, err := client.Token("", getenv)
		switch {
		case err == nil:
			return t, "", nil
		case !errors.Is(err, client.ErrNoToken):
			return "", "", usageError{err}
		}
		file = c.Job + ".token"
	}
	if token, err = master.LoadOrCreateToken(file); err != nil {
		if errors.Is(err, userfile.ErrTooLarge) {
			return "", "", usageError{fmt.Errorf("--token-file: %w", err)}
		}
		return "", "", err
	}
	return token, file, nil
}

// openState opens the state kept in the Kubernetes API (--state-kube), and
// returns the func that closes it; a nil store (and a close that does
// nothing) without --state-kube: the master opens its --state-dir itself.
func (c *masterConfig) openState(ctx context.Context, log *slog.Logger) (master.Store, func(), error) {
	if c.StateKube.Name == "" {
		return nil, func() {}, nil
	}
	ks, err := openKubeState(ctx, c, log)
	if err != nil {
		return nil, nil, err
	}
	return ks, func() { ks.Close() }, nil
}

// toMasterConfig is the configuration of the master the command line asks
// for, serving with token and tc and keeping its state in st (nil: in
// --state-dir, or in memory).
func (c *masterConfig) toMasterConfig(token string, tc *tls.Config, st master.Store, log *slog.Logger) master.Config {
	var preset *jobconfig.Config
	if c.Preset != nil {
		p := c.Preset.JobConfig()
		preset = &p
	}
	return master.Config{
		Listen: c.Listen, Job: c.Job, Token: token, Preset: preset, Checkpoint: c.Checkpoint,
		AddrFile: c.AddrFile, StateDir: c.StateDir, DiscardState: c.DiscardState, Store: st, TLS: tc, Logger: log,
		MetricsAddr: c.MetricsAddr, MetricsAddrFile: c.MetricsAddrFile,
	}
}
