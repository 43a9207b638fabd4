package master

import (
	"math"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
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
