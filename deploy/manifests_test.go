package deploy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/operator"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository's root: the tests run in deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// kustomization is the part of a kustomization.yaml the tests read; strict
// decoding refuses any other field, so that one added is noticed here.
type kustomization struct {
	APIVersion         string               `json:"apiVersion,omitempty"`
	Kind               string               `json:"kind,omitempty"`
	Resources          []string             `json:"resources"`
	ConfigMapGenerator []configMapGenerator `json:"configMapGenerator,omitempty"`
}

// configMapGenerator is a kustomization's ConfigMap made of files.
type configMapGenerator struct {
	Name    string   `json:"name"`
	Files   []string `json:"files"`
	Options struct {
		DisableNameSuffixHash bool              `json:"disableNameSuffixHash,omitempty"`
		Labels                map[string]string `json:"labels,omitempty"`
	} `json:"options"`
}

// documents splits a YAML file on its document separators, dropping those
// that hold only comments.
func documents(b []byte) [][]byte {
	var out [][]byte
	var cur bytes.Buffer
	flush := func() {
		doc := bytes.TrimSpace(cur.Bytes())
		cur.Reset()
		empty := true
		for l := range strings.Lines(string(doc)) {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			out = append(out, slices.Clone(doc))
		}
	}
	for l := range strings.Lines(string(b)) {
		if strings.TrimRight(l, "\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return out
}

// decoder decodes the manifests' kinds strictly: an unknown or duplicate
// field is an error.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// objects decodes every document of deploy/REL.
func objects(t *testing.T, rel string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", rel))
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	var out []runtime.Object
	for i, doc := range documents(b) {
		if obj, ok := monitoringObject(t, rel, doc); ok {
			out = append(out, obj)
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("deploy/%s: document %d: %v", rel, i+1, err)
		}
		out = append(out, obj)
	}
	return out
}

// only returns the one object of type T in deploy/REL.
func only[T runtime.Object](t *testing.T, rel string) T {
	t.Helper()
	var found []T
	for _, o := range objects(t, rel) {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("deploy/%s: %d objects of type %T, want 1", rel, len(found), zero)
	}
	return found[0]
}

func operatorDeployment(t *testing.T) *appsv1.Deployment {
	return only[*appsv1.Deployment](t, "operator/operator.yaml")
}

func sampleJob(t *testing.T) *v1alpha1.ElasticJob {
	return only[*v1alpha1.ElasticJob](t, "samples/ddp-elasticjob.yaml")
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// TestManifestsParse decodes every YAML document under deploy/ strictly
// into its Go type, and checks every kustomization's resources exist.
func TestManifestsParse(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy")
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.Name() == "kustomization.yaml" {
			k := readKustomization(t, filepath.Dir(path))
			if len(k.Resources) == 0 {
				t.Errorf("deploy/%s: no resources", rel)
			}
			for _, g := range k.ConfigMapGenerator {
				for _, f := range g.Files {
					if _, err := os.Stat(filepath.Join(filepath.Dir(path), f)); err != nil {
						t.Errorf("deploy/%s: ConfigMap %s: file %s: %v", rel, g.Name, f, err)
					}
				}
			}
			for _, r := range k.Resources {
				fi, err := os.Stat(filepath.Join(filepath.Dir(path), r))
				switch {
				case err != nil:
					t.Errorf("deploy/%s: resource %s: %v", rel, r, err)
				case fi.IsDir():
					if _, err := os.Stat(filepath.Join(filepath.Dir(path), r, "kustomization.yaml")); err != nil {
						t.Errorf("deploy/%s: resource %s is a folder without a kustomization.yaml", rel, r)
					}
				}
			}
			return nil
		}
		n += len(objects(t, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no manifests under deploy/")
	}
}

// TestKustomizationInstallsEverything checks that deploy/kustomization.yaml
// takes every CRD, the operator's RBAC and the operator, and not the master
// role, which is per job namespace.
func TestKustomizationInstallsEverything(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy")
	k := readKustomization(t, dir)
	crds, err := filepath.Glob(filepath.Join(dir, "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("deploy/crd: no CRDs (%v)", err)
	}
	want := []string{"rbac", "operator/operator.yaml"}
	for _, c := range crds {
		want = append(want, "crd/"+filepath.Base(c))
	}
	for _, w := range want {
		if !slices.Contains(k.Resources, w) {
			t.Errorf("deploy/kustomization.yaml: resources %v lack %s", k.Resources, w)
		}
	}
	if slices.Contains(readKustomization(t, filepath.Join(dir, "rbac")).Resources, "master-role.yaml") {
		t.Error("deploy/rbac/kustomization.yaml installs master-role.yaml; it belongs in each job namespace")
	}
}

// TestServiceAccounts checks that the operator runs as the service account
// its RBAC binds, and that the operator's defaults name the master's.
func TestServiceAccounts(t *testing.T) {
	dep := operatorDeployment(t)
	sa := only[*corev1.ServiceAccount](t, "rbac/service_account.yaml")
	if got := dep.Spec.Template.Spec.ServiceAccountName; got != sa.Name || dep.Namespace != sa.Namespace {
		t.Errorf("operator Deployment runs as %s/%s, the ServiceAccount is %s/%s", dep.Namespace, got, sa.Namespace, sa.Name)
	}
	role := only[*rbacv1.ClusterRole](t, "rbac/role.yaml")
	crb := only[*rbacv1.ClusterRoleBinding](t, "rbac/role_binding.yaml")
	rb := only[*rbacv1.RoleBinding](t, "rbac/role_binding.yaml")
	if crb.RoleRef.Name != role.Name {
		t.Errorf("ClusterRoleBinding binds %s, the ClusterRole is %s", crb.RoleRef.Name, role.Name)
	}
	if rb.Namespace != dep.Namespace {
		t.Errorf("leader election RoleBinding in %s, the operator in %s", rb.Namespace, dep.Namespace)
	}
	if dep.Namespace != operator.DefaultNamespace {
		t.Errorf("operator in %s, its default --namespace is %s", dep.Namespace, operator.DefaultNamespace)
	}
	for _, s := range [][]rbacv1.Subject{crb.Subjects, rb.Subjects} {
		if len(s) != 1 || s[0].Kind != "ServiceAccount" || s[0].Name != sa.Name || s[0].Namespace != sa.Namespace {
			t.Errorf("binding subjects %+v, want the ServiceAccount %s/%s", s, sa.Namespace, sa.Name)
		}
	}

	// The master's, in master-role.yaml, is the operator's default and its flag.
	master := only[*corev1.ServiceAccount](t, "rbac/master-role.yaml")
	mrb := only[*rbacv1.RoleBinding](t, "rbac/master-role.yaml")
	mrole := only[*rbacv1.Role](t, "rbac/master-role.yaml")
	if master.Name != operator.DefaultMasterServiceAccount {
		t.Errorf("master-role.yaml's ServiceAccount is %s, the operator's default --master-service-account %s", master.Name, operator.DefaultMasterServiceAccount)
	}
	if len(mrb.Subjects) != 1 || mrb.Subjects[0].Name != master.Name || mrb.Subjects[0].Namespace != master.Namespace || mrb.RoleRef.Name != mrole.Name {
		t.Errorf("master RoleBinding binds %s to %+v, want the Role %s to %s/%s", mrb.RoleRef.Name, mrb.Subjects, mrole.Name, master.Namespace, master.Name)
	}
	args := flagValues(dep.Spec.Template.Spec.Containers[0].Args)
	if got := args["--master-service-account"]; got != "" && got != master.Name {
		t.Errorf("operator --master-service-account=%s, master-role.yaml has %s", got, master.Name)
	}
}

// TestImages checks that the operator, its masters and the sample use one
// image, pulled IfNotPresent so that one loaded into kind or minikube serves.
func TestImages(t *testing.T) {
	dep := operatorDeployment(t)
	c := dep.Spec.Template.Spec.Containers[0]
	args := flagValues(c.Args)
	if c.Image != operator.DefaultMasterImage || args["--master-image"] != c.Image {
		t.Errorf("operator image %s, --master-image=%s, operator.DefaultMasterImage %s: want one image", c.Image, args["--master-image"], operator.DefaultMasterImage)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent || args["--master-image-pull-policy"] != string(corev1.PullIfNotPresent) {
		t.Errorf("operator imagePullPolicy %q, --master-image-pull-policy=%s: want IfNotPresent", c.ImagePullPolicy, args["--master-image-pull-policy"])
	}
	for typ, r := range sampleJob(t).Spec.ReplicaSpecs {
		for _, sc := range r.Template.Spec.Containers {
			if sc.Image != c.Image || sc.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("sample %s container %s: image %s pulled %q, want %s IfNotPresent", typ, sc.Name, sc.Image, sc.ImagePullPolicy, c.Image)
			}
		}
	}
}

// flagValues maps --name=value arguments to their values.
func flagValues(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			m[k] = v
		}
	}
	return m
}
