package master

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/jobconfig/configwire"
)

// ckptJob is a master with checkpoint storage and a closed world of two
// nodes, "a" (ranks 0-1) and "b" (ranks 2-3), in round 1.
type ckptJob struct {
	t       *testing.T
	m       *Master
	c       roverv1connect.MasterServiceClient
	store   string
	bucket  *ckpt.Bucket
	streams []session
	round   int64
}

func newCkptJob(t *testing.T, ctx context.Context, keep int) *ckptJob {
	t.Helper()
	store := filepath.Join(t.TempDir(), "ckpts")
	m, c := startMaster(t, Config{Job: "j", Checkpoint: jobconfig.CheckpointStorage{URL: store, Keep: keep}})
	j := &ckptJob{t: t, m: m, c: c, store: store, round: 1}
	for i, id := range []string{"a", "b"} {
		j.streams = append(j.streams, openSessionRank(ctx, t, c, id, i, rdzvConfig(2, 2)))
	}
	for _, s := range j.streams {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	}
	b, err := ckpt.OpenBucket(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	j.bucket = b
	return j
}

// write persists rank's real file of step and returns what an agent reports.
func (j *ckptJob) write(ctx context.Context, step int64, rank int) ckpt.FileInfo {
	j.t.Helper()
	var buf bytes.Buffer
	meta := map[string]string{ckpt.MetaStep: strconv.FormatInt(step, 10), ckpt.MetaRank: strconv.Itoa(rank), ckpt.MetaWorldSize: "4"}
	w := ckpt.Tensor{Name: "w", DType: "F32", Shape: []int64{4}, Data: make([]byte, 16)}
	w.Data[0] = byte(step)
	if err := ckpt.Encode(&buf, []ckpt.Tensor{w}, meta); err != nil {
		j.t.Fatal(err)
	}
	info, err := ckpt.PersistRank(ctx, j.bucket, step, rank, buf.Bytes())
	if err != nil {
		j.t.Fatal(err)
	}
	return info
}

// report sends a CheckpointDurable for rank's file from its node.
func (j *ckptJob) report(ctx context.Context, round, step int64, rank int, size int64, crc uint32) (*roverv1.CheckpointDurableResponse, error) {
	node := map[bool]string{true: "a", false: "b"}[rank < 2]
	resp, err := j.c.CheckpointDurable(ctx, connect.NewRequest(&roverv1.CheckpointDurableRequest{
		Step: step, Rank: int32(rank), Mode: "sharded", Size: size, Crc32C: crc, Round: round, NodeId: node}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// commit writes and reports every rank's file of step and returns whether
// the last report committed it.
func (j *ckptJob) commit(ctx context.Context, step int64) bool {
	j.t.Helper()
	var last *roverv1.CheckpointDurableResponse
	for rank := range 4 {
		info := j.write(ctx, step, rank)
		r, err := j.report(ctx, j.round, step, rank, info.Size, info.CRC32C)
		if err != nil {
			j.t.Fatalf("report rank %d of step %d: %v", rank, step, err)
		}
		last = r
	}
	return last.GetCommitted()
}

// tree is every file under dir with its SHA-256.
func tree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	files := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, dir)] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func latestOf(t *testing.T, dir string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, ckpt.LatestKey))
	return strings.TrimSpace(string(b))
}

// rawCall posts a JSON body to a method of the master, as any HTTP client
// holding the token can, and returns the status and body.
func rawCall(t *testing.T, m *Master, method, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+m.Addr()+"/rover.v1.MasterService/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostileCheckpointRequests: requests that would commit a step whose
// files are missing or differ, complete a step from two rounds' reports,
// name a location or a retention, or claim another node's rank are refused
// with a clear error; the storage is unchanged by each and the verified
// step stays committed. Then a real commit prunes only the older step.
func TestHostileCheckpointRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j := newCkptJob(t, ctx, 1)
	if !j.commit(ctx, 10) {
		t.Fatal("step 10 with every rank's file reported was not committed")
	}
	// Files of steps 30 and 40 exist, as if their ranks had written them.
	step30, step40 := map[int]ckpt.FileInfo{}, map[int]ckpt.FileInfo{}
	for rank := range 4 {
		step30[rank], step40[rank] = j.write(ctx, 30, rank), j.write(ctx, 40, rank)
	}
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "step-000000000003"), 0o700); err != nil {
		t.Fatal(err)
	}
	before, outsideBefore := tree(t, j.store), tree(t, outside)

	type outcome struct {
		code connect.Code
		want string
	}
	tests := []struct {
		name string
		send func() error // the last, decisive request
		want outcome
	}{
		{"commit with missing files", func() error {
			for rank := range 3 {
				if _, err := j.report(ctx, 1, 20, rank, 1000, 1); err != nil {
					return err
				}
			}
			_, err := j.report(ctx, 1, 20, 3, 1000, 1)
			return err
		}, outcome{connect.CodeFailedPrecondition, "is not in"}},
		{"commit with a wrong size", func() error {
			for rank := range 3 {
				if _, err := j.report(ctx, 1, 30, rank, step30[rank].Size, step30[rank].CRC32C); err != nil {
					return err
				}
			}
			_, err := j.report(ctx, 1, 30, 3, step30[3].Size+8, step30[3].CRC32C)
			return err
		}, outcome{connect.CodeFailedPrecondition, "were reported"}},
		{"another node's rank", func() error {
			_, err := j.c.CheckpointDurable(ctx, connect.NewRequest(&roverv1.CheckpointDurableRequest{
				Step: 30, Rank: 3, Mode: "sharded", Size: step30[3].Size, Round: 1, NodeId: "a"}))
			return err
		}, outcome{connect.CodeInvalidArgument, "not one of node"}},
		{"a round that never was", func() error {
			_, err := j.report(ctx, 7, 30, 3, step30[3].Size, step30[3].CRC32C)
			return err
		}, outcome{connect.CodeFailedPrecondition, "round 7"}},
		{"a foreign URL", func() error {
			return rawError(rawCall(t, j.m, "CheckpointDurable",
				fmt.Sprintf(`{"url":%q,"step":"3","rank":0,"mode":"sharded","size":"100","round":"1","nodeId":"a"}`, outside)))
		}, outcome{connect.CodeInvalidArgument, "url"}},
		{"a relative path", func() error {
			return rawError(rawCall(t, j.m, "CheckpointDurable",
				`{"path":"../../x","step":"3","rank":0,"mode":"sharded","size":"100","round":"1","nodeId":"a"}`))
		}, outcome{connect.CodeInvalidArgument, "path"}},
		{"keep in a request", func() error {
			return rawError(rawCall(t, j.m, "CheckpointDurable",
				`{"keep":1,"step":"999","rank":0,"mode":"sharded","size":"100","round":"1","nodeId":"a"}`))
		}, outcome{connect.CodeInvalidArgument, "keep"}},
		{"an endpoint override at join", func() error {
			cfg := rdzvConfig(2, 2)
			cfg.Checkpoint = &roverv1.CheckpointStorage{Url: "s3://bucket/pfx?endpoint=http://127.0.0.1:9", Keep: 1}
			_, err := j.c.Join(ctx, joinReq("c", cfg))
			return err
		}, outcome{connect.CodeFailedPrecondition, "checkpoints go to"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.send()
			if connect.CodeOf(err) != tt.want.code || err == nil || !strings.Contains(err.Error(), tt.want.want) {
				t.Errorf("got %v (%v), want %v naming %q", connect.CodeOf(err), err, tt.want.code, tt.want.want)
			}
			if after := tree(t, j.store); !equalTrees(before, after) {
				t.Errorf("storage changed: %d files before, %d after", len(before), len(after))
			}
			if got := latestOf(t, j.store); got != "10" {
				t.Errorf("latest is %q, want the verified step 10", got)
			}
			if after := tree(t, outside); !equalTrees(outsideBefore, after) {
				t.Errorf("a directory outside the job's storage changed")
			}
		})
	}

	// Reports of step 40 from two rounds never complete it: ranks 0 and 1
	// report in round 1, a failure opens round 2, ranks 2 and 3 report in
	// round 2 (once it closes), and a late report of round 1 is refused.
	for rank := range 2 {
		if _, err := j.report(ctx, 1, 40, rank, step40[rank].Size, step40[rank].CRC32C); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.c.ReportFailure(ctx, connect.NewRequest(&roverv1.ReportFailureRequest{NodeId: "a", Round: 1,
		Failures: []*roverv1.WorkerFailure{{Rank: 0, ExitCode: 1}}})); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b"} {
		req := joinReq(id, rdzvConfig(2, 2))
		req.Msg.Round, req.Msg.RequestedRank = 2, int32(i)
		if _, err := j.c.Join(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	nextView(t, j.streams[0], func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 2 })
	for rank := 2; rank < 4; rank++ {
		r, err := j.report(ctx, 2, 40, rank, step40[rank].Size, step40[rank].CRC32C)
		if err != nil || r.GetCommitted() {
			t.Errorf("round 2's report of rank %d: committed %v (%v), want not committed", rank, r.GetCommitted(), err)
		}
	}
	if _, err := j.report(ctx, 1, 40, 1, step40[1].Size, step40[1].CRC32C); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a late report of round 1: %v, want FailedPrecondition", err)
	}
	if got := latestOf(t, j.store); got != "10" {
		t.Fatalf("latest is %q after reports from two rounds, want 10", got)
	}

	// A step below the latest commit is never committed (it would move
	// latest back, and let pruning delete newer steps).
	j.round = 2
	if j.commit(ctx, 5) || latestOf(t, j.store) != "10" {
		t.Errorf("step 5 below the committed step 10 was committed (latest %s)", latestOf(t, j.store))
	}
	// A real commit of step 50 keeps one step: it prunes step 10 and the
	// uncommitted directories below 50, never step 50.
	if !j.commit(ctx, 50) {
		t.Fatal("step 50 was not committed")
	}
	steps, _ := filepath.Glob(filepath.Join(j.store, "step-*"))
	if latestOf(t, j.store) != "50" || len(steps) != 1 || filepath.Base(steps[0]) != "step-000000000050" {
		t.Errorf("after committing step 50 with keep 1: latest %s, steps %v; want only step 50", latestOf(t, j.store), steps)
	}
}

func rawError(status int, body string) error {
	if status == http.StatusOK {
		return nil
	}
	return connect.NewError(map[int]connect.Code{http.StatusBadRequest: connect.CodeInvalidArgument}[status], fmt.Errorf("%d: %s", status, body))
}

func equalTrees(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCheckpointStorageFromAgents: without storage of its own, the master
// takes the first agent's, which may name a bucket and a prefix only, as
// an absolute location; a later agent must agree, and learns it when it
// joins.
func TestCheckpointStorageFromAgents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c := startMaster(t, Config{Job: "j"})
	join := func(id, url string, keep int) (*roverv1.JoinResponse, error) {
		cfg := rdzvConfig(1, 3)
		if url != "" {
			cfg.Checkpoint = &roverv1.CheckpointStorage{Url: url, Keep: int32(keep)}
		}
		r, err := c.Join(ctx, joinReq(id, cfg))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	for _, bad := range []struct{ url, want string }{
		{"ckpts", "relative path"},
		{"s3://bucket/pfx?endpoint=http://127.0.0.1:9", "query parameters"},
		{"s3://key:secret@bucket/pfx", "user information"},
		{"file://host/dir", "absolute path"},
		{"ftp://host/dir", "scheme"},
	} {
		if _, err := join("a", bad.url, 1); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("join with checkpoint storage %q: %v, want InvalidArgument naming %q", bad.url, err, bad.want)
		}
	}
	dir := t.TempDir()
	r, err := join("a", dir, 3)
	if err != nil || r.GetCheckpoint().GetUrl() != dir || r.GetCheckpoint().GetKeep() != 3 {
		t.Fatalf("first join: %v (%v), want the job's storage %s keeping 3", r, err, dir)
	}
	if r, err = join("b", "", 0); err != nil || r.GetCheckpoint().GetUrl() != dir {
		t.Errorf("an agent without storage: %v (%v), want it to learn %s", r, err, dir)
	}
	if _, err = join("c", "file://"+dir+"/", 3); err != nil {
		t.Errorf("the same directory as a file URL: %v", err)
	}
	if _, err := join("d", t.TempDir(), 3); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "checkpoints go to") {
		t.Errorf("an agent naming another directory: %v, want FailedPrecondition", err)
	}
	if _, err := join("d", dir, 2); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "keeps 3") {
		t.Errorf("an agent asking to keep another number: %v, want FailedPrecondition", err)
	}
}

// TestFreshJobRemovesUncommittedSteps: a master starting a job removes the
// step directories a previous run left without a manifest (partial files,
// empty directories), and never a committed step.
func TestFreshJobRemovesUncommittedSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j := newCkptJob(t, ctx, 0)
	if !j.commit(ctx, 10) {
		t.Fatal("step 10 not committed")
	}
	j.write(ctx, 5, 0)  // below latest, never committed
	j.write(ctx, 12, 1) // above latest: a crashed run's last try
	partial := filepath.Join(j.store, "step-000000000013", "rank-00000.safetensors.1a2b.tmp")
	if err := os.MkdirAll(filepath.Dir(partial), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(partial, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A new job on the same storage, its rendezvous preset: the master
	// prepares the storage before it serves, so before any worker runs.
	preset := configwire.FromProto(rdzvConfig(1, 1))
	startMaster(t, Config{Job: "j2", Checkpoint: jobconfig.CheckpointStorage{URL: j.store}, Preset: &preset})
	steps, _ := filepath.Glob(filepath.Join(j.store, "step-*"))
	if len(steps) != 1 || filepath.Base(steps[0]) != "step-000000000010" {
		t.Errorf("steps after a fresh start: %v, want only the committed step 10", steps)
	}
}
