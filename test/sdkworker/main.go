// Command sdkworker is a Go worker program for Rover's tests: it uses the Go
// SDK to lease every shard of a dataset through its agent, optionally slowly,
// and writes what it trained as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	out := flag.String("out", "", "directory for out-<RANK>.json")
	flag.Parse()
	if err := run(*size, *shardSize, *epochs, *perShard, *slowRank, *slowPerShard, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sdkworker:", err)
		os.Exit(1)
	}
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
	var trained []shard
	for {
		s, err := ds.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		time.Sleep(perShard)
		ok, err := ds.Complete(ctx, s, true)
		if err != nil {
			return err
		}
		if ok {
			trained = append(trained, shard{s.Epoch, s.Indices()})
		}
	}
	b, err := json.Marshal(map[string]any{"world_size": info.GetWorldSize(), "shards": trained})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "out-"+rank+".json"), b, 0o644)
}
