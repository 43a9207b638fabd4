package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/kubemaster"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/runconfig"
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
		{[]string{"rover", "run", "--precheck=3", "--standalone", "--no-python", "true"}, 2, "--precheck=3: want 0 (no check), 1 (the node check) or 2"},
		{[]string{"rover", "run", "--nnodes", "2000000", "--rdzv-endpoint", "127.0.0.1:1", "--no-python", "true"}, 2, "--nnodes=2000000: at most 1048576 nodes"},
		{[]string{"rover", "run", "--nproc-per-node", "100000", "--no-python", "true"}, 2, "--nproc-per-node=100000: want 1 to 4096"},
		{[]string{"rover", "run", "--hang-timeout", "100000h", "--no-python", "true"}, 2, "--hang-timeout=100000h0m0s: must be at most 720h (30 days)"},
		{[]string{"rover", "submit", "--nnodes", "2000000", "--no-python", "true"}, 2, "--nnodes=2000000: at most 1048576 nodes"},
		{[]string{"rover", "submit", "--nproc-per-node", "100000", "--no-python", "true"}, 2, "--nproc-per-node=100000: want 1 to 4096"},
		{[]string{"rover", "master", "--nnodes", "2000000"}, 2, "--nnodes=2000000: at most 1048576 nodes"},
		{[]string{"rover", "master", "--linger", "100000h"}, 2, "--linger=100000h0m0s: must be at most 720h"},
		{[]string{"rover", "run", "--nnodes", "2", "--rdzv-endpoint", "192.0.2.1:1", "--no-python", "true"}, 2, "set ROVER_JOB_SECRET to the same random string"},
		{[]string{"rover", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"rover", "master", "--nnodes", "4:2"}, 2, "--nnodes=4:2: minimum 4 is greater than maximum 2"},
		{[]string{"rover", "master", "--nnodes", "2x"}, 2, "--nnodes=2x: want N or MIN:MAX"},
		{[]string{"rover", "master", "--nnodes", "2", "--node-unit", "0"}, 2, "--node-unit=0: must be at least 1"},
		{[]string{"rover", "master", "--nnodes", "2", "--heartbeat-timeout", "1ns"}, 2, "--heartbeat-timeout=1ns: must be at least 1ms"},
		{[]string{"rover", "master", "--nnodes", "2", "--join-timeout=-1s"}, 2, "--join-timeout=-1s: must be positive"},
		{[]string{"rover", "master", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"rover", "status"}, 2, "needs --master"},
		{[]string{"rover", "operator", "--master-image-pull-policy", "Sometimes", "--master-image", ""}, 2, "--master-image is empty"},
		{[]string{"rover", "operator", "--master-image-pull-policy", "Sometimes"}, 2, "--master-image-pull-policy=Sometimes: use Always"},
		{[]string{"rover", "operator", "extra"}, 2, "rover operator takes no arguments"},
		{[]string{"rover", "bench", "rendezvous", "--nodes", "0"}, 2, "--nodes must be at least 1"},
		{[]string{"dlrover-run", "--nnodes=0"}, 2, "nnodes"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			t.Setenv("ROVER_TOKEN", "")
			t.Setenv("ROVER_JOB_SECRET", "")
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

func TestMasterFlags(t *testing.T) {
	defaults := runconfig.Policy{NodeUnit: 1, LastCallTimeout: 30 * time.Second, JoinTimeout: 600 * time.Second,
		HeartbeatTimeout: 600 * time.Second, DisconnectGrace: 5 * time.Second,
		HangTimeout: 5 * time.Minute, HangDetection: 1}
	preset := func(mod func(*runconfig.Policy)) *runconfig.Policy {
		p := defaults
		mod(&p)
		return &p
	}
	tests := []struct {
		name string
		args []string
		want masterConfig
	}{
		{"defaults", nil, masterConfig{Listen: "127.0.0.1:29400", Job: "none", Linger: 5 * time.Second}},
		{"state dir and files", []string{"--state-dir", "/var/lib/rover/j", "--token-file", "j.token", "--addr-file", "a", "--job", "j"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "j", TokenFile: "j.token", AddrFile: "a", StateDir: "/var/lib/rover/j", Linger: 5 * time.Second}},
		{"state in the Kubernetes API", []string{"--state-kube", "team-a/j-rover-master-state", "--job", "j"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "j", Linger: 5 * time.Second,
				StateKube: struct{ Namespace, Name string }{"team-a", "j-rover-master-state"}}},
		{"preset, durations in seconds or Go's syntax", []string{"--nnodes", "2:4", "--node-unit", "2", "--max-restarts", "3",
			"--heartbeat-timeout", "30", "--last-call-timeout", "1.5", "--join-timeout", "10m", "--disconnect-grace", "0", "--linger", "0"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "none", Preset: preset(func(p *runconfig.Policy) {
				p.MinNodes, p.MaxNodes, p.NodeUnit, p.MaxRestarts = 2, 4, 2, 3
				p.HeartbeatTimeout, p.LastCallTimeout, p.JoinTimeout, p.DisconnectGrace = 30*time.Second, 1500*time.Millisecond, 10*time.Minute, 0
			})}},
		// Without --checkpoint-keep the keep is the default, which a
		// worker's Checkpointer(dir, keep) may still declare.
		{"checkpoint dir, default keep", []string{"--checkpoint-dir", "/ckpt/j"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "none", Linger: 5 * time.Second,
				Checkpoint: jobconfig.CheckpointStorage{URL: "/ckpt/j", Keep: 1, KeepDefault: true}}},
		{"checkpoint dir and keep", []string{"--checkpoint-dir", "/ckpt/j", "--checkpoint-keep", "1"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "none", Linger: 5 * time.Second,
				Checkpoint: jobconfig.CheckpointStorage{URL: "/ckpt/j", Keep: 1}}},
		{"Kubernetes API limits", []string{"--state-kube", "ns/s", "--kube-api-qps", "50.5", "--kube-api-burst", "60"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "none", Linger: 5 * time.Second, KubeQPS: 50.5, KubeBurst: 60,
				StateKube: struct{ Namespace, Name string }{"ns", "s"}}},
		{"discard state", []string{"--state-dir", "d", "--discard-state"},
			masterConfig{Listen: "127.0.0.1:29400", Job: "none", Linger: 5 * time.Second, StateDir: "d", DiscardState: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMasterFlags(tt.args, io.Discard)
			if err != nil {
				t.Fatalf("parseMasterFlags(%q): %v", tt.args, err)
			}
			if tt.want.KubeQPS == 0 { // the defaults, sized for 1,000 nodes
				tt.want.KubeQPS, tt.want.KubeBurst = kubemaster.DefaultQPS, kubemaster.DefaultBurst
			}
			if diff := cmp.Diff(&tt.want, got); diff != "" {
				t.Errorf("parseMasterFlags(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestMasterFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // every line of the error
	}{
		{"nnodes syntax", []string{"--nnodes", "2x"}, []string{"--nnodes=2x: want N or MIN:MAX, e.g. 2 or 1:4"}},
		{"nnodes reversed", []string{"--nnodes", "4:2"},
			[]string{"--nnodes=4:2: minimum 4 is greater than maximum 2; write --nnodes=MIN:MAX with MIN <= MAX"}},
		{"node unit zero", []string{"--nnodes", "2", "--node-unit", "0"}, []string{"--node-unit=0: must be at least 1"}},
		{"node unit word", []string{"--nnodes", "2", "--node-unit", "x"}, []string{"--node-unit=x: want a whole number"}},
		{"restarts negative", []string{"--nnodes", "2", "--max-restarts=-1"}, []string{"--max-restarts=-1: must be 0 to 1048576"}},
		{"bounds", []string{"--nnodes", "2000000", "--max-restarts=2000000", "--join-timeout=100000h", "--hang-timeout=721h", "--linger=800h",
			"--checkpoint-dir=/tmp/ck", "--checkpoint-keep=2000000"},
			[]string{
				"--checkpoint-keep=2000000: want 0 (keep all) to 1048576",
				"--linger=800h0m0s: must be at most 720h (30 days), the longest duration Rover accepts",
				"--nnodes=2000000: at most 1048576 nodes; lower the maximum",
				"--max-restarts=2000000: must be 0 to 1048576",
				"--join-timeout=100000h0m0s: must be at most 720h (30 days), the longest duration Rover accepts",
				"--hang-timeout=721h0m0s: must be at most 720h (30 days), the longest duration Rover accepts",
			}},
		{"heartbeat timeout below the millisecond", []string{"--nnodes", "2", "--heartbeat-timeout", "1ns"},
			[]string{"--heartbeat-timeout=1ns: must be at least 1ms: the master keeps whole milliseconds"}},
		{"negative durations", []string{"--nnodes", "2", "--last-call-timeout=-1s", "--join-timeout=-2", "--disconnect-grace=-5s", "--linger=-1s"},
			[]string{
				"--linger=-1s: must not be negative",
				"--join-timeout=-2s: must be positive",
				"--last-call-timeout=-1s: must be positive",
				"--disconnect-grace=-5s: must not be negative",
			}},
		{"duration word", []string{"--nnodes", "2", "--join-timeout", "soon"},
			[]string{"--join-timeout=soon: want seconds (e.g. 30 or 0.5) or a duration (e.g. 500ms or 10m)"}},
		{"preset flag without --nnodes", []string{"--max-restarts", "3"},
			[]string{"--max-restarts=3 takes effect only with --nnodes: add --nnodes N or MIN:MAX, or drop it to take the first agent's settings"}},
		{"a TLS certificate without its key", []string{"--tls-cert", "cert.pem"},
			[]string{"--tls-cert and --tls-key go together: give both to serve TLS, or neither to serve cleartext HTTP/2"}},
		{"a TLS key without its certificate", []string{"--tls-key", "key.pem"},
			[]string{"--tls-cert and --tls-key go together: give both to serve TLS, or neither to serve cleartext HTTP/2"}},
		{"state kube without a namespace", []string{"--state-kube", "state"},
			[]string{"--state-kube=state: want NAMESPACE/NAME, such as team-a/llama-rover-master-state"}},
		{"state in two places", []string{"--state-kube", "ns/state", "--state-dir", "d"},
			[]string{"--state-dir and --state-kube both say where the state goes: give one"}},
		{"Kubernetes API limits without Kubernetes", []string{"--kube-api-qps", "50"},
			[]string{"--kube-api-qps takes effect only with --platform kubernetes or --state-kube"}},
		{"Kubernetes API limits out of range", []string{"--state-kube", "ns/s", "--kube-api-qps", "0", "--kube-api-burst", "many"},
			[]string{"--kube-api-qps=0: want a number of requests per second above 0, such as 200",
				"--kube-api-burst=many: want a whole number of requests of 1 or more, such as 400"}},
		{"a burst below the rate", []string{"--state-kube", "ns/s", "--kube-api-qps", "100", "--kube-api-burst", "10"},
			[]string{"--kube-api-burst=10: must be at least --kube-api-qps (100)"}},
		{"discard state without a state dir", []string{"--discard-state"},
			[]string{"--discard-state takes effect only with --state-dir: a master without one has no journal to discard"}},
		{"every problem at once", []string{"--nnodes", "2x", "--node-unit", "0", "--heartbeat-timeout", "1ns", "--linger", "soon", "extra"},
			[]string{
				`rover master takes no arguments, got ["extra"]`,
				"--linger=soon: want seconds (e.g. 30 or 0.5) or a duration (e.g. 500ms or 10m)",
				"--nnodes=2x: want N or MIN:MAX, e.g. 2 or 1:4",
				"--node-unit=0: must be at least 1",
				"--heartbeat-timeout=1ns: must be at least 1ms: the master keeps whole milliseconds",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantMasterFlagErrors(t, tt.args, tt.want) })
	}
}

// TestMasterMessagesMatchRun: `rover master` and `rover run` refuse the same
// values with the same words, each naming its own flag.
func TestMasterMessagesMatchRun(t *testing.T) {
	tests := []struct {
		name           string
		master, run    []string
		masterRef, ref string // how each names the setting
	}{
		{"node unit", []string{"--nnodes", "2", "--node-unit", "0"}, []string{"--node-unit", "0"}, "--node-unit=0", "--node-unit=0"},
		{"nnodes", []string{"--nnodes", "2x"}, []string{"--nnodes", "2x"}, "--nnodes=2x", "--nnodes=2x"},
		{"heartbeat timeout", []string{"--nnodes", "2", "--heartbeat-timeout", "1ns"}, []string{"--rdzv-conf", "heartbeat_timeout=1ns"},
			"--heartbeat-timeout=1ns", "--rdzv-conf heartbeat_timeout=1ns"},
		{"negative grace", []string{"--nnodes", "2", "--disconnect-grace", "-1"}, []string{"--rdzv-conf", "disconnect_grace=-1"},
			"--disconnect-grace=-1s", "--rdzv-conf disconnect_grace=-1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, merr := parseMasterFlags(tt.master, io.Discard)
			_, rerr := runconfig.Parse(append(tt.run, "--no-python", "true"), nil)
			if merr == nil || rerr == nil {
				t.Fatalf("rover master: %v; rover run: %v; want both to refuse", merr, rerr)
			}
			var want string
			for _, line := range strings.Split(merr.Error(), "\n") {
				if rest, ok := strings.CutPrefix(line, tt.masterRef); ok {
					want = tt.ref + rest
				}
			}
			if want == "" || !strings.Contains(rerr.Error(), want) {
				t.Errorf("rover run says:\n%v\nwant the line of rover master, %q, with its own flag: %q", rerr, merr, want)
			}
		})
	}
}

func TestMasterTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	existing := filepath.Join(dir, "existing.token")
	if err := os.WriteFile(existing, []byte("from-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		tokenFile string
		env       string
		want      string // "" for a new random token
		wantFile  string
	}{
		{"--token-file wins over ROVER_TOKEN", existing, "from-env-0123456789", "from-file-0123456789", existing},
		{"--token-file made when missing, even with ROVER_TOKEN", filepath.Join(dir, "new.token"), "from-env-0123456789", "", filepath.Join(dir, "new.token")},
		{"ROVER_TOKEN without --token-file", "", "from-env-0123456789", "from-env-0123456789", ""},
		{"neither: <job>.token in the working directory", "", "", "", "j.token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &masterConfig{Job: "j", TokenFile: tt.tokenFile}
			token, file, err := masterToken(c, func(k string) string {
				if k == "ROVER_TOKEN" {
					return tt.env
				}
				return ""
			})
			if err != nil {
				t.Fatal(err)
			}
			if file != tt.wantFile {
				t.Errorf("token file %q, want %q", file, tt.wantFile)
			}
			if tt.want != "" && token != tt.want || tt.want == "" && (token == "" || token == tt.env) {
				t.Errorf("token %q, want %q (\"\": a new one)", token, tt.want)
			}
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil || strings.TrimSpace(string(b)) != token {
					t.Errorf("%s holds %q (%v), want the token %q", file, b, err, token)
				}
			}
		})
	}
}

// startTestMaster runs a master whose token is in a file.
func startTestMaster(t *testing.T) (addr, tokenFile string) {
	t.Helper()
	tokenFile = filepath.Join(t.TempDir(), "job.token")
	if err := os.WriteFile(tokenFile, []byte("right-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Token: "right-token-0123456789", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m.Addr(), tokenFile
}

// TestTokenFileWinsOverTheVariable runs `rover status` and `rover run`
// against a real master with a wrong ROVER_TOKEN and the right token file.
func TestTokenFileWinsOverTheVariable(t *testing.T) {
	addr, tokenFile := startTestMaster(t)
	t.Setenv("ROVER_TOKEN", "wrong")
	tests := []struct {
		name string
		args []string
		want string // on stdout
	}{
		{"status", []string{"rover", "status", "--master", addr, "--token-file", tokenFile}, "job default: running"},
		{"status table", []string{"rover", "status", "--master", addr, "--token-file", tokenFile},
			"NODE  RANK  GROUP RANK  ADDR  RELAUNCHES  HOST  STATE\n"},
		{"run", []string{"rover", "run", "--nnodes", "1", "--rdzv-endpoint", addr, "--token-file", tokenFile,
			"--node-id", "n", "--no-python", "true"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.want) {
				t.Errorf("stdout lacks %q:\n%s", tt.want, stdout.String())
			}
		})
	}
	// A token file that cannot be read is an error, not a fall back to ROVER_TOKEN.
	var stdout, stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "missing.token")
	if code := run([]string{"rover", "run", "--nnodes", "2", "--rdzv-endpoint", addr, "--token-file", missing,
		"--no-python", "true"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "missing.token") {
		t.Errorf("rover run with a missing token file: exit %d, want 2 naming the file; stderr:\n%s", code, stderr.String())
	}
}

// wantMasterFlagErrors checks that rover master refuses args as a usage
// error (exit 2) whose lines are want, all at once.
func wantMasterFlagErrors(t *testing.T, args, want []string) {
	t.Helper()
	c, err := parseMasterFlags(args, io.Discard)
	if err == nil {
		t.Fatalf("parseMasterFlags(%q) = %+v, want errors", args, c)
	}
	if _, ok := err.(usageError); !ok {
		t.Errorf("parseMasterFlags(%q) = %T, want a usageError (exit 2)", args, err)
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("parseMasterFlags(%q) errors (-want +got):\n%s", args, diff)
	}
}
