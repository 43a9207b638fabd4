package deploy_test

import (
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/operator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
)

// webhookSecret is the Secret of the webhook's serving certificate.
const webhookSecret = "rover-operator-webhook-tls"

// TestWebhookManifest checks that deploy/webhook's configuration reaches
// the operator of deploy/operator: the path it serves, through a Service
// on the port it listens on, with the certificate of the Secret it mounts
// (optional, so that the operator runs without one), for the creates and
// updates of ElasticJobs, refused when the webhook cannot be asked.
func TestWebhookManifest(t *testing.T) {
	if k := readKustomization(t, repoRoot(t)+"/deploy/webhook"); !slices.Equal(k.Resources, []string{"webhook.yaml"}) {
		t.Errorf("deploy/webhook/kustomization.yaml: resources %v, want webhook.yaml", k.Resources)
	}
	svc := only[*corev1.Service](t, "webhook/webhook.yaml")
	vwc := only[*admissionregistrationv1.ValidatingWebhookConfiguration](t, "webhook/webhook.yaml")
	dep := operatorDeployment(t)
	ctr := dep.Spec.Template.Spec.Containers[0]
	args := flagValues(ctr.Args)

	if len(vwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(vwc.Webhooks))
	}
	w := vwc.Webhooks[0]
	ref := w.ClientConfig.Service
	if ref == nil || ref.Name != svc.Name || ref.Namespace != svc.Namespace || ref.Path == nil || *ref.Path != operator.WebhookPath {
		t.Errorf("the webhook calls %+v, want the Service %s/%s at %s", ref, svc.Namespace, svc.Name, operator.WebhookPath)
	}
	if svc.Namespace != dep.Namespace || !matches(svc.Spec.Selector, dep.Spec.Template.Labels) {
		t.Errorf("the Service %s/%s selects %v, not the operator's pods %s/%v", svc.Namespace, svc.Name, svc.Spec.Selector, dep.Namespace, dep.Spec.Template.Labels)
	}
	_, port, _ := strings.Cut(args["--webhook-bind-address"], ":")
	for _, p := range svc.Spec.Ports {
		if ref != nil && ref.Port != nil && p.Port != *ref.Port {
			continue
		}
		i := slices.IndexFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.String() })
		if i < 0 || strconv.Itoa(int(ctr.Ports[i].ContainerPort)) != port {
			t.Errorf("the Service's port %d targets %s, not the operator's --webhook-bind-address port %s", p.Port, p.TargetPort.String(), port)
		}
	}
	mounted := false
	for _, m := range ctr.VolumeMounts {
		i := slices.IndexFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || path.Clean(m.MountPath) != path.Clean(args["--webhook-cert-dir"]) {
			continue
		}
		s := dep.Spec.Template.Spec.Volumes[i].Secret
		mounted = s != nil && s.SecretName == webhookSecret && s.Optional != nil && *s.Optional
	}
	if !mounted {
		t.Errorf("the operator's --webhook-cert-dir=%s is not the optional Secret %s", args["--webhook-cert-dir"], webhookSecret)
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail || w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("failurePolicy %v, sideEffects %v; want Fail, None", w.FailurePolicy, w.SideEffects)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) ||
		!slices.Equal(w.Rules[0].APIGroups, []string{v1alpha1.GroupVersion.Group}) || !slices.Equal(w.Rules[0].Resources, []string{"elasticjobs"}) {
		t.Errorf("rules %+v, want CREATE and UPDATE of %s elasticjobs", w.Rules, v1alpha1.GroupVersion.Group)
	}
	if got, want := vwc.Annotations["cert-manager.io/inject-ca-from"], svc.Namespace+"/"+svc.Name; got != want {
		t.Errorf("cert-manager.io/inject-ca-from: %q, want %q (the Certificate docs/kubernetes.md makes)", got, want)
	}
}

// matches reports whether labels has every pair of selector.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}
