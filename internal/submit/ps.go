package submit

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/psnodes"
	"github.com/roverml/rover/internal/tfconfig"
)

// ClusterVersionFile and ClusterFile are the files in the job's directory
// that hold a parameter-server job's cluster version and its current
// cluster (tfconfig.EnvClusterVersionFile, EnvClusterFile).
const (
	ClusterVersionFile = "cluster-version"
	ClusterFile        = "cluster"
)

// assignAddrs gives every replica of roles a fixed address on 127.0.0.1:
// a port free now, kept for the whole job, so that a relaunched replica
// comes back at the same address (TF_CONFIG never changes). A group that
// may grow gets the addresses of its most replicas. The ports are held
// until all are chosen, so no two replicas get the same one.
func assignAddrs(roles []jobplan.Role) (tfconfig.Cluster, error) {
	addrs := map[string][]string{}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, r := range roles {
		for i := range r.Most() {
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

// newPSNodes gives every node of a parameter-server job its role's
// environment (package psnodes), with the cluster version and the current
// cluster in the files ClusterVersionFile and ClusterFile of the job's
// directory dir; the version starts at 0, and ps is the PS the job starts
// with: the processes poll the version and read the number a PS relaunch,
// migration or addition raises.
func newPSNodes(ctx context.Context, p platform.Platform, job, dir string, cluster tfconfig.Cluster, ps int) (*psnodes.Nodes, error) {
	v := psnodes.FileVersion{Path: filepath.Join(dir, ClusterVersionFile), ClusterPath: filepath.Join(dir, ClusterFile)}
	if err := v.Store(ctx, psnodes.State{}); err != nil { // a new job: not a previous run's version
		return nil, err
	}
	return psnodes.New(ctx, p, psnodes.Config{Job: job, Cluster: cluster, PS: ps, Version: v, VersionFile: v.Path, ClusterFile: v.ClusterPath})
}
