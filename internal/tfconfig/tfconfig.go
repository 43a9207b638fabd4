// Package tfconfig owns the cluster description of a parameter-server job:
// which address each replica of each role (chief, ps, worker, evaluator)
// has, TensorFlow's TF_CONFIG as its cluster resolver reads it, and the
// environment DLRover gives each process of such a job (NODE_TYPE,
// WORKER_ID, ...), plus Rover's cluster version, which tells processes
// that a PS came back and they must reconnect.
//
// It is pure: it picks no ports and starts nothing. Package submit assigns
// the addresses (a fixed port per replica, chosen at submit) and gives each
// node its environment when the node manager creates it; a relaunched
// replica gets the same address, so TF_CONFIG never changes during a job.
//
// Usage:
//
//	c, err := tfconfig.New(map[string][]string{
//		tfconfig.PS:     {"127.0.0.1:2222", "127.0.0.1:2223"},
//		tfconfig.Worker: {"127.0.0.1:2224"},
//		tfconfig.Chief:  {"127.0.0.1:2225"},
//	})
//	env, err := c.Env("job", tfconfig.Worker, 0, 0) // TF_CONFIG, NODE_TYPE, ...
package tfconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
)

// The roles of a parameter-server job, as TensorFlow and DLRover name them.
const (
	Chief     = "chief"
	PS        = "ps"
	Worker    = "worker"
	Evaluator = "evaluator"
)

// Roles lists the roles in the order Rover starts and shows them.
var Roles = []string{PS, Chief, Worker, Evaluator}

// Environment variables Rover adds to DLRover's.
const (
	// EnvClusterVersion is the cluster version when the process started:
	// 0, plus one for every PS relaunch before it.
	EnvClusterVersion = "ROVER_CLUSTER_VERSION"
	// EnvClusterVersionFile names a file holding the current cluster
	// version (a decimal number and a newline, replaced atomically): a
	// process that reads a number above the one it knows reconnects to the
	// PS and restores from them.
	EnvClusterVersionFile = "ROVER_CLUSTER_VERSION_FILE"
	// EnvClusterFile names a file holding the current cluster, as
	// TF_CONFIG's "cluster" object (replaced atomically, before the
	// version is raised): it differs from the TF_CONFIG a process started
	// with once a PS was added.
	EnvClusterFile = "ROVER_CLUSTER_FILE"
)

// Cluster is every replica's address, by role and index.
type Cluster struct {
	addrs map[string][]string
}

// ErrInvalid is wrapped by the errors of New and of a role or index
// outside the cluster.
var ErrInvalid = errors.New("invalid parameter-server cluster")

// New checks addrs (host:port by role, one per replica) and returns the
// cluster: the roles are those of this package, a PS job has at least one
// PS and one worker or chief, at most one chief and one evaluator, and no
// address twice.
func New(addrs map[string][]string) (Cluster, error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
	}
	seen := map[string]string{}
	for _, role := range slices.Sorted(maps.Keys(addrs)) {
		if !slices.Contains(Roles, role) {
			bad("role %q is unknown; use ps, chief, worker or evaluator", role)
			continue
		}
		if (role == Chief || role == Evaluator) && len(addrs[role]) > 1 {
			bad("%d %s replicas: TensorFlow runs at most one; give replicas: 1", len(addrs[role]), role)
		}
		for i, a := range addrs[role] {
			host, port, err := net.SplitHostPort(a)
			if err != nil || host == "" || port == "" {
				bad("%s %d: address %q is not host:port", role, i, a)
				continue
			}
			who := fmt.Sprintf("%s %d", role, i)
			if other, dup := seen[a]; dup {
				bad("%s and %s have the same address %s; give each replica its own port", other, who, a)
			}
			seen[a] = who
		}
	}
	if len(addrs[PS]) == 0 {
		bad("no ps replicas; a parameter-server job needs at least one")
	}
	if len(addrs[Worker]) == 0 && len(addrs[Chief]) == 0 {
		bad("no worker or chief replicas; a parameter-server job needs one that trains")
	}
	if len(errs) > 0 {
		return Cluster{}, errors.Join(errs...)
	}
	c := Cluster{addrs: map[string][]string{}}
	for role, a := range addrs {
		if len(a) > 0 {
			c.addrs[role] = slices.Clone(a)
		}
	}
	return c, nil
}

// Count is how many replicas role has.
func (c Cluster) Count(role string) int { return len(c.addrs[role]) }

// Addr is the address of role's replica index.
func (c Cluster) Addr(role string, index int) (string, error) {
	if index < 0 || index >= len(c.addrs[role]) {
		return "", fmt.Errorf("%w: %s %d is not in the cluster (it has %d %s replicas)", ErrInvalid, role, index, len(c.addrs[role]), role)
	}
	return c.addrs[role][index], nil
}

// WithCount is c with role's first n replicas only: the cluster of a job
// whose PS group runs n of the addresses it may grow to.
func (c Cluster) WithCount(role string, n int) (Cluster, error) {
	if n < 1 || n > len(c.addrs[role]) {
		return Cluster{}, fmt.Errorf("%w: %d %s replicas asked of a cluster of %d", ErrInvalid, n, role, len(c.addrs[role]))
	}
	out := Cluster{addrs: maps.Clone(c.addrs)}
	out.addrs[role] = slices.Clone(c.addrs[role][:n])
	return out, nil
}

// ClusterJSON is TF_CONFIG's "cluster" object: what the file
// EnvClusterFile holds.
func (c Cluster) ClusterJSON() (string, error) {
	b, err := json.Marshal(c.trainingCluster())
	if err != nil {
		return "", fmt.Errorf("encode the cluster: %w", err)
	}
	return string(b), nil
}

// trainingCluster is every role's addresses but the evaluator's.
func (c Cluster) trainingCluster() map[string][]string {
	out := map[string][]string{}
	for r, a := range c.addrs {
		if r != Evaluator {
			out[r] = a
		}
	}
	return out
}

// tfConfig is TF_CONFIG's JSON: TensorFlow's TFConfigClusterResolver reads
// cluster (job name to task addresses) and task (type and index).
type tfConfig struct {
	Cluster map[string][]string `json:"cluster"`
	Task    tfTask              `json:"task"`
}

type tfTask struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// TFConfig is TF_CONFIG for role's replica index. Its cluster holds the
// chief, ps and worker addresses; the evaluator is left out of it, as
// TensorFlow documents (tf.estimator.train_and_evaluate: the evaluator is
// not part of the training cluster, and the others would wait for it),
// and learns the cluster with task type evaluator.
func (c Cluster) TFConfig(role string, index int) (string, error) {
	if _, err := c.Addr(role, index); err != nil {
		return "", err
	}
	cfg := tfConfig{Cluster: c.trainingCluster(), Task: tfTask{Type: role, Index: index}}
	b, err := json.Marshal(cfg) // map keys sorted: the same text every time
	if err != nil {
		return "", fmt.Errorf("encode TF_CONFIG: %w", err)
	}
	return string(b), nil
}

// Env is the environment of role's replica index in job: TF_CONFIG,
// DLRover's NODE_* and WORKER_* variables (type, id, rank, and the job's
// worker count as NODE_NUM and WORKER_NUM, as DLRover counts them), JOB_NAME,
// and the cluster version the process starts with. NODE_ID is left to the
// platform, which sets it to the node's id on every job (DLRover sets the
// index, which is NODE_RANK and WORKER_ID here).
func (c Cluster) Env(job, role string, index, version int) (map[string]string, error) {
	tf, err := c.TFConfig(role, index)
	if err != nil {
		return nil, err
	}
	id, workers := strconv.Itoa(index), strconv.Itoa(c.Count(Worker))
	return map[string]string{
		"TF_CONFIG":       tf,
		"JOB_NAME":        job,
		"NODE_TYPE":       role,
		"NODE_RANK":       id,
		"NODE_NUM":        workers,
		"WORKER_TYPE":     role,
		"WORKER_ID":       id,
		"WORKER_RANK":     id,
		"WORKER_NUM":      workers,
		EnvClusterVersion: strconv.Itoa(version),
	}, nil
}
