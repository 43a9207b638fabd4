// Package metricstest reads a Prometheus endpoint for tests: the body of an
// HTTP GET, the metric families of an exposition, and promtool's lint of
// it. A missing promtool fails the test (Debian's prometheus package ships
// it; make deps-test installs it). It is test support: no program imports
// it.
package metricstest

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Get returns the body of url's answer, and fails the test unless it is a
// 200.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", url, resp.Status, err, b)
	}
	return string(b)
}

// Families parses an exposition in the text format, by metric name.
func Families(t testing.TB, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, body)
	}
	return fams
}

// Scrape is Families of Get: the body of url's metrics and their families.
func Scrape(t testing.TB, url string) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	body := Get(t, url)
	return body, Families(t, body)
}

// Promtool runs Prometheus's own linter (promtool check metrics) on an
// exposition, and fails the test on what it finds.
func Promtool(t testing.TB, body string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (Debian's prometheus package; make deps-test installs it): %v", err)
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out, body)
	}
}

// Await scrapes url until cond holds of what it serves, and returns that
// scrape; it fails the test, with the last scrape, after timeout (which
// only turns a hang into a failure).
func Await(t testing.TB, url string, timeout time.Duration, what string, cond func(map[string]*dto.MetricFamily) bool) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		body, fams := Scrape(t, url)
		if cond(fams) {
			return body, fams
		}
		select {
		case <-deadline.C:
			t.Fatalf("the metrics at %s never showed %s within %v:\n%s", url, what, timeout, body)
		case <-tick.C:
		}
	}
}
