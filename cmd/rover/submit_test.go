package main

import (
	"errors"
	"testing"
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
	}
	for _, tt := range tests {
		if _, err := parseSubmitArgs(tt.args); err == nil || err.Error() != tt.want {
			t.Errorf("parseSubmitArgs(%q) = %v, want %q", tt.args, err, tt.want)
		}
	}
}
