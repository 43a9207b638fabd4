package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Reasons of a terminated container, as a kubelet gives them.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
)

// podRun is the life of one pod's process: started once, stopped by the
// pod's deletion, by KillForMemory, or by the kubelet's Stop.
type podRun struct {
	k               *Kubelet
	namespace, name string
	uid             types.UID
	pod             *corev1.Pod   // as first seen; nil for a pod not run here
	done            chan struct{} // closed when run returns

	mu       sync.Mutex
	proc     *os.Process        // set while the process runs
	exited   bool               // run has written the pod's last status
	volumes  []*configMapVolume // kept up to date while the process runs
	deleting bool               // the pod is being deleted
	oom      bool               // killed "for memory"
}

func newPodRun(k *Kubelet, pod *corev1.Pod) *podRun {
	return &podRun{k: k, namespace: pod.Namespace, name: pod.Name, uid: pod.UID, pod: pod.DeepCopy(), done: make(chan struct{})}
}

// mainContainer is the container named "main", else the first.
func mainContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "main" {
			return &pod.Spec.Containers[i]
		}
	}
	return &pod.Spec.Containers[0]
}

// run starts the process, reports it Running, waits for it and reports how
// it ended; then removes the pod if it is being deleted. When ctx ends
// (the kubelet stops) it kills the process and writes nothing more.
func (r *podRun) run(ctx context.Context) {
	defer close(r.done)
	defer func() {
		r.mu.Lock()
		vols := r.volumes
		r.volumes = nil
		r.mu.Unlock()
		for _, v := range vols {
			r.k.unmountConfigMap(v)
		}
	}()
	log := r.k.log.With("pod", r.namespace+"/"+r.name)
	c := mainContainer(r.pod)
	cmd, logFile, err := r.command(ctx, c)
	if logFile != nil {
		defer logFile.Close()
	}
	if err == nil {
		r.mu.Lock()
		if r.deleting {
			err = errors.New("the pod was deleted before its process started")
		} else if err = cmd.Start(); err == nil {
			r.proc = cmd.Process
		}
		r.mu.Unlock()
	}
	if err != nil {
		log.Warn("pod's process did not start", "err", err)
		now := metav1.Now()
		r.finish(ctx, c, &corev1.ContainerStateTerminated{ExitCode: 128, Reason: ReasonStartError, Message: err.Error(),
			StartedAt: now, FinishedAt: now})
		return
	}
	started := metav1.Now()
	containerID := fmt.Sprintf("rover-test://%s_%s_%d", r.namespace, r.name, cmd.Process.Pid)
	log.Info("pod's process started", "pid", cmd.Process.Pid, "argv", cmd.Args)
	r.writeStatus(ctx, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		setIPs(st)
		st.StartTime = &started
		setConditions(st, true)
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ContainerID: containerID, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}}
	})

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-ctx.Done():
		killGroup(cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		r.mu.Lock()
		r.proc, r.exited = nil, true
		r.mu.Unlock()
		return
	}
	// The container ends with its first process: kill what it left behind.
	killGroup(cmd.Process.Pid, syscall.SIGKILL)
	r.mu.Lock()
	r.proc = nil
	oom := r.oom
	r.mu.Unlock()

	term := &corev1.ContainerStateTerminated{StartedAt: started, FinishedAt: metav1.Now(), ContainerID: containerID}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		term.Signal = int32(ws.Signal())
		term.ExitCode = 128 + term.Signal
	default:
		term.ExitCode = int32(ws.ExitStatus())
	}
	switch {
	case oom:
		term.Reason = ReasonOOMKilled
	case term.ExitCode == 0:
		term.Reason = ReasonCompleted
	default:
		term.Reason = ReasonError
	}
	log.Info("pod's process ended", "exit_code", term.ExitCode, "reason", term.Reason)
	r.finish(ctx, c, term)
}

// command makes the process of container c, its output going to the pod's
// log file.
func (r *podRun) command(ctx context.Context, c *corev1.Container) (*exec.Cmd, *os.File, error) {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(c.Command) == 0 {
		return nil, nil, fmt.Errorf("container %s has no command: the test kubelet runs no images' entrypoints", c.Name)
	}
	mounts, live, err := r.k.mountVolumes(ctx, r.pod, c)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	r.volumes = live
	r.mu.Unlock()
	env, err := r.k.environ(ctx, r.pod, c, mounts)
	if err != nil {
		return nil, nil, err
	}
	for i := range argv {
		argv[i] = rewritePaths(argv[i], mounts)
	}
	f, err := os.OpenFile(LogPath(r.k.opts.WorkDir, r.namespace, r.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open the pod's log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if path, err := lookPath(argv[0], env); err == nil {
		cmd.Path, cmd.Err = path, nil
	}
	cmd.Env = env
	cmd.Dir = r.k.opts.WorkDir
	if fi, err := os.Stat(c.WorkingDir); c.WorkingDir != "" && err == nil && fi.IsDir() {
		cmd.Dir = c.WorkingDir
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, f, nil
}

// lookPath finds name on the PATH of env, the process's own, not the
// kubelet's.
func lookPath(name string, env []string) (string, error) {
	if filepath.Base(name) != name {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := cutKey(kv, "PATH"); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func cutKey(kv, key string) (string, bool) {
	if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
		return kv[len(key)+1:], true
	}
	return "", false
}

// LogPath is where the output of pod namespace/name goes.
func LogPath(workDir, namespace, name string) string {
	return filepath.Join(workDir, namespace+"_"+name+".log")
}

// finish writes the pod's terminal status and removes the pod if it is
// being deleted.
func (r *podRun) finish(ctx context.Context, c *corev1.Container, term *corev1.ContainerStateTerminated) {
	r.writeStatus(ctx, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodFailed
		if term.ExitCode == 0 {
			st.Phase = corev1.PodSucceeded
		}
		setIPs(st)
		if st.StartTime == nil {
			st.StartTime = &term.StartedAt
		}
		setConditions(st, false)
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ContainerID: term.ContainerID, Started: new(false),
			State: corev1.ContainerState{Terminated: term},
		}}
	})
	r.mu.Lock()
	r.exited = true
	deleting := r.deleting
	r.mu.Unlock()
	if deleting {
		r.remove(ctx)
	}
}

// terminate stops the process for the pod's deletion: SIGTERM to its
// group, SIGKILL after grace. A pod whose process has ended is removed.
func (r *podRun) terminate(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleting {
		if grace == 0 && r.proc != nil {
			killGroup(r.proc.Pid, syscall.SIGKILL)
		}
		return
	}
	r.deleting = true
	select {
	case <-r.done:
		r.exited = true
	default:
	}
	switch {
	case r.exited:
		r.k.wg.Add(1)
		go func() { defer r.k.wg.Done(); r.remove(r.k.ctx) }()
	case r.proc != nil:
		pid := r.proc.Pid
		r.k.log.Info("stopping pod's process", "pod", r.namespace+"/"+r.name, "grace", grace)
		killGroup(pid, syscall.SIGTERM)
		r.k.wg.Add(1)
		go func() {
			defer r.k.wg.Done()
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-t.C:
				r.mu.Lock()
				if r.proc != nil {
					killGroup(pid, syscall.SIGKILL)
				}
				r.mu.Unlock()
			case <-r.done:
			}
		}()
	}
}

// killForMemory SIGKILLs the process group and marks the end OOMKilled.
func (r *podRun) killForMemory() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return fmt.Errorf("kill pod %s/%s for memory: %w", r.namespace, r.name, ErrNoProcess)
	}
	r.oom = true
	killGroup(r.proc.Pid, syscall.SIGKILL)
	return nil
}

// remove deletes the pod object at once, as the kubelet does once the
// pod's containers have stopped.
func (r *podRun) remove(ctx context.Context) {
	err := r.k.cs.CoreV1().Pods(r.namespace).Delete(ctx, r.name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &r.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.k.log.Warn("remove deleted pod", "pod", r.namespace+"/"+r.name, "err", err)
	}
}

// writeStatus applies mutate to the pod's latest status and writes it,
// again on a conflict. A pod that is gone is left gone.
func (r *podRun) writeStatus(ctx context.Context, mutate func(*corev1.PodStatus)) {
	pods := r.k.cs.CoreV1().Pods(r.namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := pods.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid {
			return apierrors.NewNotFound(corev1.Resource("pods"), r.name)
		}
		mutate(&pod.Status)
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.k.log.Warn("write pod status", "pod", r.namespace+"/"+r.name, "err", err)
	}
}

func setIPs(st *corev1.PodStatus) {
	st.HostIP, st.HostIPs = HostIP, []corev1.HostIP{{IP: HostIP}}
	st.PodIP, st.PodIPs = HostIP, []corev1.PodIP{{IP: HostIP}}
}

// setConditions sets the pod's readiness conditions.
func setConditions(st *corev1.PodStatus, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	for _, c := range []struct {
		t corev1.PodConditionType
		s corev1.ConditionStatus
	}{
		{corev1.PodInitialized, corev1.ConditionTrue},
		{corev1.PodReady, status},
		{corev1.ContainersReady, status},
		{corev1.PodScheduled, corev1.ConditionTrue},
	} {
		cond := corev1.PodCondition{Type: c.t, Status: c.s, LastTransitionTime: now}
		replaced := false
		for i := range st.Conditions {
			if st.Conditions[i].Type == c.t {
				if st.Conditions[i].Status == c.s {
					cond.LastTransitionTime = st.Conditions[i].LastTransitionTime
				}
				st.Conditions[i], replaced = cond, true
			}
		}
		if !replaced {
			st.Conditions = append(st.Conditions, cond)
		}
	}
}

// killGroup signals the process group led by pid; a group that is gone is
// not an error.
func killGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}
