package runconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// usageLine is the synopsis shown when the script is missing.
const usageLine = "usage: rover run [options] SCRIPT [ARGS...]"

// Validate checks c and returns every problem found, joined with
// errors.Join, or nil. It looks up the training script in the file system
// (relative to the current directory) unless -m or --no-python is set.
func (c *Config) Validate() error {
	return c.validate(os.Stat)
}

func (c *Config) validate(stat func(string) (fs.FileInfo, error)) error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}

	// The job's rendezvous policy, checked as `rover master` checks it.
	errs = append(errs, c.Policy().Check(c.policyRef)...)

	// Nodes and processes.
	nnodes := c.ref("nnodes", "--nnodes="+c.Policy().NNodesText())
	if c.NprocPerNode < 1 || c.NprocPerNode > MaxNprocPerNode {
		add("%s: want 1 to %d worker processes per node", c.ref("nproc-per-node", "--nproc-per-node="+strconv.Itoa(c.NprocPerNode)), MaxNprocPerNode)
	}
	if c.NodeRank < -1 || (c.NodeRank >= 0 && c.MaxNodes >= 1 && c.NodeRank >= c.MaxNodes) {
		add("%s is out of range: use 0 to %d (%s), or -1 to let the master assign it",
			c.ref("node-rank", "--node-rank="+strconv.Itoa(c.NodeRank)), max(c.MaxNodes-1, 0), nnodes)
	}
	for _, r := range c.LocalRanksFilter {
		if r < 0 || (c.NprocPerNode >= 1 && r >= c.NprocPerNode) {
			add("%s: local rank %d is out of range: --nproc-per-node=%d gives local ranks 0 to %d",
				c.ref("local-ranks-filter", "--local-ranks-filter"), r, c.NprocPerNode, c.NprocPerNode-1)
		}
	}

	// Timings of this agent (the job's are the policy's, above), each
	// positive (or, where zeroOK, 0) and at most MaxDuration.
	for _, d := range []struct {
		what   string
		d      time.Duration
		zeroOK bool
	}{
		{c.ref("monitor-interval", "--monitor-interval="+c.MonitorInterval.String()), c.MonitorInterval, false},
		{c.ref("rdzv-conf", "--rdzv-conf close_timeout="+c.CloseTimeout.String()), c.CloseTimeout, false},
		{c.ref("rdzv-conf", "--rdzv-conf master_timeout="+c.MasterTimeout.String()), c.MasterTimeout, false},
		{c.ref("stop-grace-period", "--stop-grace-period="+c.StopGracePeriod.String()), c.StopGracePeriod, true},
		{c.ref("heartbeat-interval", "--heartbeat-interval="+c.HeartbeatInterval.String()), c.HeartbeatInterval, false},
	} {
		if err := CheckDuration(d.what, d.d, d.zeroOK); err != nil {
			errs = append(errs, err)
		}
	}
	if p, ok := c.RdzvConf["pend_timeout"]; ok {
		d, _ := ParseSeconds(p) // read by applyRdzvConf
		if err := CheckDuration(c.ref("rdzv-conf", "--rdzv-conf pend_timeout="+d.String()), d, true); err != nil {
			errs = append(errs, err)
		}
	}
	if c.CheckpointKeep < 0 || c.CheckpointKeep > MaxCheckpointKeep {
		add("%s: want 0 (keep all) to %d", c.ref("checkpoint-keep", "--checkpoint-keep="+strconv.Itoa(c.CheckpointKeep)), MaxCheckpointKeep)
	}
	if d := c.CheckpointDir; d != "" && !strings.Contains(d, "://") {
		if abs, err := filepath.Abs(d); err != nil {
			add("%s: %v", c.ref("checkpoint-dir", "--checkpoint-dir="+d), err)
		} else {
			c.CheckpointDir = abs
		}
	}
	if hb := c.HeartbeatInterval; hb > 0 && c.HeartbeatTimeout > 0 && 3*hb > c.HeartbeatTimeout {
		add("%s must be at most a third of --rdzv-conf heartbeat_timeout=%v, or one or two late beats (a GC pause, a slow network) would declare a healthy node dead",
			c.ref("heartbeat-interval", "--heartbeat-interval="+hb.String()), c.HeartbeatTimeout)
	}

	// Output.
	errs = append(errs, c.checkStd("redirects", c.Redirects)...)
	errs = append(errs, c.checkStd("tee", c.Tee)...)
	if c.LogsSpecs != "" && c.LogsSpecs != "default" {
		add(`%s is unknown: Rover accepts only torchrun's registered name "default" (worker output as --log-dir, --redirects and --tee say); use --logs-specs=default or %s`,
			c.ref("logs-specs", "--logs-specs="+c.LogsSpecs), c.removeHint("logs-specs"))
	}

	// Rendezvous.
	switch c.RdzvBackend {
	case "c10d", "static", "dlrover", "rover":
	case "etcd", "etcd-v2":
		add("%s is not supported: Rover's master manages rendezvous; use c10d", c.ref("rdzv-backend", "--rdzv-backend="+c.RdzvBackend))
	default:
		add("%s is unknown; use c10d (also accepted: static, dlrover, rover)", c.ref("rdzv-backend", "--rdzv-backend="+c.RdzvBackend))
	}
	endpoint := c.ref("rdzv-endpoint", "--rdzv-endpoint="+c.RdzvEndpoint)
	if c.RdzvEndpoint != "" {
		if _, port, err := net.SplitHostPort(c.RdzvEndpoint); err != nil {
			add("%s: want HOST:PORT, with IPv6 addresses in brackets ([::1]:29400)", endpoint)
		} else {
			c.checkPort(&errs, endpoint, port)
		}
	}
	if c.RunID == "" {
		add("%s is empty; give the job a name, or leave the flag out", c.ref("rdzv-id", "--rdzv-id"))
	}
	if c.MaxNodes > 1 && c.RdzvEndpoint == "" && !c.Standalone {
		add(`%s needs --rdzv-endpoint HOST:PORT (a "rover master", or the host of node rank 0, whose agent then hosts the job's master), `+
			`ROVER_MASTER_ADDR or MASTER_ADDR; or --rdzv-backend=static with --node-rank and --master-addr; or --standalone for one node`, nnodes)
	}
	c.checkStatic(add)
	if c.Standalone && c.MaxNodes > 1 {
		add("%s runs a single node, but %s allows %d; drop --standalone and give --rdzv-endpoint, or use --nnodes=1",
			c.ref("standalone", "--standalone"), nnodes, c.MaxNodes)
	}
	if c.TLSServerName != "" && c.TLSCA == "" {
		add("%s needs --tls-ca: it names the master's certificate, which only TLS checks; add --tls-ca PATH or %s",
			c.ref("tls-server-name", "--tls-server-name="+c.TLSServerName), c.removeHint("tls-server-name"))
	}
	if c.TLSCA != "" && c.Standalone {
		add("%s needs a master to reach (--rdzv-endpoint): the embedded master of --standalone serves this node alone, on loopback, without TLS; %s",
			c.ref("tls-ca", "--tls-ca="+c.TLSCA), c.removeHint("tls-ca"))
	}
	if c.MetricsAddrFile != "" && c.MetricsAddr == "" {
		add("%s takes effect only with --metrics-addr: give the address to serve the metrics on, or %s",
			c.ref("metrics-addr-file", "--metrics-addr-file="+c.MetricsAddrFile), c.removeHint("metrics-addr-file"))
	}
	c.checkPort(&errs, c.ref("master-port", "--master-port"), strconv.Itoa(c.MasterPort))
	c.checkPort(&errs, c.ref("training-port", "--training-port"), strconv.Itoa(c.TrainingPort))

	// Process start.
	switch c.StartMethod {
	case "spawn", "fork", "forkserver":
	default:
		add("%s is unknown; use spawn, fork or forkserver (it has no effect in Rover)", c.ref("start-method", "--start-method="+c.StartMethod))
	}
	if c.NoPython && c.Module {
		add("--no-python and -m/--module cannot be used together: --no-python runs a program directly, -m runs a Python module; pick one")
	}
	switch {
	case c.Entrypoint == "":
		add("no training script given: %s (or -m MODULE, or --no-python PROGRAM)", usageLine)
	case !c.Module && !c.NoPython:
		if _, err := stat(c.Entrypoint); errors.Is(err, fs.ErrNotExist) {
			add("training script %q not found; check the path (relative to the current directory), or use -m for a module or --no-python for a program", c.Entrypoint)
		} else if err != nil {
			add("training script %q cannot be read: %v", c.Entrypoint, err)
		}
	}

	// dlrover-run switches.
	c.checkDLRover(add)
	return errors.Join(errs...)
}

// checkPort reports a port outside 1-65535; what names the flag.
func (c *Config) checkPort(errs *[]error, what, port string) {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		*errs = append(*errs, fmt.Errorf("%s: port %s is out of range; use 1 to 65535", what, port))
	}
}

// checkStd reports --redirects/--tee values outside 0-3 and negative ranks.
func (c *Config) checkStd(flag string, s StdSpec) []error {
	var errs []error
	what := c.ref(flag, "--"+flag+"="+s.String())
	var bad []string
	if s.Default < 0 || s.Default > 3 {
		bad = append(bad, strconv.Itoa(s.Default))
	}
	for _, r := range slices.Sorted(maps.Keys(s.PerRank)) {
		if r < 0 {
			errs = append(errs, fmt.Errorf("%s: local rank %d is negative", what, r))
		}
		if v := s.PerRank[r]; v < 0 || v > 3 {
			bad = append(bad, strconv.Itoa(v))
		}
	}
	if len(bad) > 0 {
		errs = append(errs, fmt.Errorf("%s: value %s out of range; use 0 (none), 1 (stdout), 2 (stderr) or 3 (both)",
			what, strings.Join(bad, ", ")))
	}
	return errs
}

// Policy is the job-wide part of c: what the first agent fixes for the job.
func (c *Config) Policy() Policy {
	return Policy{
		MinNodes: c.MinNodes, MaxNodes: c.MaxNodes, NodeUnit: c.NodeUnit, MaxRestarts: c.MaxRestarts,
		JoinTimeout: c.JoinTimeout, LastCallTimeout: c.LastCallTimeout,
		HeartbeatTimeout: c.HeartbeatTimeout, DisconnectGrace: c.DisconnectGrace,
		NodeCheck: NodeCheck{
			Enabled:           c.NetworkCheck || c.ExcludeStraggler || c.CommPerfTest,
			ExcludeStragglers: c.ExcludeStraggler,
			CommPerf:          c.CommPerfTest,
		},
		HangTimeout: c.HangTimeout, HangDetection: c.HangDetection,
	}
}

// policyRefs are the --rdzv-conf keys of the policy's timeouts.
var policyRefs = map[string]string{
	SettingJoinTimeout:      "join_timeout",
	SettingLastCallTimeout:  "last_call_timeout",
	SettingHeartbeatTimeout: "heartbeat_timeout",
	SettingDisconnectGrace:  "disconnect_grace",
}

// policyRef names a policy setting as `rover run` takes it: a flag, or a
// --rdzv-conf key.
func (c *Config) policyRef(setting, value string) string {
	if key, ok := policyRefs[setting]; ok {
		return c.ref("rdzv-conf", "--rdzv-conf "+key+"="+value)
	}
	return c.ref(setting, FlagRef(setting, value))
}
