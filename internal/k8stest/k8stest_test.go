package k8stest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/roverml/rover/internal/k8stest"
)

// childEnv makes the test binary, run again by the test, act as a client
// program that connects with nothing but $KUBECONFIG, as rover master will.
const childEnv = "ROVER_K8STEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := listNamespaces(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func listNamespaces() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nss corev1.NamespaceList
	if err := c.List(ctx, &nss); err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		fmt.Println(ns.Name)
	}
	return nil
}

func TestStart(t *testing.T) {
	env := k8stest.Start(t, k8stest.Options{
		// deploy/crd holds Rover's own CRDs once they exist; installing them
		// here checks that the API server accepts them.
		CRDDirs:             []string{"internal/k8stest/testdata/crd", "deploy/crd"},
		AllowMissingCRDDirs: true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "k8stest-smoke"

	t.Run("namespace and configmap", func(t *testing.T) {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"},
			Data:       map[string]string{"nodes": "4"},
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
		var gotNS corev1.Namespace
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &gotNS); err != nil {
			t.Fatalf("get namespace: %v", err)
		}
		var got corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatalf("get configmap: %v", err)
		}
		if got.Data["nodes"] != "4" || got.UID == "" {
			t.Fatalf("configmap read back as %+v, want data nodes=4 and a UID", got)
		}
	})

	t.Run("crd from CRDDirs", func(t *testing.T) {
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(schema.GroupVersionKind{Group: "k8stest.rover.dev", Version: "v1", Kind: "Widget"})
		w.SetNamespace("default")
		w.SetName("w1")
		if err := unstructured.SetNestedField(w.Object, int64(3), "spec", "size"); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatalf("create widget: %v", err)
		}
		if err := unstructured.SetNestedField(w.Object, true, "status", "ready"); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Status().Update(ctx, w); err != nil {
			t.Fatalf("update widget status: %v", err)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(w.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatalf("get widget: %v", err)
		}
		if ready, _, _ := unstructured.NestedBool(got.Object, "status", "ready"); !ready {
			t.Fatalf("widget status = %v, want ready", got.Object["status"])
		}
	})

	t.Run("kubectl with the kubeconfig", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, env.Bin(t, "kubectl"), "--kubeconfig", env.Kubeconfig, "get", "ns", "-o", "name")
		cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent") // only the flag may point at the cluster
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get ns: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "namespace/"+ns) {
			t.Fatalf("kubectl get ns printed %q, want namespace/%s", out, ns)
		}
	})

	t.Run("go client in a child process", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "KUBECONFIG="+env.Kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), ns+"\n") {
			t.Fatalf("child process listed %q, want %s", out, ns)
		}
	})

	t.Run("user without groups is forbidden", func(t *testing.T) {
		_, cfg := env.AddUser(t, "nobody")
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("get namespace as a user with no RBAC = %v, want forbidden", err)
		}
	})
}
