package kubenames

import "testing"

// TestNames pins the names of a job's master objects: existing jobs' objects
// carry them, and docs/kubernetes.md lists them.
func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{MasterService("train"), "train-rover-master"},
		{MasterPod("train", 0), "train-rover-master-0"},
		{MasterPod("train", 12), "train-rover-master-12"},
		{TokenSecret("train"), "train-rover-token"},
		{MasterAddr("train", "ml"), "train-rover-master.ml.svc:29400"},
		{ReplicaService("train", "ps", 1), "train-edljob-ps-1"},
		{ReplicaAddr("train", "ml", "worker", 0), "train-edljob-worker-0.ml.svc:2222"},
		{ClusterConfigMap("train"), "train-rover-cluster"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
