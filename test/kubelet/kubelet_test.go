package kubelet_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/test/kubelet"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestKubelet runs pods on a real API server: one that fails with env from
// a Secret and the downward API, one that is deleted while it runs, and one
// killed for memory.
func TestKubelet(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "pods"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	k, err := kubelet.Start(ctx, kubelet.Options{
		Config: env.Config, NodeName: "node-0", Namespace: ns, WorkDir: work,
		Env:      []string{"PATH=" + os.Getenv("PATH")},
		Rewrite:  map[string]string{"svc.example:80": "127.0.0.1:8080"},
		MaxGrace: time.Second,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	node, err := cs.CoreV1().Nodes().Get(ctx, "node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kubelet's node: %v", err)
	}
	if !nodeReady(node) || node.Status.Allocatable.Pods().Value() == 0 {
		t.Errorf("node status %+v, want Ready with allocatable pods", node.Status)
	}

	pods := cs.CoreV1().Pods(ns)
	// create makes a pod that runs script with sh; no script, no command.
	create := func(t *testing.T, name string, grace int64, env []corev1.EnvVar, script string) *corev1.Pod {
		t.Helper()
		var command []string
		if script != "" {
			command = []string{"sh", "-c", script}
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "main", Image: "unused", Env: env,
					Command: command}},
			},
		}
		pod, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	get := func(t *testing.T, name string) *corev1.Pod {
		t.Helper()
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}

	t.Run("fails with its exit code and resolved env", func(t *testing.T) {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Data: map[string][]byte{"foo": []byte("from-secret")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns}, Data: map[string]string{"bar": "from-configmap"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		create(t, "exit3", 30, []corev1.EnvVar{
			{Name: "BAR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "bar"}}},
			{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "FOO", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "foo"}}},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "ADDR", Value: "http://svc.example:80/x"},
		}, `echo $FOO $BAR $NODE $POD_NAME $POD_IP $ADDR; exit 3`)
		var pod *corev1.Pod
		k8stest.WaitFor(t, "the pod to fail", func() bool { pod = get(t, "exit3"); return pod.Status.Phase == corev1.PodFailed })
		if pod.Spec.NodeName != "node-0" || pod.Status.PodIP != kubelet.HostIP {
			t.Errorf("pod on node %q with IP %q, want node-0 and %s", pod.Spec.NodeName, pod.Status.PodIP, kubelet.HostIP)
		}
		term := terminated(t, pod)
		if term.ExitCode != 3 || term.Reason != kubelet.ReasonError {
			t.Errorf("terminated %+v, want exit code 3, reason Error", term)
		}
		if pod.Status.StartTime == nil {
			t.Error("no start time: the pod was never reported Running")
		}
		b, err := os.ReadFile(kubelet.LogPath(work, ns, "exit3"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(string(b)), "from-secret from-configmap node-0 exit3 127.0.0.1 http://127.0.0.1:8080/x"; got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})

	t.Run("mounts a secret volume", func(t *testing.T) {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "vol", Namespace: ns},
			Data:       map[string][]byte{"token": []byte("s3cret"), "other": []byte("o")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vol", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "unused",
					Command:      []string{"sh", "-c", `cat "$1"; echo; stat -c %a "$1"; ls "$2"`, "sh"},
					Args:         []string{"/var/run/rover/sub/tok", "/var/run/rover/sub"},
					VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/rover", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "vol", Items: []corev1.KeyToPath{{Key: "token", Path: "sub/tok"}}, DefaultMode: new(int32(0o400)),
				}}}},
			},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		k8stest.WaitFor(t, "the pod to succeed", func() bool { return get(t, "vol").Status.Phase == corev1.PodSucceeded })
		b, err := os.ReadFile(kubelet.LogPath(work, ns, "vol"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(b), "s3cret\n400\ntok\n"; got != want {
			t.Errorf("log %q, want %q (the token, its mode, the only file of sub/)", got, want)
		}
		if _, err := os.Stat(filepath.Join(kubelet.VolumeDir(work, ns, "vol", "token"), "sub", "tok")); err != nil {
			t.Errorf("the volume's file is not in VolumeDir: %v", err)
		}
	})

	t.Run("a configMap volume follows its ConfigMap", func(t *testing.T) {
		cms := cs.CoreV1().ConfigMaps(ns)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "version", Namespace: ns}, Data: map[string]string{"v": "1\n"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pod reads the file named by its env (a path under the
		// mount) until it holds 2, saying each value it saw once.
		script := `last=; while :; do v=$(cat "$VFILE"); [ "$v" != "$last" ] && echo "saw $v" && last=$v; [ "$v" = 2 ] && exit 0; sleep 0.05; done`
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "cmvol", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "unused",
					Command:      []string{"sh", "-c", script},
					Env:          []corev1.EnvVar{{Name: "VFILE", Value: "/etc/cluster/v"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "cluster", MountPath: "/etc/cluster", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "cluster", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "version"}}}}},
			},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		k8stest.WaitFor(t, "the pod to read version 1", func() bool {
			b, _ := os.ReadFile(kubelet.LogPath(work, ns, "cmvol"))
			return strings.Contains(string(b), "saw 1\n")
		})
		cm, err := cms.Get(ctx, "version", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "2\n"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Pod
		k8stest.WaitFor(t, "the pod to end", func() bool {
			got = get(t, "cmvol")
			return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed
		})
		b, _ := os.ReadFile(kubelet.LogPath(work, ns, "cmvol"))
		if got.Status.Phase != corev1.PodSucceeded || string(b) != "saw 1\nsaw 2\n" {
			t.Errorf("pod %s, log %q: want it to see 1, then 2, and succeed", got.Status.Phase, b)
		}
	})

	t.Run("cannot mount an unsupported volume", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "emptydir", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "unused", Command: []string{"true"},
					VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
				Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/scratch"}}}},
			},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Pod
		k8stest.WaitFor(t, "the pod to fail", func() bool { got = get(t, "emptydir"); return got.Status.Phase == corev1.PodFailed })
		if term := terminated(t, got); term.Reason != kubelet.ReasonStartError || !strings.Contains(term.Message, "only secret, configMap and emptyDir volumes") {
			t.Errorf("terminated %+v, want reason StartError naming the unsupported volume", term)
		}
	})

	t.Run("emptyDir volumes and workingDir", func(t *testing.T) {
		wd := t.TempDir()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "unused", WorkingDir: wd,
					Command:      []string{"sh", "-c", `echo hi > "$1" && test -d /dev/shm && pwd > here`, "sh", "/scratch/f"},
					VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "dshm", MountPath: "/dev/shm"}}}},
				Volumes: []corev1.Volume{
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				},
			},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Pod
		k8stest.WaitFor(t, "the pod to end", func() bool {
			got = get(t, "scratch")
			return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed
		})
		if got.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("pod %s: %+v", got.Status.Phase, terminated(t, got))
		}
		if b, err := os.ReadFile(filepath.Join(kubelet.VolumeDir(work, ns, "scratch", "scratch"), "f")); err != nil || string(b) != "hi\n" {
			t.Errorf("the emptyDir holds %q (%v), want the pod's file", b, err)
		}
		if b, err := os.ReadFile(filepath.Join(wd, "here")); err != nil || strings.TrimSpace(string(b)) != wd {
			t.Errorf("the pod ran in %q (%v), want its workingDir %s", b, err, wd)
		}
	})

	t.Run("succeeds", func(t *testing.T) {
		create(t, "ok", 30, nil, `exit 0`)
		var pod *corev1.Pod
		k8stest.WaitFor(t, "the pod to succeed", func() bool { pod = get(t, "ok"); return pod.Status.Phase == corev1.PodSucceeded })
		if term := terminated(t, pod); term.ExitCode != 0 || term.Reason != kubelet.ReasonCompleted {
			t.Errorf("terminated %+v, want exit code 0, reason Completed", term)
		}
	})

	t.Run("cannot start", func(t *testing.T) {
		create(t, "nocmd", 30, nil, "")
		var pod *corev1.Pod
		k8stest.WaitFor(t, "the pod to fail", func() bool { pod = get(t, "nocmd"); return pod.Status.Phase == corev1.PodFailed })
		if term := terminated(t, pod); term.ExitCode != 128 || term.Reason != kubelet.ReasonStartError {
			t.Errorf("terminated %+v, want exit code 128, reason StartError", term)
		}
	})

	t.Run("deleted while running", func(t *testing.T) {
		// It ignores SIGTERM: the kubelet SIGKILLs it after MaxGrace (1s),
		// not the pod's 30s.
		pidFile := filepath.Join(t.TempDir(), "pid")
		create(t, "long", 30, nil, `trap "" TERM; echo $$ > `+pidFile+`.tmp; mv `+pidFile+`.tmp `+pidFile+`; while :; do sleep 0.1; done`)
		var pid int
		k8stest.WaitFor(t, "the process to start", func() bool {
			b, err := os.ReadFile(pidFile)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid > 0
		})
		k8stest.WaitFor(t, "the pod to run", func() bool { return get(t, "long").Status.Phase == corev1.PodRunning })
		if err := pods.Delete(ctx, "long", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		k8stest.WaitFor(t, "the pod to be removed", func() bool {
			_, err := pods.Get(ctx, "long", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d after its pod was removed: kill 0 = %v, want ESRCH", pid, err)
		}
	})

	t.Run("killed for memory", func(t *testing.T) {
		create(t, "oom", 30, nil, `while :; do sleep 0.1; done`)
		k8stest.WaitFor(t, "the pod to run", func() bool { return get(t, "oom").Status.Phase == corev1.PodRunning })
		if err := k.KillForMemory(ns, "oom"); err != nil {
			t.Fatal(err)
		}
		var pod *corev1.Pod
		k8stest.WaitFor(t, "the pod to fail", func() bool { pod = get(t, "oom"); return pod.Status.Phase == corev1.PodFailed })
		if term := terminated(t, pod); term.ExitCode != 137 || term.Reason != kubelet.ReasonOOMKilled {
			t.Errorf("terminated %+v, want exit code 137, reason OOMKilled", term)
		}
		if err := k.KillForMemory(ns, "oom"); !errors.Is(err, kubelet.ErrNoProcess) {
			t.Errorf("KillForMemory of an ended pod = %v, want ErrNoProcess", err)
		}
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func terminated(t *testing.T, pod *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("container statuses %+v, want one terminated", pod.Status.ContainerStatuses)
	}
	return pod.Status.ContainerStatuses[0].State.Terminated
}
