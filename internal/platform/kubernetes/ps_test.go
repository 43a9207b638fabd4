package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/psnodes"
)

// testParameterServer: a parameter-server job's pods come from their
// role's template and mount the cluster-version ConfigMap; a Service per
// replica selects the replica's pod, whichever relaunch runs, and is made
// once however often it is ensured; the version lives in the ConfigMap,
// made at 0, raised by Store, read back by a second platform (a restarted
// master); a Service of another owner is refused.
func testParameterServer(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns, name = "psjob", "ctr"
	if err := c.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	psTmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main", Image: "ps:v1", Command: []string{"python", "ps.py"},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
	}}}}
	job := &elasticv1.ElasticJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: elasticv1.ElasticJobSpec{DistributionStrategy: "ParameterServerStrategy", ReplicaSpecs: map[elasticv1.ReplicaType]*elasticv1.ReplicaSpec{
			elasticv1.Worker: {Template: template()},
			elasticv1.PS:     {Template: psTmpl},
		}},
	}
	if err := c.env.Client.Create(ctx, job); err != nil {
		t.Fatalf("create ElasticJob: %v", err)
	}
	newPlatform := func() *Platform {
		opts := JobOptions(job)
		opts.Client = c.cs
		opts.MasterAddr = "m:29400"
		opts.TokenSecret = name + "-token"
		opts.ClusterConfigMap = name + "-rover-cluster"
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
		p, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newPlatform()

	// The cluster version: made at 0, raised, read by a restarted master.
	v := p.ClusterVersion()
	if st, err := v.Load(ctx); err != nil || st != (psnodes.State{}) {
		t.Fatalf("Load of a new job = %+v, %v; want version 0, no cluster", st, err)
	}
	want := psnodes.State{Version: 3, Cluster: `{"ps":["a:1"]}`}
	if err := v.Store(ctx, want); err != nil {
		t.Fatal(err)
	}
	if st, err := newPlatform().ClusterVersion().Load(ctx); err != nil || st != want {
		t.Errorf("a restarted master's Load = %+v, %v; want %+v", st, err, want)
	}
	cm, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, name+"-rover-cluster", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[ClusterVersionKey] != "3\n" || cm.Data[ClusterKey] != want.Cluster+"\n" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != job.UID {
		t.Errorf("ConfigMap data %v, owners %v: want version 3, owned by the job", cm.Data, cm.OwnerReferences)
	}

	// A Service per replica, made once.
	replicas := map[string]int{"ps": 2, "worker": 1}
	for range 2 {
		if err := p.EnsureReplicaServices(ctx, replicas); err != nil {
			t.Fatal(err)
		}
	}
	svcs, err := c.cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range svcs.Items {
		names = append(names, s.Name)
	}
	if d := cmp.Diff([]string{"ctr-edljob-ps-0", "ctr-edljob-ps-1", "ctr-edljob-worker-0"}, names); d != "" {
		t.Errorf("Services (-want +got):\n%s", d)
	}
	ps1 := svcs.Items[1]
	wantSel := map[string]string{"app": "dlrover", elasticv1.LabelJobName: name, elasticv1.LabelReplicaType: "ps", elasticv1.LabelRankIndex: "1"}
	if d := cmp.Diff(wantSel, ps1.Spec.Selector); d != "" {
		t.Errorf("ps 1's selector (-want +got):\n%s", d)
	}
	if len(ps1.Spec.Ports) != 1 || ps1.Spec.Ports[0].Port != 2222 || ps1.Spec.ClusterIP == "" || ps1.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("ps 1's Service: ports %+v, cluster IP %q; want 2222 on a cluster IP", ps1.Spec.Ports, ps1.Spec.ClusterIP)
	}

	// A relaunched PS pod: its role's template, the ConfigMap mounted,
	// labels the Service selects.
	spec := platform.NodeSpec{Job: name, Group: "ps", Rank: 1, Relaunch: 2, ID: name + "-ps-1-2",
		Argv: []string{"python", "ps.py"}, Env: map[string]string{"TF_CONFIG": "{}"}}
	if err := p.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pod, err := c.cs.CoreV1().Pods(ns).Get(ctx, spec.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range wantSel {
		if pod.Labels[k] != want {
			t.Errorf("pod label %s = %q, want %q: the Service would not select it", k, pod.Labels[k], want)
		}
	}
	ctr := pod.Spec.Containers[0]
	if ctr.Image != "ps:v1" || ctr.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("PS container image %q, limits %v: want the ps template's", ctr.Image, ctr.Resources.Limits)
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != ClusterDir || !ctr.VolumeMounts[0].ReadOnly ||
		len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].ConfigMap == nil || pod.Spec.Volumes[0].ConfigMap.Name != name+"-rover-cluster" {
		t.Errorf("mounts %+v, volumes %+v: want the cluster ConfigMap read-only at %s", ctr.VolumeMounts, pod.Spec.Volumes, ClusterDir)
	}
	if ClusterVersionFile() != "/etc/rover/cluster/version" {
		t.Errorf("ClusterVersionFile = %s", ClusterVersionFile())
	}

	// A Service of that name that is not the job's is refused.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ctr-edljob-chief-0"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := c.cs.CoreV1().Services(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = p.EnsureReplicaServices(ctx, map[string]int{"chief": 1})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("Service %s/ctr-edljob-chief-0: a Service of that name exists and is not chief 0 of job %s", ns, name)) {
		t.Errorf("EnsureReplicaServices over a stranger's Service: %v", err)
	}
}
