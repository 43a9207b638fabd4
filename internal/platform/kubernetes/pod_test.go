package kubernetes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/roverml/rover/internal/platform"
)

// offline is a platform whose client is never called: for what Pod and
// State compute.
func offline(t *testing.T, tmpl corev1.PodTemplateSpec) *Platform {
	t.Helper()
	p, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Job: "job", JobUID: "uid-1",
		Template: tmpl, MasterAddr: "m:29400", TokenSecret: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRefuses(t *testing.T) {
	_, err := New(Options{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}})
	if err == nil {
		t.Fatal("New accepted empty options")
	}
	for _, want := range []string{"Client", "Namespace", "Job", "JobUID", "MasterAddr", "TokenSecret", `training container "main"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %q does not name %s", err, want)
		}
	}
}

func TestNewRefusesLongJobName(t *testing.T) {
	_, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Job: strings.Repeat("j", 64), JobUID: "u",
		Template: template(), MasterAddr: "m:1", TokenSecret: "t"})
	if err == nil || !strings.Contains(err.Error(), "label value") {
		t.Errorf("New with a 64-letter job name: %v, want a label value error", err)
	}
}

func TestTrainingContainer(t *testing.T) {
	c := func(names ...string) *corev1.PodSpec {
		s := &corev1.PodSpec{}
		for _, n := range names {
			s.Containers = append(s.Containers, corev1.Container{Name: n})
		}
		return s
	}
	tests := []struct {
		spec *corev1.PodSpec
		name string
		want int // -1: an error
	}{
		{c("trainer"), "", 0},
		{c("logs", "main"), "", 1},
		{c("logs", "trainer"), "", -1},
		{c("logs", "trainer"), "trainer", 1},
		{c("main"), "other", -1},
		{c(), "", -1},
	}
	for _, tt := range tests {
		got, err := trainingContainer(tt.spec, tt.name)
		if tt.want < 0 && err == nil || tt.want >= 0 && (err != nil || got != tt.want) {
			t.Errorf("trainingContainer(%v, %q) = %d, %v; want %d", tt.spec.Containers, tt.name, got, err, tt.want)
		}
	}
}

// TestPodResources: each resource asked for replaces the template's
// request and limit; the others are kept.
func TestPodResources(t *testing.T) {
	tmpl := template()
	p := offline(t, tmpl)
	s := nodeSpec("job", 0, 0)
	s.Resources = platform.Resources{MilliCPU: 2500, GPUs: 8}
	pod, err := p.Pod(s)
	if err != nil {
		t.Fatal(err)
	}
	r := pod.Spec.Containers[1].Resources
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("8")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("8")},
	}
	if diff := cmp.Diff(want, r, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if q := tmpl.Spec.Containers[1].Resources.Requests[corev1.ResourceCPU]; q.String() != "1" {
		t.Errorf("Pod changed the template: cpu %s", q.String())
	}
}

// TestAvoidHostsKeepsTemplateAffinity: the hosts are excluded from every
// term the template requires (terms are ORed).
func TestAvoidHostsKeepsTemplateAffinity(t *testing.T) {
	tmpl := template()
	zone := func(z string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{z}}}}
	}
	tmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{zone("a"), zone("b")},
	}}}
	p := offline(t, tmpl)
	s := nodeSpec("job", 0, 0)
	s.AvoidHosts = []string{"bad"}
	pod, err := p.Pod(s)
	if err != nil {
		t.Fatal(err)
	}
	avoid := corev1.NodeSelectorRequirement{Key: LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"bad"}}
	for i, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) != 2 || !cmp.Equal(term.MatchExpressions[1], avoid) {
			t.Errorf("term %d = %+v, want its zone and the hosts avoided", i, term)
		}
	}
	if n := len(tmpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions); n != 1 {
		t.Errorf("Pod changed the template's affinity")
	}
}

func TestPodRefuses(t *testing.T) {
	p := offline(t, template())
	for name, edit := range map[string]func(*platform.NodeSpec){
		"master group": func(s *platform.NodeSpec) { s.Group = "dlrover-master" },
		"bad group":    func(s *platform.NodeSpec) { s.Group = "a/b" },
		"other job":    func(s *platform.NodeSpec) { s.Job = "other" },
		"bad id":       func(s *platform.NodeSpec) { s.ID = "Bad_ID" },
	} {
		s := nodeSpec("job", 0, 0)
		edit(&s)
		if _, err := p.Pod(s); err == nil || !strings.Contains(err.Error(), platform.ErrInvalidSpec.Error()) {
			t.Errorf("%s: Pod returned %v, want ErrInvalidSpec", name, err)
		}
	}
}

func TestNodeFromPod(t *testing.T) {
	l := func(kv ...string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		for i := 0; i < len(kv); i += 2 {
			pod.Labels["elasticjob.dlrover/"+kv[i]] = kv[i+1]
		}
		return pod
	}
	tests := []struct {
		pod            *corev1.Pod
		group          string
		rank, relaunch int
		ok             bool
	}{
		{l("name", "j", "replica-type", "worker", "rank-index", "3", "relaunch-count", "2"), "worker", 3, 2, true},
		{l("name", "j", "replica-type", "dlrover-master", "rank-index", "0", "relaunch-count", "0"), "", 0, 0, false},
		{l("name", "j", "replica-type", "worker", "rank-index", "x", "relaunch-count", "0"), "", 0, 0, false},
		{l("name", "j", "replica-type", "worker", "rank-index", "-1", "relaunch-count", "0"), "", 0, 0, false},
		{l("replica-type", "worker", "rank-index", "1", "relaunch-count", "0"), "", 0, 0, false},
		{l("name", "j", "replica-type", "worker", "rank-index", "1"), "", 0, 0, false},
	}
	for _, tt := range tests {
		g, rank, rel, ok := NodeFromPod(tt.pod)
		if g != tt.group || rank != tt.rank || rel != tt.relaunch || ok != tt.ok {
			t.Errorf("NodeFromPod(%v) = %q, %d, %d, %v; want %q, %d, %d, %v", tt.pod.Labels, g, rank, rel, ok, tt.group, tt.rank, tt.relaunch, tt.ok)
		}
	}
}

func TestState(t *testing.T) {
	p := offline(t, template())
	term := func(code int32, reason string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{
			{Name: "logs", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}},
		}
	}
	unschedulable := []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	tests := []struct {
		name   string
		node   string
		status corev1.PodStatus
		want   platform.Event // NodeID "n" is added
		ok     bool
	}{
		{"new", "", corev1.PodStatus{}, platform.Event{Kind: platform.Pending}, true},
		{"unschedulable", "", corev1.PodStatus{Phase: corev1.PodPending, Conditions: unschedulable},
			platform.Event{Kind: platform.Pending, Reason: "Unschedulable"}, true},
		{"pulling", "h", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}},
			platform.Event{Kind: platform.Pending, Host: "h", Reason: "ImagePullBackOff"}, true},
		{"running", "h", corev1.PodStatus{Phase: corev1.PodRunning}, platform.Event{Kind: platform.Running, Host: "h"}, true},
		{"main ended, sidecar runs", "h", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: term(3, "Error")},
			platform.Event{Kind: platform.Exited, Host: "h", ExitCode: 3, Reason: "Error"}, true},
		{"oom", "h", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term(137, "OOMKilled")},
			platform.Event{Kind: platform.Exited, Host: "h", ExitCode: 137, Signal: 9, Reason: "OOMKilled"}, true},
		{"137 of its own", "h", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term(137, "Error")},
			platform.Event{Kind: platform.Exited, Host: "h", ExitCode: 137, Reason: "Error"}, true},
		{"deadline", "h", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded", ContainerStatuses: term(143, "Error")},
			platform.Event{Kind: platform.Exited, Host: "h", ExitCode: 143, Signal: 15, Reason: "DeadlineExceeded"}, true},
		{"admission", "h", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "UnexpectedAdmissionError"},
			platform.Event{Kind: platform.Exited, Host: "h", ExitCode: -1, Reason: "UnexpectedAdmissionError"}, true},
		{"succeeded", "h", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: term(0, "Completed")},
			platform.Event{Kind: platform.Exited, Host: "h", Reason: "Completed"}, true},
		{"succeeded, no status", "h", corev1.PodStatus{Phase: corev1.PodSucceeded}, platform.Event{Kind: platform.Exited, Host: "h"}, true},
		{"unknown", "h", corev1.PodStatus{Phase: corev1.PodUnknown}, platform.Event{}, false},
	}
	for _, tt := range tests {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.PodSpec{NodeName: tt.node}, Status: tt.status}
		got, ok := p.State(pod)
		if tt.ok {
			tt.want.NodeID = "n"
		}
		if ok != tt.ok || got != tt.want {
			t.Errorf("%s: State = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestPodCarriesTemplate: a node's pod carries the whole template as
// DLRover users write it (volumes, security context, tolerations, sidecar
// and init containers, the training container's mounts and workingDir),
// with restartPolicy forced to Never and the shell line as the command.
func TestPodCarriesTemplate(t *testing.T) {
	tmpl := template()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	tmpl.Spec.Volumes = []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	tmpl.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64(1000))}
	tmpl.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	tmpl.Spec.InitContainers = []corev1.Container{{Name: "fetch", Image: "busybox"}}
	main := &tmpl.Spec.Containers[1]
	main.WorkingDir = "/workspace"
	main.VolumeMounts = []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}}
	p := offline(t, tmpl)
	s := nodeSpec("job", 1, 0)
	s.Argv = []string{"/bin/bash", "-c", "cd src && rover run --nnodes=$NODE_NUM train.py"}
	pod, err := p.Pod(s)
	if err != nil {
		t.Fatal(err)
	}
	want := tmpl.Spec.DeepCopy()
	want.RestartPolicy = corev1.RestartPolicyNever
	got := pod.Spec.DeepCopy()
	if diff := cmp.Diff(s.Argv, got.Containers[1].Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	// Apart from what the node sets (command, env), the pod is the template.
	for _, c := range []*corev1.PodSpec{want, got} {
		c.Containers[1].Command, c.Containers[1].Args, c.Containers[1].Env = nil, nil, nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod spec (-template +pod):\n%s", diff)
	}
}
