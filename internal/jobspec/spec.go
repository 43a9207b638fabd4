package jobspec

import (
	"io/fs"
	"time"

	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/runconfig"
)

// ReplicaType names a group of nodes with the same role.
type ReplicaType string

// The replica types of DLRover's ElasticJob. An allreduce job runs workers
// only; a parameter-server job (ParameterServerStrategy) runs all four, on
// a platform that can (Capabilities.ParameterServer).
const (
	Worker    ReplicaType = "worker"
	PS        ReplicaType = "ps"
	Chief     ReplicaType = "chief"
	Evaluator ReplicaType = "evaluator"
)

// dlroverMaster is DLRover's master group: accepted without containers,
// and ignored.
const dlroverMaster ReplicaType = "dlrover-master"

// replicaTypes lists the accepted replica types, in the order errors show them.
var replicaTypes = []ReplicaType{Worker, PS, Chief, Evaluator}

// The most nodes a group may have and the most worker processes a node may
// run, on any platform: far above real jobs (DLRover's largest run thousands
// of nodes), and low enough that a typo such as replicas: 1e9 is refused
// up front rather than exhausting the master. A platform may cap nodes
// lower (Capabilities.MaxNodes). The flags of rover run have their own
// bounds in package runconfig.
const (
	MaxNodes        = 10000
	MaxNprocPerNode = 1024
)

// Relaunch budget per node, as in DLRover.
const (
	DefaultRestartCount = 3
	MaxRestartCount     = 5
)

// The distribution strategies Rover runs: allreduce (PyTorch DDP/FSDP
// workers that rendezvous as one world), and parameter server (ps,
// worker, chief and evaluator roles side by side, each given TF_CONFIG;
// docs/parameter-server.md).
const (
	AllreduceStrategy       = "AllreduceStrategy"
	ParameterServerStrategy = "ParameterServerStrategy"
)

// AutoScaleAnnotation is the job's annotation of the auto-scaling knobs,
// NAME=VALUE,... as rover submit --auto-scale takes them.
const AutoScaleAnnotation = "elastic.rover.dev/auto-scale"

// JobSpec is a validated description of a training job.
type JobSpec struct {
	// Name is metadata.name; "" for a bare spec (ParseFile then takes the
	// file's base name).
	Name string
	// Namespace is metadata.namespace (Kubernetes only).
	Namespace string
	// Strategy is spec.distributionStrategy: AllreduceStrategy (also when
	// left out) or ParameterServerStrategy.
	Strategy string
	// OptimizeMode is spec.optimizeMode: "single-job".
	OptimizeMode string
	// Replicas holds the replica groups by type; a worker group is always
	// present, and a ps group in a parameter-server job.
	Replicas map[ReplicaType]*ReplicaGroup
	// MaxRestarts is the job's restart budget: how many times the worker
	// group may be restarted (--max-restarts, or spec.maxRestarts).
	MaxRestarts int
	// PendingTimeout is how long nodes may wait to be placed before the job
	// fails (spec.pendingTimeout or the pending_timeout annotation); 0 means
	// the platform's default.
	PendingTimeout time.Duration
	// PendingFailStrategy is DLRover's pending_fail_strategy annotation:
	// what nodes pending past PendingTimeout do to the job. -1 or 0:
	// nothing; 1 (the default): fail it when the job cannot run without
	// them; 2: fail it.
	PendingFailStrategy int
	// AutoScaleKnobs are the auto-scaling policy's settings for a group
	// with AutoScale (rover submit --auto-scale=NAME=VALUE,..., or the
	// AutoScaleAnnotation); zero fields take the policy's defaults
	// (docs/autoscaling.md).
	AutoScaleKnobs autoscale.Config
	// NodeUnit: nodes join and leave in groups of this size (--node-unit,
	// or spec.nodeUnit); at least 1.
	NodeUnit int
	// Env is spec.envs, sorted by name; it is also merged into every
	// group's Env.
	Env []EnvVar
	// Suspend is spec.suspend: create the job without starting it.
	Suspend bool
	// ResourceLimits is spec.resourceLimits: the most the whole job may use.
	ResourceLimits ResourceList

	// prefix is "spec." for an ElasticJob, "" otherwise: how field paths
	// in Check's errors start.
	prefix string
}

// IsParameterServer reports whether s is a parameter-server job.
func (s JobSpec) IsParameterServer() bool { return s.Strategy == ParameterServerStrategy }

// ReplicaGroup is one group of nodes.
type ReplicaGroup struct {
	Type ReplicaType
	// MinNodes and MaxNodes bound the node count; equal for a fixed count.
	MinNodes, MaxNodes int
	// Nodes is how many nodes start (replicas), within MinNodes..MaxNodes;
	// scaling (kubectl scale, a ScalePlan) changes it while the job runs.
	Nodes int
	// NprocPerNode is the number of worker processes per node.
	NprocPerNode int
	// Command is what each worker process runs: for a launcher, the
	// training script as the launcher starts it ([python -u train.py
	// ARGS...]); otherwise the container's command and args as written,
	// which the agent runs NprocPerNode times per node.
	Command []string
	// Launch holds the launcher's flags when the container runs a launcher
	// (dlrover-run, torchrun, python -m torch.distributed.run, rover run),
	// parsed as "rover run" parses them; nil otherwise. Its RdzvEndpoint is
	// "": the platform supplies the master.
	Launch *runconfig.Config
	// LaunchArgs are the launcher's arguments as "rover run" takes them
	// (flags, script, script arguments), less LauncherFeatures; nil when
	// the command is not a launcher, and left nil by FromRunConfig, which
	// has only the parsed flags (FromLaunchArgs sets it).
	LaunchArgs []string
	// LauncherFeatures are dlrover-run switches given in the command that
	// Rover does not implement yet (network-check, ...). Check refuses them.
	LauncherFeatures []string
	// Env is the job's envs merged with the container's env (the
	// container wins), job envs first.
	Env []EnvVar
	// RestartCount is the per-node relaunch budget (default 3, at most 5).
	RestartCount int
	// AutoScale lets the master decide the node count.
	AutoScale bool
	// RestartTimeout is restartTimeout: how long a relaunched node may take.
	RestartTimeout time.Duration
	// Priority is "high", "low", or a fraction such as "0.5".
	Priority string
	// CriticalNodes lists node ids whose failure fails the job, with their
	// own relaunch budgets.
	CriticalNodes []CriticalNode
	// Container is the training container's name; Image, ImagePullPolicy
	// and WorkingDir are its fields.
	Container, Image, ImagePullPolicy, WorkingDir string
	// Requests and Limits are the container's resources.
	Requests, Limits ResourceList
	// RestartPolicy is the pod template's restartPolicy as written ("" when
	// left out). Rover relaunches failed nodes itself (RestartCount), so
	// its pods always run with Never, as DLRover's do; Notes says so when
	// the template gives another.
	RestartPolicy string
	// PodFields are the pod template's fields beyond those above, as
	// field paths: volumes, securityContext, nodeSelector, sidecar and
	// init containers, the training container's volumeMounts, env entries
	// with valueFrom, ... Kubernetes honours them from the template; the
	// local platform ignores them, and Notes lists them.
	PodFields []string

	// Shell, when the container runs the launcher inside a shell line
	// (cd, &&, $NODE_NUM, ...), is how the line runs: the nodes run it
	// through the shell with Rover's launcher in place of the line's.
	// LaunchArgs are then the launcher's arguments as read before the job
	// runs. Nil when the launcher runs directly.
	Shell *ShellLine

	// broken: the group has problems (ParseFor still checks it).
	broken bool
	// notes are what reading the command left to the shell (Notes).
	notes []string
	// ctrPath is the training container's field path, for errors; "" when
	// the spec did not come from YAML.
	ctrPath string
}

// CriticalNode is one entry of criticalNodes: node ID; Relaunches is its
// relaunch budget, or -1 for the group's RestartCount.
type CriticalNode struct {
	ID, Relaunches int
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name, Value string
}

// ResourceList maps a resource name (cpu, memory, nvidia.com/gpu, ...) to a
// quantity.
type ResourceList map[string]Quantity

// Resource names with a meaning to Rover. GPU is accepted as an alias of
// nvidia.com/gpu.
const (
	CPU    = "cpu"
	Memory = "memory"
	GPU    = "nvidia.com/gpu"
)

// placeholderEndpoint stands in for the master's address while a launcher
// line is parsed: the platform supplies the real one when the job runs.
const placeholderEndpoint = "rover-master.invalid:29400"

// ParseLaunchArgs parses launcher arguments (those of "rover run": flags,
// then the script and its arguments) as a job spec needs them: the master's
// address is left to the platform and the script is not looked up here, as
// it is resolved where the job runs. "auto", "gpu" and "cpu" for
// --nproc-per-node count this machine. It is what "rover submit" with flags
// calls before FromRunConfig.
func ParseLaunchArgs(args []string) (*runconfig.Config, error) {
	return launchParser(nil).Parse(args)
}

// launchParser returns the runconfig parser for a launcher line; res, when
// it names GPUs or CPUs, answers --nproc-per-node auto/gpu/cpu.
func launchParser(res ResourceList) launchP {
	p := runconfig.Parser{
		Getenv: func(name string) string {
			if name == "ROVER_MASTER_ADDR" {
				return placeholderEndpoint
			}
			return ""
		},
		Stat: func(string) (fs.FileInfo, error) { return nil, nil },
	}
	if q, ok := res[GPU]; ok {
		p.CountGPUs = func() int { return int(q.Value()) }
	}
	if q, ok := res[CPU]; ok {
		p.NumCPU = func() int { return max(1, int(q.Milli/1000)) }
	}
	return launchP{p}
}

type launchP struct{ p runconfig.Parser }

// Parse parses args and clears the placeholder endpoint.
func (l launchP) Parse(args []string) (*runconfig.Config, error) {
	cfg, err := l.p.Parse(args)
	if err != nil {
		return nil, err
	}
	if cfg.RdzvEndpoint == placeholderEndpoint {
		cfg.RdzvEndpoint = ""
	}
	return cfg, nil
}

// FromLaunchArgs returns the JobSpec of "rover submit FLAGS SCRIPT [ARGS]":
// ParseLaunchArgs, then FromRunConfig, with LaunchArgs set to args.
func FromLaunchArgs(args []string) (JobSpec, error) {
	cfg, err := ParseLaunchArgs(args)
	if err != nil {
		return JobSpec{}, err
	}
	spec := FromRunConfig(cfg)
	spec.Replicas[Worker].LaunchArgs = append([]string{}, args...)
	return spec, nil
}

// FromRunConfig returns the JobSpec of "rover submit FLAGS SCRIPT": one
// worker group launched with cfg, as a spec whose worker command is
// "rover run FLAGS SCRIPT" would give. The job is named after --rdzv-id
// ("" when it is left at "none").
func FromRunConfig(cfg *runconfig.Config) JobSpec {
	name := cfg.RunID
	if name == "none" {
		name = ""
	}
	return JobSpec{
		Name:         name,
		Strategy:     AllreduceStrategy,
		OptimizeMode: "single-job",
		Replicas: map[ReplicaType]*ReplicaGroup{Worker: {
			Type:         Worker,
			MinNodes:     cfg.MinNodes,
			MaxNodes:     cfg.MaxNodes,
			Nodes:        cfg.MaxNodes,
			NprocPerNode: cfg.NprocPerNode,
			Command:      cfg.WorkerArgv("python"),
			Launch:       cfg,
			RestartCount: DefaultRestartCount,
		}},
		MaxRestarts:         cfg.MaxRestarts,
		PendingFailStrategy: 1,
		NodeUnit:            max(cfg.NodeUnit, 1),
	}
}
