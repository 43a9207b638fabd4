package runconfig

import (
	"fmt"
	"net"
	"strconv"
)

// JobSecretEnv names the environment variable that holds a job's secret
// when no `rover master` runs: every agent of the job derives the job's
// token from it and --rdzv-id (see docs/user-guide.md, "Launching without a
// master").
const JobSecretEnv = "ROVER_JOB_SECRET"

// Kubeflow's (and torch.distributed's) environment convention: the address
// and port of node 0, and this node's rank.
const (
	kubeflowMasterAddr = "MASTER_ADDR"
	kubeflowMasterPort = "MASTER_PORT"
)

// kubeflowEndpoint takes the endpoint from MASTER_ADDR and MASTER_PORT, as
// Kubeflow's PyTorchJob and JobSet's examples set them, when a multi-node
// job was given no endpoint any other way (--rdzv-endpoint,
// PET_RDZV_ENDPOINT, ROVER_MASTER_ADDR, DLROVER_MASTER_ADDR). A job of one
// node ignores them: a user's leftover MASTER_ADDR must not turn a
// standalone run into one that waits for a master.
func kubeflowEndpoint(c *Config, src map[string]source, getenv func(string) string) error {
	addr := getenv(kubeflowMasterAddr)
	if addr == "" || c.RdzvEndpoint != "" || src["rdzv-endpoint"] != fromDefault || c.MaxNodes <= 1 || c.Standalone ||
		c.RdzvBackend == "static" {
		return nil
	}
	port := getenv(kubeflowMasterPort)
	if port == "" {
		port = strconv.Itoa(defaultRdzvPort)
	}
	raw := net.JoinHostPort(addr, port)
	ep, err := normalizeEndpoint(raw)
	if err != nil {
		return fmt.Errorf("%s=%s and %s=%s (the endpoint of a job without --rdzv-endpoint): %w",
			kubeflowMasterAddr, addr, kubeflowMasterPort, port, err)
	}
	c.RdzvEndpoint = ep
	c.setOrigin("rdzv-endpoint", kubeflowMasterAddr+"/"+kubeflowMasterPort)
	return nil
}

// ignoreForStandalone drops the rendezvous settings --standalone replaces,
// as torchrun does, and says so in c.Warnings: the endpoint and the backend
// (--rdzv-id still names the job, and --rdzv-conf's timeouts still apply).
// A standalone job implied by one node and no endpoint keeps its backend's
// name silently: there is nothing to ignore.
func ignoreForStandalone(c *Config, src map[string]source) {
	if !c.Standalone || src["standalone"] == fromDefault {
		return
	}
	if c.RdzvEndpoint != "" {
		c.warn("%s ignores %s, as torchrun does: the job runs its own master on a loopback port",
			c.ref("standalone", "--standalone"), c.ref("rdzv-endpoint", "--rdzv-endpoint="+c.RdzvEndpoint))
		c.RdzvEndpoint = ""
		delete(c.origin, "rdzv-endpoint")
	}
	if src["rdzv-backend"] != fromDefault && c.RdzvBackend != "c10d" {
		c.warn("%s ignores %s, as torchrun does: the job runs its own master on a loopback port",
			c.ref("standalone", "--standalone"), c.ref("rdzv-backend", "--rdzv-backend="+c.RdzvBackend))
		c.RdzvBackend = "c10d"
		delete(c.origin, "rdzv-backend")
	}
}

// staticWorld applies torchrun's static rendezvous to a multi-node job:
// the workers' MASTER_ADDR and MASTER_PORT are --master-addr and
// --master-port (torchrun's defaults 127.0.0.1 and 29500 included), and,
// without --rdzv-endpoint, the job's master is at --master-addr, port
// --master-port + 1 (StaticMasterPort), where the agent of node rank 0
// hosts it when no `rover master` runs. Validate checks the rest: a node
// rank and a fixed number of nodes.
func staticWorld(c *Config) {
	if c.RdzvBackend != "static" || c.Standalone {
		return
	}
	c.MasterAddrSet, c.MasterPortSet = true, true
	if c.RdzvEndpoint == "" && c.MasterPort >= 1 && c.MasterPort < 65535 && c.MasterAddr != "" {
		c.RdzvEndpoint = net.JoinHostPort(c.MasterAddr, strconv.Itoa(StaticMasterPort(c.MasterPort)))
		c.setOrigin("rdzv-endpoint", "--master-addr and --master-port + 1, for --rdzv-backend=static")
	}
}

// StaticMasterPort is the port of the job's master in a static job without
// --rdzv-endpoint: the one after the workers' --master-port.
func StaticMasterPort(masterPort int) int { return masterPort + 1 }

// checkStatic reports what torchrun's static rendezvous needs and c lacks.
func (c *Config) checkStatic(add func(string, ...any)) {
	if c.RdzvBackend != "static" || c.Standalone || c.MaxNodes <= 1 {
		return
	}
	backend := c.ref("rdzv-backend", "--rdzv-backend=static")
	if c.NodeRank < 0 {
		add("%s needs --node-rank (PET_NODE_RANK, NODE_RANK): this node's rank, 0 to %d; the group rank is the node rank", backend, c.MaxNodes-1)
	}
	if c.MinNodes != c.MaxNodes {
		add("%s needs a fixed number of nodes, not %s; use --rdzv-backend=c10d for an elastic job",
			backend, c.ref("nnodes", "--nnodes="+c.Policy().NNodesText()))
	}
	if c.MasterPort >= 65535 && c.RdzvEndpoint == "" {
		add("%s: the job's master listens on --master-port + 1, which is past 65535; lower --master-port or give --rdzv-endpoint", backend)
	}
}

func (c *Config) warn(format string, a ...any) {
	c.Warnings = append(c.Warnings, fmt.Sprintf(format, a...))
}

func (c *Config) setOrigin(flag, from string) {
	if c.origin == nil {
		c.origin = map[string]string{}
	}
	c.origin[flag] = from
}
