package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSubmitParameterServerDryRun: --dry-run shows a parameter-server
// job's roles, and with --auto-scale the PS scaling rule.
func TestSubmitParameterServerDryRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ps.yaml")
	doc := `distributionStrategy: ParameterServerStrategy
replicaSpecs:
  ps: {replicas: 2, template: {spec: {containers: [{command: [python, ps.py]}]}}}
  worker: {replicas: 3, template: {spec: {containers: [{command: [python, w.py]}]}}}
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := runSubmit(context.Background(), []string{"--dry-run", file}, &out, &errOut); err != nil {
		t.Fatalf("dry run: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{
		"a parameter-server job",
		"role ps: 2 replicas",
		"role worker: 3 replicas, relaunches per replica 3; its success ends the job",
		"each replica runs: python w.py",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runSubmit(context.Background(), []string{"--auto-scale=ps-window=10s", "--dry-run", file}, &out, &errOut); err != nil {
		t.Fatalf("--auto-scale: %v", err)
	}
	if want := "PS scaling: a PS above 90% of its CPU request for 10s is migrated to more CPU"; !strings.Contains(out.String(), want) {
		t.Errorf("--auto-scale dry run lacks %q:\n%s", want, out.String())
	}
}
