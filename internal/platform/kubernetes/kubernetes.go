// Package kubernetes is the platform through which a job master running in
// a pod owns its job's nodes: each node is a pod, made from the ElasticJob's
// worker pod template, named by the node id, labelled as DLRover labels its
// pods and owned by the ElasticJob (so deleting the job deletes its pods).
// The pod's training container runs the node agent (`rover run`) with the
// node's identity, the master's address and the job's token (from a
// Secret) in its environment.
//
// Watch follows the job's pods with a client-go informer and turns their
// phases into platform events: Pending, Running (with the node's host),
// Exited (with the training container's exit code and the kubelet's
// reason, such as OOMKilled or Evicted) and Deleted. A pod is held from
// Create until it is deleted; a restarted master finds the pods its
// predecessor made through Watch's first report, and [NodeFromPod] reads
// their group, rank and relaunch count from their labels.
//
// The package does not make the master's pod, Service or Secret (the
// operator does) and decides nothing: when to create or delete a node is
// the node manager's business.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
)

// Options configure a Kubernetes platform. Client, Namespace, Job, JobUID,
// Template, MasterAddr and TokenSecret are required.
type Options struct {
	// Client reaches the API server; the master's service account needs
	// get, list, watch, create and delete on pods in Namespace.
	Client clientset.Interface
	// Namespace is the job's namespace: every pod is made and watched there.
	Namespace string
	// Job and JobUID are the ElasticJob's name and UID: every pod carries
	// them as its controlling owner reference and the job's name as a label.
	Job    string
	JobUID types.UID
	// Template is the pod of each node: the job's
	// spec.replicaSpecs.worker.template. It is copied, never changed.
	Template corev1.PodTemplateSpec
	// Templates are the pods of the nodes of other groups, by group name:
	// a parameter-server job's ps, chief and evaluator templates. A group
	// not here takes Template.
	Templates map[string]corev1.PodTemplateSpec
	// Container names the training container, which runs the agent; empty
	// means the one named "main", or the only one.
	Container string
	// ClusterConfigMap, when set, names the ConfigMap of a
	// parameter-server job's cluster version (ClusterVersion): every pod
	// mounts it read-only at ClusterDir.
	ClusterConfigMap string
	// MasterAddr is how agents reach the master, host:port, such as
	// "<job>-rover-master.<namespace>.svc:29400".
	MasterAddr string
	// TokenSecret and TokenKey name the Secret and key holding the job's
	// token, which agents get as ROVER_TOKEN (TokenKey default "token").
	TokenSecret string
	TokenKey    string
	// MetricsAddr, when set, is the --metrics-addr of the agents
	// (ROVER_METRICS_ADDR, "0.0.0.0:9400"): their pods get the container
	// port "metrics" and Prometheus's scrape annotations, unless the
	// template sets them, or runs on the host's network without its own
	// ROVER_METRICS_ADDR.
	MetricsAddr string
	// NodeNum, when above 0, is given to every node as NODE_NUM (DLRover's
	// node count); a NODE_NUM in NodeSpec.Env wins.
	NodeNum int
	// GPUResource is the extended resource NodeSpec.Resources.GPUs asks
	// for (default "nvidia.com/gpu").
	GPUResource corev1.ResourceName
	// Logger receives the platform's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of events (default time.Now).
	Now func() time.Time
}

// JobOptions returns the Options that describe job: its namespace, name,
// UID and worker template. The caller adds the client, the master's
// address and the token's Secret.
func JobOptions(job *elasticv1.ElasticJob) Options {
	o := Options{Namespace: job.Namespace, Job: job.Name, JobUID: job.UID}
	for t, r := range job.Spec.ReplicaSpecs {
		switch {
		case r == nil || t == elasticv1.DLRoverMaster:
		case t == elasticv1.Worker:
			o.Template = *r.Template.DeepCopy()
		default:
			if o.Templates == nil {
				o.Templates = map[string]corev1.PodTemplateSpec{}
			}
			o.Templates[string(t)] = *r.Template.DeepCopy()
		}
	}
	return o
}

// Platform makes, deletes and watches a job's pods. It is safe for
// concurrent use; each Watch runs an informer of its own.
type Platform struct {
	opts  Options
	main  int            // index of the training container in the template
	mains map[string]int // the same in each of Templates
	log   *slog.Logger

	// pods is the cache of the informer of a Watch that has synced, nil
	// when none runs: Delete reads the pod there instead of asking the
	// API server.
	pods atomic.Pointer[cache.Store]
}

var _ platform.Platform = (*Platform)(nil)

// New checks opts and returns a platform. It does not reach the API server.
func New(opts Options) (*Platform, error) {
	var errs []error
	missing := func(cond bool, what string) {
		if cond {
			errs = append(errs, fmt.Errorf("kubernetes platform: Options.%s is empty", what))
		}
	}
	missing(opts.Client == nil, "Client")
	missing(opts.Namespace == "", "Namespace")
	missing(opts.Job == "", "Job (the ElasticJob's name)")
	if opts.Job != "" && !isLabelValue(opts.Job) {
		errs = append(errs, fmt.Errorf("kubernetes platform: job name %q cannot be a label value (at most 63 letters, digits, '-', '_' or '.'): give the ElasticJob a shorter name", opts.Job))
	}
	missing(opts.JobUID == "", "JobUID (the ElasticJob's UID, for the pods' owner reference)")
	missing(opts.MasterAddr == "", "MasterAddr (the master's Service host:port)")
	missing(opts.TokenSecret == "", "TokenSecret (the Secret holding the job's token)")
	main, err := trainingContainer(&opts.Template.Spec, opts.Container)
	if err != nil {
		errs = append(errs, fmt.Errorf("kubernetes platform: %w", err))
	}
	mains := map[string]int{}
	for _, g := range slices.Sorted(maps.Keys(opts.Templates)) {
		tmpl := opts.Templates[g]
		i, err := trainingContainer(&tmpl.Spec, opts.Container)
		if err != nil {
			errs = append(errs, fmt.Errorf("kubernetes platform: the %s group: %w", g, err))
		}
		mains[g] = i
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.TokenKey == "" {
		opts.TokenKey = "token"
	}
	if opts.GPUResource == "" {
		opts.GPUResource = "nvidia.com/gpu"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("job", opts.Job, "namespace", opts.Namespace)
	return &Platform{opts: opts, main: main, mains: mains, log: log}, nil
}

// template returns group's pod template and the index of its training
// container.
func (p *Platform) template(group string) (*corev1.PodTemplateSpec, int) {
	if t, ok := p.opts.Templates[group]; ok {
		return &t, p.mains[group]
	}
	return &p.opts.Template, p.main
}

// Capabilities: resources, images, hosts and host avoidance.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{Resources: true, Image: true, Hosts: true, AvoidHosts: true}
}

// Create makes the node's pod (see [Platform.Pod]). A pod of that name
// already existing fails with platform.ErrExists; one the API server
// refuses as invalid with platform.ErrInvalidSpec.
func (p *Platform) Create(ctx context.Context, spec platform.NodeSpec) error {
	pod, err := p.Pod(spec)
	if err != nil {
		return err
	}
	_, err = p.opts.Client.CoreV1().Pods(p.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("create pod %s/%s: %w", p.opts.Namespace, spec.ID, platform.ErrExists)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("create pod %s/%s: %w: %w", p.opts.Namespace, spec.ID, platform.ErrInvalidSpec, err)
	case err != nil:
		return fmt.Errorf("create pod %s/%s: %w", p.opts.Namespace, spec.ID, err)
	}
	p.log.Debug("pod created", "node", spec.ID, "rank", spec.Rank, "relaunch", spec.Relaunch)
	return nil
}

// Delete deletes the node's pod, with the pod's grace period. A pod that
// does not exist, or is not a node of this job, is left alone and Delete
// returns nil. The Deleted event comes from Watch.
func (p *Platform) Delete(ctx context.Context, id string) error {
	pods := p.opts.Client.CoreV1().Pods(p.opts.Namespace)
	pod, err := p.pod(ctx, id)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete pod %s/%s: %w", p.opts.Namespace, id, err)
	case !p.owns(pod):
		p.log.Warn("not deleting a pod that is not a node of this job", "node", id, "labels", pod.Labels)
		return nil
	case pod.DeletionTimestamp != nil:
		return nil
	}
	// The UID precondition keeps a pod made again under the same name
	// (which Rover never does) from being deleted by mistake.
	err = pods.Delete(ctx, id, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", p.opts.Namespace, id, err)
	}
	p.log.Debug("pod deleted", "node", id)
	return nil
}

// pod reads the pod named id: from a running Watch's cache when it holds
// it (a pod the master watched since its create, the usual case), else
// from the API server. A cached pod may lag behind; Delete's UID
// precondition and its tolerance of a pod already gone cover that.
func (p *Platform) pod(ctx context.Context, id string) (*corev1.Pod, error) {
	if pods := p.pods.Load(); pods != nil {
		if obj, ok, err := (*pods).GetByKey(p.opts.Namespace + "/" + id); err == nil && ok {
			if pod, ok := obj.(*corev1.Pod); ok {
				return pod, nil
			}
		}
	}
	return p.opts.Client.CoreV1().Pods(p.opts.Namespace).Get(ctx, id, metav1.GetOptions{})
}

// owns reports whether pod is a node of this platform's job.
func (p *Platform) owns(pod *corev1.Pod) bool {
	_, _, _, ok := NodeFromPod(pod)
	return ok && pod.Labels[elasticv1.LabelJobName] == p.opts.Job
}
