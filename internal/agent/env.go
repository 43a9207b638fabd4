package agent

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/roverml/rover/internal/jobconfig"
)

// placement is one worker's place in a round's world.
type placement struct {
	Round          int
	NodeRank       int
	GroupRank      int
	GroupWorldSize int
	// MaxNodes is --nnodes MAX: the largest world of the job, in nodes
	// (ROVER_MAX_NODES; DLRover's ElasticTrainer scales its gradient
	// accumulation from it).
	MaxNodes       int
	LocalRank      int
	LocalWorldSize int
	Rank           int
	WorldSize      int
	MasterAddr     string
	MasterPort     int
	RestartCount   int
	MaxRestarts    int
	RunID          string
	Role           string
	ErrorFile      string
	NodeID         string
	// Checkpoint is the job's checkpoint storage: workers may check the
	// location they expect against it, but their requests name steps only.
	Checkpoint jobconfig.CheckpointStorage
}

// workerEnv returns the environment of one worker: the agent's own
// environment plus torchrun's contract. base is the agent's environment.
func workerEnv(base []string, p placement) []string {
	set := map[string]string{
		"LOCAL_RANK":                   strconv.Itoa(p.LocalRank),
		"RANK":                         strconv.Itoa(p.Rank),
		"GROUP_RANK":                   strconv.Itoa(p.GroupRank),
		"ROLE_RANK":                    strconv.Itoa(p.Rank),
		"ROLE_NAME":                    p.Role,
		"LOCAL_WORLD_SIZE":             strconv.Itoa(p.LocalWorldSize),
		"WORLD_SIZE":                   strconv.Itoa(p.WorldSize),
		"GROUP_WORLD_SIZE":             strconv.Itoa(p.GroupWorldSize),
		"ROLE_WORLD_SIZE":              strconv.Itoa(p.WorldSize),
		"MASTER_ADDR":                  p.MasterAddr,
		"MASTER_PORT":                  strconv.Itoa(p.MasterPort),
		"TORCHELASTIC_RESTART_COUNT":   strconv.Itoa(p.RestartCount),
		"TORCHELASTIC_MAX_RESTARTS":    strconv.Itoa(p.MaxRestarts),
		"TORCHELASTIC_RUN_ID":          p.RunID,
		"TORCHELASTIC_USE_AGENT_STORE": "False",
		"TORCHELASTIC_ERROR_FILE":      p.ErrorFile,
		"ROVER_NODE_ID":                p.NodeID,
		"ROVER_NODE_RANK":              strconv.Itoa(p.NodeRank),
		"ROVER_ROUND":                  strconv.Itoa(p.Round),
		"ROVER_MAX_NODES":              strconv.Itoa(p.MaxNodes),
		// The worker's incarnation: its shard requests carry it, so that
		// the master refuses them once a later round has begun.
		"ROVER_WORKER_INCARNATION": strconv.Itoa(p.Round),
		"ROVER_CHECKPOINT_DIR":     p.Checkpoint.URL,
		"ROVER_CHECKPOINT_KEEP":    strconv.Itoa(p.Checkpoint.Keep),
	}
	inherit := map[string]string{
		"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
	}
	if p.LocalWorldSize > 1 {
		inherit["OMP_NUM_THREADS"] = "1"
	}
	out := make([]string, 0, len(base)+len(set))
	seen := map[string]bool{}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok {
			continue
		}
		seen[k] = true
		out = append(out, kv)
	}
	// In a fixed order, so that two starts of a worker see the same
	// environment, byte for byte, as a standby's must (standby.go).
	for _, k := range slices.Sorted(maps.Keys(inherit)) {
		if !seen[k] {
			out = append(out, k+"="+inherit[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, k+"="+set[k])
	}
	return out
}

// needsOMPWarning reports whether torchrun's OMP_NUM_THREADS warning applies.
func needsOMPWarning(localWorldSize int) bool {
	_, set := os.LookupEnv("OMP_NUM_THREADS")
	return localWorldSize > 1 && !set
}
