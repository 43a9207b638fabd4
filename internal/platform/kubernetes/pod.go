package kubernetes

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
)

// LabelHostname is the well-known node label that AvoidHosts are matched
// against.
const LabelHostname = "kubernetes.io/hostname"

// Pod returns the pod that Create would make for spec, without making it.
// It fails with platform.ErrInvalidSpec when spec is invalid or belongs to
// another job.
func (p *Platform) Pod(spec platform.NodeSpec) (*corev1.Pod, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Job != p.opts.Job {
		return nil, fmt.Errorf("%w: node %s belongs to job %q, but this platform makes the pods of job %q",
			platform.ErrInvalidSpec, spec.ID, spec.Job, p.opts.Job)
	}
	if spec.Group == string(elasticv1.DLRoverMaster) {
		return nil, fmt.Errorf("%w: node %s: group %q is the master's, not a node group", platform.ErrInvalidSpec, spec.ID, spec.Group)
	}
	if !isLabelValue(spec.Group) {
		return nil, fmt.Errorf("%w: node %s: group %q is not a valid label value (letters, digits, '-', '_', '.', at most 63)",
			platform.ErrInvalidSpec, spec.ID, spec.Group)
	}
	t, main := p.template(spec.Group)
	tmpl := t.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.ID,
			Namespace:   p.opts.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         elasticv1.GroupVersion.String(),
				Kind:               elasticv1.ElasticJobKind,
				Name:               p.opts.Job,
				UID:                p.opts.JobUID,
				Controller:         new(true),
				BlockOwnerDeletion: new(true),
			}},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range nodeLabels(spec) {
		pod.Labels[k] = v
	}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever

	c := &pod.Spec.Containers[main]
	c.Command, c.Args = slices.Clone(spec.Argv), nil
	if spec.Image != "" {
		c.Image = spec.Image
	}
	c.Env = p.env(c.Env, spec)
	p.exposeMetrics(&pod.ObjectMeta, &pod.Spec, c)
	setResources(&c.Resources, spec.Resources, p.opts.GPUResource)
	if len(spec.AvoidHosts) > 0 {
		avoidHosts(&pod.Spec, spec.AvoidHosts)
	}
	if p.opts.ClusterConfigMap != "" {
		mountCluster(&pod.Spec, c, p.opts.ClusterConfigMap)
	}
	return pod, nil
}

// nodeLabels are the labels that name a node's pod: DLRover's, with the
// node's rank as its replica index (Rover's node ids are names, not
// numbers; the pod's name is the id).
func nodeLabels(spec platform.NodeSpec) map[string]string {
	l := elasticv1.ReplicaLabels(spec.Job, elasticv1.ReplicaType(spec.Group))
	l[elasticv1.LabelReplicaIndex] = strconv.Itoa(spec.Rank)
	l[elasticv1.LabelRankIndex] = strconv.Itoa(spec.Rank)
	l[elasticv1.LabelRelaunchCount] = strconv.Itoa(spec.Relaunch)
	return l
}

// NodeFromPod reads a node's group, rank and relaunch count from the labels
// of its pod, as Create wrote them; ok is false for a pod that is not a
// node (no such labels, or the master's own pod). A restarted master uses
// it to adopt the pods its predecessor made; the node id is the pod's name.
func NodeFromPod(pod *corev1.Pod) (group string, rank, relaunch int, ok bool) {
	l := pod.Labels
	group = l[elasticv1.LabelReplicaType]
	if l[elasticv1.LabelJobName] == "" || group == "" || group == string(elasticv1.DLRoverMaster) {
		return "", 0, 0, false
	}
	rank, err1 := strconv.Atoi(l[elasticv1.LabelRankIndex])
	relaunch, err2 := strconv.Atoi(l[elasticv1.LabelRelaunchCount])
	if err1 != nil || err2 != nil || rank < 0 || relaunch < 0 {
		return "", 0, 0, false
	}
	return group, rank, relaunch, true
}

// env is the training container's environment: the template's, NODE_NUM
// and WORKER_NUM,
// the spec's (sorted by name), then the node's identity and how to reach
// the master. A later variable replaces an earlier one of the same name, so
// the node's identity cannot be overridden.
func (p *Platform) env(base []corev1.EnvVar, spec platform.NodeSpec) []corev1.EnvVar {
	env := slices.Clone(base)
	set := func(v corev1.EnvVar) {
		if i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == v.Name }); i >= 0 {
			env[i] = v
			return
		}
		env = append(env, v)
	}
	val := func(name, value string) { set(corev1.EnvVar{Name: name, Value: value}) }
	field := func(name, path string) {
		set(corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}})
	}
	if p.opts.NodeNum > 0 {
		val("NODE_NUM", strconv.Itoa(p.opts.NodeNum))
		val("WORKER_NUM", strconv.Itoa(p.opts.NodeNum))
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val(k, spec.Env[k])
	}
	rank := strconv.Itoa(spec.Rank)
	val("NODE_ID", spec.ID)
	val("NODE_RANK", rank)
	val("WORKER_ID", rank) // DLRover's chaos and job scripts read it
	val("NODE_TYPE", spec.Group)
	val("ELASTIC_JOB_NAME", spec.Job)
	val("JOB_UID", string(p.opts.JobUID))
	// The agent reads ROVER_NODE_ID and PET_NODE_RANK as --node-id and
	// --node-rank: a relaunched node joins with its predecessor's rank.
	val("ROVER_NODE_ID", spec.ID)
	val("PET_NODE_RANK", rank)
	val("ROVER_RELAUNCH_COUNT", strconv.Itoa(spec.Relaunch))
	val("ROVER_MASTER_ADDR", p.opts.MasterAddr)
	val("DLROVER_MASTER_ADDR", p.opts.MasterAddr)
	set(corev1.EnvVar{Name: "ROVER_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: p.opts.TokenSecret},
		Key:                  p.opts.TokenKey,
	}}})
	field("POD_NAME", "metadata.name")
	field("POD_IP", "status.podIP")
	field("NODE_IP", "status.hostIP")
	return env
}

// setResources makes r's requests and limits of each resource the spec
// asks for equal to what it asks for; the others keep the template's.
func setResources(r *corev1.ResourceRequirements, res platform.Resources, gpu corev1.ResourceName) {
	set := func(name corev1.ResourceName, q resource.Quantity) {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Requests[name], r.Limits[name] = q, q
	}
	if res.MilliCPU > 0 {
		set(corev1.ResourceCPU, *resource.NewMilliQuantity(res.MilliCPU, resource.DecimalSI))
	}
	if res.MemoryBytes > 0 {
		set(corev1.ResourceMemory, *resource.NewQuantity(res.MemoryBytes, resource.BinarySI))
	}
	if res.GPUs > 0 {
		set(gpu, *resource.NewQuantity(int64(res.GPUs), resource.DecimalSI))
	}
}

// avoidHosts keeps the pod off hosts: a required node affinity term
// "kubernetes.io/hostname NotIn hosts", added to every term the template
// already requires (terms are ORed, so each must exclude the hosts).
func avoidHosts(spec *corev1.PodSpec, hosts []string) {
	expr := corev1.NodeSelectorRequirement{Key: LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: slices.Clone(hosts)}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range req.NodeSelectorTerms {
		t := &req.NodeSelectorTerms[i]
		t.MatchExpressions = append(t.MatchExpressions, expr)
	}
}

// trainingContainer returns the index of the container named name, or when
// name is empty, of the one named "main" or the only one.
func trainingContainer(spec *corev1.PodSpec, name string) (int, error) {
	if name == "" {
		name = "main"
		if len(spec.Containers) == 1 {
			return 0, nil
		}
	}
	for i, c := range spec.Containers {
		if c.Name == name {
			return i, nil
		}
	}
	names := make([]string, len(spec.Containers))
	for i, c := range spec.Containers {
		names[i] = c.Name
	}
	return 0, fmt.Errorf("the pod template has no training container %q (it has %q): name it main, or give only one", name, names)
}

func isLabelValue(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}
