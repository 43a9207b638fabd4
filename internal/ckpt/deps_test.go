package ckpt

import (
	"strings"
	"testing"

	"github.com/roverml/rover/internal/testsrc"
)

// TestDependencies checks that package ckpt and its tests link no cloud
// SDK: the drivers for s3://, gs:// and azblob:// are package cloudblob's,
// which only programs import, so that building and testing ckpt and the
// packages that use it stays fast.
func TestDependencies(t *testing.T) {
	deps := testsrc.Deps(t, true)
	forbidden := []string{
		"github.com/roverml/rover/internal/ckpt/cloudblob",
		"gocloud.dev/blob/s3blob", "gocloud.dev/blob/gcsblob", "gocloud.dev/blob/azureblob",
		"github.com/aws/", "cloud.google.com/go/storage", "github.com/Azure/",
	}
	for _, pkg := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("package ckpt or its tests depend on %s", pkg)
			}
		}
	}
}
