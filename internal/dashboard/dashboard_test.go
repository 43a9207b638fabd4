package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read the body: %v", url, err)
	}
	return resp, string(b)
}

func TestJobIsGetJobInProtoJSON(t *testing.T) {
	src := newScriptedSource(runningJob())
	srv := serve(t, dashboard.Handler(src))

	resp, body := get(t, srv.URL+"/api/job")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/job: %s, Content-Type %q: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var got roverv1.GetJobResponse
	if err := protojson.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/api/job is no GetJobResponse in protojson: %v\n%s", err, body)
	}
	if !proto.Equal(&got, runningJob()) {
		t.Errorf("/api/job = %v, want %v", &got, runningJob())
	}
	// Every field is present, so that the page need not know defaults.
	for _, field := range []string{`"reason":""`, `"roundOpen":false`, `"failures":[]`} {
		if !strings.Contains(strings.ReplaceAll(body, " ", ""), field) {
			t.Errorf("/api/job lacks %s: %s", field, body)
		}
	}

	src.fail(errMasterGone)
	resp, body = get(t, srv.URL+"/api/job")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "master unreachable") {
		t.Errorf("GET /api/job with the source failing: %s %q, want 503 saying why", resp.Status, body)
	}
}

func TestEventsAfterSince(t *testing.T) {
	src := newScriptedSource(runningJob())
	at := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	for i, kind := range []string{"rendezvous_completed", "worker_failed", "checkpoint_committed"} {
		src.addEvent(dashboard.Event{Time: at.Add(time.Duration(i) * time.Second), Kind: kind, Node: "node-a", Round: 2, Message: kind,
			Fields: map[string]string{"i": string(rune('0' + i))}})
	}
	srv := serve(t, dashboard.Handler(src))

	seqs := func(query string) []uint64 {
		t.Helper()
		resp, body := get(t, srv.URL+"/api/events"+query)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/events%s: %s %s", query, resp.Status, body)
		}
		var evs []dashboard.Event
		if err := json.Unmarshal([]byte(body), &evs); err != nil || evs == nil {
			t.Fatalf("GET /api/events%s: not a JSON list of events (%v): %s", query, err, body)
		}
		var out []uint64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []uint64
	}{
		{"", []uint64{1, 2, 3}},
		{"?since=1", []uint64{2, 3}},
		{"?since=1&max=1", []uint64{2}},
		{"?since=3", nil},
	} {
		if diff := cmp.Diff(tc.want, seqs(tc.query)); diff != "" {
			t.Errorf("/api/events%s: seqs (-want +got):\n%s", tc.query, diff)
		}
	}

	// The JSON shape the page and other clients read.
	_, body := get(t, srv.URL+"/api/events?since=1&max=1")
	want := `[{"seq":2,"time":"2026-12-03T11:00:01Z","kind":"worker_failed","node":"node-a","message":"worker_failed","round":2,"fields":{"i":"1"}}]`
	if body != want {
		t.Errorf("/api/events?since=1&max=1 = %s, want %s", body, want)
	}

	for _, bad := range []string{"?since=-1", "?since=x", "?max=0", "?max=many"} {
		resp, body := get(t, srv.URL+"/api/events"+bad)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "want") {
			t.Errorf("GET /api/events%s: %s %q, want 400 saying what to pass", bad, resp.Status, body)
		}
	}
}

func TestReadOnlyWithStrictHeaders(t *testing.T) {
	srv := serve(t, dashboard.Handler(newScriptedSource(runningJob())))

	for _, path := range []string{"/", "/api/job", "/api/events", "/api/history", "/api/stream", "/assets/app.js"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(body), "read-only") {
				t.Errorf("%s %s: %s, Allow %q, %q; want 405 with Allow: GET, HEAD", method, path, resp.Status, resp.Header.Get("Allow"), body)
			}
		}
	}
	for _, path := range []string{"/", "/api/job", "/assets/app.js", "/no-such-page"} {
		resp, _ := get(t, srv.URL+path)
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "default-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'self' and nothing unsafe", path, csp)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, got)
		}
	}
}

func TestPageAndAssetsAreEmbedded(t *testing.T) {
	srv := serve(t, dashboard.Handler(newScriptedSource(runningJob())))

	resp, page := get(t, srv.URL+"/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	// The CSP forbids inline scripts and styles, so the page has none; and
	// it loads nothing from elsewhere.
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !regexp.MustCompile(`src="assets/[a-z]+\.js"`).MatchString(tag) {
			t.Errorf("the page has an inline or foreign script: %s", tag)
		}
	}
	for _, bad := range []string{"<style", " style=", "http://", "https://", " on"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q: inline code, or something from elsewhere", bad)
		}
	}
	assets := map[string]string{"/assets/app.js": "text/javascript", "/assets/style.css": "text/css"}
	for path, ctype := range assets {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || body == "" {
			t.Errorf("GET %s: %s, Content-Type %q, %d bytes; want %s", path, resp.Status, resp.Header.Get("Content-Type"), len(body), ctype)
		}
	}
	// The page's script inserts text only, never markup.
	_, js := get(t, srv.URL+"/assets/app.js")
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s: insert job data with textContent or text nodes", sink)
		}
	}
	for _, path := range []string{"/no-such-page", "/assets/", "/assets/nope.js", "/api/"} {
		if resp, _ := get(t, srv.URL+path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		}
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestHistoryIsBoundedAndSampledOncePerInterval(t *testing.T) {
	src := newScriptedSource(runningJob())
	clock := &fakeClock{now: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)}
	d := dashboard.New(src, dashboard.Options{Samples: 3, SampleEvery: time.Second, Now: clock.Now})
	srv := serve(t, d)

	steps := []int64{10, 30, 50, 20, 40}
	for i, step := range steps {
		src.update(func(j *roverv1.GetJobResponse) {
			j.Progress.Step = step
			j.Goodput.Ratio = float64(i) / 10
		})
		get(t, srv.URL+"/api/job")
		get(t, srv.URL+"/api/job") // the same second: no second sample
		clock.advance(2 * time.Second)
	}
	_, body := get(t, srv.URL+"/api/history")
	var got []dashboard.Sample
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/api/history is not a list of samples: %v: %s", err, body)
	}
	start := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	want := []dashboard.Sample{
		// The oldest two fell out of the ring; the step rate of a step that
		// went back (a restore) is 0.
		{Time: start.Add(4 * time.Second), Round: 2, Step: 50, StepRate: 10, Goodput: 0.2, Phase: "training"},
		{Time: start.Add(6 * time.Second), Round: 2, Step: 20, StepRate: 0, Goodput: 0.3, Phase: "training"},
		{Time: start.Add(8 * time.Second), Round: 2, Step: 40, StepRate: 10, Goodput: 0.4, Phase: "training"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

func TestViewersShareOneLookAtTheJob(t *testing.T) {
	src := newScriptedSource(runningJob())
	clock := &fakeClock{now: time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)}
	srv := serve(t, dashboard.New(src, dashboard.Options{SampleEvery: time.Second, Now: clock.Now}))

	for range 3 {
		get(t, srv.URL+"/api/job")
	}
	if n := src.lookCount(); n != 1 {
		t.Errorf("three viewers at one moment looked at the job %d times, want once", n)
	}
	clock.advance(time.Second / 2)
	get(t, srv.URL+"/api/job")
	if n := src.lookCount(); n != 2 {
		t.Errorf("after half a sample interval: %d looks, want 2", n)
	}
	// A change of the source is seen at once.
	src.update(func(j *roverv1.GetJobResponse) { j.Round = 7 })
	_, body := get(t, srv.URL+"/api/job")
	if n := src.lookCount(); n != 3 || !strings.Contains(body, `"7"`) {
		t.Errorf("after a change: %d looks, round in %s; want 3 looks and round 7", n, body)
	}
}
