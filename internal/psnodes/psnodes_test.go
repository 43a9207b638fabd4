package psnodes

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/tfconfig"
)

// recorder is a platform that records the nodes it is asked to create;
// resources says whether it reserves them.
type recorder struct {
	platform.Platform
	resources bool
	specs     []platform.NodeSpec
}

func (r *recorder) Create(_ context.Context, spec platform.NodeSpec) error {
	r.specs = append(r.specs, spec)
	return nil
}

func (r *recorder) Capabilities() platform.Capabilities {
	return platform.Capabilities{Resources: r.resources}
}

func (r *recorder) last() platform.NodeSpec { return r.specs[len(r.specs)-1] }

// brokenVersion fails every Store.
type brokenVersion struct{ st State }

func (b brokenVersion) Load(context.Context) (State, error) { return b.st, nil }
func (brokenVersion) Store(context.Context, State) error    { return errors.New("disk full") }

// testCluster has three PS addresses, two workers and a chief.
func testCluster(t *testing.T) tfconfig.Cluster {
	t.Helper()
	c, err := tfconfig.New(map[string][]string{
		tfconfig.PS:     {"h:1", "h:2", "h:3"},
		tfconfig.Worker: {"h:4", "h:5"},
		tfconfig.Chief:  {"h:6"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func files(t *testing.T) FileVersion {
	dir := t.TempDir()
	return FileVersion{Path: filepath.Join(dir, "v"), ClusterPath: filepath.Join(dir, "c")}
}

func config(t *testing.T, v FileVersion, ps int) Config {
	return Config{Job: "j", Cluster: testCluster(t), PS: ps, Version: v, VersionFile: v.Path, ClusterFile: v.ClusterPath}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func psList(t *testing.T, cluster string) []string {
	t.Helper()
	var c map[string][]string
	if err := json.Unmarshal([]byte(cluster), &c); err != nil {
		t.Fatalf("cluster %q: %v", cluster, err)
	}
	return c[tfconfig.PS]
}

func tfPS(t *testing.T, spec platform.NodeSpec) []string {
	t.Helper()
	var tf struct{ Cluster map[string][]string }
	if err := json.Unmarshal([]byte(spec.Env["TF_CONFIG"]), &tf); err != nil {
		t.Fatal(err)
	}
	return tf.Cluster[tfconfig.PS]
}

// TestGrowAndRestart: a job of 2 of 3 PS stores its cluster at start;
// an added PS (rank 2) raises the version with the grown cluster, stored
// first, and gets a TF_CONFIG with it; a master restarted on the same
// files goes on from the grown cluster and the version.
func TestGrowAndRestart(t *testing.T) {
	ctx := context.Background()
	v := files(t)
	rec := &recorder{}
	n, err := New(ctx, rec, config(t, v, 2))
	if err != nil {
		t.Fatal(err)
	}
	if got := psList(t, read(t, v.ClusterPath)); len(got) != 2 || n.PS() != 2 {
		t.Fatalf("cluster at start %v, PS %d; want 2", got, n.PS())
	}
	if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.Worker, Rank: 1}); err != nil {
		t.Fatal(err)
	}
	if w := rec.last(); len(tfPS(t, w)) != 2 || w.Env[tfconfig.EnvClusterVersion] != "0" || w.Env[tfconfig.EnvClusterFile] != v.ClusterPath {
		t.Errorf("worker env %v", w.Env)
	}
	if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.PS, Rank: 2}); err != nil {
		t.Fatal(err)
	}
	if p := rec.last(); len(tfPS(t, p)) != 3 || p.Env[tfconfig.EnvClusterVersion] != "1" {
		t.Errorf("added PS: TF_CONFIG ps %v, version %s; want 3 PS at version 1", tfPS(t, p), p.Env[tfconfig.EnvClusterVersion])
	}
	if read(t, v.Path) != "1" || len(psList(t, read(t, v.ClusterPath))) != 3 {
		t.Errorf("files: version %s, cluster %s; want 1 and 3 PS", read(t, v.Path), read(t, v.ClusterPath))
	}
	r, err := New(ctx, &recorder{}, config(t, v, 2))
	if err != nil {
		t.Fatal(err)
	}
	if r.PS() != 3 || r.ClusterVersion() != 1 {
		t.Errorf("restarted: PS %d version %d; want 3, 1", r.PS(), r.ClusterVersion())
	}
	// A relaunched PS raises the version again; the cluster stays.
	if err := r.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.PS, Rank: 0, Relaunch: 1}); err != nil {
		t.Fatal(err)
	}
	if read(t, v.Path) != "2" || len(psList(t, read(t, v.ClusterPath))) != 3 {
		t.Errorf("after a relaunch: version %s, cluster %s; want 2 and 3 PS", read(t, v.Path), read(t, v.ClusterPath))
	}
}

// TestStoreFails: a PS relaunch whose version cannot be stored creates no
// node and keeps the version; other nodes are still created, the role's
// variables over the spec's.
func TestStoreFails(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	c, _ := testCluster(t).WithCount(tfconfig.PS, 3)
	text, _ := c.ClusterJSON()
	n, err := New(ctx, rec, Config{Job: "j", Cluster: testCluster(t), Version: brokenVersion{st: State{Version: 2, Cluster: text}}, VersionFile: "/v", ClusterFile: "/c"})
	if err != nil {
		t.Fatal(err)
	}
	err = n.Create(ctx, platform.NodeSpec{Job: "j", ID: "j-ps-0-1", Group: tfconfig.PS, Relaunch: 1})
	if err == nil || !strings.Contains(err.Error(), "raise the cluster version for node j-ps-0-1: disk full") {
		t.Errorf("Create = %v, want the store's failure", err)
	}
	if len(rec.specs) != 0 || n.ClusterVersion() != 2 {
		t.Errorf("after a failed store: %d nodes created, version %d; want none, 2", len(rec.specs), n.ClusterVersion())
	}
	if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.Worker, Rank: 1, Relaunch: 1, Env: map[string]string{"NODE_TYPE": "x", "A": "b"}}); err != nil {
		t.Fatal(err)
	}
	env := rec.last().Env
	if env["NODE_TYPE"] != "worker" || env["A"] != "b" || env[tfconfig.EnvClusterVersion] != "2" || env[tfconfig.EnvClusterVersionFile] != "/v" {
		t.Errorf("worker env %v: want the role's over the spec's, version 2, the version file", env)
	}
}

// TestRequestsTold: a platform that reserves nothing gets no resources;
// the process is told them. One that reserves them gets them.
func TestRequestsTold(t *testing.T) {
	ctx := context.Background()
	for _, reserves := range []bool{false, true} {
		rec := &recorder{resources: reserves}
		n, err := New(ctx, rec, config(t, files(t), 0))
		if err != nil {
			t.Fatal(err)
		}
		res := platform.Resources{MilliCPU: 1500, MemoryBytes: 1 << 30}
		if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.PS, Rank: 1, Relaunch: 1, Resources: res}); err != nil {
			t.Fatal(err)
		}
		got := rec.last()
		switch {
		case reserves && (got.Resources != res || got.Env[EnvCPURequest] != ""):
			t.Errorf("a reserving platform: resources %+v, env %v", got.Resources, got.Env)
		case !reserves && (!got.Resources.IsZero() || got.Env[EnvCPURequest] != "1500" || got.Env[EnvMemoryRequest] != "1073741824"):
			t.Errorf("a platform that reserves nothing: resources %+v, env %v; want none, told", got.Resources, got.Env)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	_, err := New(context.Background(), nil, Config{PS: 5})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"no platform", "Job", "no PS", "Version, VersionFile and ClusterFile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not name %s", err, want)
		}
	}
	v := files(t)
	if err := os.WriteFile(v.Path, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), &recorder{}, config(t, v, 0))
	if err == nil || !strings.Contains(err.Error(), "not a version") {
		t.Errorf("New with a garbled version file: %v", err)
	}
	_, err = New(context.Background(), &recorder{}, config(t, files(t), 4))
	if err == nil || !strings.Contains(err.Error(), "Config.PS is 4") {
		t.Errorf("New with more PS than addresses: %v", err)
	}
}
