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

// newPSNodes gives every node of a parameter-server job its role's
// environment (package psnodes), with the cluster version in the file
// ClusterVersionFile of the job's directory dir, which starts at 0: the
// processes poll it and read the number a PS relaunch raises.
func newPSNodes(ctx context.Context, p platform.Platform, job, dir string, cluster tfconfig.Cluster) (*psnodes.Nodes, error) {
	file := filepath.Join(dir, ClusterVersionFile)
	v := psnodes.FileVersion{Path: file}
	if err := v.Store(ctx, 0); err != nil { // a new job: not a previous run's version
		return nil, err
	}
	return psnodes.New(ctx, p, psnodes.Config{Job: job, Cluster: cluster, Version: v, VersionFile: file})
}
