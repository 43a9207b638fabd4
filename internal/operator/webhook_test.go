package operator

import (
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/tlstest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// freePort is a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// registerWebhook makes the API server send ElasticJob creates and updates
// to url, verifying its certificate with caPEM: deploy/webhook's
// configuration, with a URL in place of the operator's Service.
func registerWebhook(t *testing.T, c client.Client, url string, caPEM []byte) {
	t.Helper()
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	mustCreate(t, c, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "rover-elasticjob-validation"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "elasticjob.elastic.rover.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
					Resources: []string{"elasticjobs"},
				},
			}},
		}},
	})
}

// badJob is a job the CRD's schema accepts with four problems that only
// Rover's checks find: a launcher flag value that is not a number (in a
// shell line, as DLRover's jobs write it), an environment variable name
// no process can have, a field Kubernetes cannot honour yet (priority)
// and a master budget that is not a number.
func badJob(ns, name string) *v1alpha1.ElasticJob {
	job := newJob(ns, name)
	r := job.Spec.ReplicaSpecs[v1alpha1.Worker]
	r.Priority = "high"
	ctr := &r.Template.Spec.Containers[0]
	ctr.Command = []string{"/bin/bash", "-c",
		"cd /workspace && dlrover-run --nnodes=$NODE_NUM --nproc_per_node=2 --max_restarts=many train.py"}
	ctr.Env = []corev1.EnvVar{{Name: "1BAD", Value: "x"}}
	job.Annotations = map[string]string{AnnotationMasterRestartCount: "lots"}
	return job
}

// badJobProblems are parts of the message that refuses badJob, one for
// each of its problems.
var badJobProblems = []string{
	"--max-restarts=many: want a whole number",
	`"1BAD" is not a valid environment variable name`,
	"cannot honour spec.replicaSpecs.worker.priority",
	AnnotationMasterRestartCount,
}

// TestAdmissionWebhook runs the operator with its webhook (a certificate
// of a test CA for 127.0.0.1) and registers it with the real API server:
// a job Rover cannot run is refused at creation with all its problems in
// the message, and nothing is stored; a good job is admitted, with the
// plan's notes as warnings; an update that breaks the good job is refused,
// one of its labels is not checked.
func TestAdmissionWebhook(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	ca := tlstest.NewCA(t, "webhook CA")
	certs := t.TempDir()
	cert, key := ca.Issue(t, "127.0.0.1")
	tlstest.WriteFile(t, filepath.Join(certs, WebhookCertName), cert)
	tlstest.WriteFile(t, filepath.Join(certs, WebhookKeyName), key)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	startOperator(t, env, Config{WebhookCertDir: certs, WebhookAddr: addr})
	registerWebhook(t, c, "https://"+addr+WebhookPath, ca.PEM)
	ns := newNamespace(t, c, "admission")

	// The API server reads webhook configurations through an informer: a
	// server-side dry run of the bad job shows when it calls this one.
	eventually(t, "the API server to call the webhook", func() error {
		err := c.Create(t.Context(), badJob(ns, "probe"), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "denied the request") {
			return errors.New("the dry run was not refused by the webhook: " + errString(err))
		}
		return nil
	})

	err := c.Create(t.Context(), badJob(ns, "bad"))
	if err == nil {
		t.Fatal("the API server admitted the bad job")
	}
	t.Logf("the API server refused the bad job: %v", err)
	for _, want := range append([]string{"denied the request", "the job cannot run"}, badJobProblems...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
	if _, err := getJob(t, c, ns, "bad"); !apierrors.IsNotFound(err) {
		t.Errorf("get the refused job: %v, want not found", err)
	}

	// The good job's restartPolicy Always is run as Never: a warning says so.
	good := newJob(ns, "good")
	good.Spec.ReplicaSpecs[v1alpha1.Worker].Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	warned := &warningLog{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warned
	wc, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.Create(t.Context(), good); err != nil {
		t.Fatalf("the good job was refused: %v", err)
	}
	if got := warned.all(); !slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, "restartPolicy: Always is run as Never") }) {
		t.Errorf("warnings %q lack the restartPolicy's", got)
	}
	broken := good.DeepCopy()
	broken.Spec.ReplicaSpecs[v1alpha1.Worker].Replicas = new(int32(3))
	if err := c.Update(t.Context(), broken); err == nil || !strings.Contains(err.Error(), "spec.replicaSpecs.worker.replicas") {
		t.Errorf("an update to replicas that disagree with --nnodes: %v, want it refused", err)
	}
	eventually(t, "a label on the good job", func() error {
		job, err := getJob(t, c, ns, "good")
		if err != nil {
			return err
		}
		job.Labels = map[string]string{"team": "a"}
		return c.Update(t.Context(), job)
	})
}

func errString(err error) string {
	if err == nil {
		return "created"
	}
	return err.Error()
}

// warningLog keeps the API server's warnings to a client.
type warningLog struct {
	mu  sync.Mutex
	got []string
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warningLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}
