package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubemaster"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventsJob is kubernetesEvents's job.
const eventsJob = "events"

// masterEvents lists the Events the job's master recorded about the
// object of kind and name: their reasons, in the order created.
func (k *kube) masterEvents(t *testing.T, kind, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k.c.List(context.Background(), &list, client.InNamespace(kubeNamespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.ReportingController == "rover.dev/master" && e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

func reasons(evs []eventsv1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// kubernetesEvents runs the DDP example as an ElasticJob and deletes a
// worker pod while it trains: `kubectl wait --for=condition=Succeeded`
// returns once the job is done; the job then carries the conditions
// Succeeded (true), Running and Restarting (false, the latter set by the
// master's restarts), each for the job's generation; the master recorded
// Kubernetes Events on the job for the world, the lost node, its relaunch,
// the restart and the end, and on the deleted pod for its loss.
func kubernetesEvents(t *testing.T, k *kube) {
	const job = eventsJob
	defer func() {
		if t.Failed() {
			t.Logf("pods of %s:\n%s", job, k.podLogs(job))
		}
	}()
	dir := t.TempDir()
	store := filepath.Join(dir, "flash")
	saves := filepath.Join(dir, "saves.log")
	if err := k.c.Create(context.Background(), ddpJob(job, dir, "--flash", store, "--log-saves", saves, "--step-sleep", "0.1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, jobTimeout, "a committed checkpoint", func() bool { return latestCommitted(store) >= 10 })
	waitStep(t, saves, 15)
	victim := job + "-worker-1-0"
	k.deletePod(t, victim)

	wait := exec.Command(k.env.Bin(t, "kubectl"), "--kubeconfig", k.env.Kubeconfig, "-n", kubeNamespace,
		"wait", "--for=condition=Succeeded", "elasticjob/"+job, "--timeout", jobTimeout.String())
	out, err := wait.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "condition met") {
		t.Fatalf("kubectl wait --for=condition=Succeeded: %v\n%s", err, out)
	}
	got := k.succeeded(t, job)
	for _, want := range []struct {
		typ    string
		status metav1.ConditionStatus
	}{{"Succeeded", metav1.ConditionTrue}, {"Running", metav1.ConditionFalse}, {kubemaster.CondRestarting, metav1.ConditionFalse}} {
		c := meta.FindStatusCondition(got.Status.Conditions, want.typ)
		if c == nil || c.Status != want.status || c.Reason == "" || c.Message == "" || c.ObservedGeneration != got.Generation {
			t.Errorf("condition %s: %+v; want %s with a reason and a message, for generation %d", want.typ, c, want.status, got.Generation)
		}
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, kubemaster.CondRestarting); c != nil && c.Reason != kubemaster.ReasonJobSucceeded {
		t.Errorf("Restarting condition's reason %q at the end, want %s", c.Reason, kubemaster.ReasonJobSucceeded)
	}

	onJob := reasons(k.masterEvents(t, elasticv1.ElasticJobKind, job))
	for _, want := range []string{"MasterStarted", "RendezvousCompleted", "NodeLost", "NodeRelaunched", "Restart", "JobSucceeded"} {
		if !slices.Contains(onJob, want) {
			t.Errorf("no %s Event on the ElasticJob; its Events: %v", want, onJob)
		}
	}
	// The deleted pod's relaunch gives its cause, as the metrics count it.
	relaunched := false
	for _, e := range k.masterEvents(t, elasticv1.ElasticJobKind, job) {
		relaunched = relaunched || e.Reason == "NodeRelaunched" && strings.Contains(e.Note, "(cause deleted)")
	}
	if !relaunched {
		t.Errorf("no NodeRelaunched Event on the ElasticJob gives the cause deleted")
	}
	if len(onJob) > 60 {
		t.Errorf("%d Events on the job for one disruption: the budget should bound them", len(onJob))
	}
	onPod := k.masterEvents(t, "Pod", victim)
	if !slices.Contains(reasons(onPod), "NodeLost") {
		t.Errorf("no NodeLost Event on the deleted pod %s; its Events: %v", victim, reasons(onPod))
	}
	for _, e := range onPod {
		if e.Type != "Warning" || e.Related == nil || e.Related.Name != job || e.Note == "" {
			t.Errorf("Event %s on pod %s: type %s, related %v, note %q; want a Warning related to the job, with a note", e.Reason, victim, e.Type, e.Related, e.Note)
		}
	}
}
