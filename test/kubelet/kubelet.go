package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// DefaultMaxGrace caps a pod's termination grace period unless
// Options.MaxGrace says otherwise.
const DefaultMaxGrace = 10 * time.Second

// Options configure a Kubelet.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// NodeName is the Node to register and run the pods of.
	NodeName string
	// Namespace limits the pods watched; "" watches all namespaces.
	Namespace string
	// WorkDir holds the pods' logs (<namespace>_<pod>.log) and is the
	// working directory of a process whose container names none that
	// exists here. Required.
	WorkDir string
	// Env is every process's base environment ("KEY=value"), before the
	// container's own. Nil gives processes no inherited environment.
	Env []string
	// Rewrite replaces, in every env value of a container and every file
	// of a configMap volume, each key by its value: a Service's DNS name
	// by a loopback address, say.
	//
	// Volumes: a secret or configMap volume that a container mounts is
	// written under VolumeDir (WorkDir/<namespace>_<pod>/<volume>), and,
	// in place of a mount, each argument of the container's command and
	// args, and each env value, that is a path under a volumeMount's
	// mountPath (alone or after "--flag=") is rewritten to the same path
	// under that directory.
	Rewrite map[string]string
	// MaxGrace caps a deleted pod's termination grace period (default
	// DefaultMaxGrace).
	MaxGrace time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Kubelet runs the pods bound to one Node as local processes.
type Kubelet struct {
	opts Options
	cs   kubernetes.Interface
	log  *slog.Logger

	ctx    context.Context // ends with Stop: kills every process
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	pods map[types.UID]*podRun // a pod's run, kept until the pod is gone
	// cmVolumes are the configMap volumes of running pods, by the
	// ConfigMap's namespace/name.
	cmVolumes map[string][]*configMapVolume
	limit     *bindLimit // LimitBinding's; nil: every pod is bound
}

// Start registers the Node and starts running its pods. The Kubelet runs
// until ctx ends or Stop is called.
func Start(ctx context.Context, o Options) (*Kubelet, error) {
	var problems []error
	if o.Config == nil {
		problems = append(problems, errors.New("Options.Config is nil"))
	}
	if o.NodeName == "" {
		problems = append(problems, errors.New("Options.NodeName is empty"))
	}
	if o.WorkDir == "" {
		problems = append(problems, errors.New("Options.WorkDir is empty"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("start the test kubelet: %w", err)
	}
	if o.MaxGrace <= 0 {
		o.MaxGrace = DefaultMaxGrace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, fmt.Errorf("start the test kubelet: connect to the API server: %w", err)
	}
	k := &Kubelet{opts: o, cs: cs, log: o.Logger.With("node", o.NodeName), pods: map[types.UID]*podRun{}, cmVolumes: map[string][]*configMapVolume{}}
	if err := k.registerNode(ctx); err != nil {
		return nil, err
	}
	k.ctx, k.cancel = context.WithCancel(ctx)

	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", o.Namespace, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.sync(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.sync(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.gone(pod)
			}
		},
	}); err != nil {
		k.cancel()
		return nil, fmt.Errorf("start the test kubelet: watch pods: %w", err)
	}
	k.wg.Add(1)
	go func() { defer k.wg.Done(); inf.RunWithContext(k.ctx) }()
	if err := k.watchConfigMaps(); err != nil {
		k.Stop()
		return nil, fmt.Errorf("start the test kubelet: %w", err)
	}
	if !cache.WaitForCacheSync(k.ctx.Done(), inf.HasSynced) {
		k.Stop()
		return nil, fmt.Errorf("start the test kubelet: the pod watch did not sync: %w", ctx.Err())
	}
	k.log.Info("test kubelet started", "namespace", o.Namespace, "workdir", o.WorkDir)
	return k, nil
}

// Stop kills every process (SIGKILL to its process group), without writing
// the pods' status, and waits for everything the Kubelet started.
func (k *Kubelet) Stop() {
	k.cancel()
	k.wg.Wait()
}

// KillForMemory SIGKILLs the process group of pod namespace/name as the
// kernel's OOM killer would: the pod fails with exit code 137 and reason
// OOMKilled. It fails when the pod has no running process here.
func (k *Kubelet) KillForMemory(namespace, name string) error {
	k.mu.Lock()
	var run *podRun
	for _, r := range k.pods {
		if r.namespace == namespace && r.name == name {
			run = r
		}
	}
	k.mu.Unlock()
	if run == nil {
		return fmt.Errorf("kill pod %s/%s for memory: %w", namespace, name, ErrNoProcess)
	}
	return run.killForMemory()
}

// ErrNoProcess: the pod has no process running on this kubelet.
var ErrNoProcess = errors.New("no process runs for the pod here")

// registerNode creates (or updates) the Node, Ready.
func (k *Kubelet) registerNode(ctx context.Context) error {
	name := k.opts.NodeName
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
	}}}
	nodes := k.cs.CoreV1().Nodes()
	got, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = nodes.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", name, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(strconv.Itoa(runtime.NumCPU())),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	got.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "test kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: HostIP}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo:  corev1.NodeSystemInfo{OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH, KubeletVersion: "rover-test-kubelet"},
	}
	if _, err := nodes.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("register node %s: write its status: %w", name, err)
	}
	return nil
}

// sync acts on the latest state of a pod: binds it when it has no node,
// starts its process when it is new on this node, stops it when the pod is
// being deleted, and removes a deleted pod whose process has ended.
func (k *Kubelet) sync(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp == nil && k.admit(pod) {
			k.bind(pod)
		} else if pod.DeletionTimestamp != nil {
			k.release(pod)
		}
		return
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		k.release(pod)
	}
	if pod.Spec.NodeName != k.opts.NodeName {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx.Err() != nil {
		return
	}
	run := k.pods[pod.UID]
	if run == nil {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
			pod.Status.Phase == corev1.PodRunning { // Running: a process we never started (a previous kubelet's)
			run = &podRun{k: k, namespace: pod.Namespace, name: pod.Name, uid: pod.UID, done: make(chan struct{})}
			close(run.done)
		} else {
			run = newPodRun(k, pod)
			k.wg.Add(1)
			go func() { defer k.wg.Done(); run.run(k.ctx) }()
		}
		k.pods[pod.UID] = run
	}
	if pod.DeletionTimestamp != nil {
		run.terminate(k.grace(pod))
	}
}

// gone forgets a pod that was removed, killing its process if it still
// runs (a forced deletion).
func (k *Kubelet) gone(pod *corev1.Pod) {
	k.mu.Lock()
	run := k.pods[pod.UID]
	delete(k.pods, pod.UID)
	k.mu.Unlock()
	k.release(pod)
	if run != nil {
		run.terminate(0)
	}
}

// grace is how long a deleted pod's process has between SIGTERM and
// SIGKILL.
func (k *Kubelet) grace(pod *corev1.Pod) time.Duration {
	secs := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		secs = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	return min(time.Duration(secs)*time.Second, k.opts.MaxGrace)
}

// bind binds pod to this node, as a scheduler would. A pod that another
// binder got first is left alone.
func (k *Kubelet) bind(pod *corev1.Pod) {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.opts.NodeName},
	}
	err := k.cs.CoreV1().Pods(pod.Namespace).Bind(k.ctx, b, metav1.CreateOptions{})
	switch {
	case err == nil:
		k.log.Debug("bound pod", "pod", pod.Namespace+"/"+pod.Name)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), k.ctx.Err() != nil:
	default:
		k.log.Warn("bind pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}
