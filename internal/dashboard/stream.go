package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The stream (/api/stream) is a text/event-stream of these messages:
//
//	event: job      data: the job's status (as /api/job), whenever it changed
//	event: history  data: every sample (as /api/history), first on each connection
//	event: sample   data: one new sample
//	event: event    data: one event (as in /api/events), with id: its Seq
//	event: fault    data: {"message": why the job's status is unknown now}
//
// Only events carry an id, so a browser that reconnects sends the Seq of
// the last event it saw as Last-Event-ID, and the stream resumes after it;
// a client without the header may pass ?since=N.

// retryMillis is how long a browser waits before it reconnects.
const retryMillis = 2000

// keepaliveTicks is how many quiet ticks pass before the stream writes a
// comment, so that proxies keep the connection.
const keepaliveTicks = 15

func (d *Dashboard) serveStream(w http.ResponseWriter, r *http.Request) {
	since, err := resumeAfter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	// A server's write timeout would cut the stream; lift it where the
	// server has one.
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	s := &sseWriter{w: w}
	s.printf("retry: %d\n\n", retryMillis)

	ctx := r.Context()
	tick := time.NewTicker(d.opts.SampleEvery)
	defer tick.Stop()
	var lastJob []byte
	var lastSample time.Time
	first, quiet := true, 0
	for {
		changed := d.src.Changed() // before reading, so no change is missed
		for {
			evs := d.src.Events(since, eventsBatch)
			for _, e := range evs {
				s.message("event", strconv.FormatUint(e.Seq, 10), e)
				since = e.Seq
			}
			if len(evs) < eventsBatch {
				break
			}
		}
		if b, err := d.jobJSON(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.message("fault", "", map[string]string{"message": err.Error()})
			lastJob = nil
		} else if !bytes.Equal(b, lastJob) {
			s.data("job", "", b)
			lastJob = b
		}
		if samples := d.hist.since(lastSample); first || len(samples) > 0 {
			if first {
				s.message("history", "", samples)
			} else {
				for _, x := range samples {
					s.message("sample", "", x)
				}
			}
			if len(samples) > 0 {
				lastSample = samples[len(samples)-1].Time
			}
		}
		first = false
		if quiet++; s.n == 0 && quiet >= keepaliveTicks {
			s.printf(": keepalive\n\n")
		}
		if s.err != nil {
			return
		}
		if s.n > 0 {
			if err := rc.Flush(); err != nil {
				return
			}
			s.n, quiet = 0, 0
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return
		case <-d.closed:
			return
		}
	}
}

// resumeAfter is the Seq of the last event the client saw: its
// Last-Event-ID header, else its since parameter, else 0.
func resumeAfter(r *http.Request) (uint64, error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad Last-Event-ID %q: want the id of the last event the stream sent", id)
		}
		return n, nil
	}
	since := r.URL.Query().Get("since")
	n, err := queryUint(since, 0)
	if err != nil {
		return 0, fmt.Errorf("bad since %q: want the sequence number of the last event seen (0 for all)", since)
	}
	return n, nil
}

// sseWriter writes server-sent events, keeping the first error; n counts
// the bytes since the last flush.
type sseWriter struct {
	w   io.Writer
	n   int
	err error
}

func (s *sseWriter) printf(format string, args ...any) {
	if s.err != nil {
		return
	}
	n, err := fmt.Fprintf(s.w, format, args...)
	s.n += n
	s.err = err
}

// message writes one message whose data is v in JSON.
func (s *sseWriter) message(event, id string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.err = fmt.Errorf("marshal a %s message: %w", event, err)
		return
	}
	s.data(event, id, b)
}

// data writes one message; each line of data becomes a data field, so a
// payload with line breaks cannot end the message early.
func (s *sseWriter) data(event, id string, data []byte) {
	if id != "" {
		s.printf("id: %s\n", id)
	}
	s.printf("event: %s\n", event)
	for _, line := range bytes.Split(data, []byte("\n")) {
		s.printf("data: %s\n", bytes.TrimSuffix(line, []byte("\r")))
	}
	s.printf("\n")
}
