package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDocListsEveryMetric: docs/metrics.md lists exactly the metrics the
// master and the agent expose, with their labels, so that it cannot go
// stale.
func TestDocListsEveryMetric(t *testing.T) {
	exposed := map[string]string{} // name -> labels, sorted, comma separated
	var cs []prometheus.Collector
	cs = append(cs, NewMaster(scriptedJob, false).collectors(scriptedJob)...)
	cs = append(cs, NewAgent(nil).collectors()...)
	descRE := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the description %s", d)
			}
			exposed[m[1]] = sortedLabels(strings.Split(m[2], ","))
		}
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	rowRE := regexp.MustCompile("^\\| `(rover_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")
	for _, line := range strings.Split(string(doc), "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := documented[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		labels := strings.TrimSpace(m[3])
		if labels == "—" {
			labels = ""
		}
		documented[m[1]] = sortedLabels(strings.Split(strings.ReplaceAll(labels, "`", ""), ","))
	}
	if diff := cmp.Diff(exposed, documented); diff != "" {
		t.Errorf("docs/metrics.md differs from the metrics exposed (-exposed +documented):\n%s", diff)
	}
}

func sortedLabels(ls []string) string {
	var out []string
	for _, l := range ls {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
