package operator

import (
	"slices"
	"strings"
	"testing"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestObserveMaster(t *testing.T) {
	pod := func(phase corev1.PodPhase, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-rover-master-0"}, Status: corev1.PodStatus{Phase: phase}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	term := func(code int32, reason, msg string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: MasterContainer, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg},
			}}}
		}
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.Now()) }
	cases := []struct {
		name  string
		pod   *corev1.Pod
		state masterState
		msg   string // a part of the message
	}{
		{"gone", nil, masterGone, "deleted"},
		{"pending", pod(corev1.PodPending, nil), masterPending, "pending"},
		{"image pull", pod(corev1.PodPending, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: MasterContainer, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "no such image"},
			}}}
		}), masterPending, "ImagePullBackOff: no such image"},
		{"unschedulable", pod(corev1.PodPending, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available"}}
		}), masterPending, "not scheduled: 0/3 nodes"},
		{"running", pod(corev1.PodRunning, nil), masterRunning, "runs"},
		{"running, being deleted", pod(corev1.PodRunning, deleting), masterTerminating, "being deleted"},
		{"succeeded", pod(corev1.PodSucceeded, term(0, "Completed", "")), masterSucceeded, "succeeded"},
		{"exit 1 with a message", pod(corev1.PodFailed, term(1, "Error", "rank 0 failed\n")), masterJobFailed, "rank 0 failed"},
		{"exit 1", pod(corev1.PodFailed, term(1, "Error", "")), masterJobFailed, "exited 1: the job failed (kubectl logs j-rover-master-0)"},
		{"exit 2", pod(corev1.PodFailed, term(2, "Error", "unknown flag --platform")), masterRefused, "unknown flag --platform"},
		{"out of memory", pod(corev1.PodFailed, term(137, "OOMKilled", "")), masterLost, "exited 137 (OOMKilled)"},
		{"crash", pod(corev1.PodFailed, term(139, "Error", "")), masterLost, "exited 139"},
		{"failed, being deleted", pod(corev1.PodFailed, func(p *corev1.Pod) { term(3, "", "")(p); deleting(p) }), masterLost, "exited 3"},
		{"evicted", pod(corev1.PodFailed, func(p *corev1.Pod) {
			p.Status.Reason, p.Status.Message = "Evicted", "the node was low on memory"
		}), masterLost, "evicted: the node was low on memory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := observeMaster(tc.pod)
			if got.state != tc.state || !strings.Contains(got.message, tc.msg) {
				t.Errorf("observeMaster = {%d, %q}, want {%d, containing %q}", got.state, got.message, tc.state, tc.msg)
			}
		})
	}
}

func TestMasterBudget(t *testing.T) {
	cases := []struct {
		annotation string // "-" for none
		want       int32
		err        bool
	}{
		{"-", DefaultMasterRestartCount, false},
		{"0", 0, false},
		{" 5 ", 5, false},
		{"-1", 0, true},
		{"three", 0, true},
		{"99999999999", 0, true},
	}
	for _, tc := range cases {
		job := &v1alpha1.ElasticJob{}
		if tc.annotation != "-" {
			job.Annotations = map[string]string{AnnotationMasterRestartCount: tc.annotation}
		}
		got, err := masterBudget(job)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("masterBudget(%q) = %d, %v; want %d, error %v", tc.annotation, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), AnnotationMasterRestartCount) {
			t.Errorf("error %q does not name the annotation", err)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1alpha1.ElasticJob)
		want   []string // parts of the error; none for a valid job
	}{
		{"valid", func(*v1alpha1.ElasticJob) {}, nil},
		{"DLRover's pod template and shell line", func(j *v1alpha1.ElasticJob) {
			r := j.Spec.ReplicaSpecs[v1alpha1.Worker]
			r.RestartPolicy = "Always"
			ps := &r.Template.Spec
			ps.RestartPolicy = corev1.RestartPolicyAlways
			ps.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64(1000))}
			ps.Volumes = []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
			ps.NodeSelector = map[string]string{"pool": "gpu"}
			c := &ps.Containers[0]
			c.Command = []string{"/bin/bash", "-c", "cd /workspace && pip install -e . && dlrover-run --nnodes=$NODE_NUM --nproc_per_node=2 train.py"}
			c.VolumeMounts = []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}}
			c.Env = append(c.Env, corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
			ps.Containers = append(ps.Containers, corev1.Container{Name: "sidecar", Image: "busybox", Command: []string{"sleep", "inf"}})
		}, nil},
		{"replicas above the limit", func(j *v1alpha1.ElasticJob) {
			j.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas = new(int32(1 << 20))
		}, []string{"spec.replicaSpecs.worker.replicas", "limit of 10000"}},
		{"replicas disagree with --nnodes", func(j *v1alpha1.ElasticJob) {
			j.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas = new(int32(4))
		}, []string{"replicas", "nnodes"}},
		{"bad launcher flag", func(j *v1alpha1.ElasticJob) {
			j.Spec.ReplicaSpecs[v1alpha1.Worker].Template.Spec.Containers[0].Command = []string{"rover", "run", "--nnodes=2", "--max-restarts=x", "train.py"}
		}, []string{"max-restarts"}},
		{"a field the platform cannot honour", func(j *v1alpha1.ElasticJob) {
			j.Spec.ReplicaSpecs[v1alpha1.Worker].Priority = "high"
		}, []string{"cannot honour spec.replicaSpecs.worker.priority"}},
		{"a flag the platform gives", func(j *v1alpha1.ElasticJob) {
			j.Spec.ReplicaSpecs[v1alpha1.Worker].Template.Spec.Containers[0].Command = []string{"rover", "run", "--nnodes=2", "--rdzv-endpoint=m:29400", "train.py"}
		}, []string{"remove --rdzv-endpoint"}},
		{"every problem at once", func(j *v1alpha1.ElasticJob) { *j = *badJob(j.Namespace, j.Name) }, badJobProblems},
		{"name too long for the Service", func(j *v1alpha1.ElasticJob) {
			j.Name = strings.Repeat("a", 51)
		}, []string{"metadata.name", "at most 50 characters"}},
		{"name with a dot", func(j *v1alpha1.ElasticJob) { j.Name = "train.v2" }, []string{"metadata.name", "no dots"}},
		{"bad budget", func(j *v1alpha1.ElasticJob) {
			j.Annotations = map[string]string{AnnotationMasterRestartCount: "lots"}
		}, []string{AnnotationMasterRestartCount}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob("ns", "train")
			tc.mutate(job)
			notes, err := validate(job)
			if tc.name == "DLRover's pod template and shell line" && !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "Always is run as Never") }) {
				t.Errorf("notes %q lack restartPolicy's", notes)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("validate accepted the job")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{Master: MasterConfig{PullPolicy: "Sometimes", ServiceAccount: "Bad_Name"}, LeaderElect: true}
	c.Default()
	c.Master.Image = ""
	err := c.Validate()
	for _, w := range []string{"--master-image is empty", "--master-image-pull-policy=Sometimes", "--master-service-account"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v; want it to contain %q", err, w)
		}
	}
	hook := Config{WebhookCertDir: "/certs", WebhookAddr: "9443"}
	hook.Default()
	if err := hook.Validate(); err == nil || !strings.Contains(err.Error(), "--webhook-bind-address=9443") {
		t.Errorf("Validate() = %v; want it to refuse --webhook-bind-address=9443", err)
	}
	ok := Config{}
	ok.Default()
	if err := ok.Validate(); err != nil {
		t.Errorf("the defaults are refused: %v", err)
	}
}
