package peer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sink is where Fetch streams a snapshot: the receiving node's memory.
type Sink interface {
	// Begin returns memory for the size bytes of step's snapshot.
	Begin(step, size int64) ([]byte, error)
	// Commit publishes what was written since Begin as step's snapshot;
	// Abort drops it (nothing of it is ever visible).
	Commit(step, size int64) error
	Abort()
}

// Request is one fetch.
type Request struct {
	// Addr is the peer's host:port.
	Addr       string
	Run, Token string
	Step       int64
	// Shard asks for the backup the peer keeps of global rank Rank's
	// sharded snapshot of Step; without it, for the peer's replicated
	// node copy.
	Shard bool
	Rank  int
	// MaxBytes bounds the snapshot's announced size (0: 1 TiB).
	MaxBytes int64
	// Check, when set, validates the bytes once their CRC32C matched and
	// before they are committed (the agent checks the safetensors metadata:
	// the step and the replicated mode).
	Check func(data []byte) error
	// Client is the HTTP client (nil: a fresh one without proxies).
	Client *http.Client
	// Idle is how long the transfer may make no progress (0: 30 s).
	Idle time.Duration
}

// Result describes a fetched snapshot.
type Result struct {
	Addr     string
	Bytes    int64
	Duration time.Duration
}

const defaultMaxBytes = 1 << 40

// Fetch streams req.Step's snapshot from the peer into sink and commits it
// once its size, its CRC32C and req.Check agree; on any error nothing is
// committed (the sink is aborted).
func Fetch(ctx context.Context, req Request, sink Sink) (Result, error) {
	start := time.Now()
	n, err := fetch(ctx, req, sink)
	if err != nil {
		return Result{}, fmt.Errorf("fetch %s from peer %s: %w", req.what(), req.Addr, err)
	}
	return Result{Addr: req.Addr, Bytes: n, Duration: time.Since(start)}, nil
}

// FetchFirst tries the peers in order and returns the first fetch that
// succeeds, or every peer's error.
func FetchFirst(ctx context.Context, peers []string, req Request, sink Sink) (Result, error) {
	var errs []error
	for _, p := range peers {
		req.Addr = p
		res, err := Fetch(ctx, req, sink)
		if err == nil {
			return res, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return Result{}, fmt.Errorf("fetch %s: no peer holds it", req.what())
	}
	return Result{}, errors.Join(errs...)
}

func (req Request) what() string {
	if req.Shard {
		return fmt.Sprintf("step %d of rank %d", req.Step, req.Rank)
	}
	return fmt.Sprintf("step %d", req.Step)
}

func fetch(ctx context.Context, req Request, sink Sink) (int64, error) {
	limit := req.MaxBytes
	if limit <= 0 {
		limit = defaultMaxBytes
	}
	idle := req.Idle
	if idle <= 0 {
		idle = 30 * time.Second
	}
	client := req.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: idle, DisableCompression: true}}
		defer client.CloseIdleConnections()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := newWatchdog(idle, func() { cancel(fmt.Errorf("no progress for %v", idle)) })
	defer watch.stop()

	q := url.Values{"step": {strconv.FormatInt(req.Step, 10)}}
	if req.Shard {
		q.Set("rank", strconv.Itoa(req.Rank))
	}
	u := url.URL{Scheme: "http", Host: req.Addr, Path: Path, RawQuery: q.Encode()}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	hr.Header.Set(authHeader, authScheme+req.Token)
	hr.Header.Set(HeaderRun, req.Run)
	resp, err := client.Do(hr)
	if err != nil {
		return 0, causeOr(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("%w: %s: %s", ErrRefused, resp.Status, trim(msg))
	}
	if run := resp.Header.Get(HeaderRun); run != req.Run {
		return 0, fmt.Errorf("%w: it answers for run %q, not %q", ErrRefused, run, req.Run)
	}
	if s := resp.Header.Get(HeaderStep); s != strconv.FormatInt(req.Step, 10) {
		return 0, fmt.Errorf("%w: it sent step %q, not %d", ErrRefused, s, req.Step)
	}
	if r := resp.Header.Get(HeaderRank); req.Shard && r != strconv.Itoa(req.Rank) {
		return 0, fmt.Errorf("%w: it sent rank %q, not %d", ErrRefused, r, req.Rank)
	}
	want, err := strconv.ParseUint(resp.Header.Get(HeaderCRC), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a CRC32C in hex", ErrRefused, HeaderCRC, resp.Header.Get(HeaderCRC))
	}
	size := resp.ContentLength
	switch {
	case size < 0:
		return 0, fmt.Errorf("%w: no Content-Length", ErrRefused)
	case size > limit:
		return 0, fmt.Errorf("%w: %d bytes, at most %d accepted", ErrTooLarge, size, limit)
	}
	err = receive(resp.Body, req.Step, size, uint32(want), sink, req.Check, watch.reset,
		func(err error) error { return causeOr(ctx, err) })
	if err != nil {
		return 0, err
	}
	return size, nil
}

// receive reads size bytes of body into the memory sink hands out for
// step, computing their CRC32C as they come, and commits them once it is
// want and check (when set) passes; on any error nothing is committed
// (the sink is aborted). progress is called as bytes arrive; readErr
// decorates a read's error.
func receive(body io.Reader, step, size int64, want uint32, sink Sink, check func([]byte) error, progress func(), readErr func(error) error) error {
	buf, err := sink.Begin(step, size)
	if err != nil {
		return fmt.Errorf("make room for %d bytes: %w", size, err)
	}
	if int64(len(buf)) < size {
		sink.Abort()
		return fmt.Errorf("make room for %d bytes: the sink gave %d", size, len(buf))
	}
	committed := false
	defer func() {
		if !committed {
			sink.Abort()
		}
	}()
	var crc uint32
	for off := int64(0); off < size; {
		n, err := body.Read(buf[off:min(off+writeChunk, size)])
		crc = crc32.Update(crc, castagnoli, buf[off:off+int64(n)])
		off += int64(n)
		progress()
		if err != nil && (off < size || !errors.Is(err, io.EOF)) {
			return fmt.Errorf("%w: %d of %d bytes received: %w", ErrCorrupt, off, size, readErr(err))
		}
	}
	if crc != want {
		return fmt.Errorf("%w: CRC32C %08x, the sender announced %08x", ErrCorrupt, crc, want)
	}
	if check != nil {
		if err := check(buf[:size]); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if err := sink.Commit(step, size); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	return nil
}

// causeOr names why ctx ended (the watchdog's reason) when it did.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return fmt.Errorf("%w (%w)", c, err)
	}
	return err
}

func trim(b []byte) string {
	s := string(b)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return strconv.Quote(s)
}

// watchdog calls fire when reset has not been called for d.
type watchdog struct {
	mu sync.Mutex
	t  *time.Timer
	d  time.Duration
}

func newWatchdog(d time.Duration, fire func()) *watchdog {
	return &watchdog{t: time.AfterFunc(d, fire), d: d}
}

func (w *watchdog) reset() {
	w.mu.Lock()
	w.t.Reset(w.d)
	w.mu.Unlock()
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.t.Stop()
	w.mu.Unlock()
}
