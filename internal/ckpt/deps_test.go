package ckpt

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies checks that package ckpt and its tests link no cloud
// SDK: the drivers for s3://, gs:// and azblob:// are package cloudblob's,
// which only programs import, so that building and testing ckpt and the
// packages that use it stays fast.
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH to list the dependencies with: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-test", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/roverml/rover/internal/ckpt/cloudblob",
		"gocloud.dev/blob/s3blob", "gocloud.dev/blob/gcsblob", "gocloud.dev/blob/azureblob",
		"github.com/aws/", "cloud.google.com/go/storage", "github.com/Azure/",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("package ckpt or its tests depend on %s", pkg)
			}
		}
	}
}
