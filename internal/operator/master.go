package operator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The master pod's container and token file (its names and port are
// package kubenames').
const (
	// MasterContainer is the name of the master pod's one container.
	MasterContainer = "master"
	// TokenDir is where the token Secret is mounted in the master pod;
	// TokenFile is the token's path there (--token-file).
	TokenDir  = "/var/run/rover"
	TokenFile = TokenDir + "/" + kubenames.TokenKey
	// tokenVolume is the name of the token Secret's volume.
	tokenVolume = "rover-token"
	// tokenMode is the token file's mode: readable by its owner only.
	tokenMode int32 = 0o400
)

// MasterLabels returns the labels of job's master pods, which its Service
// selects: app=dlrover, the job's name and replica type dlrover-master (as
// DLRover labels its master).
func MasterLabels(job string) map[string]string {
	return v1alpha1.ReplicaLabels(job, v1alpha1.DLRoverMaster)
}

// MasterConfig says how the operator makes master pods.
type MasterConfig struct {
	// Image is the master container's image (Rover's).
	Image string
	// PullPolicy is its imagePullPolicy; "" for the cluster's default.
	PullPolicy corev1.PullPolicy
	// ServiceAccount is the master pod's service account, which must be
	// allowed deploy/rbac/master-role.yaml in the job's namespace.
	ServiceAccount string
}

// newToken returns a new job token: 32 random bytes in hex.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// owner returns the controller owner reference of the objects of job.
func owner(job *v1alpha1.ElasticJob) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(job, v1alpha1.GroupVersion.WithKind(v1alpha1.ElasticJobKind))}
}

// tokenSecret returns job's token Secret with a new token.
func tokenSecret(job *v1alpha1.ElasticJob) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            kubenames.TokenSecret(job.Name),
			Namespace:       job.Namespace,
			Labels:          v1alpha1.JobLabels(job.Name),
			OwnerReferences: owner(job),
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true),
		Data:      map[string][]byte{kubenames.TokenKey: []byte(newToken())},
	}
}

// masterService returns job's master Service.
func masterService(job *v1alpha1.ElasticJob) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:            kubenames.MasterService(job.Name),
			Namespace:       job.Namespace,
			Labels:          MasterLabels(job.Name),
			OwnerReferences: owner(job),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: MasterLabels(job.Name),
			Ports: []corev1.ServicePort{{
				Name:       kubenames.MasterPortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       kubenames.MasterPort,
				TargetPort: intstr.FromString(kubenames.MasterPortName),
			}},
		},
	}
}

// MasterCommand returns the master container's command for job in
// namespace ns.
func MasterCommand(ns, job string) []string {
	return []string{"rover", "master",
		"--platform", "kubernetes",
		"--namespace", ns,
		"--job", job,
		"--listen", fmt.Sprintf("0.0.0.0:%d", kubenames.MasterPort),
		"--token-file", TokenFile,
		"--metrics-addr", kubenames.MetricsAddr(),
	}
}

// masterPod returns job's master pod after n relaunches.
func masterPod(job *v1alpha1.ElasticJob, n int32, c MasterConfig) *corev1.Pod {
	labels := MasterLabels(job.Name)
	labels[v1alpha1.LabelRelaunchCount] = strconv.Itoa(int(n))
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            kubenames.MasterPod(job.Name, n),
			Namespace:       job.Namespace,
			Labels:          labels,
			Annotations:     kubenames.PrometheusAnnotations(),
			OwnerReferences: owner(job),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: c.ServiceAccount,
			Containers: []corev1.Container{{
				Name:            MasterContainer,
				Image:           c.Image,
				ImagePullPolicy: c.PullPolicy,
				Command:         MasterCommand(job.Namespace, job.Name),
				Ports: []corev1.ContainerPort{
					{Name: kubenames.MasterPortName, ContainerPort: kubenames.MasterPort, Protocol: corev1.ProtocolTCP},
					{Name: kubenames.MetricsPortName, ContainerPort: kubenames.MetricsPort, Protocol: corev1.ProtocolTCP},
				},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: field("metadata.name")},
					{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: tokenVolume, MountPath: TokenDir, ReadOnly: true}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{
						TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(kubenames.MasterPortName)},
					},
					PeriodSeconds: 5,
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{{
				Name: tokenVolume,
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName:  kubenames.TokenSecret(job.Name),
					Items:       []corev1.KeyToPath{{Key: kubenames.TokenKey, Path: kubenames.TokenKey}},
					DefaultMode: new(tokenMode),
				}},
			}},
		},
	}
}

// sameService reports whether the Service have's spec serves as want's.
func sameService(have, want *corev1.Service) bool {
	if !maps.Equal(have.Spec.Selector, want.Spec.Selector) || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, p := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != p.Name || h.Port != p.Port || h.TargetPort != p.TargetPort || h.Protocol != p.Protocol {
			return false
		}
	}
	return true
}
