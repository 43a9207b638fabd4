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
	"github.com/roverml/rover/internal/shard"
)

const benchUsage = `usage: rover bench rendezvous --nodes N [--conns C] [--heartbeat-period D] [--periods P]
       rover bench shards --clients N [--batch B] [--agents A] [--duration D] [--durable] [--size S] [--shard-size K] [--shuffle]
       rover bench recovery [--nodes N] [--shards S]`

// runBench is `rover bench BENCHMARK`: each benchmark parses its command
// line into its package bench config, checks it, and runs.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "shards" {
		return runBenchShards(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "recovery" {
		return runBenchRecovery(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "rendezvous" {
		return usageError{errors.New(benchUsage)}
	}
	return runBenchRendezvous(ctx, args[1:], stdout, stderr)
}

func runBenchRendezvous(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchRendezvous(args, stderr)
	if err != nil {
		return helpIsNoError(err)
	}
	if cfg.Rover, err = roverBinary(); err != nil {
		return err
	}
	_, err = bench.Rendezvous(ctx, *cfg, stdout)
	return err
}

// parseBenchRendezvous parses and checks the command line of `rover bench
// rendezvous`.
func parseBenchRendezvous(args []string, stderr io.Writer) (*bench.RendezvousConfig, error) {
	cfg := &bench.RendezvousConfig{}
	fs := flag.NewFlagSet("rover bench rendezvous", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Nodes, "nodes", 1000, "simulated node agents")
	fs.IntVar(&cfg.Conns, "conns", 16, "HTTP/2 connections the agents share")
	fs.DurationVar(&cfg.HeartbeatPeriod, "heartbeat-period", time.Second, "heartbeat period of every agent")
	fs.IntVar(&cfg.Periods, "periods", 3, "heartbeat periods to measure")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if cfg.Nodes < 1 {
		return nil, usageError{fmt.Errorf("--nodes must be at least 1, got %d", cfg.Nodes)}
	}
	return cfg, nil
}

func runBenchShards(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchShards(args, stderr)
	if err != nil {
		return helpIsNoError(err)
	}
	if cfg.Rover, err = roverBinary(); err != nil {
		return err
	}
	_, err = bench.Shards(ctx, *cfg, stdout)
	return err
}

// parseBenchShards parses and checks the command line of `rover bench
// shards`, reporting every problem at once.
func parseBenchShards(args []string, stderr io.Writer) (*bench.ShardsConfig, error) {
	cfg := &bench.ShardsConfig{}
	fs := flag.NewFlagSet("rover bench shards", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Clients, "clients", 256, "simulated agents leasing shards")
	fs.IntVar(&cfg.Batch, "batch", 1, "shards leased per call (an agent batches its workers' requests)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long to measure")
	fs.IntVar(&cfg.Conns, "conns", 16, "HTTP/2 connections the clients share")
	fs.BoolVar(&cfg.Durable, "durable", false, "give the master a state dir: every transition is fsynced before it is answered")
	fs.IntVar(&cfg.Agents, "agents", 0, "simulated node agents whose workers the clients are; each batches its workers' calls (0: the clients call the master themselves)")
	fs.Int64Var(&cfg.Size, "size", 1<<24, "samples in the dataset")
	fs.Int64Var(&cfg.ShardSize, "shard-size", 1, "samples per shard")
	fs.BoolVar(&cfg.Shuffle, "shuffle", false, "shuffle the dataset: every shard carries its samples")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := checkBenchShards(cfg); err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

// checkBenchShards returns every problem of cfg, joined.
func checkBenchShards(cfg *bench.ShardsConfig) error {
	var errs []error
	if cfg.Clients < 1 {
		errs = append(errs, fmt.Errorf("--clients must be at least 1, got %d", cfg.Clients))
	}
	if cfg.Agents < 0 || cfg.Agents > max(cfg.Clients, 1) {
		errs = append(errs, fmt.Errorf("--agents must be 0 to --clients (%d), got %d", cfg.Clients, cfg.Agents))
	}
	if cfg.Size < 1 || cfg.Size > shard.MaxSize {
		errs = append(errs, fmt.Errorf("--size must be 1 to %d, got %d", int64(shard.MaxSize), cfg.Size))
	}
	maxShard := int64(shard.MaxSize)
	if cfg.Shuffle {
		maxShard = shard.MaxLeaseSamples // a shuffled shard carries its samples
	}
	if cfg.ShardSize < 1 || cfg.ShardSize > maxShard {
		errs = append(errs, fmt.Errorf("--shard-size must be 1 to %d, got %d", maxShard, cfg.ShardSize))
	}
	return errors.Join(errs...)
}

func runBenchRecovery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchRecovery(args, stderr)
	if err != nil {
		return helpIsNoError(err)
	}
	if cfg.Rover, err = roverBinary(); err != nil {
		return err
	}
	_, err = bench.Recovery(ctx, *cfg, stdout)
	return err
}

// parseBenchRecovery parses and checks the command line of `rover bench
// recovery`.
func parseBenchRecovery(args []string, stderr io.Writer) (*bench.RecoveryConfig, error) {
	cfg := &bench.RecoveryConfig{}
	fs := flag.NewFlagSet("rover bench recovery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Nodes, "nodes", 1000, "nodes joined to the job")
	fs.IntVar(&cfg.Shards, "shards", 1_000_000, "shard records the master holds: half leased, half completed")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if cfg.Nodes < 1 || cfg.Shards < 2 {
		return nil, usageError{fmt.Errorf("--nodes must be at least 1 and --shards at least 2, got %d and %d", cfg.Nodes, cfg.Shards)}
	}
	return cfg, nil
}

// roverBinary is this binary's path, which a benchmark starts its master
// and agents with.
func roverBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the rover binary: %w", err)
	}
	return exe, nil
}
