// Package dashboard serves a job's live web dashboard, read-only: the page
// and its embedded assets, the job's status as the master's GetJob answers
// it (/api/job), the job's event log (/api/events), a bounded history of
// step rate and goodput for the charts (/api/history), and a stream of
// server-sent events that pushes each of them as it changes (/api/stream).
//
// It owns the HTTP side and the history only. Where the job's status and
// its events come from is its caller's: a Source. It listens on nothing;
// the caller mounts the handler on a server of its own (the master's
// metrics address).
//
//	d := dashboard.New(src, dashboard.Options{})
//	g.Go(func() error { return d.Run(ctx) }) // samples the history while nobody watches
//	mux.Handle("/", d)
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// Source is what the dashboard shows: the job's status and its events.
type Source interface {
	// Job returns the job's status, as the master's GetJob answers it.
	Job(ctx context.Context) (*roverv1.GetJobResponse, error)
	EventSource
}

// EventSource is the job's event log.
type EventSource interface {
	// Events returns at most max events whose Seq is above since, oldest
	// first. Sequence numbers start at 1 and only grow.
	Events(since uint64, max int) []Event
	// Changed returns a channel that is closed at the next change: a new
	// event, or a change of the job's status that the source sees. The
	// dashboard also looks at the job every Options.SampleEvery, so a
	// source that sees no status changes may only report events.
	Changed() <-chan struct{}
}

// Event is one entry of the job's event log.
type Event struct {
	Seq      uint64            `json:"seq"`
	Time     time.Time         `json:"time"`
	Kind     string            `json:"kind"`
	Severity string            `json:"severity,omitempty"`
	Node     string            `json:"node,omitempty"`
	Message  string            `json:"message"`
	Round    int64             `json:"round,omitempty"`
	Fields   map[string]string `json:"fields,omitempty"`
}

// Options tune a dashboard; the zero value is good.
type Options struct {
	// SampleEvery is how often the history takes a sample of the job, and
	// how often a stream looks at the job when its source says nothing
	// (0: one second).
	SampleEvery time.Duration
	// Samples is how many samples the history keeps, the newest (0: 3600,
	// an hour at one per second).
	Samples int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger logs failures to ask the source (nil: slog.Default()).
	Logger *slog.Logger
}

// The defaults of Options.
const (
	DefaultSampleEvery = time.Second
	DefaultSamples     = 3600
)

// eventsBatch is how many events one call to Events asks for; maxEvents is
// the most /api/events answers at once.
const (
	eventsBatch = 256
	maxEvents   = 1000
)

//go:embed assets
var assetFiles embed.FS

// jobMarshal marshals the job for the page: every field present, so that
// the page need not know protobuf's defaults.
var jobMarshal = protojson.MarshalOptions{EmitUnpopulated: true}

// Dashboard is the handler of a job's dashboard.
type Dashboard struct {
	src    Source
	opts   Options
	hist   *history
	mux    *http.ServeMux
	closed chan struct{} // closed when Run returns: streams end
	close  sync.Once
	latest latestJob
}

// latestJob is the newest look at the job, shared by the sampler and every
// viewer: it serves those who ask within half a sample interval, unless the
// source changed since. A job of 10,000 nodes takes a tenth of a second to look at
// and marshal (BenchmarkJob10kNodes), so each viewer must not do it again.
type latestJob struct {
	mu      sync.Mutex // held while looking: the others wait and share it
	at      time.Time
	changed <-chan struct{} // the source's Changed when it was taken
	job     *roverv1.GetJobResponse
	json    []byte // nil until a viewer needs it
}

var _ http.Handler = (*Dashboard)(nil)

// Handler returns the dashboard of src with the default options. Without
// Run, its history grows only while someone looks at it.
func Handler(src Source) http.Handler { return New(src, Options{}) }

// New returns the dashboard of src.
func New(src Source, opts Options) *Dashboard {
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = DefaultSampleEvery
	}
	if opts.Samples <= 0 {
		opts.Samples = DefaultSamples
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Logger = opts.Logger.With("component", "dashboard")
	d := &Dashboard{src: src, opts: opts, hist: newHistory(opts.Samples, opts.SampleEvery), closed: make(chan struct{})}
	assets, err := fs.Sub(assetFiles, "assets")
	if err != nil {
		panic(fmt.Sprintf("dashboard: embedded assets: %v", err)) // the embed directive names the directory
	}
	d.mux = http.NewServeMux()
	d.mux.HandleFunc("/{$}", d.servePage)
	files := http.StripPrefix("/assets/", http.FileServerFS(assets))
	d.mux.HandleFunc("/assets/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})
	d.mux.HandleFunc("/api/job", d.serveJob)
	d.mux.HandleFunc("/api/events", d.serveEvents)
	d.mux.HandleFunc("/api/history", d.serveHistory)
	d.mux.HandleFunc("/api/stream", d.serveStream)
	return d
}

// Run samples the job into the history every Options.SampleEvery until
// ctx ends; then it ends the open streams and returns nil.
func (d *Dashboard) Run(ctx context.Context) error {
	defer d.close.Do(func() { close(d.closed) })
	tick := time.NewTicker(d.opts.SampleEvery)
	defer tick.Stop()
	for {
		d.latest.mu.Lock()
		_, err := d.look(ctx)
		d.latest.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			d.opts.Logger.Debug("sample the job", "err", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// snapshot asks the source for the job and records a sample of it when one
// is due.
func (d *Dashboard) snapshot(ctx context.Context) (*roverv1.GetJobResponse, error) {
	j, err := d.src.Job(ctx)
	if err != nil {
		return nil, fmt.Errorf("get the job's status: %w", err)
	}
	d.hist.add(d.opts.Now(), j)
	return j, nil
}

// look returns the job from the latest look when it is fresh, else looks
// again; its JSON is made on the first call of jobJSON after the look.
func (d *Dashboard) look(ctx context.Context) (*latestJob, error) {
	l := &d.latest
	now := d.opts.Now()
	if l.job != nil && now.Sub(l.at) < d.opts.SampleEvery/2 && !isClosed(l.changed) {
		return l, nil
	}
	changed := d.src.Changed()
	j, err := d.snapshot(ctx)
	if err != nil {
		l.job, l.json = nil, nil
		return nil, err
	}
	l.at, l.changed, l.job, l.json = now, changed, j, nil
	return l, nil
}

// jobJSON returns the job in JSON, from the latest look when it is fresh.
func (d *Dashboard) jobJSON(ctx context.Context) ([]byte, error) {
	d.latest.mu.Lock()
	defer d.latest.mu.Unlock()
	l, err := d.look(ctx)
	if err != nil {
		return nil, err
	}
	if l.json == nil {
		b, err := jobMarshal.Marshal(l.job)
		if err != nil {
			return nil, fmt.Errorf("marshal the job's status: %w", err)
		}
		l.json = b
	}
	return l.json, nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ServeHTTP answers GET and HEAD requests with strict security headers;
// other methods get 405: the dashboard changes nothing.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s not allowed: the dashboard is read-only, use GET", r.Method), http.StatusMethodNotAllowed)
		return
	}
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) servePage(w http.ResponseWriter, r *http.Request) {
	page, err := assetFiles.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, "the dashboard's page is missing from the binary", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(page)
}

func (d *Dashboard) serveJob(w http.ResponseWriter, r *http.Request) {
	b, err := d.jobJSON(r.Context())
	if err != nil {
		d.opts.Logger.Warn("answer /api/job", "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, b)
}

// serveEvents answers /api/events?since=N&max=M: the events after N (0:
// from the first), at most M (default and cap maxEvents), oldest first.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := queryUint(q.Get("since"), 0)
	if err != nil {
		http.Error(w, fmt.Sprintf("bad since %q: want the sequence number of the last event seen (0 for all)", q.Get("since")), http.StatusBadRequest)
		return
	}
	limit, err := queryUint(q.Get("max"), maxEvents)
	if err != nil || limit == 0 {
		http.Error(w, fmt.Sprintf("bad max %q: want a number of events from 1 to %d", q.Get("max"), maxEvents), http.StatusBadRequest)
		return
	}
	evs := d.src.Events(since, int(min(limit, maxEvents)))
	if evs == nil {
		evs = []Event{}
	}
	b, err := json.Marshal(evs)
	if err != nil {
		http.Error(w, fmt.Sprintf("marshal the events: %v", err), http.StatusInternalServerError)
		return
	}
	writeJSON(w, b)
}

func (d *Dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(d.hist.since(time.Time{}))
	if err != nil {
		http.Error(w, fmt.Sprintf("marshal the history: %v", err), http.StatusInternalServerError)
		return
	}
	writeJSON(w, b)
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// queryUint parses a query parameter, def when it is absent.
func queryUint(s string, def uint64) (uint64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseUint(s, 10, 64)
}
