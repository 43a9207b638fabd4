package master

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestLostNodeTakesTheBlame drives the core through the orders in which a
// killed node's loss and its survivor's worker failure arrive, with no
// restarts to spend: the survivor's failure is a consequence unless it
// came alone, and the job's failure records name the lost node.
func TestLostNodeTakesTheBlame(t *testing.T) {
	const grace = 5 * time.Second
	window := jobstate.BlameWindow(liveness.Config{DisconnectGrace: grace}) // 15 s
	type op struct {
		after time.Duration
		what  string // fail <node>, lost <node>, join <node>, tick
	}
	tests := []struct {
		name       string
		ops        []op
		wantState  roverv1.JobState
		wantRound  int64
		wantBlamed []string // node IDs of the failure records
	}{
		{"loss first", []op{{time.Second, "lost b"}, {0, "fail a"}},
			roverv1.JobState_JOB_STATE_RUNNING, 2, []string{"b"}},
		{"failure first, loss within the window", []op{{0, "fail a"}, {grace, "lost b"}, {time.Hour, "tick"}},
			roverv1.JobState_JOB_STATE_RUNNING, 2, []string{"b"}},
		{"failure first, the lost node's agent back within the window", []op{{0, "fail a"}, {time.Second, "join b"}, {time.Hour, "tick"}},
			roverv1.JobState_JOB_STATE_RUNNING, 2, []string{"b"}},
		{"failure alone", []op{{0, "fail a"}, {window - time.Millisecond, "tick"}, {time.Millisecond, "tick"}},
			roverv1.JobState_JOB_STATE_FAILED, 1, []string{"a"}},
		{"failure, then a loss too late", []op{{0, "fail a"}, {window, "lost b"}},
			roverv1.JobState_JOB_STATE_FAILED, 1, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Unix(1000, 0)
			c := newCore("job", store.NewMemory())
			cfg := jobconfig.Config{
				Rendezvous: rendezvous.Config{MinNodes: 2, MaxNodes: 2, MaxRestarts: 0, LastCall: time.Second, JoinTimeout: 10 * time.Hour},
				Nodes:      liveness.Config{HeartbeatTimeout: time.Hour, DisconnectGrace: grace},
			}
			if err := c.configure(ctx, cfg, now); err != nil {
				t.Fatal(err)
			}
			join := func(id string) {
				req, _, err := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := c.join(ctx, req, memoryReport{}, 0, now); err != nil {
					t.Fatalf("join %s: %v", id, err)
				}
			}
			join("a")
			join("b")
			if r := c.job(); r.GetRound() != 1 || r.GetRoundOpen() {
				t.Fatalf("round %d open %v, want round 1 closed", r.GetRound(), r.GetRoundOpen())
			}
			for _, o := range tt.ops {
				now = now.Add(o.after)
				what, id, _ := strings.Cut(o.what, " ")
				var err error
				switch what {
				case "fail":
					raw, _ := protojson.Marshal(&roverv1.WorkerFailure{NodeId: id, Round: 1, ExitCode: 1, Message: "gloo: connection reset by peer"})
					err = c.apply(ctx, &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: id, Round: 1, Failures: []json.RawMessage{raw}})
				case "lost":
					err = c.apply(ctx, &jobstate.Event{Type: jobstate.EventNodeLost, Time: now, Node: id, Reason: fmt.Sprintf("disconnected for %v", grace)})
				case "join":
					join(id)
				case "tick":
					err = c.tick(ctx, now)
				}
				if err != nil {
					t.Fatalf("%s: %v", o.what, err)
				}
			}
			r := c.job()
			if r.GetJobState() != tt.wantState || r.GetRound() != tt.wantRound || r.GetRestartCount() != 0 {
				t.Errorf("job %v in round %d with %d restarts (%s); want %v in round %d with 0",
					r.GetJobState(), r.GetRound(), r.GetRestartCount(), r.GetReason(), tt.wantState, tt.wantRound)
			}
			var blamed []string
			for _, f := range r.GetFailures() {
				blamed = append(blamed, f.GetNodeId())
			}
			if fmt.Sprint(blamed) != fmt.Sprint(tt.wantBlamed) {
				t.Errorf("failure records name %v, want %v: %v", blamed, tt.wantBlamed, r.GetFailures())
			}
			if tt.wantState == roverv1.JobState_JOB_STATE_FAILED && !strings.Contains(r.GetReason(), "node a ") {
				t.Errorf("reason %q does not name node a", r.GetReason())
			}
		})
	}
}
