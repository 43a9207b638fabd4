package kubemaster

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/k8stest"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestMasterFollowsScaling: on a real API server, a master running with
// exactly deploy/rbac/master-role.yaml's permissions follows the job's
// worker count. The job runs --nnodes=1:3 and starts 2 pods (replicas 2);
// `kubectl scale --replicas=3` (the /scale subresource) adds a third pod;
// the master's event log records it as a ScaleDecision Event; a count
// outside --nnodes is set back with a warning event; a ScalePlan
// for 1 node removes the two highest ranks, sets the job's replicas and
// ends Succeeded; a ScalePlan asking for what Rover does not do ends
// Failed, naming the field.
func TestMasterFollowsScaling(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{CRDDirs: []string{"deploy/crd"}, Scheme: Scheme()})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "scale"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	_, masterCfg := env.AddUser(t, k8stest.ApplyMasterRole(t, env.Client, ns))
	job := ddpJob(t, ns)
	w := job.Spec.ReplicaSpecs[elasticv1.Worker]
	w.Replicas = new(int32(2))
	w.Template.Spec.Containers[0].Command = []string{"rover", "run", "--nnodes=1:3", "--nproc-per-node=2", "examples/ddp/train.py"}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{Config: masterCfg, Namespace: ns, Job: job.Name, Listen: "127.0.0.1:0",
			Token: "secret", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("master Run: %v", err)
		}
	})
	pods := func() []string { return livePods(t, cs, ns, job.Name) }
	waitPods := func(want ...string) {
		t.Helper()
		k8stest.WaitFor(t, "pods "+strings.Join(want, ", "), func() bool { return slices.Equal(pods(), want) })
	}
	scale := func(n int32) {
		t.Helper()
		s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job.Name}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
		if err := env.Client.SubResource("scale").Update(ctx, job, client.WithSubResourceBody(s)); err != nil {
			t.Fatalf("scale to %d: %v", n, err)
		}
	}
	replicas := func() int32 {
		var got elasticv1.ElasticJob
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), &got); err != nil {
			t.Fatal(err)
		}
		return workerReplicas(&got)
	}

	waitPods("ddp-worker-0-0", "ddp-worker-1-0")
	scale(3)
	waitPods("ddp-worker-0-0", "ddp-worker-1-0", "ddp-worker-2-0")
	// The event log's scaling, as a Kubernetes Event the master role may
	// create.
	k8stest.WaitFor(t, "a ScaleDecision event", func() bool {
		list, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Reason == "ScaleDecision" && e.ReportingController == reportingController && e.Regarding.Name == job.Name &&
				strings.Contains(e.Note, "scaled to 3 nodes")
		})
	})

	scale(5)
	k8stest.WaitFor(t, "replicas set back to 3", func() bool { return replicas() == 3 })
	k8stest.WaitFor(t, "a ScaleRefused event", func() bool {
		list, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Reason == ReasonScaleRefused && e.Regarding.Name == job.Name && strings.Contains(e.Note, "--nnodes")
		})
	})
	if got := pods(); len(got) != 3 {
		t.Errorf("pods %v after a refused scale, want the 3 there were", got)
	}

	plan := func(name string, spec elasticv1.ScalePlanSpec) *elasticv1.ScalePlan {
		t.Helper()
		p := &elasticv1.ScalePlan{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: elasticv1.ManualScaleLabels(job.Name)}, Spec: spec}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		k8stest.WaitFor(t, "ScalePlan "+name+" settled", func() bool {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				t.Fatal(err)
			}
			return p.Status.FinishTime != nil
		})
		return p
	}
	down := plan("down", elasticv1.ScalePlanSpec{OwnerJob: job.Name, ReplicaResourceSpecs: map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec{elasticv1.Worker: {Replicas: 1}}})
	if down.Status.Phase != elasticv1.PhaseSucceeded {
		t.Fatalf("ScalePlan down: %+v", down.Status)
	}
	waitPods("ddp-worker-0-0")
	if n := replicas(); n != 1 {
		t.Errorf("replicas %d after the plan, want 1", n)
	}
	bad := plan("migrate", elasticv1.ScalePlanSpec{OwnerJob: job.Name, MigratePods: []elasticv1.PodMeta{{Name: "ddp-worker-0-0"}}})
	if bad.Status.Phase != elasticv1.PhaseFailed || !strings.Contains(bad.Status.Message, "spec.migratePods") {
		t.Errorf("ScalePlan migrate: %+v, want Failed naming spec.migratePods", bad.Status)
	}
	over := plan("over", elasticv1.ScalePlanSpec{OwnerJob: job.Name, ReplicaResourceSpecs: map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec{elasticv1.Worker: {Replicas: 4}}})
	if over.Status.Phase != elasticv1.PhaseFailed || !strings.Contains(over.Status.Message, "1 to 3") {
		t.Errorf("ScalePlan over: %+v, want Failed saying the range", over.Status)
	}
	if got := pods(); !slices.Equal(got, []string{"ddp-worker-0-0"}) {
		t.Errorf("pods %v after refused plans, want ddp-worker-0-0", got)
	}
}

func TestPlanActions(t *testing.T) {
	specs := func(kv ...any) map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec {
		m := map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(elasticv1.ReplicaType)] = elasticv1.ReplicaResourceSpec{Replicas: int32(kv[i+1].(int))}
		}
		return m
	}
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resourceQuantity(t, q)}
	}
	tests := []struct {
		name string
		ps   bool
		spec elasticv1.ScalePlanSpec
		want planAsk
		err  string // error substring; "" for want
	}{
		{"workers", false, elasticv1.ScalePlanSpec{OwnerJob: "j", ReplicaResourceSpecs: specs(elasticv1.Worker, 3)}, planAsk{workers: 3}, ""},
		{"other owner", false, elasticv1.ScalePlanSpec{OwnerJob: "k", ReplicaResourceSpecs: specs(elasticv1.Worker, 3)}, planAsk{}, "spec.ownerJob"},
		{"no count", false, elasticv1.ScalePlanSpec{OwnerJob: "j"}, planAsk{}, "replicaResourceSpecs.worker.replicas is missing"},
		{"create pods", false, elasticv1.ScalePlanSpec{OwnerJob: "j", CreatePods: []elasticv1.PodMeta{{Name: "p"}}}, planAsk{}, "spec.createPods"},
		{"remove pods", false, elasticv1.ScalePlanSpec{OwnerJob: "j", RemovePods: []elasticv1.PodMeta{{Name: "p"}}}, planAsk{}, "spec.removePods"},
		{"allreduce ps hosts", false, elasticv1.ScalePlanSpec{OwnerJob: "j", PsHosts: []string{"h"}}, planAsk{}, "spec.psHosts"},
		{"allreduce ps", false, elasticv1.ScalePlanSpec{OwnerJob: "j", ReplicaResourceSpecs: specs(elasticv1.PS, 1)}, planAsk{}, "replicaResourceSpecs.ps"},
		{"allreduce migrate", false, elasticv1.ScalePlanSpec{OwnerJob: "j", MigratePods: []elasticv1.PodMeta{{Name: "j-worker-0-0"}}}, planAsk{}, "spec.migratePods"},
		{"resources", false, elasticv1.ScalePlanSpec{OwnerJob: "j", ReplicaResourceSpecs: map[elasticv1.ReplicaType]elasticv1.ReplicaResourceSpec{
			elasticv1.Worker: {Replicas: 3, Resource: corev1.ResourceList{corev1.ResourceMemory: resourceQuantity(t, "8Gi")}}}}, planAsk{}, "replicaResourceSpecs.worker.resource"},
		{"ps count", true, elasticv1.ScalePlanSpec{OwnerJob: "j", ReplicaResourceSpecs: specs(elasticv1.PS, 3)}, planAsk{ps: 3}, ""},
		{"ps hosts", true, elasticv1.ScalePlanSpec{OwnerJob: "j", PsHosts: []string{"j-edljob-ps-0.ns.svc:2222", "j-edljob-ps-1"}}, planAsk{ps: 2}, ""},
		{"ps hosts not ours", true, elasticv1.ScalePlanSpec{OwnerJob: "j", PsHosts: []string{"10.0.0.1:2222"}}, planAsk{}, "spec.psHosts[0] is \"10.0.0.1:2222\""},
		{"ps hosts disagree", true, elasticv1.ScalePlanSpec{OwnerJob: "j", PsHosts: []string{"j-edljob-ps-0"}, ReplicaResourceSpecs: specs(elasticv1.PS, 2)}, planAsk{}, "make them agree"},
		{"migrate by type", true, elasticv1.ScalePlanSpec{OwnerJob: "j", MigratePods: []elasticv1.PodMeta{{Type: elasticv1.PS, RankIndex: 1, Resource: cpu("2")}}},
			planAsk{migrate: []psMove{{1, 2000}}}, ""},
		{"migrate by name", true, elasticv1.ScalePlanSpec{OwnerJob: "j", MigratePods: []elasticv1.PodMeta{{Name: "j-ps-0-3", Resource: cpu("1500m")}}},
			planAsk{migrate: []psMove{{0, 1500}}}, ""},
		{"migrate a worker", true, elasticv1.ScalePlanSpec{OwnerJob: "j", MigratePods: []elasticv1.PodMeta{{Name: "j-worker-0-0", Resource: cpu("2")}}}, planAsk{}, "only PS are migrated"},
		{"migrate without cpu", true, elasticv1.ScalePlanSpec{OwnerJob: "j", MigratePods: []elasticv1.PodMeta{{Name: "j-ps-0-0"}}}, planAsk{}, "resource.cpu is missing"},
		{"ps job chief", true, elasticv1.ScalePlanSpec{OwnerJob: "j", ReplicaResourceSpecs: specs(elasticv1.Chief, 1)}, planAsk{}, "replicaResourceSpecs.chief"},
		{"ps job nothing", true, elasticv1.ScalePlanSpec{OwnerJob: "j"}, planAsk{}, "asks for nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planActions(&elasticv1.ScalePlan{Spec: tc.spec}, "j", "ns", tc.ps)
			if tc.err == "" {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("planActions = %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("planActions = %+v, %v; want an error naming %s", got, err, tc.err)
			}
		})
	}
}

func resourceQuantity(t *testing.T, s string) resource.Quantity {
	t.Helper()
	q, err := resource.ParseQuantity(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
