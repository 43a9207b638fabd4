package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/kubenames"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// podMonitor is the part of the Prometheus Operator's PodMonitor
// (monitoring.coreos.com/v1) that deploy/monitoring uses; strict decoding
// refuses any other field, so that a misspelt one is noticed.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			Any bool `json:"any"`
		} `json:"namespaceSelector"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

func (p *podMonitor) DeepCopyObject() runtime.Object { c := *p; return &c }

// monitoringObject decodes a document of the Prometheus Operator's API
// group strictly; ok is false for other documents.
func monitoringObject(t *testing.T, rel string, doc []byte) (runtime.Object, bool) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil || tm.APIVersion != "monitoring.coreos.com/v1" {
		return nil, false
	}
	if tm.Kind != "PodMonitor" {
		t.Fatalf("deploy/%s: kind %s of monitoring.coreos.com/v1: only PodMonitor is known here", rel, tm.Kind)
	}
	var pm podMonitor
	if err := yaml.UnmarshalStrict(doc, &pm); err != nil {
		t.Fatalf("deploy/%s: %v", rel, err)
	}
	return &pm, true
}

// TestPodMonitor: the PodMonitor scrapes, in every namespace, the pods of
// ElasticJobs (masters and agents) on the port the operator and the master
// name "metrics", at the metrics' path.
func TestPodMonitor(t *testing.T) {
	pm := only[*podMonitor](t, "monitoring/podmonitor.yaml")
	if !pm.Spec.NamespaceSelector.Any {
		t.Error("the PodMonitor watches one namespace; ElasticJobs run in any")
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for _, labels := range []map[string]string{v1alpha1.ReplicaLabels("j", v1alpha1.DLRoverMaster), v1alpha1.NodeLabels("j", v1alpha1.Worker, 0, 0, 0)} {
		if !sel.Matches(labelSet(labels)) {
			t.Errorf("the PodMonitor's selector %s does not select a pod labelled %v", sel, labels)
		}
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port != kubenames.MetricsPortName || ep.Path != kubenames.MetricsPath {
		t.Errorf("the PodMonitor scrapes port %q path %q, want %q %q", ep.Port, ep.Path, kubenames.MetricsPortName, kubenames.MetricsPath)
	}
	var targets []string
	for _, r := range ep.Relabelings {
		targets = append(targets, r.TargetLabel)
	}
	if !slices.Contains(targets, "elasticjob") {
		t.Errorf("no relabeling makes the label elasticjob, which the dashboard selects by: %v", targets)
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

// TestGrafanaDashboard: the dashboard is JSON that Grafana's sidecar loads
// from the kustomization's ConfigMap, and every query refers only to
// metrics Rover exposes (docs/metrics.md, which TestDocListsEveryMetric
// keeps true to the code) or Prometheus's own.
func TestGrafanaDashboard(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "monitoring")
	k := readKustomization(t, dir)
	if len(k.ConfigMapGenerator) != 1 || !slices.Equal(k.ConfigMapGenerator[0].Files, []string{"rover-dashboard.json"}) ||
		k.ConfigMapGenerator[0].Options.Labels["grafana_dashboard"] != "1" {
		t.Fatalf("deploy/monitoring/kustomization.yaml: want one ConfigMap of rover-dashboard.json labelled grafana_dashboard: \"1\", got %+v", k.ConfigMapGenerator)
	}
	b, err := os.ReadFile(filepath.Join(dir, "rover-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}

	var dash struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("rover-dashboard.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("rover-dashboard.json: uid %q, title %q, %d panels", dash.UID, dash.Title, len(dash.Panels))
	}
	known := documentedMetrics(t)
	labels := documentedLabels(t)
	used := map[string]bool{}
	metricRE := regexp.MustCompile(`\brover_[a-z_]+`)
	byRE := regexp.MustCompile(`\bby \(([^)]*)\)`)
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			has := map[string]bool{"le": true} // a histogram's buckets
			for _, l := range scrapeLabels {
				has[l] = true
			}
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					m, _ = strings.CutSuffix(m, suffix)
				}
				for _, l := range labels[m] {
					has[l] = true
				}
			}
			for _, by := range byRE.FindAllStringSubmatch(tg.Expr, -1) {
				for l := range strings.SplitSeq(by[1], ",") {
					if l = strings.TrimSpace(l); !has[l] {
						t.Errorf("panel %q groups by %s, a label none of its metrics has (docs/metrics.md): %s", p.Title, l, tg.Expr)
					}
				}
			}
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && known[b] == "histogram" {
						base = b
					}
				}
				if known[base] == "" {
					t.Errorf("panel %q queries %s, which Rover does not expose (docs/metrics.md): %s", p.Title, m, tg.Expr)
				}
				used[base] = true
			}
		}
	}
	for _, m := range []string{"rover_job_goodput_ratio", "rover_job_restarts_total", "rover_job_step", "rover_agent_workers"} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	checkPromQL(t, dash.Panels)
}

// checkPromQL has promtool parse every query of the dashboard, as the
// expression of a recording rule, with the dashboard's variable filled in.
func checkPromQL(t *testing.T, panels []dashboardPanel) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (Debian's prometheus package; make deps-test installs it): %v", err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	n := 0
	for _, p := range panels {
		for _, e := range p.exprs() {
			n++
			q, _ := json.Marshal(strings.ReplaceAll(e, "$elasticjob", ".*"))
			fmt.Fprintf(&rules, "  - record: dashboard:query%d\n    expr: %s\n", n, q)
		}
	}
	file := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool does not parse the dashboard's queries: %v\n%s", err, out)
	}
}

// dashboardPanel is a panel of rover-dashboard.json.
type dashboardPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func (p dashboardPanel) exprs() []string {
	var out []string
	for _, tg := range p.Targets {
		out = append(out, tg.Expr)
	}
	return out
}

// documentedMetrics reads the metrics and their types from docs/metrics.md.
// scrapeLabels are the labels Prometheus adds to every series it scrapes
// of a Rover pod (podmonitor.yaml's relabelings and its own).
var scrapeLabels = []string{"elasticjob", "replica_type", "rank", "instance", "job", "namespace", "pod"}

// documentedLabels returns the labels of each metric of docs/metrics.md.
func documentedLabels(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^\\| `(rover_[a-z_]+)` \\| (?:counter|gauge|histogram) \\|([^|]*)\\|")
	labelRE := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(b), -1) {
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], l[1])
		}
	}
	return out
}

func documentedMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^\\| `(rover_[a-z_]+)` \\| (counter|gauge|histogram) \\|")
	out := map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = m[2]
	}
	if len(out) < 10 {
		t.Fatalf("docs/metrics.md lists %d metrics", len(out))
	}
	return out
}
