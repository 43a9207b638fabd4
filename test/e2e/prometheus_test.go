package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/testbuf"
)

// TestPrometheusScrapesAJob runs a real Prometheus (Debian's) scraping, every
// second, the master and both agents of a two-node DDP job, SIGKILLs a
// worker, and asks Prometheus's HTTP API until what it scraped moved: the
// master's restart counter and an agent's worker restarts to 1, the goodput
// ratio below what it was before the fault, restore or rendezvous badput
// above zero; and every target is up.
func TestPrometheusScrapesAJob(t *testing.T) {
	dir := t.TempDir()
	script, steps := filepath.Join(dir, "train.py"), filepath.Join(dir, "steps.log")
	if err := os.WriteFile(script, []byte(goodputScript), 0o644); err != nil {
		t.Fatal(err)
	}
	masterMetrics := filepath.Join(dir, "master.metrics")
	c := newCluster(t, "prom", "--linger", "2m", "--metrics-addr", "127.0.0.1:0", "--metrics-addr-file", masterMetrics)
	agentMetrics := []string{filepath.Join(dir, "node0.metrics"), filepath.Join(dir, "node1.metrics")}
	var agents []*process
	for i, name := range []string{"node0", "node1"} {
		agents = append(agents, c.agent(name, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-conf", rdzvConf, "--max-restarts", "3",
			"--metrics-addr", "127.0.0.1:0", "--metrics-addr-file", agentMetrics[i],
			script, filepath.Join(dir, "ckpt.pt"), steps, "60", "0.5"))
	}
	targets := func(files ...string) []string {
		var out []string
		for _, f := range files {
			waitExists(t, f, time.Minute)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.TrimSpace(string(b)))
		}
		return out
	}
	prom := startPrometheus(t, dir, map[string][]string{"rover-master": targets(masterMetrics), "rover-agent": targets(agentMetrics...)})

	waitFor(t, jobTimeout, "Prometheus to scrape all three targets", func() bool {
		v, ok := prom.value(t, `sum(up)`)
		return ok && v == 3
	})
	var before float64
	var victim life
	waitFor(t, jobTimeout, "both ranks past step 10, as Prometheus saw it", func() bool {
		lives, ok := readStepLog(t, steps).generation(0, 2)
		if !ok || min(lives[0].high, lives[1].high) < 10 {
			return false
		}
		victim = lives[1]
		step, ok1 := prom.value(t, `rover_job_step`)
		before, ok = prom.value(t, `rover_job_goodput_ratio`)
		return ok && ok1 && step >= 10 && before > 0
	})
	if v, _ := prom.value(t, `rover_job_restarts_total`); v != 0 {
		t.Fatalf("rover_job_restarts_total is %v before any fault", v)
	}
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank %d (pid %d): %v", victim.rank, victim.pid, err)
	}
	t.Logf("killed rank %d (pid %d) after step %d, goodput ratio %.3f", victim.rank, victim.pid, victim.high, before)
	for _, w := range []struct {
		query string
		ok    func(float64) bool
		what  string
	}{
		{`rover_job_restarts_total`, func(v float64) bool { return v == 1 }, "the master's restart counter at 1"},
		{`sum(rover_agent_worker_restarts_total)`, func(v float64) bool { return v == 2 }, "both agents' worker restarts at 1"},
		{`rover_job_goodput_ratio`, func(v float64) bool { return v < before }, fmt.Sprintf("the goodput ratio below %.3f", before)},
		{`sum(rover_job_badput_seconds_total{cause=~"restore|rendezvous|stopping|failure_detection|worker_start"})`,
			func(v float64) bool { return v > 0 }, "restart badput above 0"},
		{`sum(rover_job_worker_failures_total)`, func(v float64) bool { return v == 1 }, "one worker failure by cause"},
	} {
		waitFor(t, jobTimeout, w.what+" in Prometheus ("+w.query+")", func() bool {
			v, ok := prom.value(t, w.query)
			return ok && w.ok(v)
		})
	}
	for _, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
}

// prometheus is a running Prometheus server.
type prometheus struct {
	addr string
	out  *testbuf.Buffer
}

// startPrometheus runs Debian's prometheus, scraping each job's targets
// every second, on a free loopback port, its storage in dir; it fails the
// test when prometheus is not installed.
func startPrometheus(t *testing.T, dir string, jobs map[string][]string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed (Debian's prometheus package; make deps-test installs it): %v", err)
	}
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
	for job, targets := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, `"`+strings.Join(targets, `", "`)+`"`)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Prometheus takes no port 0: take a free port and give it back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &prometheus{addr: ln.Addr().String(), out: &testbuf.Buffer{}}
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+p.addr)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("---- output of prometheus ----\n%s", p.out)
		}
	})
	if err := p.out.WaitFor(time.Minute, done, "Server is ready to receive web requests"); err != nil {
		t.Fatalf("prometheus did not start: %v\n%s", err, p.out)
	}
	return p
}

// value asks Prometheus for query's value now; ok is false while the query
// has no single sample.
func (p *prometheus) value(t *testing.T, query string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatalf("query Prometheus: %v", err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("Prometheus's answer to %s: %v", query, err)
	}
	if r.Status != "success" {
		t.Fatalf("Prometheus refused %s: %s", query, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return v, err == nil
}
