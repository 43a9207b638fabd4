package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSubmitArgs: `rover submit` reads its own options before the job, and
// refuses a command line without a job, an empty --job-dir and arguments
// after a job file.
func TestSubmitArgs(t *testing.T) {
	c, err := parseSubmitArgs([]string{"--quiet", "--job-dir", "d", "--dry-run", "--nnodes", "2", "--no-python", "true"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Quiet || !c.DryRun || c.JobDir != "d" || c.Spec.Replicas["worker"] == nil {
		t.Errorf("parseSubmitArgs = %+v; want --quiet, --dry-run, --job-dir d and a job of workers", c)
	}
	if c, err := parseSubmitArgs([]string{"--job-dir=e", "--no-python", "true"}); err != nil || c.JobDir != "e" || c.Quiet || c.DryRun {
		t.Errorf("parseSubmitArgs(--job-dir=e) = %+v, %v; want --job-dir e alone", c, err)
	}
	for _, args := range [][]string{{"-h"}, {"--quiet", "--help"}} {
		if _, err := parseSubmitArgs(args); !errors.Is(err, errHelp) {
			t.Errorf("parseSubmitArgs(%q) = %v, want errHelp", args, err)
		}
	}
	tests := []struct {
		args []string
		want string
	}{
		{nil, "rover submit needs a job: JOB.yaml, or rover run's options and a SCRIPT (see rover submit --help)"},
		{[]string{"--quiet"}, "rover submit needs a job: JOB.yaml, or rover run's options and a SCRIPT (see rover submit --help)"},
		{[]string{"--job-dir"}, "--job-dir needs a directory"},
		{[]string{"--job-dir", ""}, "--job-dir needs a directory"},
		{[]string{"--job-dir="}, "--job-dir needs a directory"},
		{[]string{"x.yaml", "extra"}, `x.yaml is a job file: it takes no other arguments (found ["extra"]); put the script's arguments in the file's command`},
		{[]string{"--bogus"}, `unknown flag --bogus (see "rover run --help")`},
		{[]string{"--max-nodes-here"}, "--max-nodes-here needs a value"},
		{[]string{"--max-nodes-here", "0", "x.py"}, `--max-nodes-here "0": give the most nodes to run at once on this machine, a whole number of 1 or more (leave it out for no limit)`},
		{[]string{"--max-nodes-here=-2", "x.py"}, `--max-nodes-here "-2": give the most nodes to run at once on this machine, a whole number of 1 or more (leave it out for no limit)`},
		{[]string{"--max-nodes-here", "two", "x.py"}, `--max-nodes-here "two": give the most nodes to run at once on this machine, a whole number of 1 or more (leave it out for no limit)`},
		{[]string{"--pending-timeout", "soon", "x.py"}, `--pending-timeout "soon": give seconds (600) or a duration (10m), more than 0: `},
		{[]string{"--pending-timeout=0", "x.py"}, `--pending-timeout "0": give seconds (600) or a duration (10m), more than 0: --pending-timeout 0: must be positive`},
	}
	for _, tt := range tests {
		if _, err := parseSubmitArgs(tt.args); err == nil || !strings.HasPrefix(err.Error(), tt.want) || !strings.HasSuffix(tt.want, " ") && err.Error() != tt.want {
			t.Errorf("parseSubmitArgs(%q) = %v, want %q", tt.args, err, tt.want)
		}
	}
}

// TestSubmitCapacityArgs: --max-nodes-here and --pending-timeout, in
// either form, before the job; the timeout wins over the spec's.
func TestSubmitCapacityArgs(t *testing.T) {
	c, err := parseSubmitArgs([]string{"--max-nodes-here", "2", "--pending-timeout=90", "--nnodes", "2:3", "--no-python", "true"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxNodesHere != 2 || c.Spec.PendingTimeout != 90*time.Second {
		t.Errorf("max nodes %d, pending timeout %v; want 2, 1m30s", c.MaxNodesHere, c.Spec.PendingTimeout)
	}
	c, err = parseSubmitArgs([]string{"--max-nodes-here=3", "--pending-timeout", "2m", "--no-python", "true"})
	if err != nil || c.MaxNodesHere != 3 || c.Spec.PendingTimeout != 2*time.Minute {
		t.Errorf("parseSubmitArgs = %+v, %v; want 3 nodes here, a 2m timeout", c, err)
	}
	c, err = parseSubmitArgs([]string{"--max-nodes-here", "1", "--dry-run", "--nnodes", "2:3", "--no-python", "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := planJob(c, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "--max-nodes-here 1 is below the job's minimum of 2 nodes (--nnodes 2:3): it could never run; give 2 or more") {
		t.Errorf("planJob with capacity below the minimum: %v", err)
	}
}
