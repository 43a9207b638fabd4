package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const rightSizeKubeJob = "rightsize" // no other job's name in it: the kubelet rewrites master addresses by name

// kubernetesRightSize runs the DDP example as an ElasticJob whose worker
// pods request far more memory (8 GiB) than its workers use, within the
// job's resourceLimits; a worker pod is deleted mid-training once the
// agents have reported their workers' usage. The relaunched pod asks for
// the right-sized memory (the peak seen × 1.25, under half the request),
// as the master's NodeRightSized Event says, and within the limits' share
// of a node; the CPU request, not CPU-bound while steps slow down, stays;
// and the job still succeeds.
func kubernetesRightSize(t *testing.T, k *kube) {
	const job = rightSizeKubeJob
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.podLogs(job))
		}
	}()
	dir := t.TempDir()
	store := filepath.Join(dir, "flash")
	saves := filepath.Join(dir, "saves.log")
	ej := ddpJob(job, dir, "--flash", store, "--log-saves", saves, "--step-sleep", "0.1")
	requested := resource.MustParse("8Gi")
	ctr := &ej.Spec.ReplicaSpecs[elasticv1.Worker].Template.Spec.Containers[0]
	ctr.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: requested, corev1.ResourceCPU: resource.MustParse("1")}
	// Two nodes at most: each may ask for 2 CPUs and 16 GiB.
	ej.Spec.ResourceLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi")}
	if err := k.c.Create(context.Background(), ej); err != nil {
		t.Fatal(err)
	}
	// A committed checkpoint takes seconds of steps: the agents' heartbeats
	// carried the workers' usage by then.
	waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return latestCommitted(store) >= 10 })
	waitStep(t, saves, 15)
	k.deletePod(t, job+"-worker-1-0")
	relaunched := job + "-worker-1-1"
	var pod *corev1.Pod
	waitFor(t, jobTimeout, "the relaunched worker pod", func() bool {
		pod = k.pod(t, relaunched)
		return pod != nil && pod.Labels[elasticv1.LabelRelaunchCount] == "1"
	})
	res := pod.Spec.Containers[0].Resources
	mem, cpu := res.Requests[corev1.ResourceMemory], res.Requests[corev1.ResourceCPU]
	if mem.Value() >= requested.Value()/2 || mem.Value() < 256<<20 || mem.Value() > 16<<30 {
		t.Errorf("relaunched pod requests %s memory; want it lowered from %s to under half, at least 256Mi, within the 16Gi share", &mem, &requested)
	}
	if lim := res.Limits[corev1.ResourceMemory]; lim.Cmp(mem) != 0 {
		t.Errorf("relaunched pod's memory limit %s, want its request %s", &lim, &mem)
	}
	if cpu.MilliValue() != 1000 {
		t.Errorf("relaunched pod requests %s CPU; want the template's 1: its workers were not CPU-bound while their steps slowed", &cpu)
	}

	t.Logf("the relaunched pod %s requests %s memory (the template %s) and %s CPU", relaunched, &mem, &requested, &cpu)
	got := k.succeeded(t, job)
	if w := got.Status.ReplicaStatuses[elasticv1.Worker]; w == nil || w.Succeeded != 2 || w.Failed != 0 {
		t.Errorf("worker status %+v, want 2 succeeded, none failed", w)
	}
	if r := readResult(t, filepath.Join(dir, "out.json")); r.Step != 60 || r.WorldSize != 4 {
		t.Errorf("result: step %d world %d; want 60, 4", r.Step, r.WorldSize)
	}
	// The decision is an Event on the job, with the memory the pod asks for
	// and the peak it came from.
	re := regexp.MustCompile(`node ` + regexp.QuoteMeta(relaunched) + ` \(node rank 1\) asks for what its rank's workers used: memory ` +
		strconv.FormatInt(requested.Value(), 10) + ` -> (\d+) bytes \(peak (\d+)\)`)
	found := ""
	for _, e := range k.masterEvents(t, elasticv1.ElasticJobKind, job) {
		if m := re.FindStringSubmatch(e.Note); e.Reason == "NodeRightSized" && m != nil {
			found = m[1]
			if peak, _ := strconv.ParseInt(m[2], 10, 64); peak <= 0 || mem.Value() != max(peak*5/4, 256<<20) {
				t.Errorf("the pod asks for %d bytes; want the peak %d × 1.25 (at least 256Mi)", mem.Value(), peak)
			}
		}
	}
	if found != fmt.Sprint(mem.Value()) {
		t.Errorf("no NodeRightSized Event on the job says %s's memory became %d bytes (found %q); Events: %v",
			relaunched, mem.Value(), found, reasons(k.masterEvents(t, elasticv1.ElasticJobKind, job)))
	}
}
