package k8stest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadYAML reads the objects of a YAML (or JSON) file of several documents.
func ReadYAML(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// MasterServiceAccount is the service account of deploy/rbac/master-role.yaml.
const MasterServiceAccount = "rover-master"

// ApplyMasterRole creates deploy/rbac/master-role.yaml in ns, as the
// install guide says (the namespace in place of default), and returns the
// user name of its service account, for Env.AddUser: a job's master runs
// with exactly these permissions.
func ApplyMasterRole(t testing.TB, c client.Client, ns string) (user string) {
	t.Helper()
	for _, obj := range ReadYAML(t, filepath.Join(RepoRoot(t), "deploy/rbac/master-role.yaml")) {
		obj.SetNamespace(ns)
		if obj.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = ns
			}
			if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	return "system:serviceaccount:" + ns + ":" + MasterServiceAccount
}
