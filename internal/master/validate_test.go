package master

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"google.golang.org/protobuf/proto"
)

// FuzzValidateJoin feeds arbitrary encoded join requests to the validator: it
// must never panic, and what it accepts must be in range.
func FuzzValidateJoin(f *testing.F) {
	good, _ := proto.Marshal(joinReq("node-1", rdzvConfig(1, 4)).Msg)
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r roverv1.JoinRequest
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		jr, cfg, err := validateJoin(&r)
		if err != nil {
			return
		}
		if jr.NodeID == "" || jr.LocalWorldSize < 1 || cfg.Rendezvous.MinNodes < 1 || cfg.Rendezvous.MinNodes > cfg.Rendezvous.MaxNodes {
			t.Errorf("accepted an out-of-range request: %v", &r)
		}
		// The checkpoint storage an agent asks for: an absolute location
		// without driver parameters or credentials, and a keep in range.
		if checkStorage(cfg.Checkpoint, ckpt.FromAgent) != nil {
			return
		}
		s := cfg.Checkpoint
		if s.Keep < 0 || s.Keep > maxCheckpointKeep || s.URL == "" && s.Keep != 0 ||
			strings.ContainsAny(s.URL, "?@#") || s.URL != "" && !strings.Contains(s.URL, "://") && !filepath.IsAbs(s.URL) {
			t.Errorf("accepted checkpoint storage %+v from an agent", s)
		}
	})
}

// FuzzCheckpointDurable feeds arbitrary checkpoint reports to a master with
// storage: none may make it write outside the job's storage, commit a step
// whose files are not there, or panic.
func FuzzCheckpointDurable(f *testing.F) {
	f.Add(int64(1), int32(0), "sharded", int64(100), int64(1), "a")
	f.Add(int64(-1), int32(9), "replicated", int64(1<<62), int64(1<<40), "")
	f.Add(int64(1<<62), int32(-1), "bogus", int64(-5), int64(-1), "../b")
	dir := f.TempDir()
	store := filepath.Join(dir, "ckpts")
	m, c := startMaster(f, Config{Job: "j", Checkpoint: jobconfig.CheckpointStorage{URL: store, Keep: 1}})
	_ = m
	ctx := f.Context()
	s := openSessionRank(ctx, f, c, "a", 0, rdzvConfig(1, 1))
	nextView(f, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	f.Fuzz(func(t *testing.T, step int64, rank int32, mode string, size, round int64, node string) {
		r, err := c.CheckpointDurable(ctx, connect.NewRequest(&roverv1.CheckpointDurableRequest{
			Step: step, Rank: rank, Mode: mode, Size: size, Round: round, NodeId: node}))
		if err == nil && r.Msg.GetCommitted() {
			t.Errorf("a report of step %d without files committed it", step)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) > 1 {
			t.Errorf("something was written beside the job's storage: %v", entries)
		}
		if _, err := os.Stat(filepath.Join(store, ckpt.LatestKey)); err == nil {
			t.Errorf("a latest marker was written")
		}
	})
}

// FuzzValidateOthers covers the remaining validators.
func FuzzValidateOthers(f *testing.F) {
	f.Add("k", []byte("v"), int64(10), int64(1), "node", int32(0))
	f.Fuzz(func(t *testing.T, key string, value []byte, wait, round int64, node string, rank int32) {
		_ = validateSetKey(&roverv1.SetKeyRequest{Key: key, Value: value})
		if d, err := validateGetKey(&roverv1.GetKeyRequest{Key: key, WaitMillis: wait}); err == nil && (d < 0 || d > maxWait) {
			t.Errorf("accepted wait %d", wait)
		}
		_ = validateFailures(&roverv1.ReportFailureRequest{NodeId: node, Round: round,
			Failures: []*roverv1.WorkerFailure{{Rank: rank, Message: key}}})
	})
}

// TestMillisNeverOverflow: durations in milliseconds are checked before they
// are converted, so a huge value is refused, not wrapped into range.
func TestMillisNeverOverflow(t *testing.T) {
	for _, v := range []int64{math.MaxInt64, math.MaxInt64 / 1000, 1 << 62, -1, math.MinInt64} {
		if d, err := millis("x", v); err == nil {
			t.Errorf("millis(%d) = %v, want out of range", v, d)
		}
		if d, err := validateGetKey(&roverv1.GetKeyRequest{Key: "k", WaitMillis: v}); err == nil {
			t.Errorf("wait_millis %d accepted as %v", v, d)
		}
	}
	if d, err := millis("x", 1500); err != nil || d != 1500*time.Millisecond {
		t.Errorf("millis(1500) = %v, %v", d, err)
	}
}
