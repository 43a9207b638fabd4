package psnodes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// brokenVersion fails every Store.
type brokenVersion struct{ v int }

func (b brokenVersion) Load(context.Context) (int, error) { return b.v, nil }
func (brokenVersion) Store(context.Context, int) error    { return errors.New("disk full") }

func testCluster(t *testing.T) tfconfig.Cluster {
	t.Helper()
	c, err := tfconfig.New(map[string][]string{
		tfconfig.PS:     {"h:1", "h:2"},
		tfconfig.Worker: {"h:3", "h:4"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRestartGoesOn: a master restarted on the same version file starts
// from the stored version, and its next PS relaunch raises it further.
func TestRestartGoesOn(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "v")
	v := FileVersion{Path: file}
	if got, err := v.Load(ctx); err != nil || got != 0 {
		t.Fatalf("Load of a missing file = %d, %v; want 0", got, err)
	}
	if err := v.Store(ctx, 4); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	n, err := New(ctx, rec, Config{Job: "j", Cluster: testCluster(t), Version: v, VersionFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if n.ClusterVersion() != 4 {
		t.Fatalf("version %d after a restart, want 4", n.ClusterVersion())
	}
	if err := n.Create(ctx, platform.NodeSpec{Job: "j", Group: tfconfig.PS, Rank: 1, Relaunch: 2}); err != nil {
		t.Fatal(err)
	}
	if got := rec.specs[0].Env[tfconfig.EnvClusterVersion]; got != "5" {
		t.Errorf("relaunched PS starts at version %s, want 5", got)
	}
	if b, _ := os.ReadFile(file); string(b) != "5\n" {
		t.Errorf("version file holds %q, want 5", b)
	}
}

// TestStoreFails: a PS relaunch whose version cannot be stored creates no
// node and keeps the version; other nodes are still created.
func TestStoreFails(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	n, err := New(ctx, rec, Config{Job: "j", Cluster: testCluster(t), Version: brokenVersion{v: 2}, VersionFile: "/v"})
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
	env := rec.specs[0].Env
	if env["NODE_TYPE"] != "worker" || env["A"] != "b" || env[tfconfig.EnvClusterVersion] != "2" || env[tfconfig.EnvClusterVersionFile] != "/v" {
		t.Errorf("worker env %v: want the role's over the spec's, version 2, the version file", env)
	}
}

func TestNewRefuses(t *testing.T) {
	_, err := New(context.Background(), nil, Config{})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"no platform", "Job", "no PS", "Version"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not name %s", err, want)
		}
	}
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), &recorder{}, Config{Job: "j", Cluster: testCluster(t), Version: FileVersion{Path: file}, VersionFile: file})
	if err == nil || !strings.Contains(err.Error(), "not a version") {
		t.Errorf("New with a garbled version file: %v", err)
	}
}
