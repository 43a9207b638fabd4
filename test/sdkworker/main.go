// Command sdkworker is a Go worker program for Rover's tests: it uses the Go
// SDK to lease every shard of a dataset through its agent, optionally slowly,
// and writes what it trained, and when, as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/roverml/rover/sdk/go/rover"
)

func main() {
	size := flag.Int64("size", 1000, "samples per epoch")
	shardSize := flag.Int64("shard-size", 10, "samples per shard")
	epochs := flag.Int("epochs", 1, "epochs")
	perShard := flag.Duration("per-shard", 0, "time spent on each shard")
	slowRank := flag.String("slow-rank", "", "the RANK that spends --slow-per-shard on each shard")
	slowPerShard := flag.Duration("slow-per-shard", 0, "time the slow rank spends on each shard")
	out := flag.String("out", "", "directory for out-<RANK>.json, and done.jsonl, where every completed shard is appended")
	crashAfter := flag.Int("crash-after-shards", -1, "exit 1 while holding a lease, after completing this many shards (once per --crash-marker)")
	crashMarker := flag.String("crash-marker", "", "file created by the crash, so that it happens once")
	flag.Parse()
	crash = crashSpec{after: *crashAfter, marker: *crashMarker}
	if err := run(*size, *shardSize, *epochs, *perShard, *slowRank, *slowPerShard, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sdkworker:", err)
		os.Exit(1)
	}
}

type crashSpec struct {
	after  int
	marker string
}

var crash crashSpec

// crashNow reports whether to crash after n completed shards: once, on the
// first worker to get there.
func (c crashSpec) now(n int) bool {
	if c.after < 0 || n != c.after || c.marker == "" {
		return false
	}
	f, err := os.OpenFile(c.marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func run(size, shardSize int64, epochs int, perShard time.Duration, slowRank string, slowPerShard time.Duration, out string) error {
	ctx := context.Background()
	c, err := rover.Connect()
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	ds, err := c.Dataset(ctx, rover.DatasetSpec{Name: "sdk", Size: size, ShardSize: shardSize, Epochs: epochs})
	if err != nil {
		return err
	}
	rank := os.Getenv("RANK")
	if rank == slowRank {
		perShard = slowPerShard
	}
	type shard struct {
		Epoch   int     `json:"epoch"`
		Indices []int64 `json:"indices"`
	}
	// SIGTERM (the agent stopping the workers) takes effect between shards,
	// so a completed shard is always recorded in done.jsonl.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	var trained []shard
	// start and last bound this worker's part of the job: from its first
	// lease to its last completion.
	start, last := time.Now(), time.Time{}
	for {
		select {
		case <-stop:
			os.Exit(143)
		default:
		}
		s, err := ds.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if crash.now(len(trained)) {
			fmt.Fprintf(os.Stderr, "sdkworker rank %s: crashing while holding shard [%d, %d)\n", rank, s.Start, s.End)
			os.Exit(1)
		}
		time.Sleep(perShard)
		ok, err := ds.Complete(ctx, s, true)
		if err != nil {
			return err
		}
		if ok {
			last = time.Now()
			trained = append(trained, shard{s.Epoch, s.Indices()})
			if err := appendLine(filepath.Join(out, "done.jsonl"), shard{s.Epoch, s.Indices()}); err != nil {
				return err
			}
		}
	}
	result := map[string]any{"world_size": info.GetWorldSize(), "shards": trained, "start_unix_nano": start.UnixNano()}
	if !last.IsZero() {
		result["last_complete_unix_nano"] = last.UnixNano()
	}
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "out-"+rank+".json"), b, 0o644)
}

// appendLine appends v as one JSON line (one write with O_APPEND, so lines of
// concurrent workers do not interleave).
func appendLine(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
