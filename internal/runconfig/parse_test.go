package runconfig

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// files are the training scripts the test parser finds.
var files = fstest.MapFS{
	"train.py":     {},
	"-weird.py":    {},
	"dir/train.py": {},
}

// testParser returns a Parser over env, with gpus GPUs, 6 CPUs and files.
func testParser(env map[string]string, gpus int) Parser {
	return Parser{
		Getenv:    func(k string) string { return env[k] },
		CountGPUs: func() int { return gpus },
		NumCPU:    func() int { return 6 },
		Stat:      func(name string) (fs.FileInfo, error) { return fs.Stat(files, name) },
	}
}

// base is the Config of "rover run train.py", written out independently of
// the flag table.
func base() *Config {
	return &Config{
		MinNodes: 1, MaxNodes: 1,
		NprocPerNode:          1,
		RdzvBackend:           "c10d",
		Standalone:            true,
		RunID:                 "none",
		JoinTimeout:           600 * time.Second,
		LastCallTimeout:       30 * time.Second,
		CloseTimeout:          30 * time.Second,
		HeartbeatTimeout:      30 * time.Second,
		MasterTimeout:         600 * time.Second,
		DisconnectGrace:       5 * time.Second,
		MonitorInterval:       100 * time.Millisecond,
		StartMethod:           "spawn",
		Role:                  "default",
		NodeRank:              -1,
		MasterAddr:            "127.0.0.1",
		MasterPort:            29500,
		NodeUnit:              1,
		TrainingPort:          60000,
		Accelerator:           "nvidia.com/gpu",
		MembindPolicy:         "preferred",
		UCPDeviceType:         "cpu",
		CheckpointKeep:        1,
		CheckpointBackupBytes: -1,
		StopGracePeriod:       30 * time.Second,
		HeartbeatInterval:     5 * time.Second,
		HangTimeout:           5 * time.Minute,
		HangDetection:         1,
		StandbyWorkers:        true,
		Entrypoint:            "train.py",
	}
}

var cmpConfig = []cmp.Option{cmpopts.IgnoreUnexported(Config{}), cmpopts.EquateEmpty()}

func TestParse(t *testing.T) {
	multi := func(lo, hi int, ep string) func(*Config) {
		return func(c *Config) { c.MinNodes, c.MaxNodes, c.RdzvEndpoint, c.Standalone = lo, hi, ep, false }
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		gpus int
		want func(*Config) // changes to base()
	}{
		{name: "script only", args: []string{"train.py"}},
		{name: "script in a directory", args: []string{"dir/train.py"},
			want: func(c *Config) { c.Entrypoint = "dir/train.py" }},
		{name: "dash spellings with =", args: []string{"--nproc-per-node=4", "--nnodes=2", "--rdzv-endpoint=m:1234", "train.py"},
			want: func(c *Config) { multi(2, 2, "m:1234")(c); c.NprocPerNode = 4 }},
		{name: "underscore spellings with space", args: []string{"--nproc_per_node", "4", "--nnodes", "2", "--rdzv_endpoint", "m:1234", "train.py"},
			want: func(c *Config) { multi(2, 2, "m:1234")(c); c.NprocPerNode = 4 }},
		{name: "mixed spellings", args: []string{"--max_restarts=3", "--monitor-interval", "5", "--rdzv_id=job1", "train.py"},
			want: func(c *Config) { c.MaxRestarts, c.MonitorInterval, c.RunID = 3, 5*time.Second, "job1" }},
		{name: "elastic range and default port", args: []string{"--nnodes=1:4", "--rdzv-endpoint", "master", "train.py"},
			want: multi(1, 4, "master:29400")},
		{name: "ipv6 endpoint without port", args: []string{"--nnodes=2", "--rdzv-endpoint=[::1]", "train.py"},
			want: multi(2, 2, "[::1]:29400")},
		{name: "ipv6 endpoint with port", args: []string{"--nnodes=2", "--rdzv-endpoint=[fe80::1%eth0]:1234", "train.py"},
			want: multi(2, 2, "[fe80::1%eth0]:1234")},
		{name: "one node with an endpoint is not standalone", args: []string{"--rdzv-endpoint=m", "train.py"},
			want: func(c *Config) { c.RdzvEndpoint, c.Standalone = "m:29400", false }},
		{name: "nproc auto with gpus", args: []string{"--nproc-per-node=auto", "train.py"}, gpus: 8,
			want: func(c *Config) { c.NprocPerNode = 8 }},
		{name: "nproc auto without gpus uses cpus", args: []string{"--nproc-per-node=auto", "train.py"},
			want: func(c *Config) { c.NprocPerNode = 6 }},
		{name: "nproc gpu", args: []string{"--nproc-per-node", "gpu", "train.py"}, gpus: 2,
			want: func(c *Config) { c.NprocPerNode = 2 }},
		{name: "nproc cpu", args: []string{"--nproc-per-node", "cpu", "train.py"}, gpus: 2,
			want: func(c *Config) { c.NprocPerNode = 6 }},
		{name: "script args that look like flags", args: []string{"--nnodes=1", "train.py", "--nnodes", "5", "-m", "--", "--help", "x"},
			want: func(c *Config) { c.Args = []string{"--nnodes", "5", "-m", "--", "--help", "x"} }},
		{name: "double dash ends options", args: []string{"--nproc-per-node=2", "--", "train.py", "--lr=1"},
			want: func(c *Config) { c.NprocPerNode, c.Args = 2, []string{"--lr=1"} }},
		{name: "double dash before a script that starts with a dash", args: []string{"--", "-weird.py", "-x"},
			want: func(c *Config) { c.Entrypoint, c.Args = "-weird.py", []string{"-x"} }},
		{name: "module", args: []string{"-m", "pkg.train", "--config", "a.yaml"},
			want: func(c *Config) { c.Module, c.Entrypoint, c.Args = true, "pkg.train", []string{"--config", "a.yaml"} }},
		{name: "module long form", args: []string{"--module", "pkg.train"},
			want: func(c *Config) { c.Module, c.Entrypoint = true, "pkg.train" }},
		{name: "no python", args: []string{"--no_python", "bash", "-c", "echo hi"},
			want: func(c *Config) { c.NoPython, c.Entrypoint, c.Args = true, "bash", []string{"-c", "echo hi"} }},
		{name: "no python with double dash", args: []string{"--no-python", "--", "-prog"},
			want: func(c *Config) { c.NoPython, c.Entrypoint = true, "-prog" }},
		{name: "per-rank redirects and short tee", args: []string{"--nproc-per-node=2", "-r", "0:1,1:2", "-t3", "train.py"},
			want: func(c *Config) {
				c.NprocPerNode = 2
				c.Redirects = StdSpec{PerRank: map[int]int{0: 1, 1: 2}}
				c.Tee = StdSpec{Default: 3}
			}},
		{name: "redirects long forms", args: []string{"--redirects=3", "--tee", " 0:1, 1:2 ", "-r=2", "train.py"},
			want: func(c *Config) {
				c.Redirects = StdSpec{Default: 2}
				c.Tee = StdSpec{PerRank: map[int]int{0: 1, 1: 2}}
			}},
		{name: "rdzv-conf durations", args: []string{"--rdzv-conf",
			"join_timeout=900,last_call_timeout=500ms,close_timeout=1m,heartbeat_timeout=120,disconnect_grace=2.5,read_timeout=60,pend_timeout=100,use_libuv=1,",
			"train.py"},
			want: func(c *Config) {
				c.JoinTimeout, c.LastCallTimeout, c.CloseTimeout = 900*time.Second, 500*time.Millisecond, time.Minute
				c.HeartbeatTimeout, c.DisconnectGrace = 120*time.Second, 2500*time.Millisecond
				c.RdzvConf = map[string]string{"join_timeout": "900", "last_call_timeout": "500ms", "close_timeout": "1m",
					"heartbeat_timeout": "120", "disconnect_grace": "2.5", "read_timeout": "60", "pend_timeout": "100", "use_libuv": "1"}
				c.Warnings = []string{"--rdzv-conf pend_timeout does nothing here: a node left out of a world waits for the next round, and the master ends a job that cannot form one after join_timeout"}
			}},
		{name: "rdzv-conf dlrover lastcall spelling", args: []string{"--rdzv_conf=lastcall_timeout=45", "train.py"},
			want: func(c *Config) {
				c.LastCallTimeout, c.RdzvConf = 45*time.Second, map[string]string{"lastcall_timeout": "45"}
			}},
		{name: "PET defaults", args: []string{"train.py"},
			env: map[string]string{"PET_NPROC_PER_NODE": "2", "PET_NNODES": "1:3", "PET_RDZV_ENDPOINT": "host",
				"PET_MAX_RESTARTS": "3", "PET_RDZV_ID": "j", "PET_RDZV_CONF": "join_timeout=10", "PET_REDIRECTS": "3"},
			want: func(c *Config) {
				multi(1, 3, "host:29400")(c)
				c.NprocPerNode, c.MaxRestarts, c.RunID, c.Redirects = 2, 3, "j", StdSpec{Default: 3}
				c.JoinTimeout, c.RdzvConf = 10*time.Second, map[string]string{"join_timeout": "10"}
			}},
		{name: "PET boolean defaults", args: []string{"pkg"}, env: map[string]string{"PET_MODULE": "1", "PET_RUN_PATH": "0"},
			want: func(c *Config) { c.Module, c.Entrypoint = true, "pkg" }},
		{name: "command line beats env", args: []string{"--nproc-per-node=3", "--max-restarts", "1", "train.py"},
			env:  map[string]string{"PET_NPROC_PER_NODE": "2", "PET_MAX_RESTARTS": "bad"},
			want: func(c *Config) { c.NprocPerNode, c.MaxRestarts = 3, 1 }},
		{name: "empty env value counts as unset", args: []string{"train.py"}, env: map[string]string{"PET_NNODES": ""}},
		{name: "ROVER_MASTER_ADDR gives the endpoint", args: []string{"--nnodes=2", "train.py"},
			env: map[string]string{"ROVER_MASTER_ADDR": "m:5"}, want: multi(2, 2, "m:5")},
		{name: "PET_RDZV_ENDPOINT beats ROVER_MASTER_ADDR", args: []string{"--nnodes=2", "train.py"},
			env: map[string]string{"ROVER_MASTER_ADDR": "m:5", "PET_RDZV_ENDPOINT": "p:6"}, want: multi(2, 2, "p:6")},
		{name: "command-line endpoint beats ROVER_MASTER_ADDR", args: []string{"--nnodes=2", "--rdzv-endpoint=c", "train.py"},
			env: map[string]string{"ROVER_MASTER_ADDR": "m:5"}, want: multi(2, 2, "c:29400")},
		{name: "ROVER env for rover flags", args: []string{"train.py"},
			env: map[string]string{"ROVER_TOKEN_FILE": "/t", "ROVER_NODE_ID": "n1", "ROVER_STOP_GRACE_PERIOD": "10s", "ROVER_HEARTBEAT_INTERVAL": "5"},
			want: func(c *Config) {
				c.TokenFile, c.NodeID, c.StopGracePeriod, c.HeartbeatInterval = "/t", "n1", 10*time.Second, 5*time.Second
			}},
		{name: "rover flags", args: []string{"--token-file", "/t", "--node_id=n2", "--stop-grace-period=1m30s", "--heartbeat-interval", "2.5", "train.py"},
			env: map[string]string{"ROVER_NODE_ID": "n1"},
			want: func(c *Config) {
				c.TokenFile, c.NodeID, c.StopGracePeriod, c.HeartbeatInterval = "/t", "n2", 90*time.Second, 2500*time.Millisecond
			}},
		{name: "TLS flags", args: []string{"--nnodes=2", "--tls-ca", "/ca.pem", "--tls-server-name=m.example", "train.py"},
			env:  map[string]string{"ROVER_MASTER_ADDR": "m:5"},
			want: func(c *Config) { multi(2, 2, "m:5")(c); c.TLSCA, c.TLSServerName = "/ca.pem", "m.example" }},
		{name: "TLS flags from env", args: []string{"--nnodes=2", "train.py"},
			env:  map[string]string{"ROVER_MASTER_ADDR": "m:5", "ROVER_TLS_CA": "/ca.pem", "ROVER_TLS_SERVER_NAME": "m.example"},
			want: func(c *Config) { multi(2, 2, "m:5")(c); c.TLSCA, c.TLSServerName = "/ca.pem", "m.example" }},
		{name: "standalone flag", args: []string{"--standalone", "train.py"}},
		{name: "standalone=true", args: []string{"--standalone=true", "train.py"}},
		{name: "standalone=false with endpoint", args: []string{"--standalone=false", "--rdzv-endpoint=m", "train.py"},
			want: func(c *Config) { c.RdzvEndpoint, c.Standalone = "m:29400", false }},
		{name: "command-line endpoint beats PET_STANDALONE", args: []string{"--nnodes=2", "--rdzv-endpoint=m", "train.py"},
			env: map[string]string{"PET_STANDALONE": "1"}, want: multi(2, 2, "m:29400")},
		{name: "command-line nnodes beats PET_STANDALONE", args: []string{"--nnodes=2", "train.py"},
			env: map[string]string{"PET_STANDALONE": "1", "ROVER_MASTER_ADDR": "m"}, want: multi(2, 2, "m:29400")},
		{name: "command-line standalone beats ROVER_MASTER_ADDR", args: []string{"--standalone", "train.py"},
			env: map[string]string{"ROVER_MASTER_ADDR": "m:5"}},
		{name: "master addr and port", args: []string{"--master-addr", "10.0.0.1", "--master_port=1234", "train.py"},
			want: func(c *Config) {
				c.MasterAddr, c.MasterAddrSet, c.MasterPort, c.MasterPortSet = "10.0.0.1", true, 1234, true
			}},
		{name: "master addr from env is set", args: []string{"train.py"}, env: map[string]string{"PET_MASTER_ADDR": "h"},
			want: func(c *Config) { c.MasterAddr, c.MasterAddrSet = "h", true }},
		{name: "checkpoint keep given", args: []string{"--checkpoint-keep", "1", "train.py"},
			want: func(c *Config) { c.CheckpointKeep, c.CheckpointKeepSet = 1, true }},
		{name: "checkpoint keep from env is set", args: []string{"train.py"}, env: map[string]string{"ROVER_CHECKPOINT_KEEP": "3"},
			want: func(c *Config) { c.CheckpointKeep, c.CheckpointKeepSet = 3, true }},
		{name: "local ranks filter sorted and unique", args: []string{"--nproc-per-node=4", "--local-ranks-filter", "3, 0,0", "train.py"},
			want: func(c *Config) { c.NprocPerNode, c.LocalRanksFilter = 4, []int{0, 3} }},
		{name: "negative number as value", args: []string{"--node-rank", "-1", "train.py"}},
		{name: "node rank", args: []string{"--nnodes=2", "--rdzv-endpoint=m", "--node_rank", "1", "train.py"},
			want: func(c *Config) { multi(2, 2, "m:29400")(c); c.NodeRank = 1 }},
		{name: "unique prefixes", args: []string{"--nproc", "4", "--max_rest=2", "--stand", "train.py"},
			want: func(c *Config) { c.NprocPerNode, c.MaxRestarts = 4, 2 }},
		{name: "dlrover flags", args: []string{"--nnodes=2:4", "--rdzv-endpoint=m", "--node-unit", "2", "--training_port=7000", "--precheck=0", "--auto-tunning=false", "train.py"},
			want: func(c *Config) { multi(2, 4, "m:29400")(c); c.NodeUnit, c.TrainingPort = 2, 7000 }},
		{name: "other torchrun flags", args: []string{"--start-method=fork", "--role", "trainer", "--log-dir=/logs", "--local-addr", "10.1.1.1",
			"--run-path", "--rdzv-backend=static", "--monitor_interval=250ms", "--logs_specs=default", "train.py"},
			want: func(c *Config) {
				c.StartMethod, c.Role, c.LogDir, c.LocalAddr = "fork", "trainer", "/logs", "10.1.1.1"
				c.RunPath, c.RdzvBackend, c.MonitorInterval, c.LogsSpecs = true, "static", 250*time.Millisecond, "default"
			}},
		{name: "accepted backends", args: []string{"--rdzv-backend=rover", "--rdzv-backend=dlrover", "train.py"},
			want: func(c *Config) { c.RdzvBackend = "dlrover" }},
		{name: "last value wins", args: []string{"--nproc-per-node", "2", "--nproc-per-node", "3", "train.py"},
			want: func(c *Config) { c.NprocPerNode = 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := testParser(tt.env, tt.gpus).Parse(tt.args)
			if err != nil {
				t.Fatalf("Parse(%q) error:\n%v", tt.args, err)
			}
			want := base()
			if tt.want != nil {
				tt.want(want)
			}
			if diff := cmp.Diff(want, got, cmpConfig...); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"--nnodes=2", "--help", "train.py"}, {"--bogus", "-h"}, {"--help=1"},
	} {
		if _, err := testParser(nil, 0).Parse(args); !errors.Is(err, ErrHelp) {
			t.Errorf("Parse(%q) = %v, want ErrHelp", args, err)
		}
	}
	// After the script, --help belongs to the script.
	c, err := testParser(nil, 0).Parse([]string{"train.py", "--help"})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if diff := cmp.Diff([]string{"--help"}, c.Args); diff != "" {
		t.Errorf("Args (-want +got):\n%s", diff)
	}
}

func TestParseNilGetenv(t *testing.T) {
	c, err := Parse([]string{"--no-python", "true"}, nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.NprocPerNode != 1 || !c.Standalone || c.Entrypoint != "true" {
		t.Errorf("Parse = %+v, want defaults with entrypoint true", c)
	}
}

func TestParseDoesNotAliasArgs(t *testing.T) {
	args := []string{"--no-python", "prog", "a", "b"}
	c, err := Parse(args, nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	args[2] = "changed"
	if diff := cmp.Diff([]string{"a", "b"}, c.Args); diff != "" {
		t.Errorf("Args changed with the input (-want +got):\n%s", diff)
	}
}
