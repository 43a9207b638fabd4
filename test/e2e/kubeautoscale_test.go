package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobspec"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const autoScaleKubeJob = "grow" // no other job's name in it: the kubelet rewrites master addresses by name

// kubernetesAutoScale runs a job of --nnodes 2:3 with autoScale: true and
// three replicas on a node that can place only two of its worker pods
// (the kubelet leaves the third unbound, Pending, as a scheduler would).
// After the job's pendingTimeout the master gives the third pod up: the
// job trains on two, and the master records the change as a ScalePlan
// labelled scale-type: auto and the job's replicas set to 2. Once the node
// can place a third pod and the capacity learned has expired
// (capacity-retry), the policy grows the job to three, records that too,
// and the third pod runs and joins.
func kubernetesAutoScale(t *testing.T, k *kube) {
	const job = autoScaleKubeJob
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.podLogs(job))
		}
	}()
	isWorker := func(p *corev1.Pod) bool {
		return p.Labels[elasticv1.LabelJobName] == job && p.Labels[elasticv1.LabelReplicaType] == string(elasticv1.Worker)
	}
	k.kl.LimitBinding(isWorker, 2)
	defer k.kl.LimitBinding(isWorker, -1)
	dir := t.TempDir()
	stop := filepath.Join(dir, "stop")
	ej := ddpJob(job, dir)
	ej.Spec.ReplicaSpecs[elasticv1.Worker].Template.Spec.Containers[0].Command = []string{"rover", "run", "--nnodes", "2:3",
		"--nproc-per-node", "1", "--max-restarts", "3", "--checkpoint-dir", filepath.Join(dir, "flash"),
		filepath.Join(repoRoot, "test", "e2e", "testdata", "autoscale_train.py"), "--stop-file", stop, "--log", dir}
	ej.Annotations = map[string]string{"pending_timeout": "10",
		jobspec.AutoScaleAnnotation: "warmup-steps=5,warmup=2s,window=6,min-samples=4,cool-down=5s,capacity-retry=20s"}
	w := ej.Spec.ReplicaSpecs[elasticv1.Worker]
	w.Replicas, w.AutoScale = new(int32(3)), true
	ctx := context.Background()
	if err := k.c.Create(ctx, ej); err != nil {
		t.Fatal(err)
	}
	autoPlans := func() []elasticv1.ScalePlan {
		var l elasticv1.ScalePlanList
		if err := k.c.List(ctx, &l, client.InNamespace(kubeNamespace),
			client.MatchingLabels{elasticv1.LabelJobName: job, elasticv1.LabelScaleType: elasticv1.ScaleTypeAuto}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	replicas := func() int32 { return *k.job(t, job).Spec.ReplicaSpecs[elasticv1.Worker].Replicas }
	planFor := func(n int32, says string) bool {
		return slices.ContainsFunc(autoPlans(), func(p elasticv1.ScalePlan) bool {
			return p.Spec.ReplicaResourceSpecs[elasticv1.Worker].Replicas == n && p.Status.Phase == elasticv1.PhaseSucceeded &&
				strings.Contains(p.Status.Message, says)
		})
	}
	waitFor(t, jobTimeout, "the pending third pod given up: an auto ScalePlan for 2 nodes, replicas 2", func() bool {
		return planFor(2, "pending timeout") && replicas() == 2
	})
	k.kl.LimitBinding(isWorker, 3) // the node can place a third pod now
	waitFor(t, jobTimeout, "the policy to grow the job to 3: an auto ScalePlan for 3 nodes, replicas 3", func() bool {
		return planFor(3, "auto-scale: grow from 2 to 3 nodes") && replicas() == 3
	})
	var third string
	waitFor(t, jobTimeout, "a third worker pod running", func() bool {
		var pods corev1.PodList
		if err := k.c.List(ctx, &pods, client.InNamespace(kubeNamespace), client.MatchingLabels{elasticv1.LabelJobName: job,
			elasticv1.LabelReplicaType: string(elasticv1.Worker)}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				n++
				third = p.Name
			}
		}
		return n == 3
	})
	t.Logf("the job grew back to 3 workers (%s among them); auto ScalePlans: %d", third, len(autoPlans()))
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := k.succeeded(t, job)
	if ws := got.Status.ReplicaStatuses[elasticv1.Worker]; ws == nil || ws.Succeeded < 3 || ws.Failed != 0 {
		t.Errorf("worker status %+v, want 3 succeeded and none failed", ws)
	}
	logs := readTrainLogs(t, dir)
	checkExactlyOnce(t, logs, 480, epochsTrained(logs), 3*4)
}
