// Package psnodes is the platform wrapper that runs the nodes of a
// parameter-server job: it gives every node its role's environment
// (TF_CONFIG and DLRover's variables, package tfconfig) when the node
// manager creates it, and raises the job's cluster version before a
// relaunched (or migrated) PS, or an added one, is created, so that the
// processes that watch it reconnect to the PS, restore from them, and
// read the cluster again when it grew.
//
// The version and the current cluster are kept by a [Version]: files on
// the local platform ([FileVersion]), a ConfigMap that the pods mount on
// Kubernetes (package internal/platform/kubernetes). What is stored is
// what a restarted master starts from: the version only goes up.
//
// A platform that reserves no resources (the local one) cannot honour a
// node's CPU or memory request: the request is told to the process
// instead (ROVER_CPU_REQUEST_MILLI, ROVER_MEMORY_REQUEST_BYTES) and not
// reserved.
//
// Usage:
//
//	v := psnodes.FileVersion{Path: versionFile, ClusterPath: clusterFile}
//	nodes, err := psnodes.New(ctx, plat, psnodes.Config{
//		Job: "train", Cluster: cluster, PS: 2,
//		Version: v, VersionFile: versionFile, ClusterFile: clusterFile,
//	})
//	// give nodes to the master as its platform
//
// It decides nothing: which nodes to create is the node manager's business.
package psnodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"

	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/tfconfig"
)

// State is what the processes of a parameter-server job read besides
// their TF_CONFIG: the cluster version and the current cluster.
type State struct {
	Version int
	// Cluster is TF_CONFIG's "cluster" object (tfconfig.ClusterJSON); ""
	// when none was stored yet.
	Cluster string
}

// Version is where a parameter-server job's State lives, where its
// processes read it.
type Version interface {
	// Load returns the current state: version 0 and no cluster when none
	// was stored yet.
	Load(ctx context.Context) (State, error)
	// Store makes s the current state, the cluster no later than the
	// version; when it returns, a process that reads the version reads s
	// (or, where the platform propagates it, soon will).
	Store(ctx context.Context, s State) error
}

// Environment variables of the requests a platform that reserves nothing
// tells the process instead.
const (
	EnvCPURequest    = "ROVER_CPU_REQUEST_MILLI"
	EnvMemoryRequest = "ROVER_MEMORY_REQUEST_BYTES"
)

// Config describes a parameter-server job's nodes.
type Config struct {
	// Job is the job's name (JOB_NAME).
	Job string
	// Cluster is every replica's address, kept for the whole job: the
	// PS group's up to the most PS it may grow to.
	Cluster tfconfig.Cluster
	// PS is how many PS the job starts with (0: every PS of Cluster).
	PS int
	// Version keeps the cluster version and the current cluster.
	Version Version
	// VersionFile and ClusterFile are the paths of the version and of the
	// cluster as the processes see them (tfconfig.EnvClusterVersionFile,
	// EnvClusterFile).
	VersionFile, ClusterFile string
}

// Nodes is a platform whose nodes get their role's environment. It is safe
// for concurrent use.
type Nodes struct {
	platform.Platform
	cfg Config

	mu      sync.Mutex
	version int
	ps      int // the PS in the current cluster
}

// New wraps p; it reads the current version from cfg.Version, so that a
// restarted master goes on from its predecessor's.
func New(ctx context.Context, p platform.Platform, cfg Config) (*Nodes, error) {
	var errs []error
	if p == nil {
		errs = append(errs, errors.New("no platform"))
	}
	if cfg.Job == "" {
		errs = append(errs, errors.New("Config.Job is empty"))
	}
	if cfg.Cluster.Count(tfconfig.PS) == 0 {
		errs = append(errs, errors.New("Config.Cluster has no PS"))
	}
	if cfg.Version == nil || cfg.VersionFile == "" || cfg.ClusterFile == "" {
		errs = append(errs, errors.New("Config.Version, VersionFile and ClusterFile must be set"))
	}
	most := cfg.Cluster.Count(tfconfig.PS)
	if cfg.PS == 0 {
		cfg.PS = most
	}
	if cfg.PS < 0 || cfg.PS > most {
		errs = append(errs, fmt.Errorf("Config.PS is %d; give 1 to the %d PS of the cluster", cfg.PS, most))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("parameter-server nodes: %w", err)
	}
	st, err := cfg.Version.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("parameter-server nodes: read the cluster version: %w", err)
	}
	n := &Nodes{Platform: p, cfg: cfg, version: st.Version, ps: cfg.PS}
	if st.Cluster != "" { // a restarted master: the PS it had grown to
		var c map[string][]string
		if err := json.Unmarshal([]byte(st.Cluster), &c); err != nil {
			return nil, fmt.Errorf("parameter-server nodes: the stored cluster %q: %w", st.Cluster, err)
		}
		n.ps = min(max(n.ps, len(c[tfconfig.PS])), most)
	}
	cur, err := n.clusterLocked()
	if err != nil {
		return nil, err
	}
	if text, _ := cur.ClusterJSON(); text != st.Cluster {
		if err := cfg.Version.Store(ctx, State{Version: n.version, Cluster: text}); err != nil {
			return nil, fmt.Errorf("parameter-server nodes: store the cluster: %w", err)
		}
	}
	return n, nil
}

// clusterLocked is the current cluster: the PS running now.
func (n *Nodes) clusterLocked() (tfconfig.Cluster, error) {
	return n.cfg.Cluster.WithCount(tfconfig.PS, n.ps)
}

// PS is how many PS the current cluster has.
func (n *Nodes) PS() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ps
}

// ClusterVersion is the current cluster version.
func (n *Nodes) ClusterVersion() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.version
}

// Create creates the node with its role's environment added to spec.Env
// (the role's wins over the spec's). A relaunched or migrated PS
// (Relaunch above 0) first raises the cluster version by one; a PS of a
// rank beyond the current cluster's (the group grew) also adds it to the
// cluster, stored before the version. When that cannot be stored the node
// is not created and the error says why.
func (n *Nodes) Create(ctx context.Context, spec platform.NodeSpec) error {
	n.mu.Lock()
	if spec.Group == tfconfig.PS && (spec.Relaunch > 0 || spec.Rank >= n.ps) {
		ps := max(n.ps, spec.Rank+1)
		cur, err := n.cfg.Cluster.WithCount(tfconfig.PS, ps)
		var text string
		if err == nil {
			text, err = cur.ClusterJSON()
		}
		if err == nil {
			err = n.cfg.Version.Store(ctx, State{Version: n.version + 1, Cluster: text})
		}
		if err != nil {
			n.mu.Unlock()
			return fmt.Errorf("raise the cluster version for node %s: %w", spec.ID, err)
		}
		n.version, n.ps = n.version+1, ps
	}
	version := n.version
	cur, err := n.clusterLocked()
	n.mu.Unlock()
	if err != nil {
		return err
	}
	env, err := cur.Env(n.cfg.Job, spec.Group, spec.Rank, version)
	if err != nil {
		return fmt.Errorf("the environment of node %s: %w", spec.ID, err)
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	} else {
		spec.Env = maps.Clone(spec.Env)
	}
	maps.Copy(spec.Env, env)
	spec.Env[tfconfig.EnvClusterVersionFile] = n.cfg.VersionFile
	spec.Env[tfconfig.EnvClusterFile] = n.cfg.ClusterFile
	if !spec.Resources.IsZero() && !n.Platform.Capabilities().Resources {
		// Told, not reserved: the platform could not honour it.
		if spec.Resources.MilliCPU > 0 {
			spec.Env[EnvCPURequest] = strconv.FormatInt(spec.Resources.MilliCPU, 10)
		}
		if spec.Resources.MemoryBytes > 0 {
			spec.Env[EnvMemoryRequest] = strconv.FormatInt(spec.Resources.MemoryBytes, 10)
		}
		spec.Resources = platform.Resources{}
	}
	return n.Platform.Create(ctx, spec)
}
