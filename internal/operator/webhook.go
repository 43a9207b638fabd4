package operator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The admission webhook refuses, at creation, an ElasticJob that the CRD's
// schema accepts but Rover cannot run, with every problem validate finds
// (the checks of rover submit --dry-run); the API server then stores
// nothing. Without it (no --webhook-cert-dir, or no
// ValidatingWebhookConfiguration installed) such a job is created and the
// reconciler marks it Failed/InvalidSpec: the same checks, later.

// WebhookPath is the path of the webhook that validates ElasticJobs, as
// deploy/webhook's ValidatingWebhookConfiguration names it.
const WebhookPath = "/validate-elastic-rover-dev-v1alpha1-elasticjob"

// DefaultWebhookAddr is where the webhook server listens by default.
const DefaultWebhookAddr = ":9443"

// Webhook's certificate and key in Config.WebhookCertDir: the names
// cert-manager and kubernetes.io/tls Secrets give them.
const (
	WebhookCertName = "tls.crt"
	WebhookKeyName  = "tls.key"
)

// jobAdmission is the validating webhook of ElasticJobs.
type jobAdmission struct{ log *slog.Logger }

var _ admission.Validator[*v1alpha1.ElasticJob] = jobAdmission{}

// ValidateCreate refuses a job that validate finds wrong; the plan's notes
// come back as warnings (kubectl prints them).
func (a jobAdmission) ValidateCreate(_ context.Context, job *v1alpha1.ElasticJob) (admission.Warnings, error) {
	return a.check(job)
}

// ValidateUpdate checks the new job when what validate reads changed
// (its spec, name or annotations), so that a job that got in before the
// webhook was installed can still be labelled, have its finalizers
// removed and be deleted.
func (a jobAdmission) ValidateUpdate(_ context.Context, old, job *v1alpha1.ElasticJob) (admission.Warnings, error) {
	if job.DeletionTimestamp != nil || equality.Semantic.DeepEqual(old.Spec, job.Spec) && equality.Semantic.DeepEqual(old.Annotations, job.Annotations) {
		return nil, nil
	}
	return a.check(job)
}

// ValidateDelete admits every deletion.
func (jobAdmission) ValidateDelete(context.Context, *v1alpha1.ElasticJob) (admission.Warnings, error) {
	return nil, nil
}

func (a jobAdmission) check(job *v1alpha1.ElasticJob) (admission.Warnings, error) {
	notes, err := validate(job)
	if err != nil {
		a.log.Info("job refused at admission", "job", job.Name, "namespace", job.Namespace, "err", err)
		return nil, fmt.Errorf("the job cannot run: %w", err)
	}
	return notes, nil
}

// webhookServer is the server of Config.WebhookCertDir and WebhookAddr;
// nil, with a warning when a folder is named, when that folder does not
// hold a certificate and key.
func webhookServer(c Config) (webhook.Server, error) {
	if c.WebhookCertDir == "" {
		return nil, nil
	}
	if missing := missingFiles(c.WebhookCertDir, WebhookCertName, WebhookKeyName); len(missing) > 0 {
		c.Logger.Warn("no admission webhook: its certificate is missing (make the Secret rover-operator-webhook-tls, docs/kubernetes.md); "+
			"ElasticJobs Rover cannot run are marked Failed/InvalidSpec after their creation", "webhook_cert_dir", c.WebhookCertDir, "missing", missing)
		return nil, nil
	}
	c.Logger.Info("serving the admission webhook", "webhook_cert_dir", c.WebhookCertDir, "addr", c.WebhookAddr, "path", WebhookPath)
	host, port, err := splitAddr(c.WebhookAddr)
	if err != nil {
		return nil, err
	}
	return webhook.NewServer(webhook.Options{
		Host: host, Port: port, CertDir: c.WebhookCertDir, CertName: WebhookCertName, KeyName: WebhookKeyName,
	}), nil
}

// setupWebhook registers jobAdmission at WebhookPath on mgr's webhook
// server.
func setupWebhook(mgr ctrl.Manager, log *slog.Logger) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.ElasticJob{}).
		WithValidator(jobAdmission{log: log}).
		WithValidatorCustomPath(WebhookPath).
		Complete()
}

// splitAddr splits a listen address, host:port with a port of 1 to 65535.
func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--webhook-bind-address=%s: %w; give host:port, e.g. :9443", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("--webhook-bind-address=%s: the port is not a number from 1 to 65535", addr)
	}
	return host, port, nil
}

// missingFiles lists the names that are not regular files in dir.
func missingFiles(dir string, names ...string) []string {
	var out []string
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || !fi.Mode().IsRegular() {
			out = append(out, n)
		}
	}
	return out
}
