package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/operator"
)

// TestInstall runs the install steps of docs/kubernetes.md ("From zero to a
// running job") with kubectl against a real kube-apiserver: the
// kustomization (twice: applying again is a no-op), the master role in a job
// namespace, the sample job. Then it asks the API server whether the
// operator and the master may do what they do. There is no kubelet: no pod
// runs.
func TestInstall(t *testing.T) {
	root := repoRoot(t)
	env := k8stest.Start(t, k8stest.Options{})
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(env.Bin(t, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
		cmd.Dir = root
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}

	for range 2 {
		kubectl("", "apply", "--server-side", "-k", "deploy/")
	}
	kubectl("", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/elasticjobs.elastic.rover.dev", "crd/scaleplans.elastic.rover.dev")
	kubectl("", "get", "-n", operator.DefaultNamespace, "deployment/rover-operator", "serviceaccount/rover-operator")

	const ns = "team-a"
	kubectl("", "create", "namespace", ns)
	role, err := os.ReadFile(filepath.Join(root, "deploy", "rbac", "master-role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The documented sed 's/namespace: default/namespace: team-a/'.
	kubectl(strings.ReplaceAll(string(role), "namespace: default", "namespace: "+ns), "apply", "-f", "-")
	// The documented sed that slows the sample down, so that a worker can be
	// deleted while it trains.
	sample, err := os.ReadFile(filepath.Join(root, "deploy", "samples", "ddp-elasticjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	slow := strings.ReplaceAll(string(sample), "examples/ddp/train.py]", "examples/ddp/train.py, --step-sleep=0.5]")
	if slow == string(sample) {
		t.Fatal("deploy/samples/ddp-elasticjob.yaml: no `examples/ddp/train.py]` for docs/kubernetes.md's sed to extend")
	}
	kubectl(slow, "apply", "-n", ns, "-f", "-")
	if out := kubectl("", "get", "ej", "ddp", "-n", ns, "-o", "jsonpath={.spec.replicaSpecs.worker.template.spec.containers[0].command}"); !strings.Contains(out, "--step-sleep=0.5") {
		t.Errorf("the slowed-down sample's command is %s", out)
	}
	if out := kubectl("", "get", "ej", "-n", ns); !strings.Contains(out, "ddp") {
		t.Errorf("kubectl get ej: no ddp job:\n%s", out)
	}

	opSA := "system:serviceaccount:" + operator.DefaultNamespace + ":rover-operator"
	masterSA := "system:serviceaccount:" + ns + ":" + operator.DefaultMasterServiceAccount
	for _, c := range []struct {
		as   string
		args []string
	}{
		{opSA, []string{"watch", "elasticjobs.elastic.rover.dev", "--all-namespaces"}},
		{opSA, []string{"patch", "elasticjobs.elastic.rover.dev", "--subresource=status", "-n", ns}},
		{opSA, []string{"create", "pods", "-n", ns}},
		{opSA, []string{"create", "secrets", "-n", ns}},
		{opSA, []string{"update", "leases.coordination.k8s.io", "-n", operator.DefaultNamespace}},
		{masterSA, []string{"create", "pods", "-n", ns}},
		{masterSA, []string{"delete", "pods", "-n", ns}},
		{masterSA, []string{"patch", "elasticjobs.elastic.rover.dev", "--subresource=status", "-n", ns}},
		{masterSA, []string{"update", "configmaps", "-n", ns}},
		{masterSA, []string{"create", "services", "-n", ns}},
	} {
		cmd := exec.Command(env.Bin(t, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig, "auth", "can-i", "--as", c.as}, c.args...)...)
		out, _ := cmd.CombinedOutput() // exit 1 means "no"
		if strings.TrimSpace(string(out)) != "yes" {
			t.Errorf("%s may not %s: %s", c.as, strings.Join(c.args, " "), out)
		}
	}
	// The master's rights stop at its namespace.
	cmd := exec.Command(env.Bin(t, "kubectl"), "--kubeconfig", env.Kubeconfig, "auth", "can-i", "--as", masterSA, "create", "pods", "-n", "default")
	if out, _ := cmd.CombinedOutput(); strings.TrimSpace(string(out)) != "no" {
		t.Errorf("%s may create pods in default: %s", masterSA, out)
	}
}
