package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
)

// TestStateLimits: the key-value store and the datasets of a job are
// bounded; a request past a limit is ResourceExhausted, changes nothing, and
// updating what exists is still allowed.
func TestStateLimits(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	c := configuredCore(t, store.NewMemory(), now)
	c.mu.Lock()
	for i := range maxKeys {
		c.st.Keys.Set(fmt.Sprint("k", i), nil)
	}
	c.mu.Unlock()
	err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "one-more", Value: []byte("v")})
	if !errors.Is(err, errLimit) || connect.CodeOf(rpcError(err)) != connect.CodeResourceExhausted {
		t.Errorf("a key past the limit: %v, want ResourceExhausted", err)
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "k7", Value: []byte("new")}); err != nil {
		t.Errorf("updating an existing key at the limit: %v", err)
	}
	c.mu.Lock()
	c.st.Keys = jobstate.RestoreKeys(map[string][]byte{"filler": make([]byte, maxKeyBytes-10)}) // the values take all but 10 bytes
	c.mu.Unlock()
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "b1", Value: make([]byte, 11)}); !errors.Is(err, errLimit) {
		t.Errorf("a value past the byte limit: %v, want errLimit", err)
	}
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "b1", Value: make([]byte, 10)}); err != nil {
		t.Errorf("a value that just fits: %v", err)
	}

	register := func(name string) error {
		ds := shard.Dataset{Name: name, Size: 10, BatchSize: 1, ShardSize: 1, Epochs: 1, Mode: shard.Leased}
		_, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: name, Spec: &ds}})
		return err
	}
	for i := range maxDatasets {
		if err := register(fmt.Sprint("d", i)); err != nil {
			t.Fatalf("dataset %d: %v", i, err)
		}
	}
	if err := register("one-more"); !errors.Is(err, errLimit) {
		t.Errorf("a dataset past the limit: %v, want errLimit", err)
	}
	if err := register("d3"); err != nil {
		t.Errorf("registering an existing dataset again at the limit: %v", err)
	}
}
