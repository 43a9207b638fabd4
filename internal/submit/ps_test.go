package submit

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/tfconfig"
)

// recorder is a platform that records the nodes it is asked to create.
type recorder struct {
	platform.Platform
	specs []platform.NodeSpec
}

func (r *recorder) Create(_ context.Context, spec platform.NodeSpec) error {
	r.specs = append(r.specs, spec)
	return nil
}

func (r *recorder) Capabilities() platform.Capabilities { return platform.Capabilities{} }

// TestPSNodes: every replica gets a distinct fixed address; each node gets
// its role's TF_CONFIG and the cluster version, which a PS relaunch (and
// only that) raises, in the file first; a relaunched worker keeps its
// TF_CONFIG.
func TestPSNodes(t *testing.T) {
	cluster, err := assignAddrs([]jobplan.Role{{Name: "ps", Nodes: 2}, {Name: "worker", Nodes: 2}, {Name: "chief", Nodes: 1}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range []string{"ps", "worker", "chief"} {
		for i := range cluster.Count(r) {
			a, _ := cluster.Addr(r, i)
			if host, _, _ := net.SplitHostPort(a); host != "127.0.0.1" || seen[a] {
				t.Errorf("%s %d at %s: want a distinct 127.0.0.1 address", r, i, a)
			}
			seen[a] = true
		}
	}
	dir := t.TempDir()
	rec := &recorder{}
	n, err := newPSNodes(context.Background(), rec, "j", dir, cluster, 2)
	if err != nil {
		t.Fatal(err)
	}
	version := func() string {
		b, err := os.ReadFile(filepath.Join(dir, ClusterVersionFile))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	ctx := context.Background()
	create := func(group string, rank, relaunch int) platform.NodeSpec {
		t.Helper()
		if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: group, Rank: rank, Relaunch: relaunch, Env: map[string]string{"A": "b"}}); err != nil {
			t.Fatal(err)
		}
		return rec.specs[len(rec.specs)-1]
	}
	w := create("worker", 1, 0)
	if version() != "0" || w.Env[tfconfig.EnvClusterVersion] != "0" || w.Env["A"] != "b" || w.Env[tfconfig.EnvClusterVersionFile] != filepath.Join(dir, ClusterVersionFile) {
		t.Errorf("first worker: version file %s, env %v", version(), w.Env)
	}
	var tf struct {
		Task struct {
			Type  string
			Index int
		}
	}
	if err := json.Unmarshal([]byte(w.Env["TF_CONFIG"]), &tf); err != nil || tf.Task.Type != "worker" || tf.Task.Index != 1 {
		t.Errorf("worker 1's TF_CONFIG %s: %v", w.Env["TF_CONFIG"], err)
	}
	if w2 := create("worker", 1, 1); w2.Env["TF_CONFIG"] != w.Env["TF_CONFIG"] || w2.Env[tfconfig.EnvClusterVersion] != "0" || version() != "0" {
		t.Errorf("a worker relaunch changed TF_CONFIG or the version: %v", w2.Env)
	}
	if p := create("ps", 0, 1); p.Env[tfconfig.EnvClusterVersion] != "1" || version() != "1" {
		t.Errorf("after a PS relaunch: version file %s, env %v; want 1", version(), p.Env)
	}
	if c := create("chief", 0, 0); c.Env[tfconfig.EnvClusterVersion] != "1" {
		t.Errorf("a node created after the PS relaunch starts at version %s, want 1", c.Env[tfconfig.EnvClusterVersion])
	}
	if err := n.Create(ctx, platform.NodeSpec{Group: "worker", Rank: 5}); err == nil || !strings.Contains(err.Error(), "worker 5 is not in the cluster") {
		t.Errorf("worker 5: %v", err)
	}
}
