package k8stest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAssetsDirNamesTheFix(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), nil, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	_, err := AssetsDir()
	if err == nil {
		t.Fatal("AssetsDir() succeeded with a non-executable kube-apiserver")
	}
	for _, want := range []string{"KUBEBUILDER_ASSETS=" + dir, "kube-apiserver", "make testbin", "testbin/build.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("AssetsDir() error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "etcd,") {
		t.Errorf("AssetsDir() error %q names etcd, which is there", err)
	}
}

func TestAssetsDirDefault(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBEBUILDER_ASSETS", "")
	_, err := AssetsDir()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(home, ".cache/rover/testbin-"+KubeVersion)) {
		t.Fatalf("AssetsDir() with an empty home = %v, want an error naming the default folder", err)
	}
	def := DefaultAssetsDir()
	if err := os.MkdirAll(def, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(def, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := AssetsDir(); err != nil || got != def {
		t.Fatalf("AssetsDir() = %q, %v; want %q", got, err, def)
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "testbin", "build.sh")); err != nil {
		t.Fatalf("RepoRoot() = %s, which has no testbin/build.sh: %v", root, err)
	}
	// testbin/ is a module of its own; its go.mod must not be taken for the root.
	got, err := findRepoRoot(filepath.Join(root, "testbin"))
	if err != nil || got != root {
		t.Fatalf("findRepoRoot(testbin) = %q, %v; want %q", got, err, root)
	}
}

func TestCRDPaths(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "deploy", "crd"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs := t.TempDir()
	tests := []struct {
		name         string
		dirs         []string
		allowMissing bool
		want         []string
		wantErr      string
	}{
		{name: "none", dirs: nil, want: nil},
		{name: "relative and absolute", dirs: []string{"deploy/crd", abs}, want: []string{filepath.Join(root, "deploy/crd"), abs}},
		{name: "missing fails", dirs: []string{"deploy/crd", "nope"}, wantErr: "AllowMissingCRDDirs"},
		{name: "missing allowed", dirs: []string{"nope", "deploy/crd"}, allowMissing: true, want: []string{filepath.Join(root, "deploy/crd")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := crdPaths(root, tt.dirs, tt.allowMissing, t.Logf)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("crdPaths() error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("crdPaths() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
