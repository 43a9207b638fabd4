package master

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
)

// settingsTestConfig is the job's configuration in TestJoinComparesEverySetting.
func settingsTestConfig() *roverv1.RendezvousConfig {
	c := rdzvConfig(1, 4)
	c.HangTimeoutMillis, c.HangDetection = 300_000, 1
	return c
}

// TestJoinComparesEverySetting starts a real master on loopback, lets a
// first agent fix the job's settings, and has a second agent join with one
// setting changed: each is refused with FailedPrecondition, naming the
// setting, both values and what to do. An agent with the same settings
// joins.
func TestJoinComparesEverySetting(t *testing.T) {
	tests := []struct {
		name   string
		change func(*roverv1.RendezvousConfig)
		want   string
	}{
		{"nnodes", func(c *roverv1.RendezvousConfig) { c.MaxNodes = 8 }, "--nnodes=1:8, but the job runs with 1:4"},
		{"node unit", func(c *roverv1.RendezvousConfig) { c.NodeUnit = 2 }, "--node-unit=2, but the job runs with 1"},
		{"max restarts", func(c *roverv1.RendezvousConfig) { c.MaxRestarts = 3 }, "--max-restarts=3, but the job runs with 1"},
		{"join timeout", func(c *roverv1.RendezvousConfig) { c.JoinTimeoutMillis = 300_000 },
			"--rdzv-conf join_timeout=5m0s, but the job runs with 1m0s"},
		{"last call timeout", func(c *roverv1.RendezvousConfig) { c.LastCallMillis = 30_000 },
			"--rdzv-conf last_call_timeout=30s, but the job runs with 200ms"},
		{"heartbeat timeout", func(c *roverv1.RendezvousConfig) { c.HeartbeatTimeoutMillis = 30_000 },
			"--rdzv-conf heartbeat_timeout=30s, but the job runs with 1m0s"},
		{"disconnect grace", func(c *roverv1.RendezvousConfig) { c.DisconnectGraceMillis = 0 },
			"--rdzv-conf disconnect_grace=0s, but the job runs with 1s"},
		{"hang timeout", func(c *roverv1.RendezvousConfig) { c.HangTimeoutMillis = 600_000 },
			"--hang-timeout=10m0s, but the job runs with 5m0s"},
		{"hang detection", func(c *roverv1.RendezvousConfig) { c.HangDetection = 2 },
			"--hang-detection=2, but the job runs with 1"},
		{"node check", func(c *roverv1.RendezvousConfig) { c.NodeCheck = &roverv1.NodeCheckConfig{Enabled: true} },
			"the node check (--network-check, --exclude-straggler, --comm-perf-test, --precheck) on (exclude stragglers false, comm perf false), but the job runs with it off"},
	}
	_, c := startMaster(t, Config{Job: "settings"})
	ctx := context.Background()
	if _, err := c.Join(ctx, joinReq("first", settingsTestConfig())); err != nil {
		t.Fatalf("first join: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := settingsTestConfig()
			tt.change(asked)
			_, err := c.Join(ctx, joinReq("second-"+strings.ReplaceAll(tt.name, " ", "-"), asked))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("join with a different %s: %v, want FailedPrecondition", tt.name, err)
			}
			for _, w := range []string{tt.want, "start every agent of the job with the same settings"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("join with a different %s: %v\nwant it to contain %q", tt.name, err, w)
				}
			}
		})
	}
	if _, err := c.Join(ctx, joinReq("same", settingsTestConfig())); err != nil {
		t.Errorf("join with the job's settings: %v", err)
	}
}

// TestJoinReportsEveryDifference: an agent differing in several settings
// hears of all of them at once.
func TestJoinReportsEveryDifference(t *testing.T) {
	_, c := startMaster(t, Config{Job: "settings"})
	ctx := context.Background()
	if _, err := c.Join(ctx, joinReq("first", settingsTestConfig())); err != nil {
		t.Fatalf("first join: %v", err)
	}
	asked := settingsTestConfig()
	asked.JoinTimeoutMillis, asked.HangTimeoutMillis, asked.HangDetection = 1000, 1000, 0
	_, err := c.Join(ctx, joinReq("second", asked))
	for _, w := range []string{"join_timeout=1s", "--hang-timeout=1s", "--hang-detection=0"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("join: %v, want it to name %s", err, w)
		}
	}
}

// TestJobSettingsCoverTheRequest fails when a field is added to the join
// request's configuration without a row in jobSettings (or, for the
// checkpoint storage, checkpointAgrees): changing any one field must be
// refused.
func TestJobSettingsCoverTheRequest(t *testing.T) {
	fields := (&roverv1.RendezvousConfig{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		t.Run(string(f.Name()), func(t *testing.T) {
			if f.Name() == "checkpoint" {
				return // checkpointAgrees: an agent may leave it out (checkpoints_test.go)
			}
			job := settingsTestConfig()
			job.NodeCheck = &roverv1.NodeCheckConfig{Enabled: true}
			asked := proto.Clone(job).(*roverv1.RendezvousConfig)
			m := asked.ProtoReflect()
			switch f.Kind() {
			case protoreflect.Int32Kind:
				m.Set(f, protoreflect.ValueOfInt32(int32(m.Get(f).Int())+1))
			case protoreflect.Int64Kind:
				m.Set(f, protoreflect.ValueOfInt64(m.Get(f).Int()+1000))
			case protoreflect.MessageKind:
				if f.Name() != "node_check" {
					t.Fatalf("a new message field %s: add it to jobSettings", f.Name())
				}
				asked.NodeCheck.CommPerf = true
			default:
				t.Fatalf("field %s of kind %v: add it to jobSettings and to this test", f.Name(), f.Kind())
			}
			a, b := jobConfigOf(t, job), jobConfigOf(t, asked)
			if err := settingsAgree(a, b); err == nil {
				t.Errorf("an agent with another %s agrees with the job: add it to jobSettings", f.Name())
			}
		})
	}
}

func jobConfigOf(t *testing.T, r *roverv1.RendezvousConfig) *jobconfig.Config {
	t.Helper()
	c, err := validateRendezvous(r)
	if err != nil {
		t.Fatalf("validateRendezvous: %v", err)
	}
	return c
}
