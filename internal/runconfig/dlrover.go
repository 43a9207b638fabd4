package runconfig

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The accelerators dlrover-run's --accelerator names.
const (
	AcceleratorNVIDIA  = "nvidia.com/gpu"
	AcceleratorAscend  = "ascend-npu"
	AcceleratorMThread = "mthreads.com/gpu"
	AcceleratorMetaX   = "metax-tech.com/gpu"
	AcceleratorCPU     = "cpu"
)

var accelerators = []string{AcceleratorNVIDIA, AcceleratorAscend, AcceleratorMThread, AcceleratorMetaX, AcceleratorCPU}

func acceleratorNames() string { return strings.Join(accelerators, ", ") }

// countNUMANodes counts the NUMA nodes Linux shows in
// /sys/devices/system/node; a machine without that directory has one.
func countNUMANodes() int {
	m, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	return max(len(m), 1)
}

// applyDLRover carries out the dlrover-run switches that change other
// settings (--precheck, --auto-config, --hang-downtime) and notes in
// c.Warnings, one line each, the switches that do nothing on this machine
// and why. It returns the problems of values it reads from the
// environment (NODE_NUM for --auto-config).
func applyDLRover(p *Parser, c *Config, src map[string]source) []error {
	var errs []error
	given := func(flag string) bool { return src[flag] != fromDefault }

	// --precheck, as DLRover's update_precheck_args: 1 runs the node check,
	// 2 also the larger collective. Out-of-range values are Validate's.
	switch c.Precheck {
	case 1:
		c.NetworkCheck = true
	case 2:
		c.NetworkCheck, c.CommPerfTest = true, true
	}

	if c.AutoConfig {
		errs = append(errs, autoConfig(p, c, src)...)
	}

	maxMinutes := int(MaxDuration / time.Minute)
	switch {
	case !given("hang-downtime"):
	case c.HangDowntime < 1 || c.HangDowntime > maxMinutes:
		errs = append(errs, fmt.Errorf("%s: want whole minutes from 1 to %d (30 days); or write --hang-timeout, where 0 turns hang detection off",
			c.ref("hang-downtime", "--hang-downtime="+strconv.Itoa(c.HangDowntime)), maxMinutes))
	default:
		if given("hang-timeout") {
			c.note("--hang-downtime=%d is ignored: --hang-timeout=%v wins", c.HangDowntime, c.HangTimeout)
		} else {
			c.HangTimeout = time.Duration(c.HangDowntime) * time.Minute
		}
	}

	if given("auto-tunning") && c.AutoTunning {
		c.note("--auto-tunning does nothing here: Rover does not tune the parallel configuration; the job runs as its flags say")
	}
	if given("accelerator") {
		gpus := p.CountGPUs()
		switch {
		case c.Accelerator == AcceleratorNVIDIA && gpus > 0, c.Accelerator == AcceleratorCPU && gpus == 0:
		case c.Accelerator == AcceleratorNVIDIA:
			c.note("--accelerator=%s does nothing here: this machine has no NVIDIA GPUs (no /dev/nvidia0), so the workers run on CPU", c.Accelerator)
		default:
			c.note("--accelerator=%s does nothing here: Rover finds the machine's devices itself (NVIDIA GPUs, else CPUs) and this machine has %d NVIDIA GPUs", c.Accelerator, gpus)
		}
	}
	if c.NUMAAffinity {
		if n := p.NUMANodes(); n <= 1 {
			c.note("--numa-affinity does nothing here: this machine has one NUMA node, so there is nothing to bind to")
		} else {
			c.note("--numa-affinity does nothing yet: Rover does not bind workers to NUMA nodes; the kernel places them on this machine's %d nodes", n)
		}
	}
	if given("ucp-device-type") {
		c.note("--ucp-device-type=%s does nothing here: Rover's flash checkpoint always stages in host shared memory", c.UCPDeviceType)
	}
	if _, ok := c.RdzvConf["pend_timeout"]; ok {
		c.note("--rdzv-conf pend_timeout does nothing here: a node left out of a world waits for the next round, and the master ends a job that cannot form one after join_timeout")
	}
	return errs
}

// autoConfig is DLRover's auto_configure_params: the node count from
// NODE_NUM (as the platform sets it), one worker per GPU when the machine
// has GPUs, and the node check for jobs of 4 nodes or more. It wins over
// --nnodes and --nproc-per-node, as DLRover's does.
func autoConfig(p *Parser, c *Config, src map[string]source) []error {
	var did []string
	if raw := p.Getenv("NODE_NUM"); raw != "" {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 || n > MaxNodes {
			return []error{fmt.Errorf("NODE_NUM=%s (read by --auto-config): want a whole number of nodes from 1 to %d; fix NODE_NUM or drop --auto-config", raw, MaxNodes)}
		}
		c.MinNodes, c.MaxNodes = n, n
		src["nnodes"] = fromCommandLine
		did = append(did, fmt.Sprintf("--nnodes=%d from NODE_NUM", n))
	}
	if g := p.CountGPUs(); g > 0 {
		c.NprocPerNode = g
		did = append(did, fmt.Sprintf("--nproc-per-node=%d, one per GPU", g))
	}
	if c.MinNodes >= 4 && !c.NetworkCheck {
		c.NetworkCheck = true
		did = append(did, "the node check, for 4 nodes or more")
	}
	if len(did) == 0 {
		c.note("--auto-config changed nothing: NODE_NUM is unset and this machine has no NVIDIA GPUs")
	} else {
		c.note("--auto-config set %s", strings.Join(did, ", "))
	}
	return nil
}

// note adds one line to c.Warnings.
func (c *Config) note(format string, a ...any) {
	c.Warnings = append(c.Warnings, fmt.Sprintf(format, a...))
}

// checkDLRover reports bad values of the dlrover-run switches.
func (c *Config) checkDLRover(add func(string, ...any)) {
	if c.Precheck < 0 || c.Precheck > 2 {
		add("%s: want 0 (no check), 1 (the node check) or 2 (the node check with the larger collective)",
			c.ref("precheck", "--precheck="+strconv.Itoa(c.Precheck)))
	}
	known := false
	for _, a := range accelerators {
		known = known || c.Accelerator == a
	}
	if !known {
		add("%s is unknown; use one of %s", c.ref("accelerator", "--accelerator="+c.Accelerator), acceleratorNames())
	}
	if c.MembindPolicy != "bind" && c.MembindPolicy != "preferred" {
		add("%s is unknown; use bind or preferred", c.ref("membind-policy", "--membind-policy="+c.MembindPolicy))
	}
}
