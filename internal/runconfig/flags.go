package runconfig

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// group is a section of Usage.
type group int

const (
	groupGeneral group = iota
	groupTorchrun
	groupDLRover
	groupRover
)

// applyFunc sets a flag's value in c from its text. p supplies the machine
// (GPU and CPU counts).
type applyFunc func(p *Parser, c *Config, raw string) error

// flagDef describes one flag of "rover run".
type flagDef struct {
	name    string   // canonical long name: dashes, no leading "--"
	short   string   // single-letter short form, or ""
	boolean bool     // takes no value (but accepts --flag=true/false)
	metavar string   // the value's placeholder in Usage
	def     string   // built-in default, in the flag's own syntax
	defText string   // how Usage shows the default, when not def
	env     []string // environment variables giving the default, first wins
	group   group
	help    string
	apply   applyFunc // nil for --help
}

// pet returns torchrun's environment variable for a flag: PET_<NAME>.
func pet(name string) []string {
	return []string{"PET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// roverEnv returns Rover's environment variable for a flag: ROVER_<NAME>.
func roverEnv(name string) []string {
	return []string{"ROVER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func boolField(field func(*Config) *bool) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		v, err := parseBool(raw)
		*field(c) = v
		return err
	}
}

func intField(field func(*Config) *int) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		v, err := ParseInt(raw)
		if err == nil {
			*field(c) = v
		}
		return err
	}
}

func stringField(field func(*Config) *string) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		*field(c) = raw
		return nil
	}
}

// addrField takes a HOST:PORT listen address (HOST may be empty: every
// interface).
func addrField(field func(*Config) *string) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		if err := CheckListenAddr(raw); err != nil {
			return err
		}
		*field(c) = raw
		return nil
	}
}

// CheckListenAddr checks a HOST:PORT address to listen on: "" (none), or
// an optional host and a port from 0 (pick one) to 65535.
func CheckListenAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 0.0.0.0:9400, or :0 to pick a port; IPv6 as [::1]:9400)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q of %q is not a number from 0 (pick one) to 65535", port, addr)
	}
	return nil
}

func durationField(field func(*Config) *time.Duration) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		v, err := ParseSeconds(raw)
		if err == nil {
			*field(c) = v
		}
		return err
	}
}

func stdField(field func(*Config) *StdSpec) applyFunc {
	return func(_ *Parser, c *Config, raw string) error {
		v, err := parseStdSpec(raw)
		if err == nil {
			*field(c) = v
		}
		return err
	}
}

// flags lists every flag, in the order Usage shows them.
var flags = []flagDef{
	{name: "help", short: "h", boolean: true, group: groupGeneral, help: "show this help and exit"},

	// torchrun.
	{name: "nnodes", metavar: "N|MIN:MAX", def: "1:1", env: pet("nnodes"), group: groupTorchrun,
		help: "number of nodes, or a range MIN:MAX for an elastic job",
		apply: func(_ *Parser, c *Config, raw string) error {
			lo, hi, err := ParseNNodes(raw)
			if err == nil {
				c.MinNodes, c.MaxNodes = lo, hi
			}
			return err
		}},
	{name: "nproc-per-node", metavar: "N|auto|gpu|cpu", def: "1", env: pet("nproc-per-node"), group: groupTorchrun,
		help: "worker processes per node; gpu: one per GPU; cpu: one per CPU; auto: gpu if there are GPUs, else cpu",
		apply: func(p *Parser, c *Config, raw string) error {
			n, err := parseNproc(raw, p.CountGPUs, p.NumCPU)
			if err == nil {
				c.NprocPerNode = n
			}
			return err
		}},
	{name: "rdzv-backend", metavar: "NAME", def: "c10d", env: pet("rdzv-backend"), group: groupTorchrun,
		help:  "c10d, dlrover and rover: the rover master's rendezvous; static: also group rank = --node-rank, MASTER_ADDR/PORT = --master-addr/--master-port; etcd is not supported",
		apply: stringField(func(c *Config) *string { return &c.RdzvBackend })},
	{name: "rdzv-endpoint", metavar: "HOST[:PORT]", defText: "none", group: groupTorchrun,
		env:  append(pet("rdzv-endpoint"), "ROVER_MASTER_ADDR", "DLROVER_MASTER_ADDR"),
		help: "address of the job's master (a rover master, or else hosted there by the agent on that host); the port defaults to 29400; IPv6 as [ADDR]:PORT; without it, a multi-node job takes MASTER_ADDR:MASTER_PORT",
		apply: func(_ *Parser, c *Config, raw string) error {
			ep, err := normalizeEndpoint(raw)
			if err == nil {
				c.RdzvEndpoint = ep
			}
			return err
		}},
	{name: "rdzv-id", metavar: "ID", def: "none", env: pet("rdzv-id"), group: groupTorchrun,
		help:  "job name shared by all nodes of the job; workers see it as TORCHELASTIC_RUN_ID",
		apply: stringField(func(c *Config) *string { return &c.RunID })},
	{name: "rdzv-conf", metavar: "KEY=VALUE,...", defText: "none", env: pet("rdzv-conf"), group: groupTorchrun,
		help:  "rendezvous settings; keys are listed below",
		apply: func(_ *Parser, c *Config, raw string) error { return applyRdzvConf(c, raw) }},
	{name: "standalone", boolean: true, def: "false", env: pet("standalone"), group: groupTorchrun,
		help:  "run a single node with its own master; implied by one node and no --rdzv-endpoint",
		apply: boolField(func(c *Config) *bool { return &c.Standalone })},
	{name: "max-restarts", metavar: "N", def: "0", env: pet("max-restarts"), group: groupTorchrun,
		help:  "how many times the workers are restarted after a failure before the job fails",
		apply: intField(func(c *Config) *int { return &c.MaxRestarts })},
	{name: "monitor-interval", metavar: "SECONDS", def: "0.1", env: pet("monitor-interval"), group: groupTorchrun,
		help:  "how often the workers are checked, in seconds (or a duration: 500ms)",
		apply: durationField(func(c *Config) *time.Duration { return &c.MonitorInterval })},
	{name: "start-method", metavar: "spawn|fork|forkserver", def: "spawn", env: pet("start-method"), group: groupTorchrun,
		help:  "accepted for compatibility; no effect: workers always run the script as new processes",
		apply: stringField(func(c *Config) *string { return &c.StartMethod })},
	{name: "role", metavar: "NAME", def: "default", defText: `"default"`, env: pet("role"), group: groupTorchrun,
		help:  "the workers' role name (ROLE_NAME)",
		apply: stringField(func(c *Config) *string { return &c.Role })},
	{name: "module", short: "m", boolean: true, def: "false", env: pet("module"), group: groupTorchrun,
		help:  "SCRIPT is a Python module, run as python -u -m MODULE",
		apply: boolField(func(c *Config) *bool { return &c.Module })},
	{name: "no-python", boolean: true, def: "false", env: pet("no-python"), group: groupTorchrun,
		help:  "SCRIPT is a program, run directly without python",
		apply: boolField(func(c *Config) *bool { return &c.NoPython })},
	{name: "run-path", boolean: true, def: "false", env: pet("run-path"), group: groupTorchrun,
		help:  "accepted for compatibility; the script still runs as python -u SCRIPT",
		apply: boolField(func(c *Config) *bool { return &c.RunPath })},
	{name: "log-dir", metavar: "DIR", defText: "none", env: pet("log-dir"), group: groupTorchrun,
		help:  "directory for the workers' log files, in torchrun's layout: DIR/<rdzv-id>_<random>/attempt_<N>/<local rank>/",
		apply: stringField(func(c *Config) *string { return &c.LogDir })},
	{name: "redirects", short: "r", metavar: "SPEC", def: "0", env: pet("redirects"), group: groupTorchrun,
		help:  "send worker output to files in --log-dir: 0 none, 1 stdout, 2 stderr, 3 both; or per local rank, e.g. 0:1,1:2",
		apply: stdField(func(c *Config) *StdSpec { return &c.Redirects })},
	{name: "tee", short: "t", metavar: "SPEC", def: "0", env: pet("tee"), group: groupTorchrun,
		help:  "like --redirects, but the output is also shown on the console, each line prefixed with [<role><local rank>]: or $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
		apply: stdField(func(c *Config) *StdSpec { return &c.Tee })},
	{name: "local-ranks-filter", metavar: "RANKS", defText: "all", env: pet("local-ranks-filter"), group: groupTorchrun,
		help: "show console output only from these local ranks, e.g. 0,3",
		apply: func(_ *Parser, c *Config, raw string) error {
			r, err := parseRankList(raw)
			c.LocalRanksFilter = r
			return err
		}},
	{name: "node-rank", metavar: "N", def: "-1", env: append(pet("node-rank"), "NODE_RANK"), group: groupTorchrun,
		help:  "this node's rank; -1: assigned by the master (torchrun's static rendezvous needs it)",
		apply: intField(func(c *Config) *int { return &c.NodeRank })},
	{name: "master-addr", metavar: "ADDR", def: "127.0.0.1", env: pet("master-addr"), group: groupTorchrun,
		help:  "MASTER_ADDR for the workers, as with torchrun's static rendezvous",
		apply: stringField(func(c *Config) *string { return &c.MasterAddr })},
	{name: "master-port", metavar: "PORT", def: "29500", env: pet("master-port"), group: groupTorchrun,
		help:  "MASTER_PORT for the workers, as with torchrun's static rendezvous",
		apply: intField(func(c *Config) *int { return &c.MasterPort })},
	{name: "local-addr", metavar: "ADDR", defText: "chosen by the agent", env: pet("local-addr"), group: groupTorchrun,
		help:  "address this node advertises to the other nodes",
		apply: stringField(func(c *Config) *string { return &c.LocalAddr })},
	{name: "logs-specs", metavar: "NAME", defText: "none", env: pet("logs-specs"), group: groupTorchrun,
		help:  `default (torchrun's registered logs specs: --log-dir, --redirects and --tee) is the only one`,
		apply: stringField(func(c *Config) *string { return &c.LogsSpecs })},

	// dlrover-run.
	{name: "network-check", boolean: true, def: "false", env: pet("network-check"), group: groupDLRover,
		help:  "check the nodes before training: pairs run a compute benchmark, a collective and a point-to-point test; faulty nodes are excluded (docs/user-guide.md)",
		apply: boolField(func(c *Config) *bool { return &c.NetworkCheck })},
	{name: "node-unit", metavar: "N", def: "1", env: pet("node-unit"), group: groupDLRover,
		help:  "nodes join and leave the job in groups of N",
		apply: intField(func(c *Config) *int { return &c.NodeUnit })},
	{name: "exclude-straggler", boolean: true, def: "false", env: pet("exclude-straggler"), group: groupDLRover,
		help:  "with the node check, exclude stragglers (nodes slower than 2x the median) while --nnodes MIN remain",
		apply: boolField(func(c *Config) *bool { return &c.ExcludeStraggler })},
	{name: "save-at-breakpoint", boolean: true, def: "false", env: pet("save-at-breakpoint"), group: groupDLRover,
		help:  "accepted for DLRover's scripts; Rover always does it: when workers fail, the newest in-memory checkpoint is persisted",
		apply: boolField(func(c *Config) *bool { return &c.SaveAtBreakpoint })},
	{name: "comm-perf-test", boolean: true, def: "false", env: pet("comm-perf-test"), group: groupDLRover,
		help:  "run the node check with a larger collective, to measure the communication's bandwidth",
		apply: boolField(func(c *Config) *bool { return &c.CommPerfTest })},
	{name: "auto-config", boolean: true, def: "false", env: pet("auto-config"), group: groupDLRover,
		help:  "as DLRover: --nnodes from $NODE_NUM, --nproc-per-node from the GPU count (when there are GPUs), and the node check from 4 nodes on",
		apply: boolField(func(c *Config) *bool { return &c.AutoConfig })},
	{name: "precheck", metavar: "0|1|2", def: "0", env: pet("precheck"), group: groupDLRover,
		help:  "check the nodes before training: 0 no, 1 the node check (as --network-check), 2 the node check with the larger collective (as --comm-perf-test)",
		apply: intField(func(c *Config) *int { return &c.Precheck })},
	{name: "training-port", metavar: "PORT", def: "60000", env: pet("training-port"), group: groupDLRover,
		help:  "first port of the range the training processes may use",
		apply: intField(func(c *Config) *int { return &c.TrainingPort })},
	{name: "auto-tunning", boolean: true, def: "false", env: pet("auto-tunning"), group: groupDLRover,
		help:  "accepted; does nothing: Rover does not tune the parallel configuration (a note says so)",
		apply: boolField(func(c *Config) *bool { return &c.AutoTunning })},
	{name: "accelerator", metavar: "NAME", def: AcceleratorNVIDIA, env: pet("accelerator"), group: groupDLRover,
		help:  "the machine's accelerator: " + acceleratorNames() + "; Rover drives NVIDIA GPUs and CPUs (a note says when it does nothing)",
		apply: stringField(func(c *Config) *string { return &c.Accelerator })},
	{name: "numa-affinity", boolean: true, def: "false", env: pet("numa-affinity"), group: groupDLRover,
		help:  "accepted; binding workers to NUMA nodes is not done yet (a note says why it does nothing: one NUMA node, or not implemented)",
		apply: boolField(func(c *Config) *bool { return &c.NUMAAffinity })},
	{name: "membind-policy", metavar: "bind|preferred", def: "preferred", env: pet("membind-policy"), group: groupDLRover,
		help:  "with --numa-affinity: the memory binding policy",
		apply: stringField(func(c *Config) *string { return &c.MembindPolicy })},
	{name: "ucp-device-type", metavar: "cpu|gpu", def: "cpu", env: pet("ucp-device-type"), group: groupDLRover,
		help:  "DeepSpeed universal checkpoint's device; accepted, does nothing: Rover's checkpoints go through host shared memory",
		apply: stringField(func(c *Config) *string { return &c.UCPDeviceType })},
	{name: "hang-downtime", metavar: "MINUTES", defText: "none: --hang-timeout", env: pet("hang-downtime"), group: groupDLRover,
		help: "DLRover's hang threshold in whole minutes: the same as --hang-timeout=MINUTESm, which wins when both are given",
		apply: func(_ *Parser, c *Config, raw string) error {
			if raw == "" {
				return nil
			}
			n, err := ParseInt(raw)
			if err == nil {
				c.HangDowntime = n
			}
			return err
		}},

	// Rover.
	{name: "token-file", metavar: "PATH", defText: "none", env: roverEnv("token-file"), group: groupRover,
		help:  "file holding the token that authenticates this node to the master; wins over $ROVER_TOKEN",
		apply: stringField(func(c *Config) *string { return &c.TokenFile })},
	{name: "checkpoint-dir", metavar: "DIR_OR_URL", defText: "none", env: roverEnv("checkpoint-dir"), group: groupRover,
		help:  "the job's checkpoint storage: a directory, or a file://, s3://, gs:// or azblob:// URL; workers' save(persist=True) writes there",
		apply: stringField(func(c *Config) *string { return &c.CheckpointDir })},
	{name: "checkpoint-keep", metavar: "N", def: "1", env: roverEnv("checkpoint-keep"), group: groupRover,
		help:  "committed checkpoint steps kept in the checkpoint storage (0: all)",
		apply: intField(func(c *Config) *int { return &c.CheckpointKeep })},
	{name: "checkpoint-backup-bytes", metavar: "BYTES|auto", def: "auto", env: roverEnv("checkpoint-backup-bytes"), group: groupRover,
		help: "shared memory this node may fill with its backup of another node's sharded checkpoints (it is that node's backup peer), " +
			"e.g. 8Gi; auto: as much as its own checkpoint arenas take, at least 64 MiB; 0: no backup peers for this node " +
			"(it keeps and pushes no backups, and a lost node's replacement restores its shards from storage)",
		apply: func(_ *Parser, c *Config, raw string) error {
			if strings.TrimSpace(raw) == "auto" {
				c.CheckpointBackupBytes = -1
				return nil
			}
			n, err := ParseBytes(raw)
			if err == nil {
				c.CheckpointBackupBytes = n
			}
			return err
		}},
	{name: "tls-ca", metavar: "PATH", defText: "none: cleartext HTTP/2", env: roverEnv("tls-ca"), group: groupRover,
		help:  "speak TLS to the master and verify it with the CA certificates in this PEM file (for a master started with --tls-cert)",
		apply: stringField(func(c *Config) *string { return &c.TLSCA })},
	{name: "tls-server-name", metavar: "NAME", defText: "the host of --rdzv-endpoint", env: roverEnv("tls-server-name"), group: groupRover,
		help:  "with --tls-ca: the name the master's certificate must hold, when the endpoint's host is not in it",
		apply: stringField(func(c *Config) *string { return &c.TLSServerName })},
	{name: "node-id", metavar: "ID", defText: "derived by the agent", env: roverEnv("node-id"), group: groupRover,
		help:  "stable identity of this node's agent across restarts",
		apply: stringField(func(c *Config) *string { return &c.NodeID })},
	{name: "stop-grace-period", metavar: "DURATION", def: "30s", env: roverEnv("stop-grace-period"), group: groupRover,
		help:  "when stopping workers, time between SIGTERM and SIGKILL",
		apply: durationField(func(c *Config) *time.Duration { return &c.StopGracePeriod })},
	{name: "heartbeat-interval", metavar: "DURATION", def: "5s", env: roverEnv("heartbeat-interval"), group: groupRover,
		help:  "how often the agent sends a heartbeat to the master",
		apply: durationField(func(c *Config) *time.Duration { return &c.HeartbeatInterval })},
	{name: "warm-standby", boolean: true, def: "true", env: roverEnv("warm-standby"), group: groupRover,
		help:  "keep a standby Python per local rank, with torch imported, that a restart runs the script in (false: every start is a cold python)",
		apply: boolField(func(c *Config) *bool { return &c.StandbyWorkers })},
	{name: "metrics-addr", metavar: "HOST:PORT", defText: "none", env: roverEnv("metrics-addr"), group: groupRover,
		help:  "serve the agent's Prometheus metrics at http://HOST:PORT/metrics (port 0 picks one; see docs/metrics.md); a master the agent hosts serves its own there too",
		apply: addrField(func(c *Config) *string { return &c.MetricsAddr })},
	{name: "metrics-addr-file", metavar: "FILE", env: roverEnv("metrics-addr-file"), group: groupRover,
		help:  "with --metrics-addr: write the address the metrics are served on to this file",
		apply: stringField(func(c *Config) *string { return &c.MetricsAddrFile })},
	{name: "hang-timeout", metavar: "DURATION", def: "5m", env: roverEnv("hang-timeout"), group: groupRover,
		help:  "no step progress of any worker for this long, after the job made progress, is a hang (0: off; also --rdzv-conf hang_timeout)",
		apply: durationField(func(c *Config) *time.Duration { return &c.HangTimeout })},
	{name: "hang-detection", metavar: "N", def: "1", env: roverEnv("hang-detection"), group: groupRover,
		help:  "what a hang does (DLRover's --hang_detection): 0 log it and collect the workers' stacks, 1 also warn, 2 also restart the workers",
		apply: intField(func(c *Config) *int { return &c.HangDetection })},
}
