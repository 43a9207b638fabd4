package runconfig

import (
	"net"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseEndpoint: where a job's master is, from the flags and every
// environment convention, in their order of precedence.
func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		// want: the endpoint, standalone, node rank, the workers' fixed
		// MASTER_ADDR:MASTER_PORT ("" when the agent picks a port).
		endpoint   string
		standalone bool
		nodeRank   int
		workers    string
		warnings   []string
	}{
		{name: "flag", args: []string{"--nnodes=2", "--rdzv-endpoint=h:5"}, endpoint: "h:5", nodeRank: -1},
		{name: "flag beats every variable", args: []string{"--nnodes=2", "--rdzv-endpoint=h:5"},
			env:      map[string]string{"PET_RDZV_ENDPOINT": "p:1", "ROVER_MASTER_ADDR": "r:1", "DLROVER_MASTER_ADDR": "d:1", "MASTER_ADDR": "k"},
			endpoint: "h:5", nodeRank: -1},
		{name: "PET_RDZV_ENDPOINT beats ROVER_MASTER_ADDR", args: []string{"--nnodes=2"},
			env: map[string]string{"PET_RDZV_ENDPOINT": "p:1", "ROVER_MASTER_ADDR": "r:1"}, endpoint: "p:1", nodeRank: -1},
		{name: "ROVER_MASTER_ADDR beats DLROVER_MASTER_ADDR", args: []string{"--nnodes=2"},
			env: map[string]string{"ROVER_MASTER_ADDR": "r:1", "DLROVER_MASTER_ADDR": "d:1"}, endpoint: "r:1", nodeRank: -1},
		{name: "DLROVER_MASTER_ADDR beats MASTER_ADDR", args: []string{"--nnodes=2"},
			env: map[string]string{"DLROVER_MASTER_ADDR": "d:1", "MASTER_ADDR": "k", "MASTER_PORT": "7"}, endpoint: "d:1", nodeRank: -1},
		{name: "Kubeflow's MASTER_ADDR, MASTER_PORT and NODE_RANK", args: []string{"--nnodes=2"},
			env: map[string]string{"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "NODE_RANK": "1"}, endpoint: "job-master-0:23456", nodeRank: 1},
		{name: "MASTER_ADDR without MASTER_PORT: port 29400", args: []string{"--nnodes=2"},
			env: map[string]string{"MASTER_ADDR": "fd00::1"}, endpoint: "[fd00::1]:29400", nodeRank: -1},
		{name: "PET_NODE_RANK beats NODE_RANK", args: []string{"--nnodes=2"},
			env: map[string]string{"MASTER_ADDR": "k", "PET_NODE_RANK": "0", "NODE_RANK": "1"}, endpoint: "k:29400", nodeRank: 0},
		{name: "--node-rank beats both", args: []string{"--nnodes=2", "--node-rank=1"},
			env: map[string]string{"MASTER_ADDR": "k", "PET_NODE_RANK": "0", "NODE_RANK": "0"}, endpoint: "k:29400", nodeRank: 1},
		{name: "one node ignores MASTER_ADDR", args: nil,
			env: map[string]string{"MASTER_ADDR": "k", "MASTER_PORT": "1"}, standalone: true, nodeRank: -1},
		{name: "static: the master next to --master-port", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=1", "--master-addr=10.0.0.1", "--master-port=1234"},
			endpoint: "10.0.0.1:1235", nodeRank: 1, workers: "10.0.0.1:1234"},
		{name: "static: torchrun's defaults", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=0"},
			endpoint: "127.0.0.1:29501", nodeRank: 0, workers: "127.0.0.1:29500"},
		{name: "static: PET_ variables, as Slurm scripts export them", args: []string{"--rdzv-backend=static"},
			env:      map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "n0", "PET_MASTER_PORT": "6000"},
			endpoint: "n0:6001", nodeRank: 1, workers: "n0:6000"},
		{name: "static: an endpoint wins over the derived one", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=0", "--rdzv-endpoint=m:9", "--master-addr=n0"},
			endpoint: "m:9", nodeRank: 0, workers: "n0:29500"},
		{name: "static ignores MASTER_ADDR", args: []string{"--nnodes=2", "--rdzv-backend=static", "--node-rank=0"},
			env: map[string]string{"MASTER_ADDR": "k", "MASTER_PORT": "1"}, endpoint: "127.0.0.1:29501", nodeRank: 0, workers: "127.0.0.1:29500"},
		{name: "standalone ignores the endpoint and backend", args: []string{"--standalone", "--rdzv-endpoint=m:5", "--rdzv-backend=static", "--rdzv-id=j"},
			standalone: true, nodeRank: -1, warnings: []string{
				"--standalone ignores --rdzv-endpoint=m:5, as torchrun does: the job runs its own master on a loopback port",
				"--standalone ignores --rdzv-backend=static, as torchrun does: the job runs its own master on a loopback port"}},
		{name: "standalone ignores both from the environment", args: nil,
			env:        map[string]string{"PET_STANDALONE": "1", "ROVER_MASTER_ADDR": "m"},
			standalone: true, nodeRank: -1, warnings: []string{
				"--standalone (from PET_STANDALONE) ignores --rdzv-endpoint=m:29400 (from ROVER_MASTER_ADDR), as torchrun does: the job runs its own master on a loopback port"}},
		{name: "standalone keeps c10d silently", args: []string{"--standalone", "--rdzv-backend=c10d"}, standalone: true, nodeRank: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{}, tt.args...), "train.py")
			c, err := testParser(tt.env, 0).Parse(args)
			if err != nil {
				t.Fatalf("Parse(%q): %v", args, err)
			}
			workers := ""
			if c.MasterAddrSet && c.MasterPortSet {
				workers = net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
			}
			got := []any{c.RdzvEndpoint, c.Standalone, c.NodeRank, workers, c.Warnings}
			want := []any{tt.endpoint, tt.standalone, tt.nodeRank, tt.workers, tt.warnings}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse(%q): endpoint, standalone, node rank, workers' master, warnings (-want +got):\n%s", args, diff)
			}
			if tt.standalone && c.RunID == "" {
				t.Errorf("standalone dropped --rdzv-id")
			}
		})
	}
}
