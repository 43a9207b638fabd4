package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roverml/rover/internal/dashboard/browsertest"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// The strings a worker or a user controls, with markup in them: none may
// run as script or become an element.
const (
	evilMessage = `<img src=x onerror="window.__pwned=1">`
	evilNode    = `node-<b id="evil" onclick="window.__pwned=2">c</b>`
	evilJob     = `train-<script>window.__pwned=3</script>`
	evilTrace   = "Traceback (most recent call last):\n  File \"train.py\", line 7\n<svg onload=\"window.__pwned=4\"></svg>"
)

// TestBrowserShowsALiveJobAndEscapesWorkerText opens the dashboard in a
// real headless chromium, waits for the nodes table and both charts to
// draw from the stream, crashes a worker in the source and sees the
// failure row appear without a reload, cuts the stream and sees the
// browser resume after the last event it saw, and checks that markup in
// worker and user strings shows as text and runs nothing.
func TestBrowserShowsALiveJobAndEscapesWorkerText(t *testing.T) {
	job := runningJob()
	job.RunId = evilJob
	job.Nodes[1].NodeId = evilNode
	job.ManagedNodes[1].NodeId = evilNode
	src := newScriptedSource(job)
	// A long log: the page gets it in one burst and keeps the newest 500.
	const saved = 700
	for i := range saved {
		src.addEvent(dashboard.Event{Time: time.Now(), Kind: "checkpoint_committed", Severity: "info", Round: 2,
			Message: fmt.Sprintf("checkpoint step %d committed", 10*(i+1))})
	}
	d := dashboard.New(src, dashboard.Options{SampleEvery: 100 * time.Millisecond})
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		<-runDone
	})
	var resumes resumeLog
	srv := serve(t, resumes.wrap(d))
	ctx, console := browsertest.Start(t)

	browsertest.Open(t, ctx, srv.URL+"/")
	// A mark that a reload would wipe.
	browsertest.Eval[bool](t, ctx, `window.__loadMark = 'first load'; true`)

	browsertest.WaitFor(t, ctx, "the nodes table", `document.querySelectorAll('#nodes tbody tr').length === 2 && document.querySelector('#conn').textContent === 'live'`)
	if got := browsertest.Eval[string](t, ctx, `document.querySelectorAll('#nodes tbody tr')[1].cells[0].textContent`); got != evilNode {
		t.Errorf("the second node's id shows as %q, want the text %q", got, evilNode)
	}
	if got := browsertest.Eval[string](t, ctx, `document.querySelector('#job-name').textContent`); got != evilJob {
		t.Errorf("the job's name shows as %q, want the text %q", got, evilJob)
	}

	browsertest.WaitFor(t, ctx, "the event log's newest 500", `document.querySelectorAll('#events tbody tr').length === 500 &&
		document.querySelector('#events tbody tr').cells[0].textContent === '700'`)
	if got := browsertest.Eval[string](t, ctx, `document.querySelector('#checkpoint-events li').textContent`); !strings.HasSuffix(got, "checkpoint step 7000 committed") {
		t.Errorf("newest checkpoint event shows as %q, want step 7000's", got)
	}

	// The charts draw once the history has a few samples; the job trains
	// meanwhile.
	charted := `['#chart-steprate', '#chart-goodput'].every((id) => Number(document.querySelector(id).dataset.points) >= 3 &&
		document.querySelector(id + ' polyline') !== null && document.querySelector(id + ' polyline').getAttribute('points').split(' ').length >= 3) &&
		Number(document.querySelector('#chart-steprate').dataset.last) > 0`
	deadline := time.Now().Add(90 * time.Second)
	for step := int64(60); !browsertest.Eval[bool](t, ctx, charted); step += 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the charts did not draw 3 points within 90s: %s", browsertest.Eval[string](t, ctx, `document.querySelector('#charts-section').textContent`))
		}
		src.update(func(j *roverv1.GetJobResponse) {
			j.Progress.Step = step
			j.Goodput.Ratio = 0.5 + float64(step%40)/100
		})
	}

	// A worker crashes: the failure row appears without a reload.
	src.update(func(j *roverv1.GetJobResponse) {
		j.Failures = append(j.Failures, &roverv1.WorkerFailure{
			NodeId: evilNode, NodeRank: 1, Host: "host-b", Rank: 2, LocalRank: 0, Pid: 4242, ExitCode: 1, Round: 2,
			TimeUnixNanos: time.Now().UnixNano(), Message: evilMessage, Traceback: evilTrace,
			Cause: "worker crash", Action: "restart the workers", Diagnosis: "the worker raised",
		})
		j.RestartCount = 2
		j.RoundOpen = true
	})
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "worker_failed", Severity: "error", Node: evilNode, Round: 2, Message: evilMessage})
	browsertest.WaitFor(t, ctx, "the failure row", `document.querySelectorAll('#failures tbody tr.failure').length === 1`)
	browsertest.WaitFor(t, ctx, "the failure's mark on the rounds' timeline", `document.querySelectorAll('#rounds line.failure').length === 1`)
	browsertest.WaitFor(t, ctx, "the failure event", `document.querySelectorAll('#events tbody tr.bad').length === 1`)

	row := browsertest.Eval[[]string](t, ctx, `[...document.querySelector('#failures tbody tr.failure').cells].map((c) => c.textContent)`)
	if len(row) != 9 || row[2] != evilNode || row[5] != "worker crash" || row[6] != "restart the workers" || row[7] != evilMessage {
		t.Errorf("failure row %q, want node %q, cause worker crash, action restart the workers, message %q as text", row, evilNode, evilMessage)
	}
	if got := browsertest.Eval[string](t, ctx, `document.querySelector('#failures tbody tr.failure pre').textContent`); got != evilTrace {
		t.Errorf("traceback shows as %q, want the text %q", got, evilTrace)
	}
	if got := browsertest.Eval[string](t, ctx, `document.querySelector('#events tbody tr.bad').cells[6].textContent`); got != evilMessage {
		t.Errorf("event message shows as %q, want the text %q", got, evilMessage)
	}
	if got := browsertest.Eval[string](t, ctx, `window.__loadMark || 'reloaded'`); got != "first load" {
		t.Errorf("the page reloaded (mark %q): the failure must arrive on the stream", got)
	}

	// The connection drops: the browser reconnects by itself, resumes
	// after the last event it saw, and shows each event once.
	srv.CloseClientConnections()
	browsertest.WaitFor(t, ctx, "the second connection", `Number(document.body.dataset.connections) >= 2 && document.querySelector('#conn').textContent === 'live'`)
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "restart", Severity: "warning", Round: 3, Message: "restart the workers"})
	browsertest.WaitFor(t, ctx, "the event after the reconnection", `document.querySelector('#events tbody tr').cells[0].textContent === '702'`)
	seqs := browsertest.Eval[[]string](t, ctx, `[...document.querySelectorAll('#events tbody tr')].map((r) => r.cells[0].textContent)`)
	if len(seqs) != 500 || seqs[0] != "702" || seqs[1] != "701" || seqs[499] != "203" {
		t.Errorf("events shown after the reconnection: %d, from %s to %s; want each once, 702 down to 203", len(seqs), seqs[0], seqs[len(seqs)-1])
	}
	if got := resumes.ids(); len(got) < 2 || got[0] != "" || slices.ContainsFunc(got[1:], func(id string) bool { return id != fmt.Sprint(saved+1) }) {
		t.Errorf("the stream's Last-Event-ID headers %q, want none and then %d on every reconnection", got, saved+1)
	}
	if got := browsertest.Eval[string](t, ctx, `window.__loadMark || 'reloaded'`); got != "first load" {
		t.Errorf("the page reloaded (mark %q) when the connection dropped", got)
	}

	// Open the traceback and let the page settle, so that markup would have
	// had its chance to load and run, then look for what it would have done.
	browsertest.Eval[bool](t, ctx, `document.querySelector('#failures details').open = true; true`)
	browsertest.WaitFor(t, ctx, "the opened traceback", `document.querySelector('#failures details pre').getBoundingClientRect().height > 0`)
	if got := browsertest.Eval[string](t, ctx, `typeof window.__pwned`); got != "undefined" {
		t.Errorf("markup from a worker ran script in the page: window.__pwned is %s", browsertest.Eval[string](t, ctx, `String(window.__pwned)`))
	}
	if n := browsertest.Eval[int](t, ctx, `document.querySelectorAll('img, svg image, #evil, b, main script, [onerror], [onload], [onclick]').length`); n != 0 {
		t.Errorf("markup from the job became %d elements in the page", n)
	}

	browsertest.Screenshot(t, ctx, "dashboard.png")

	for _, line := range console.Lines() {
		if strings.Contains(line, "ERR_INCOMPLETE_CHUNKED_ENCODING") {
			continue // the stream the test cut
		}
		if strings.HasPrefix(line, "exception") || strings.Contains(line, "Content Security Policy") || strings.HasPrefix(line, "error") {
			t.Errorf("the page's console: %s", line)
		}
	}
}

// resumeLog records the Last-Event-ID header of each stream request.
type resumeLog struct {
	mu     sync.Mutex
	lastID []string
}

func (l *resumeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/stream" {
			l.mu.Lock()
			l.lastID = append(l.lastID, r.Header.Get("Last-Event-ID"))
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (l *resumeLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lastID...)
}
