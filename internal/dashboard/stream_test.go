package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// message is one server-sent event as a client parses it.
type message struct {
	id, event, data string
	retry           string
}

// stream is a client of /api/stream.
type stream struct {
	t      *testing.T
	cancel context.CancelFunc
	msgs   chan message
}

// openStream connects to url, with a Last-Event-ID when lastID is set.
func openStream(t *testing.T, url, lastID string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("GET %s: %s, Content-Type %q; want a text/event-stream", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &stream{t: t, cancel: cancel, msgs: make(chan message)}
	go func() {
		defer resp.Body.Close()
		defer close(s.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m message
		var data []string
		for sc.Scan() {
			line := sc.Text()
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch {
			case line == "":
				m.data = strings.Join(data, "\n")
				if m.event != "" || m.retry != "" {
					select {
					case s.msgs <- m:
					case <-ctx.Done():
						return
					}
				}
				m, data = message{}, nil
			case field == "id":
				m.id = value
			case field == "event":
				m.event = value
			case field == "data":
				data = append(data, value)
			case field == "retry":
				m.retry = value
			case field == "":
				// A comment.
			default:
				m.event, data = "unknown field", []string{line}
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.cancel() }

// next returns the next message whose event is one of kinds, skipping
// the others, and fails the test when none comes before a deadline.
func (s *stream) next(kinds ...string) message {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatalf("the stream ended while waiting for %v", kinds)
			}
			if m.event == "unknown field" {
				s.t.Fatalf("the stream sent an unknown field: %q", m.data)
			}
			for _, k := range kinds {
				if m.event == k || (k == "retry" && m.retry != "") {
					return m
				}
			}
		case <-deadline:
			s.t.Fatalf("no %v message within 30s", kinds)
		}
	}
}

func decodeJob(t *testing.T, m message) *roverv1.GetJobResponse {
	t.Helper()
	var j roverv1.GetJobResponse
	if err := protojson.Unmarshal([]byte(m.data), &j); err != nil {
		t.Fatalf("a job message is no GetJobResponse: %v: %s", err, m.data)
	}
	return &j
}

func decodeEvent(t *testing.T, m message) dashboard.Event {
	t.Helper()
	var e dashboard.Event
	if err := json.Unmarshal([]byte(m.data), &e); err != nil {
		t.Fatalf("an event message is no event: %v: %s", err, m.data)
	}
	if m.id != strconv.FormatUint(e.Seq, 10) {
		t.Fatalf("event message id %q, want its seq %d", m.id, e.Seq)
	}
	return e
}

func TestStreamPushesChangesAndResumesAfterLastEventID(t *testing.T) {
	src := newScriptedSource(runningJob())
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "rendezvous_completed", Round: 2, Message: "round 2: 2 nodes"})
	srv := serve(t, dashboard.Handler(src))

	s := openStream(t, srv.URL+"/api/stream", "")
	if m := s.next("retry", "job", "history", "event"); m.retry == "" {
		t.Fatalf("the stream's first message is %+v, want the retry interval", m)
	}
	if e := decodeEvent(t, s.next("event")); e.Seq != 1 || e.Kind != "rendezvous_completed" {
		t.Errorf("first event %+v, want seq 1 rendezvous_completed", e)
	}
	if j := decodeJob(t, s.next("job")); j.GetRunId() != "train-gpt" || j.GetRound() != 2 {
		t.Errorf("first job message: run %q round %d, want train-gpt round 2", j.GetRunId(), j.GetRound())
	}
	var hist []dashboard.Sample
	if m := s.next("history"); json.Unmarshal([]byte(m.data), &hist) != nil || len(hist) != 1 || hist[0].Step != 50 {
		t.Errorf("history message %q, want the one sample of step 50", m.data)
	}

	// A change of the job is pushed as it happens.
	src.update(func(j *roverv1.GetJobResponse) {
		j.Round = 3
		j.Failures = append(j.Failures, &roverv1.WorkerFailure{NodeId: "node-b", Rank: 2, ExitCode: 1, Round: 2,
			Message: "RuntimeError: boom\nsecond line", Cause: "worker crash", Action: "restart"})
	})
	j := decodeJob(t, s.next("job"))
	if j.GetRound() != 3 || len(j.GetFailures()) != 1 || j.GetFailures()[0].GetMessage() != "RuntimeError: boom\nsecond line" {
		t.Errorf("pushed job: round %d failures %v, want round 3 with the crash", j.GetRound(), j.GetFailures())
	}
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "worker_failed", Node: "node-b", Message: "line one\nline two"})
	if e := decodeEvent(t, s.next("event")); e.Seq != 2 || e.Message != "line one\nline two" {
		t.Errorf("pushed event %+v, want seq 2 with its message whole", e)
	}
	s.close()

	// Two more while nobody listens; a reconnect after event 2 gets just them.
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "restart", Message: "restart 2"})
	src.addEvent(dashboard.Event{Time: time.Now(), Kind: "rendezvous_completed", Message: "round 3"})
	s = openStream(t, srv.URL+"/api/stream", "2")
	for _, want := range []uint64{3, 4} {
		if e := decodeEvent(t, s.next("event")); e.Seq != want {
			t.Fatalf("after Last-Event-ID 2: event %d, want %d", e.Seq, want)
		}
	}
	s.next("job") // the snapshot comes again on every connection
	s.close()

	// Without the header, ?since= does the same.
	s = openStream(t, srv.URL+"/api/stream?since=3", "")
	if e := decodeEvent(t, s.next("event")); e.Seq != 4 {
		t.Errorf("after ?since=3: event %d, want 4", e.Seq)
	}
}

func TestStreamReportsASourceFault(t *testing.T) {
	src := newScriptedSource(runningJob())
	srv := serve(t, dashboard.Handler(src))
	s := openStream(t, srv.URL+"/api/stream", "")
	s.next("job")
	src.fail(errMasterGone)
	var f map[string]string
	if m := s.next("fault"); json.Unmarshal([]byte(m.data), &f) != nil || !strings.Contains(f["message"], "master unreachable") {
		t.Errorf("fault message %q, want it to say the master is unreachable", m.data)
	}
	src.update(func(j *roverv1.GetJobResponse) {})
	src.fail(nil)
	if j := decodeJob(t, s.next("job")); j.GetRunId() != "train-gpt" {
		t.Errorf("job after the fault: %v", j)
	}
}

func TestStreamRejectsABadLastEventID(t *testing.T) {
	srv := serve(t, dashboard.Handler(newScriptedSource(runningJob())))
	for _, hdr := range []string{"abc", "-1"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/stream", nil)
		req.Header.Set("Last-Event-ID", hdr)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Last-Event-ID %q: %s, want 400", hdr, resp.Status)
		}
	}
}

func TestStreamEndsWhenRunEnds(t *testing.T) {
	d := dashboard.New(newScriptedSource(runningJob()), dashboard.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	srv := serve(t, d)
	s := openStream(t, srv.URL+"/api/stream", "")
	s.next("job")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v, want nil once its context ended", err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-s.msgs:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end within 30s of Run's end")
		}
	}
}
