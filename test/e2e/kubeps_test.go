package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/internal/platform/kubernetes"
	"github.com/roverml/rover/test/kubelet"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// psKubeJob is kubernetesParameterServer's job, and psKubeRoles its
// replicas by role.
const psKubeJob = "ps-train"

var psKubeRoles = map[string]int{"ps": 2, "chief": 1, "worker": 3}

// psKubeRewrite maps the address of every replica of psKubeJob (its
// Service's, as TF_CONFIG lists it) to a free port on loopback: the test
// kubelet's pods share this machine's network, where every replica
// cannot listen on the Services' one port.
func psKubeRewrite(t *testing.T) map[string]string {
	t.Helper()
	rewrite := map[string]string{}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for role, n := range psKubeRoles {
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
			rewrite[kubenames.ReplicaAddr(psKubeJob, kubeNamespace, role, i)] = l.Addr().String()
		}
	}
	return rewrite
}

// dlroverPSElasticJob is a parameter-server job as DLRover's examples
// write one (examples/tensorflow/criteo_deeprec/manual_job.yaml), with
// only apiVersion changed and Rover's stdlib PS program in the
// containers' shell lines: ps and worker groups with resources and
// autoScale: false, a chief, and a dlrover-master group whose container
// has only a name and a pull policy.
func dlroverPSElasticJob(out string, steps, pause int) string {
	line := fmt.Sprintf("cd %s && %s -u ps_roles.py %s %d %d", filepath.Join(repoRoot, "test", "e2e", "testdata"), pythonExec, out, steps, pause)
	role := func(name string, replicas, restarts int, memory string) string {
		return fmt.Sprintf(`    %s:
      autoScale: false
      replicas: %d
      restartCount: %d
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: rover:e2e
              imagePullPolicy: Always
              command:
                - /bin/bash
                - -c
                - "%s"
              resources:
                limits: {cpu: "1", memory: %s}
                requests: {cpu: "1", memory: %s}
`, name, replicas, restarts, line, memory, memory)
	}
	return `apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata:
  name: ` + psKubeJob + `
  namespace: ` + kubeNamespace + `
spec:
  distributionStrategy: ParameterServerStrategy
  replicaSpecs:
` + role("ps", 2, 2, "512Mi") + role("chief", 1, 1, "256Mi") + role("worker", 3, 2, "256Mi") + `    dlrover-master:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              imagePullPolicy: Always
`
}

// kubernetesParameterServer runs dlroverPSElasticJob (2 PS, 3 workers, 1
// chief; test/e2e/testdata/ps_roles.py) through the operator, its master
// pod and the test kubelet. While the workers wait, PS 0's pod is deleted
// and PS 1 is killed for memory: each comes back at the same Service
// address with the cluster version raised in the ConfigMap every pod
// mounts (1, then 2), restores its total from its checkpoint, PS 1 with
// more memory. Then the master's pod is deleted, and PS 0's again: the
// next master adopts the pods and goes on from the version in the
// ConfigMap (3). A ScalePlan's migratePods moves PS 1 to a pod of 2 CPUs
// (version 4). The workers, whose pods started at version 0, reconnect
// reading version 4 from their mounted file; every step is counted once,
// and the chief's success ends the job, Succeeded.
func kubernetesParameterServer(t *testing.T, k *kube) {
	const job, steps, pause = psKubeJob, 20, 5
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.psPodLogs(job))
		}
	}()
	out := t.TempDir()
	var ej elasticv1.ElasticJob
	if err := yaml.UnmarshalStrict([]byte(dlroverPSElasticJob(out, steps, pause)), &ej); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := k.c.Create(ctx, &ej); err != nil {
		t.Fatalf("create the ElasticJob: %v", err)
	}
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "events"))
		return string(b)
	}
	waitFor(t, jobTimeout, "all three workers to pause", func() bool { return strings.Count(events(), " paused\n") == 3 })

	// A Service per replica, selecting the replica's pod.
	for role, n := range psKubeRoles {
		for i := range n {
			var svc corev1.Service
			name := kubenames.ReplicaService(job, role, i)
			if err := k.c.Get(ctx, client.ObjectKey{Namespace: kubeNamespace, Name: name}, &svc); err != nil {
				t.Errorf("Service %s: %v", name, err)
				continue
			}
			if svc.Spec.Selector[elasticv1.LabelReplicaType] != role || svc.Spec.Selector[elasticv1.LabelRankIndex] != fmt.Sprint(i) || svc.Spec.Ports[0].Port != kubenames.ReplicaPort {
				t.Errorf("Service %s selects %v on %v", name, svc.Spec.Selector, svc.Spec.Ports)
			}
		}
	}
	// TF_CONFIG names the Services, as the pod spec says it.
	tf := podEnv(t, k.pod(t, job+"-worker-1-0"), "TF_CONFIG")
	var cfg struct {
		Cluster map[string][]string
		Task    struct {
			Type  string
			Index int
		}
	}
	if err := json.Unmarshal([]byte(tf), &cfg); err != nil {
		t.Fatalf("worker 1's TF_CONFIG %q: %v", tf, err)
	}
	if want := kubenames.ReplicaAddr(job, kubeNamespace, "ps", 1); len(cfg.Cluster["ps"]) != 2 || cfg.Cluster["ps"][1] != want || cfg.Task.Type != "worker" || cfg.Task.Index != 1 {
		t.Errorf("worker 1's TF_CONFIG %s: want ps 1 at %s, task worker 1", tf, want)
	}

	// Steps 0..4 alternate over the two PS: PS 0 applied 3 of each
	// worker's, PS 1 two.
	k.deletePod(t, job+"-ps-0-0")
	waitFor(t, jobTimeout, "PS 0 to come back at version 1 with its total", func() bool {
		return regexp.MustCompile(`(?m)^ps 0 start version 1 total 9 addr `).MatchString(events())
	})
	waitFor(t, jobTimeout, "PS 1 to run", func() bool { return k.running(t, job+"-ps-1-0") })
	if err := k.kl.KillForMemory(kubeNamespace, job+"-ps-1-0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, jobTimeout, "PS 1 to come back at version 2 with its total", func() bool {
		return regexp.MustCompile(`(?m)^ps 1 start version 2 total 6 addr `).MatchString(events())
	})
	relaunched := k.pod(t, job+"-ps-1-1")
	if relaunched == nil {
		t.Fatal("no pod ps-1-1")
	}
	if mem := relaunched.Spec.Containers[0].Resources.Limits.Memory(); mem.Cmp(resource.MustParse("512Mi")) <= 0 {
		t.Errorf("PS 1 came back with memory %s, want more than the 512Mi it was killed for", mem)
	}
	// The master's pod is deleted; the next master adopts the role pods
	// and goes on from the version in the ConfigMap: PS 0 deleted again
	// comes back at version 3.
	k.deletePod(t, kubenames.MasterPod(job, 0))
	waitFor(t, jobTimeout, "the relaunched master pod to run", func() bool { return k.running(t, kubenames.MasterPod(job, 1)) })
	k.deletePod(t, job+"-ps-0-1")
	waitFor(t, jobTimeout, "PS 0 to come back at version 3 with its total", func() bool {
		return regexp.MustCompile(`(?m)^ps 0 start version 3 total 9 addr `).MatchString(events())
	})
	// A user's ScalePlan migrates PS 1 to a pod of 2 CPUs (DLRover's
	// migratePods): a new pod of rank 1, at the same Service, version 4.
	plan := &elasticv1.ScalePlan{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeNamespace, Name: job + "-migrate", Labels: elasticv1.ManualScaleLabels(job)},
		Spec: elasticv1.ScalePlanSpec{OwnerJob: job, MigratePods: []elasticv1.PodMeta{{Name: job + "-ps-1-1",
			Resource: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}},
	}
	if err := k.c.Create(ctx, plan); err != nil {
		t.Fatal(err)
	}
	waitFor(t, jobTimeout, "PS 1 to come back at version 4 with its total", func() bool {
		return regexp.MustCompile(`(?m)^ps 1 start version 4 total 6 addr `).MatchString(events())
	})
	if err := k.c.Get(ctx, client.ObjectKeyFromObject(plan), plan); err != nil || plan.Status.Phase != elasticv1.PhaseSucceeded {
		t.Errorf("ScalePlan %s: %+v, %v; want Succeeded", plan.Name, plan.Status, err)
	}
	if cpu := k.pod(t, job+"-ps-1-2").Spec.Containers[0].Resources.Requests.Cpu(); cpu.MilliValue() != 2000 {
		t.Errorf("the migrated PS 1 asks for %s of CPU, want 2", cpu)
	}
	// The kubelet writes a changed ConfigMap into each pod's volume after
	// the change (a real one within its sync period): the workers go on
	// once their mounted files say version 4.
	for w := range 3 {
		file := k.clusterVersionFile(t, fmt.Sprintf("%s-worker-%d-0", job, w))
		waitFor(t, jobTimeout, fmt.Sprintf("worker %d's mounted cluster version to say 4", w), func() bool {
			b, _ := os.ReadFile(file)
			return strings.TrimSpace(string(b)) == "4"
		})
	}
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := k.succeeded(t, job)
	ev := events()
	t.Logf("the roles' events:\n%s", ev)

	// Each PS came back at its address.
	for i, starts := range []int{3, 3} {
		addrs := regexp.MustCompile(fmt.Sprintf(`(?m)^ps %d start version \d+ total \d+ addr (\S+) cpu \S+$`, i)).FindAllStringSubmatch(ev, -1)
		if len(addrs) != starts || addrs[0][1] != addrs[len(addrs)-1][1] || addrs[0][1] != addrs[1][1] {
			t.Errorf("PS %d started at %v, want %d times at the same address", i, addrs, starts)
		}
	}
	// The workers, started at version 0, reconnected reading version 4
	// from the ConfigMap mounted in their pods.
	for w := range 3 {
		for ps := range 2 {
			if !strings.Contains(ev, fmt.Sprintf("worker %d reconnected ps %d version 4\n", w, ps)) {
				t.Errorf("worker %d did not reconnect to PS %d at cluster version 4:\n%s", w, ps, ev)
			}
		}
	}
	res := readPSResult(t, out)
	checkNoDups(t, out)
	if len(res.Totals) != 2 || res.Totals[0]+res.Totals[1] != 3*steps {
		t.Errorf("the PS counted %v steps, want %d in all: each of 3 workers' %d steps once", res.Totals, 3*steps, steps)
	}
	var cm corev1.ConfigMap
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: kubeNamespace, Name: kubenames.ClusterConfigMap(job)}, &cm); err != nil || cm.Data["version"] != "4\n" {
		t.Errorf("ConfigMap %s: %v, %v; want version 4", kubenames.ClusterConfigMap(job), cm.Data, err)
	}
	if got.Status.RelaunchCount != 3 {
		t.Errorf("job relaunch count %d, want 3 (PS 0 twice, PS 1 once; a migration is no relaunch)", got.Status.RelaunchCount)
	}
	if c := got.Status.ReplicaStatuses[elasticv1.Chief]; c == nil || c.Succeeded != 1 {
		t.Errorf("chief status %+v, want 1 succeeded", c)
	}
	if w := got.Status.ReplicaStatuses[elasticv1.Worker]; w == nil || w.Succeeded != 3 {
		t.Errorf("worker status %+v, want 3 succeeded", w)
	}
	want := []string{job + "-ps-0-0", job + "-ps-0-1", job + "-ps-0-2", job + "-ps-1-0", job + "-ps-1-1", job + "-ps-1-2"}
	if pods := k.ranPods(job, "ps"); !slices.Equal(pods, want) {
		t.Errorf("PS pods that ran: %v, want %v", pods, want)
	}
}

// podEnv is the value of the env variable name of pod's main container,
// as the pod spec gives it.
func podEnv(t *testing.T, pod *corev1.Pod, name string) string {
	t.Helper()
	if pod == nil {
		t.Fatal("no such pod")
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	t.Fatalf("pod %s has no env %s", pod.Name, name)
	return ""
}

// psPodLogs is the output of a parameter-server job's master and role
// pods, for a failure's message.
func (k *kube) psPodLogs(job string) string {
	var b strings.Builder
	b.WriteString(k.podLogs(job))
	for _, role := range []string{"ps", "chief"} {
		for _, pod := range k.ranPods(job, role) {
			out, _ := os.ReadFile(filepath.Join(k.work, kubeNamespace+"_"+pod+".log"))
			fmt.Fprintf(&b, "---- %s ----\n%s\n", pod, lastLines(string(out), 40))
		}
	}
	return b.String()
}

// clusterVersionFile is where the test kubelet keeps pod's copy of the
// cluster version, the file its processes read at
// kubernetes.ClusterVersionFile.
func (k *kube) clusterVersionFile(t *testing.T, pod string) string {
	t.Helper()
	p := k.pod(t, pod)
	if p == nil {
		t.Fatalf("no pod %s", pod)
	}
	for _, vm := range p.Spec.Containers[0].VolumeMounts {
		if vm.MountPath == kubernetes.ClusterDir {
			return filepath.Join(kubelet.VolumeDir(k.work, p.Namespace, p.Name, vm.Name), kubernetes.ClusterVersionKey)
		}
	}
	t.Fatalf("pod %s mounts nothing at %s", pod, kubernetes.ClusterDir)
	return ""
}
