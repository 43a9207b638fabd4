package runconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// dlroverRunFlags is every argument dlrover-run adds to torchrun's
// (dlrover/trainer/torch/elastic_run.py, parse_args), in each spelling it
// registers, with a value of its type; nil for a switch. Every one must
// parse.
var dlroverRunFlags = []struct {
	spellings []string
	value     string // "" for a switch
}{
	{[]string{"--precheck"}, "1"},
	{[]string{"--node_unit", "--node-unit"}, "1"},
	{[]string{"--auto_config", "--auto-config"}, ""},
	{[]string{"--auto_tunning", "--auto-tunning"}, ""},
	{[]string{"--exclude-straggler", "--exclude_straggler"}, ""},
	{[]string{"--save_at_breakpoint", "--save-at-breakpoint"}, ""},
	{[]string{"--accelerator"}, "nvidia.com/gpu"},
	{[]string{"--training_port", "--training-port"}, "60000"},
	{[]string{"--numa-affinity", "--numa_affinity"}, ""},
	{[]string{"--membind-policy", "--membind_policy"}, "bind"},
	{[]string{"--network-check", "--network_check"}, ""},
	{[]string{"--comm-perf-test", "--comm_perf_test"}, ""},
	{[]string{"--ucp_device_type"}, "cpu"},
	// DLRover's master flags that job scripts also pass to dlrover-run.
	{[]string{"--hang_detection", "--hang-detection"}, "1"},
	{[]string{"--hang_downtime", "--hang-downtime"}, "5"},
}

// TestParseEveryDLRoverFlag parses each dlrover-run argument in each
// spelling and value form: --flag=value, --flag value, and PET_<NAME>.
func TestParseEveryDLRoverFlag(t *testing.T) {
	for _, f := range dlroverRunFlags {
		for _, spelled := range f.spellings {
			forms := map[string][]string{"alone": {spelled}}
			if f.value != "" {
				forms = map[string][]string{"=": {spelled + "=" + f.value}, "space": {spelled, f.value}}
			} else {
				forms["=true"] = []string{spelled + "=true"}
				forms["=0"] = []string{spelled + "=0"}
			}
			for form, args := range forms {
				t.Run(spelled+" "+form, func(t *testing.T) {
					args := append(append([]string{}, args...), "train.py")
					if _, err := testParser(nil, 1).Parse(args); err != nil {
						t.Fatalf("Parse(%q): %v", args, err)
					}
				})
			}
		}
		name := strings.TrimLeft(f.spellings[0], "-")
		if name == "hang_detection" {
			continue // Rover's flag: its environment variable is ROVER_HANG_DETECTION
		}
		env := "PET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		v := f.value
		if v == "" {
			v = "1"
		}
		t.Run(env, func(t *testing.T) {
			if _, err := testParser(map[string]string{env: v}, 1).Parse([]string{"train.py"}); err != nil {
				t.Fatalf("Parse with %s=%s: %v", env, v, err)
			}
		})
	}
}

// TestDLRoverFlags checks what each dlrover-run switch does, and the note
// of one that does nothing on this machine.
func TestDLRoverFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		gpus  int
		numa  int
		want  func(*Config) // changes to base()
		notes []string      // substrings of c.Warnings, in order; nil: none
	}{
		{name: "precheck 0 checks nothing", args: []string{"--precheck=0", "train.py"}},
		{name: "precheck 1 is the node check", args: []string{"--precheck", "1", "train.py"},
			want: func(c *Config) { c.Precheck, c.NetworkCheck = 1, true }},
		{name: "precheck 2 adds the larger collective", args: []string{"--precheck=2", "train.py"},
			want: func(c *Config) { c.Precheck, c.NetworkCheck, c.CommPerfTest = 2, true, true }},
		{name: "auto config from NODE_NUM and the GPUs", args: []string{"--auto_config", "--rdzv-endpoint=m", "train.py"},
			env: map[string]string{"NODE_NUM": "4"}, gpus: 8,
			want: func(c *Config) {
				c.AutoConfig, c.MinNodes, c.MaxNodes, c.NprocPerNode, c.NetworkCheck = true, 4, 4, 8, true
				c.RdzvEndpoint, c.Standalone = "m:29400", false
			},
			notes: []string{"--auto-config set --nnodes=4 from NODE_NUM, --nproc-per-node=8, one per GPU, the node check, for 4 nodes or more"}},
		{name: "auto config wins over the command line", args: []string{"--auto-config", "--nnodes=1", "--nproc-per-node=2", "--rdzv-endpoint=m", "train.py"},
			env: map[string]string{"NODE_NUM": "2"}, gpus: 4,
			want: func(c *Config) {
				c.AutoConfig, c.MinNodes, c.MaxNodes, c.NprocPerNode = true, 2, 2, 4
				c.RdzvEndpoint, c.Standalone = "m:29400", false
			},
			notes: []string{"--auto-config set --nnodes=2 from NODE_NUM, --nproc-per-node=4"}},
		{name: "auto config with nothing to read", args: []string{"--auto-config", "train.py"},
			want:  func(c *Config) { c.AutoConfig = true },
			notes: []string{"--auto-config changed nothing: NODE_NUM is unset and this machine has no NVIDIA GPUs"}},
		{name: "auto tunning is noted", args: []string{"--auto-tunning", "train.py"},
			want:  func(c *Config) { c.AutoTunning = true },
			notes: []string{"--auto-tunning does nothing here"}},
		{name: "nvidia accelerator with GPUs", args: []string{"--accelerator=nvidia.com/gpu", "train.py"}, gpus: 2},
		{name: "nvidia accelerator on CPU", args: []string{"--accelerator", "nvidia.com/gpu", "train.py"},
			notes: []string{"--accelerator=nvidia.com/gpu does nothing here: this machine has no NVIDIA GPUs"}},
		{name: "ascend accelerator", args: []string{"--accelerator=ascend-npu", "train.py"},
			want:  func(c *Config) { c.Accelerator = AcceleratorAscend },
			notes: []string{"--accelerator=ascend-npu does nothing here: Rover finds the machine's devices itself"}},
		{name: "cpu accelerator on CPU", args: []string{"--accelerator=cpu", "train.py"},
			want: func(c *Config) { c.Accelerator = AcceleratorCPU }},
		{name: "accelerator from env", args: []string{"train.py"}, env: map[string]string{"PET_ACCELERATOR": "metax-tech.com/gpu"},
			want:  func(c *Config) { c.Accelerator = AcceleratorMetaX },
			notes: []string{"--accelerator=metax-tech.com/gpu does nothing here"}},
		{name: "numa affinity on one NUMA node", args: []string{"--numa_affinity", "--membind_policy=bind", "train.py"}, numa: 1,
			want:  func(c *Config) { c.NUMAAffinity, c.MembindPolicy = true, "bind" },
			notes: []string{"--numa-affinity does nothing here: this machine has one NUMA node"}},
		{name: "numa affinity on two NUMA nodes", args: []string{"--numa-affinity", "train.py"}, numa: 2,
			want:  func(c *Config) { c.NUMAAffinity = true },
			notes: []string{"--numa-affinity does nothing yet: Rover does not bind workers to NUMA nodes; the kernel places them on this machine's 2 nodes"}},
		{name: "ucp device type", args: []string{"--ucp_device_type", "gpu", "train.py"},
			want:  func(c *Config) { c.UCPDeviceType = "gpu" },
			notes: []string{"--ucp-device-type=gpu does nothing here"}},
		{name: "hang downtime is minutes of --hang-timeout", args: []string{"--hang_downtime=10", "train.py"},
			want: func(c *Config) { c.HangDowntime, c.HangTimeout = 10, 10*time.Minute }},
		{name: "hang downtime beats rdzv-conf hang_timeout", args: []string{"--rdzv-conf=hang_timeout=60", "--hang-downtime", "3", "train.py"},
			want: func(c *Config) {
				c.HangDowntime, c.HangTimeout = 3, 3*time.Minute
				c.RdzvConf = map[string]string{"hang_timeout": "60"}
			}},
		{name: "hang timeout beats hang downtime", args: []string{"--hang-timeout=90s", "--hang_downtime=3", "train.py"},
			want:  func(c *Config) { c.HangDowntime, c.HangTimeout = 3, 90*time.Second },
			notes: []string{"--hang-downtime=3 is ignored: --hang-timeout=1m30s wins"}},
		{name: "pend_timeout is stored, and said to do nothing", args: []string{"--rdzv-conf=pend_timeout=3600", "train.py"},
			want:  func(c *Config) { c.RdzvConf = map[string]string{"pend_timeout": "3600"} },
			notes: []string{"--rdzv-conf pend_timeout does nothing here"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParser(tt.env, tt.gpus)
			p.NUMANodes = func() int { return max(tt.numa, 1) }
			got, err := p.Parse(tt.args)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			want := base()
			if tt.want != nil {
				tt.want(want)
			}
			notes := got.Warnings
			got.Warnings = nil
			if diff := cmp.Diff(want, got, cmpConfig...); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
			if len(notes) != len(tt.notes) {
				t.Fatalf("Parse(%q) notes %q, want %d like %q", tt.args, notes, len(tt.notes), tt.notes)
			}
			for i, n := range tt.notes {
				if !strings.Contains(notes[i], n) {
					t.Errorf("note %d = %q, want it to contain %q", i, notes[i], n)
				}
			}
		})
	}
}
