package kubemaster

import (
	"context"
	"fmt"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/kubenames"
	kubeplatform "github.com/roverml/rover/internal/platform/kubernetes"
	"github.com/roverml/rover/internal/psnodes"
	"github.com/roverml/rover/internal/tfconfig"
)

// parameterServerNodes prepares what a parameter-server job's pods need
// before the first is made, and returns the platform that makes them:
//
//   - a Service per replica of every role (kubenames.ReplicaService), whose
//     address is the replica's in TF_CONFIG, the same across relaunches;
//   - the ConfigMap of the cluster version (kubenames.ClusterConfigMap),
//     which every pod mounts (kubeplatform.ClusterDir) and whose value a
//     restarted master goes on from;
//   - TF_CONFIG and DLRover's variables in every pod (package psnodes),
//     the version raised before each relaunched PS is created.
//
// Making them again is harmless: a restarted master finds them.
func parameterServerNodes(ctx context.Context, plat *kubeplatform.Platform, job *elasticv1.ElasticJob, plan *jobplan.Plan) (*psnodes.Nodes, error) {
	addrs := map[string][]string{}
	counts := map[string]int{}
	ps := 0
	for _, r := range plan.Roles {
		counts[r.Name] = r.Most()
		if r.Name == tfconfig.PS {
			ps = r.Nodes
		}
		for i := range r.Most() {
			addrs[r.Name] = append(addrs[r.Name], kubenames.ReplicaAddr(job.Name, job.Namespace, r.Name, i))
		}
	}
	cluster, err := tfconfig.New(addrs)
	if err != nil {
		return nil, fmt.Errorf("ElasticJob %s/%s: %w", job.Namespace, job.Name, err)
	}
	if err := plat.EnsureReplicaServices(ctx, counts); err != nil {
		return nil, err
	}
	return psnodes.New(ctx, plat, psnodes.Config{
		Job: plan.Name, Cluster: cluster, PS: ps,
		Version: plat.ClusterVersion(), VersionFile: kubeplatform.ClusterVersionFile(), ClusterFile: kubeplatform.ClusterFile(),
	})
}
