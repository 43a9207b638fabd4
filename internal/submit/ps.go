package submit

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/tfconfig"
)

// ClusterVersionFile is the file in the job's directory that holds a
// parameter-server job's cluster version (tfconfig.EnvClusterVersionFile).
const ClusterVersionFile = "cluster-version"

// assignAddrs gives every replica of roles a fixed address on 127.0.0.1:
// a port free now, kept for the whole job, so that a relaunched replica
// comes back at the same address (TF_CONFIG never changes). The ports are
// held until all are chosen, so no two replicas get the same one.
func assignAddrs(roles []jobplan.Role) (tfconfig.Cluster, error) {
	addrs := map[string][]string{}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, r := range roles {
		for i := range r.Nodes {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return tfconfig.Cluster{}, fmt.Errorf("choose a port for %s %d: %w", r.Name, i, err)
			}
			held = append(held, l)
			addrs[r.Name] = append(addrs[r.Name], l.Addr().String())
		}
	}
	return tfconfig.New(addrs)
}

// psNodes gives every node of a parameter-server job its role's
// environment (TF_CONFIG, DLRover's variables) when it is created, and
// raises the cluster version when a PS is relaunched: the version file
// is rewritten before the new PS starts, so that the other processes,
// which poll it, reconnect and restore from the PS.
type psNodes struct {
	platform.Platform
	job     string
	cluster tfconfig.Cluster
	file    string // the cluster version file

	mu      sync.Mutex
	version int
}

func newPSNodes(p platform.Platform, job, dir string, cluster tfconfig.Cluster) (*psNodes, error) {
	n := &psNodes{Platform: p, job: job, cluster: cluster, file: filepath.Join(dir, ClusterVersionFile)}
	if err := n.writeVersion(0); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *psNodes) Create(ctx context.Context, spec platform.NodeSpec) error {
	n.mu.Lock()
	if spec.Group == tfconfig.PS && spec.Relaunch > 0 {
		if err := n.writeVersion(n.version + 1); err != nil {
			n.mu.Unlock()
			return err
		}
		n.version++
	}
	version := n.version
	n.mu.Unlock()
	env, err := n.cluster.Env(n.job, spec.Group, spec.Rank, version)
	if err != nil {
		return fmt.Errorf("the environment of node %s: %w", spec.ID, err)
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	} else {
		spec.Env = maps.Clone(spec.Env)
	}
	maps.Copy(spec.Env, env)
	spec.Env[tfconfig.EnvClusterVersionFile] = n.file
	return n.Platform.Create(ctx, spec)
}

// writeVersion replaces the version file atomically.
func (n *psNodes) writeVersion(v int) error {
	tmp := n.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(v)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the cluster version: %w", err)
	}
	if err := os.Rename(tmp, n.file); err != nil {
		return fmt.Errorf("write the cluster version: %w", err)
	}
	return nil
}
