// Package psnodes is the platform wrapper that runs the nodes of a
// parameter-server job: it gives every node its role's environment
// (TF_CONFIG and DLRover's variables, package tfconfig) when the node
// manager creates it, and raises the job's cluster version before a
// relaunched PS is created, so that the processes that watch it reconnect
// to the PS and restore from it.
//
// The version is kept by a [Version]: a file on the local platform
// ([FileVersion]), a ConfigMap that the pods mount on Kubernetes (package
// internal/platform/kubernetes). Its value is what a restarted master
// starts from: the version only goes up.
//
// Usage:
//
//	nodes, err := psnodes.New(ctx, plat, psnodes.Config{
//		Job: "train", Cluster: cluster,
//		Version: psnodes.FileVersion{Path: file}, VersionFile: file,
//	})
//	// give nodes to the master as its platform
//
// It decides nothing: which nodes to create is the node manager's business.
package psnodes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/tfconfig"
)

// Version is where a parameter-server job's cluster version lives, where
// its processes read it.
type Version interface {
	// Load returns the current version: 0 when none was stored yet.
	Load(ctx context.Context) (int, error)
	// Store makes v the current version; when it returns, a process that
	// reads the version reads v (or, where the platform propagates it,
	// soon will).
	Store(ctx context.Context, v int) error
}

// Config describes a parameter-server job's nodes.
type Config struct {
	// Job is the job's name (JOB_NAME).
	Job string
	// Cluster is every replica's address, kept for the whole job.
	Cluster tfconfig.Cluster
	// Version keeps the cluster version.
	Version Version
	// VersionFile is the path of the version as the processes see it
	// (tfconfig.EnvClusterVersionFile).
	VersionFile string
}

// Nodes is a platform whose nodes get their role's environment. It is safe
// for concurrent use.
type Nodes struct {
	platform.Platform
	cfg Config

	mu      sync.Mutex
	version int
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
	if cfg.Version == nil || cfg.VersionFile == "" {
		errs = append(errs, errors.New("Config.Version and VersionFile must be set"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("parameter-server nodes: %w", err)
	}
	v, err := cfg.Version.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("parameter-server nodes: read the cluster version: %w", err)
	}
	return &Nodes{Platform: p, cfg: cfg, version: v}, nil
}

// ClusterVersion is the current cluster version.
func (n *Nodes) ClusterVersion() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.version
}

// Create creates the node with its role's environment added to spec.Env
// (the role's wins over the spec's). A relaunched PS (Relaunch above 0)
// first raises the cluster version by one; when that cannot be stored the
// node is not created and the error says why.
func (n *Nodes) Create(ctx context.Context, spec platform.NodeSpec) error {
	n.mu.Lock()
	if spec.Group == tfconfig.PS && spec.Relaunch > 0 {
		if err := n.cfg.Version.Store(ctx, n.version+1); err != nil {
			n.mu.Unlock()
			return fmt.Errorf("raise the cluster version for node %s: %w", spec.ID, err)
		}
		n.version++
	}
	version := n.version
	n.mu.Unlock()
	env, err := n.cfg.Cluster.Env(n.cfg.Job, spec.Group, spec.Rank, version)
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
	return n.Platform.Create(ctx, spec)
}
