package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// dlroverKubeJob is kubernetesDLRoverJob's job.
const dlroverKubeJob = "dlrover-mnist"

// dlroverKubeSteps is the optimizer steps the job trains: 3072 samples in
// micro-batches of 8 on 4 ranks, 96 steps an epoch, two epochs.
const dlroverKubeSteps = 192

// dlroverElasticJob is a PyTorch ElasticJob written as DLRover's examples
// write theirs, with only apiVersion changed: the launcher inside a bash
// line (cd, &&, $NODE_NUM, --network-check), a /dev/shm emptyDir of
// medium Memory mounted in the container, restartPolicy Always, two
// worker replicas. It runs examples/dlrover_compat/mnist_train.py, whose
// DdpCheckpointer names the job's storage (the launcher names none),
// saving every step to memory and every 8th to storage; its files are in
// dir.
func dlroverElasticJob(name, dir string) string {
	script := strings.Join([]string{
		"cd " + filepath.Join(repoRoot, "examples", "dlrover_compat") + " &&",
		"dlrover-run --network-check --nnodes=$NODE_NUM --nproc_per_node=2 --max_restarts=3",
		"mnist_train.py --samples 3072 --disk-every 8",
		"--checkpoint-dir " + filepath.Join(dir, "ckpt"),
		"--out " + filepath.Join(dir, "out.json"),
		"--log " + filepath.Join(dir, "starts.log"),
		"--progress " + filepath.Join(dir, "progress"),
	}, " ")
	return `apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata:
  name: ` + name + `
  namespace: ` + kubeNamespace + `
spec:
  distributionStrategy: AllreduceStrategy
  optimizeMode: single-job
  replicaSpecs:
    worker:
      replicas: 2
      restartCount: 3
      template:
        spec:
          restartPolicy: Always
          volumes:
            - name: dshm
              emptyDir:
                medium: Memory
          containers:
            - name: main
              image: rover:e2e
              imagePullPolicy: IfNotPresent
              command:
                - /bin/bash
                - -c
                - "` + script + `"
              resources:
                limits:
                  cpu: "2"
                  memory: 2Gi
                requests:
                  cpu: "1"
                  memory: 1Gi
              volumeMounts:
                - name: dshm
                  mountPath: /dev/shm
`
}

// startSteps reads the MNIST-style job's starts log: each rank's start
// steps, in order.
func startSteps(t *testing.T, path string) map[int][]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[int][]int{}
	for _, line := range strings.Split(string(b), "\n") {
		var restart, rank, step int
		if n, _ := fmt.Sscanf(line, "restart=%d rank=%d start_step=%d", &restart, &rank, &step); n == 3 {
			steps[rank] = append(steps[rank], step)
		}
	}
	return steps
}

// hasShmVolume reports whether pod's training container mounts an emptyDir
// of medium Memory at /dev/shm, as the job's template says.
func hasShmVolume(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
			continue
		}
		for _, c := range pod.Spec.Containers {
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name && m.MountPath == "/dev/shm" }) {
				return true
			}
		}
	}
	return false
}

// kubernetesDLRoverJob submits dlroverElasticJob to the API server and
// deletes worker 1's pod once rank 0 reports a step past a committed
// checkpoint: the master relaunches the rank as -worker-1-1 (with the
// template's /dev/shm emptyDir), every rank
// (the survivor's restarted for the new round, the replacement's new)
// resumes from the same step, no older than the step storage held at the
// deletion (the survivor's agent persists the step it holds in memory when
// its workers stop), and the job trains to its last step and ends
// Succeeded.
func kubernetesDLRoverJob(t *testing.T, k *kube) {
	const job = dlroverKubeJob
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.podLogs(job))
		}
	}()
	dir := t.TempDir()
	var ej elasticv1.ElasticJob
	if err := yaml.UnmarshalStrict([]byte(dlroverElasticJob(job, dir)), &ej); err != nil {
		t.Fatal(err)
	}
	if err := k.c.Create(context.Background(), &ej); err != nil {
		t.Fatalf("create the ElasticJob: %v", err)
	}
	store := filepath.Join(dir, "ckpt")
	waitFor(t, jobTimeout, "a step committed to storage", func() bool { return latestCommitted(store) >= 8 })
	waitFor(t, jobTimeout, "rank 0 to report step 20", func() bool { return progressOf(dir) >= 20 })
	committed, at := latestCommitted(store), progressOf(dir)
	k.deletePod(t, job+"-worker-1-0")
	t.Logf("deleted worker 1's pod after step %d, with step %d committed to storage", at, committed)
	var replacement *corev1.Pod
	waitFor(t, jobTimeout, "the replacement worker pod to run", func() bool {
		replacement = k.pod(t, job+"-worker-1-1")
		return replacement != nil && replacement.Labels[elasticv1.LabelRelaunchCount] == "1" &&
			(replacement.Status.Phase == corev1.PodRunning || replacement.Status.Phase == corev1.PodSucceeded)
	})
	if !hasShmVolume(replacement) {
		t.Errorf("the replacement pod lacks the template's /dev/shm emptyDir: volumes %+v, mounts %+v",
			replacement.Spec.Volumes, replacement.Spec.Containers[0].VolumeMounts)
	}

	got := k.succeeded(t, job)
	if got.Status.RelaunchCount != 1 {
		t.Errorf("job relaunch count %d, want 1", got.Status.RelaunchCount)
	}
	if pods, want := k.ranPods(job, "worker"), []string{job + "-worker-0-0", job + "-worker-1-0", job + "-worker-1-1"}; !slices.Equal(pods, want) {
		t.Errorf("worker pods that ran: %v, want %v", pods, want)
	}
	starts := startSteps(t, filepath.Join(dir, "starts.log"))
	resumed := -1
	for rank := range 4 {
		s := starts[rank]
		if len(s) < 2 || s[0] != 0 {
			t.Fatalf("rank %d started at steps %v, want 0 and then a resumed step", rank, s)
		}
		last := s[len(s)-1]
		if resumed >= 0 && last != resumed {
			t.Errorf("rank %d resumed at step %d, another at %d", rank, last, resumed)
		}
		resumed = last
	}
	if resumed < committed || resumed == 0 {
		t.Errorf("the job resumed at step %d; storage held step %d when the pod was deleted", resumed, committed)
	}
	t.Logf("the job resumed at step %d (deleted after step %d, storage at %d)", resumed, at, committed)
	res := readResult(t, filepath.Join(dir, "out.json"))
	// TORCHELASTIC_RESTART_COUNT stays 0: a changed membership starts a
	// new round, which, as in torchelastic, is not a restart.
	if res.Step != dlroverKubeSteps || res.WorldSize != 4 {
		t.Errorf("result: step %d world %d; want %d, 4", res.Step, res.WorldSize, dlroverKubeSteps)
	}
}
