package runconfig

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrHelp is returned by Parse when -h or --help is among rover's options.
// The caller should print Usage() and exit successfully.
var ErrHelp = errors.New(`help requested: print runconfig.Usage()`)

// Config is the validated command line of "rover run".
type Config struct {
	// MinNodes and MaxNodes come from --nnodes (N means N:N).
	MinNodes, MaxNodes int
	// NprocPerNode is the number of workers per node, with auto/cpu/gpu
	// already resolved to a number.
	NprocPerNode int
	// RdzvBackend: every accepted backend (c10d, static, dlrover, rover)
	// means Rover's master-managed rendezvous; static also fixes the
	// workers' MASTER_ADDR/PORT to --master-addr/--master-port (see
	// staticWorld) and needs a node rank.
	RdzvBackend string
	// RdzvEndpoint is the job master's address as host:port (IPv6 in
	// brackets), or "" when none was given. Without --rdzv-endpoint it
	// comes from the environment (PET_RDZV_ENDPOINT, ROVER_MASTER_ADDR,
	// DLROVER_MASTER_ADDR, then Kubeflow's MASTER_ADDR:MASTER_PORT for a
	// multi-node job) or, for --rdzv-backend=static, from --master-addr and
	// --master-port + 1.
	RdzvEndpoint string
	// Standalone is true for an explicit --standalone and also when it is
	// implied: MaxNodes == 1 and no endpoint. It drops an endpoint and a
	// backend that were given (see Warnings).
	Standalone bool
	// RunID is --rdzv-id: the job name, TORCHELASTIC_RUN_ID for workers.
	RunID string

	// Rendezvous timings from --rdzv-conf.
	JoinTimeout      time.Duration // join_timeout: how long to wait for MinNodes
	LastCallTimeout  time.Duration // last_call_timeout (lastcall_timeout): extra wait once MinNodes joined
	CloseTimeout     time.Duration // close_timeout
	HeartbeatTimeout time.Duration // heartbeat_timeout: a node without heartbeats this long is dead
	DisconnectGrace  time.Duration // disconnect_grace: grace after a node's connection drops
	// MasterTimeout is master_timeout: how long the agent keeps its workers
	// running while it cannot reach the master (a master restarting), before
	// it stops them and exits. Agent-only, unlike the timeouts above.
	MasterTimeout time.Duration
	// RdzvConf holds the raw --rdzv-conf pairs, for reference; nil if none.
	RdzvConf map[string]string

	MaxRestarts     int
	MonitorInterval time.Duration
	// StartMethod is accepted for compatibility and has no effect: workers
	// are always started as new processes running the script.
	StartMethod string
	Role        string

	Module   bool // -m: Entrypoint is a Python module
	NoPython bool // --no-python: Entrypoint is a program run directly
	// RunPath is accepted for compatibility; the script still runs as
	// "python -u SCRIPT".
	RunPath bool

	LogDir           string
	Redirects, Tee   StdSpec
	LocalRanksFilter []int // sorted, unique; nil = show all local ranks
	NodeRank         int   // -1 = assigned by the master

	MasterAddr    string
	MasterAddrSet bool // given on the command line or by PET_MASTER_ADDR
	MasterPort    int
	MasterPortSet bool // given on the command line or by PET_MASTER_PORT
	LocalAddr     string
	// LogsSpecs is torchrun's --logs-specs: "" or "default" (torchrun's
	// registered DefaultLogsSpecs); Validate rejects any other name.
	LogsSpecs string

	// dlrover-run extras (dlrover.go). NetworkCheck, ExcludeStraggler and
	// CommPerfTest turn on the node check (Policy().NodeCheck), and so do
	// Precheck 1 and 2 (already folded into them) and AutoConfig from 4
	// nodes on. AutoConfig has already set MinNodes, MaxNodes and
	// NprocPerNode. The others are accepted and do nothing here; Warnings
	// says why.
	NodeUnit                       int
	NetworkCheck, ExcludeStraggler bool
	SaveAtBreakpoint, CommPerfTest bool
	AutoConfig, AutoTunning        bool
	Precheck                       int // 0, 1 or 2
	TrainingPort                   int
	Accelerator                    string // one of the Accelerator constants
	NUMAAffinity                   bool
	MembindPolicy                  string // bind or preferred
	UCPDeviceType                  string
	// HangDowntime is --hang-downtime in minutes (0: not given); when
	// given without --hang-timeout it has set HangTimeout.
	HangDowntime int

	// Rover extras.
	TokenFile string
	// CheckpointDir is the job's checkpoint storage (absolute once
	// validated; "" = none) and CheckpointKeep the committed steps kept
	// there (0 = all).
	CheckpointDir  string
	CheckpointKeep int
	// CheckpointKeepSet: --checkpoint-keep was given (on the command line
	// or by ROVER_CHECKPOINT_KEEP); without it the job's script may
	// declare the job's keep.
	CheckpointKeepSet bool
	// CheckpointBackupBytes bounds the shared memory of the backups this
	// node keeps of another node's sharded checkpoints: -1 automatic, 0
	// none (backup peers off for this node).
	CheckpointBackupBytes int64
	// TLSCA is --tls-ca: the PEM bundle of the CAs that sign the master's
	// certificate. Set, the agent speaks TLS to the master; "" is
	// cleartext HTTP/2.
	TLSCA string
	// TLSServerName is --tls-server-name: the name the master's
	// certificate must hold; "" takes the host of --rdzv-endpoint.
	TLSServerName     string
	NodeID            string        // stable agent identity; "" = the agent derives one
	StopGracePeriod   time.Duration // SIGTERM to SIGKILL grace when stopping workers
	HeartbeatInterval time.Duration
	// HangTimeout (--hang-timeout, --rdzv-conf hang_timeout) and
	// HangDetection (--hang-detection, DLRover's --hang_detection): no
	// worker progress for HangTimeout is a hang (0: off); 0 logs it, 1 also
	// warns, 2 restarts the workers.
	HangTimeout   time.Duration
	HangDetection int
	// StandbyWorkers is --warm-standby: restarts of a Python
	// entrypoint run the script in a standby interpreter that has already
	// imported torch (docs/design/restart.md); never with --no-python.
	StandbyWorkers bool
	// MetricsAddr is --metrics-addr: the HOST:PORT of the agent's
	// Prometheus metrics ("": none; port 0 picks one), and MetricsAddrFile
	// --metrics-addr-file, which receives the address they are served on.
	MetricsAddr, MetricsAddrFile string

	Entrypoint string   // script path, module name (-m) or program (--no-python)
	Args       []string // the script's own arguments, verbatim

	// Warnings are settings the command line gave that were ignored (as
	// --rdzv-endpoint is with --standalone); the caller shows them.
	Warnings []string

	// origin maps a flag name to the environment variable its value came
	// from, so that errors can point at it. Nil or missing: command line or
	// built-in default.
	origin map[string]string
}

// StdSpec says, per local rank, which of a worker's standard streams are
// redirected (--redirects) or teed (--tee): 0 none, 1 stdout, 2 stderr,
// 3 both.
type StdSpec struct {
	Default int         // for ranks not in PerRank
	PerRank map[int]int // local rank -> value
}

// For returns the value that applies to localRank.
func (s StdSpec) For(localRank int) int {
	if v, ok := s.PerRank[localRank]; ok {
		return v
	}
	return s.Default
}

// String returns the spec in the syntax of --redirects: "3" or "0:1,1:2".
func (s StdSpec) String() string {
	if len(s.PerRank) == 0 {
		return strconv.Itoa(s.Default)
	}
	parts := make([]string, 0, len(s.PerRank))
	for _, r := range slices.Sorted(maps.Keys(s.PerRank)) {
		parts = append(parts, strconv.Itoa(r)+":"+strconv.Itoa(s.PerRank[r]))
	}
	return strings.Join(parts, ",")
}

// WorkerArgv returns the command line of one worker process:
//
//	--no-python: [ENTRYPOINT ARGS...]
//	-m:          [PYTHON -u -m ENTRYPOINT ARGS...]
//	otherwise:   [PYTHON -u ENTRYPOINT ARGS...]
//
// PYTHON is pythonExec, or "python" when it is empty. "-u" (unbuffered
// output) is what torchrun uses. The result is a new slice.
func (c *Config) WorkerArgv(pythonExec string) []string {
	if pythonExec == "" {
		pythonExec = "python"
	}
	var argv []string
	switch {
	case c.NoPython:
		argv = make([]string, 0, 1+len(c.Args))
	case c.Module:
		argv = append(make([]string, 0, 4+len(c.Args)), pythonExec, "-u", "-m")
	default:
		argv = append(make([]string, 0, 3+len(c.Args)), pythonExec, "-u")
	}
	argv = append(argv, c.Entrypoint)
	return append(argv, c.Args...)
}

// EndpointNamesMaster reports whether the endpoint came from
// ROVER_MASTER_ADDR or DLROVER_MASTER_ADDR: what `rover submit` and the
// Kubernetes platform (Rover's and DLRover's) give the nodes of a job whose
// master they run, which an agent then never hosts.
func (c *Config) EndpointNamesMaster() bool {
	env := c.origin["rdzv-endpoint"]
	return env == "ROVER_MASTER_ADDR" || env == "DLROVER_MASTER_ADDR"
}

// ref names flag in an error message: text (e.g. "--nnodes=3:2"), followed by
// the environment variable it came from, if any.
func (c *Config) ref(flag, text string) string {
	if env := c.origin[flag]; env != "" {
		return text + " (from " + env + ")"
	}
	return text
}

// removeHint says how to get rid of a flag's value: remove the flag, or unset
// the environment variable it came from.
func (c *Config) removeHint(flag string) string {
	if env := c.origin[flag]; env != "" {
		return "unset " + env
	}
	return "remove the flag"
}
