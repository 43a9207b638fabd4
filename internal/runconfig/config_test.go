package runconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStdSpec(t *testing.T) {
	per := StdSpec{Default: 1, PerRank: map[int]int{0: 3, 2: 0}}
	tests := []struct {
		spec StdSpec
		rank int
		want int
	}{
		{StdSpec{}, 0, 0},
		{StdSpec{Default: 3}, 7, 3},
		{per, 0, 3},
		{per, 1, 1},
		{per, 2, 0},
	}
	for _, tt := range tests {
		if got := tt.spec.For(tt.rank); got != tt.want {
			t.Errorf("%+v.For(%d) = %d, want %d", tt.spec, tt.rank, got, tt.want)
		}
	}
	for spec, want := range map[string]string{
		StdSpec{Default: 2}.String(): "2",
		per.String():                 "0:3,2:0",
	} {
		if spec != want {
			t.Errorf("String() = %q, want %q", spec, want)
		}
	}
}

func TestWorkerArgv(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(*Config)
		python string
		want   []string
	}{
		{"script", nil, "python3", []string{"python3", "-u", "train.py", "--lr", "1"}},
		{"default python", nil, "", []string{"python", "-u", "train.py", "--lr", "1"}},
		{"module", func(c *Config) { c.Module, c.Entrypoint = true, "pkg.train" }, "/venv/bin/python",
			[]string{"/venv/bin/python", "-u", "-m", "pkg.train", "--lr", "1"}},
		{"no python", func(c *Config) { c.NoPython, c.Entrypoint = true, "./run.sh" }, "python3",
			[]string{"./run.sh", "--lr", "1"}},
		{"no args", func(c *Config) { c.Args = nil }, "python3", []string{"python3", "-u", "train.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			c.Args = []string{"--lr", "1"}
			if tt.mod != nil {
				tt.mod(c)
			}
			got := c.WorkerArgv(tt.python)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WorkerArgv(%q) (-want +got):\n%s", tt.python, diff)
			}
			got[len(got)-1] = "changed"
			if len(c.Args) > 0 && c.Args[len(c.Args)-1] == "changed" {
				t.Error("WorkerArgv shares its result with c.Args")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	script := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // nil: valid
	}{
		{"valid", nil, nil},
		{"valid elastic", func(c *Config) { c.MaxNodes, c.RdzvEndpoint, c.Standalone = 4, "m:1", false }, nil},
		{"valid module needs no file", func(c *Config) { c.Module, c.Entrypoint = true, "no.such.module" }, nil},
		{"script missing", func(c *Config) { c.Entrypoint = filepath.Join(filepath.Dir(script), "gone.py") }, []string{"gone.py\" not found"}},
		{"bad endpoint", func(c *Config) { c.RdzvEndpoint, c.Standalone = "noport", false }, []string{"--rdzv-endpoint=noport: want HOST:PORT"}},
		{"endpoint port zero", func(c *Config) { c.RdzvEndpoint, c.Standalone = "h:0", false }, []string{"port 0 is out of range"}},
		{"min nodes above max", func(c *Config) { c.MinNodes, c.MaxNodes = 3, 2 }, []string{"--nnodes=3:2: minimum 3 is greater than maximum 2"}},
		{"zero timeouts", func(c *Config) { c.JoinTimeout, c.LastCallTimeout, c.CloseTimeout, c.HeartbeatTimeout = 0, 0, 0, 0 },
			[]string{"--rdzv-conf join_timeout=0s: must be positive", "last_call_timeout=0s", "close_timeout=0s", "heartbeat_timeout=0s"}},
		{"zero config", func(c *Config) { *c = Config{} }, []string{
			"--nnodes=0", "--nproc-per-node=0", "--node-unit=0", "--monitor-interval=0s", "--rdzv-backend= is unknown",
			"--rdzv-id is empty", "--master-port: port 0", "--training-port: port 0", "--start-method= is unknown",
			"no training script given", "--heartbeat-interval=0s",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			c.Entrypoint = script
			if tt.mod != nil {
				tt.mod(c)
			}
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() error does not contain %q; got:\n%v", w, err)
				}
			}
		})
	}
}

// TestValidateListsEachProblem checks that problems are joined, one per line.
func TestValidateListsEachProblem(t *testing.T) {
	c := base()
	c.Accelerator, c.MembindPolicy, c.Precheck = "tpu", "strict", 3
	err := c.validate(files.Stat)
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("Validate() = %v, want a joined error", err)
	}
	if got := len(joined.Unwrap()); got != 3 {
		t.Errorf("Validate() gave %d errors, want 3:\n%v", got, err)
	}
}

func TestUsage(t *testing.T) {
	u := Usage()
	want := []string{
		"usage: rover run [options] SCRIPT [ARGS...]",
		"torchrun flags:", "DLRover flags", "Rover flags:", "--rdzv-conf keys",
		"-m, --module", "-r, --redirects SPEC", "-t, --tee SPEC", "-h, --help",
		"(default 1:1; env PET_NNODES)", "env PET_RDZV_ENDPOINT, ROVER_MASTER_ADDR",
		"(default 30s; env ROVER_STOP_GRACE_PERIOD)", "join_timeout", "(default 600s)",
	}
	for _, f := range flags {
		want = append(want, "--"+f.name)
		want = append(want, f.env...)
	}
	for _, k := range rdzvKeys {
		want = append(want, "  "+k.name)
	}
	for _, w := range want {
		if !strings.Contains(u, w) {
			t.Errorf("Usage() does not mention %q", w)
		}
	}
	// Every flag is on its own line with its description.
	for _, f := range flags {
		if !strings.Contains(u, flagSyntax(f)+"  ") || !strings.Contains(u, f.help) {
			t.Errorf("Usage() has no line for --%s", f.name)
		}
	}
}

func TestFlagTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range flags {
		if seen[f.name] {
			t.Errorf("flag --%s is listed twice", f.name)
		}
		seen[f.name] = true
		if f.help == "" || (f.apply == nil) != (f.name == "help") {
			t.Errorf("flag --%s lacks help text or an apply function", f.name)
		}
		if !f.boolean && f.metavar == "" {
			t.Errorf("flag --%s takes a value but has no metavar", f.name)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"nnodes", "nnodes", 0},
		{"nnode", "nnodes", 1},
		{"rdzv-endpiont", "rdzv-endpoint", 1},
		{"standlone", "standalone", 1},
		{"foo", "role", 3},
		{"ab", "ba", 1},
		{"abc", "", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestEndpointNamesMaster: an endpoint from ROVER_MASTER_ADDR or
// DLROVER_MASTER_ADDR names a master the platform runs; one from the
// command line, PET_RDZV_ENDPOINT or Kubeflow's MASTER_ADDR does not.
func TestEndpointNamesMaster(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want bool
	}{
		{map[string]string{"ROVER_MASTER_ADDR": "10.0.0.1:29400"}, nil, true},
		{map[string]string{"DLROVER_MASTER_ADDR": "10.0.0.1:29400"}, nil, true},
		{map[string]string{"PET_RDZV_ENDPOINT": "10.0.0.1:29400"}, nil, false},
		{map[string]string{"MASTER_ADDR": "10.0.0.1"}, nil, false},
		{nil, []string{"--rdzv-endpoint", "10.0.0.1:29400"}, false},
	} {
		args := append(append([]string{"--nnodes", "2"}, tt.args...), "--no-python", "true")
		c, err := Parse(args, func(k string) string { return tt.env[k] })
		if err != nil {
			t.Fatalf("Parse(%v) with %v: %v", args, tt.env, err)
		}
		if got := c.EndpointNamesMaster(); got != tt.want {
			t.Errorf("EndpointNamesMaster with %v %v = %v, want %v", tt.env, tt.args, got, tt.want)
		}
	}
}
