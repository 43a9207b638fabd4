package main

import (
	"bytes"
	"strings"
	"testing"

	"gocloud.dev/blob"
)

// TestStorageSchemes checks that the agent and the master, which open
// checkpoint storage by URL, have a driver for every scheme documented.
func TestStorageSchemes(t *testing.T) {
	for _, scheme := range []string{"file", "mem", "s3", "gs", "azblob"} {
		if !blob.DefaultURLMux().ValidBucketScheme(scheme) {
			t.Errorf("rover has no driver for %s:// URLs", scheme)
		}
	}
}

func TestCommandLineErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rover", "run", "--bogus-flag", "x.py"}, 2, "unknown flag --bogus-flag"},
		{[]string{"rover", "run", "--nnodes=3:2", "--rdzv-endpoint", "127.0.0.1:1", "x.py"}, 2, "minimum 3 is greater than maximum 2"},
		{[]string{"rover", "run", "--standalone", "no-such-script.py"}, 2, `"no-such-script.py" not found`},
		{[]string{"rover", "run"}, 2, "no training script given"},
		{[]string{"rover", "run", "--network-check", "--standalone", "--no-python", "true"}, 2, "not implemented yet"},
		{[]string{"rover", "run", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--no-python", "true"}, 2, "needs the job's token"},
		{[]string{"rover", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"rover", "master", "--nnodes", "4:2"}, 2, "MaxNodes"},
		{[]string{"rover", "status"}, 2, "needs --master"},
		{[]string{"rover", "bench", "rendezvous", "--nodes", "0"}, 2, "--nodes must be at least 1"},
		{[]string{"dlrover-run", "--nnodes=0"}, 2, "nnodes"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			t.Setenv("ROVER_TOKEN", "")
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"rover", "help"}, {"rover", "run", "--help"}, {"rover", "version"}, {"dlrover-run", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 || stdout.Len() == 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}
