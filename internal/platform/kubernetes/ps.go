package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/internal/psnodes"
)

// What a parameter-server job's pods get besides a worker's: a Service per
// replica (its stable address in TF_CONFIG) and the ConfigMap of the
// cluster version, mounted in every pod.

// ClusterDir is where every pod of a parameter-server job mounts the
// ConfigMap of its cluster version; ClusterVersionKey is the key, and so
// the file in ClusterDir, that holds the version (a decimal number and a
// newline), ClusterKey the one that holds the current cluster (TF_CONFIG's
// "cluster" object). The kubelet replaces a mounted ConfigMap's files
// atomically, all of them at once, when it changes.
const (
	ClusterDir        = "/etc/rover/cluster"
	ClusterVersionKey = "version"
	ClusterKey        = "cluster"
	clusterVolume     = "rover-cluster"
)

// ClusterVersionFile is the path of the cluster version in a pod: what
// its processes get as ROVER_CLUSTER_VERSION_FILE.
func ClusterVersionFile() string { return path.Join(ClusterDir, ClusterVersionKey) }

// ClusterFile is the path of the current cluster in a pod
// (ROVER_CLUSTER_FILE).
func ClusterFile() string { return path.Join(ClusterDir, ClusterKey) }

// mountCluster mounts the ConfigMap name read-only at ClusterDir in c, a
// container of spec.
func mountCluster(spec *corev1.PodSpec, c *corev1.Container, name string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: clusterVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
	}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: clusterVolume, MountPath: ClusterDir, ReadOnly: true})
}

// owner is the reference to the job that the master's objects carry, so
// that deleting the job deletes them.
func (p *Platform) owner() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: elasticv1.GroupVersion.String(), Kind: elasticv1.ElasticJobKind,
		Name: p.opts.Job, UID: p.opts.JobUID, Controller: new(true), BlockOwnerDeletion: new(true),
	}
}

// ReplicaService is the Service of replica index of role: named
// kubenames.ReplicaService, a ClusterIP Service on kubenames.ReplicaPort
// that selects the pod of that group and rank of the job, whichever of its
// relaunches runs. A ClusterIP, not a headless Service: a relaunched pod
// has a new IP, the Service's stays, so a client's connection to a
// replica is made to the same address before and after the relaunch,
// with no DNS record to go stale.
func (p *Platform) ReplicaService(role string, index int) *corev1.Service {
	labels := elasticv1.ReplicaLabels(p.opts.Job, elasticv1.ReplicaType(role))
	selector := elasticv1.ReplicaLabels(p.opts.Job, elasticv1.ReplicaType(role))
	selector[elasticv1.LabelRankIndex] = strconv.Itoa(index)
	labels[elasticv1.LabelRankIndex] = strconv.Itoa(index)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: kubenames.ReplicaService(p.opts.Job, role, index), Namespace: p.opts.Namespace,
			Labels: labels, OwnerReferences: []metav1.OwnerReference{p.owner()},
		},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports: []corev1.ServicePort{{
				Name: "replica", Protocol: corev1.ProtocolTCP,
				Port: kubenames.ReplicaPort, TargetPort: intstr.FromInt32(kubenames.ReplicaPort),
			}},
		},
	}
}

// EnsureReplicaServices makes the Service of every replica of replicas
// (a count by role) that does not exist yet, so that a restarted master
// makes none twice. A Service of that name that is not this job's fails,
// naming it.
func (p *Platform) EnsureReplicaServices(ctx context.Context, replicas map[string]int) error {
	services := p.opts.Client.CoreV1().Services(p.opts.Namespace)
	var errs []error
	for _, role := range slices.Sorted(maps.Keys(replicas)) {
		for i := range replicas[role] {
			want := p.ReplicaService(role, i)
			_, err := services.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, gerr := services.Get(ctx, want.Name, metav1.GetOptions{})
				switch {
				case gerr != nil:
					err = gerr
				case got.Labels[elasticv1.LabelJobName] != p.opts.Job || got.Labels[elasticv1.LabelReplicaType] != role:
					err = fmt.Errorf("a Service of that name exists and is not %s %d of job %s: delete or rename it", role, i, p.opts.Job)
				default:
					err = nil
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("make Service %s/%s: %w", p.opts.Namespace, want.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ClusterVersion keeps a parameter-server job's cluster version and
// current cluster in the ConfigMap that its pods mount
// (Options.ClusterConfigMap), under ClusterVersionKey and ClusterKey, in
// one update. The ConfigMap is the record: a restarted master reads them
// there. It implements psnodes.Version.
type ClusterVersion struct {
	Client    clientset.Interface
	Namespace string
	// Name is the ConfigMap's (kubenames.ClusterConfigMap).
	Name string
	// Owner is the job the ConfigMap belongs to, deleted with it.
	Owner metav1.OwnerReference
}

// ClusterVersion returns the ConfigMap version store of the platform's job,
// named by Options.ClusterConfigMap.
func (p *Platform) ClusterVersion() *ClusterVersion {
	return &ClusterVersion{Client: p.opts.Client, Namespace: p.opts.Namespace, Name: p.opts.ClusterConfigMap, Owner: p.owner()}
}

// Load reads the version and the cluster. A job with no ConfigMap yet
// gets one at version 0: every pod mounts it, and a pod whose ConfigMap
// is missing does not start.
func (v *ClusterVersion) Load(ctx context.Context) (psnodes.State, error) {
	cms := v.Client.CoreV1().ConfigMaps(v.Namespace)
	cm, err := cms.Get(ctx, v.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: v.Name, Namespace: v.Namespace,
				Labels: elasticv1.JobLabels(v.Owner.Name), OwnerReferences: []metav1.OwnerReference{v.Owner}},
			Data: map[string]string{ClusterVersionKey: "0\n"},
		}
		cm, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, v.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return psnodes.State{}, fmt.Errorf("read ConfigMap %s/%s: %w", v.Namespace, v.Name, err)
	}
	s := strings.TrimSpace(cm.Data[ClusterVersionKey])
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return psnodes.State{}, fmt.Errorf("ConfigMap %s/%s: %s is %q, not a version: set it to the last version the job's processes saw (or 0)", v.Namespace, v.Name, ClusterVersionKey, s)
	}
	return psnodes.State{Version: n, Cluster: strings.TrimSpace(cm.Data[ClusterKey])}, nil
}

// Store writes s, again on a conflict with another writer.
func (v *ClusterVersion) Store(ctx context.Context, s psnodes.State) error {
	cms := v.Client.CoreV1().ConfigMaps(v.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := cms.Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[ClusterVersionKey] = strconv.Itoa(s.Version) + "\n"
		if s.Cluster != "" {
			cm.Data[ClusterKey] = s.Cluster + "\n"
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("write version %d to ConfigMap %s/%s: %w", s.Version, v.Namespace, v.Name, err)
	}
	return nil
}
