// Package peer moves a flash-checkpoint snapshot from one node agent's
// shared memory to another's, for a node that joins a world holding nothing
// (a replacement for a lost machine) in replicated mode
// (docs/design/flash-checkpoint.md, "Peer restore").
//
// It owns the wire protocol, its checks and its limits: a Handler serves the
// snapshots a Source holds, and Fetch streams one straight into the memory
// a Sink hands out, checking the size and CRC32C the sender announced (the
// CRC32C the sender's arena recorded for the snapshot) and the job it
// answers for. It does not know arenas, the master or which step to fetch:
// the agent's checkpoint saver adapts its arenas to Source and Sink, and
// the master's assignment names the step and the peers.
//
// The protocol is one HTTP/1.1 GET over TCP:
//
//	GET /rover/peer/v1/snapshot?step=25
//	Authorization: Bearer <job token>
//	Rover-Run: <run id>
//
//	200 OK
//	Rover-Run: <run id>
//	Rover-Step: 25
//	Rover-Crc32c: 1a2b3c4d
//	Content-Length: 1073741824
//
//	<the snapshot's bytes: a safetensors file>
//
// A request without the job's token is refused (401) before anything is
// looked up; a request naming another run is refused (409). Nothing of a
// request is read beyond its header (bounded by the server's limits).
package peer

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Path is the snapshot endpoint.
const Path = "/rover/peer/v1/snapshot"

// Headers of the protocol.
const (
	HeaderRun   = "Rover-Run"
	HeaderStep  = "Rover-Step"
	HeaderCRC   = "Rover-Crc32c"
	authHeader  = "Authorization"
	authScheme  = "Bearer "
	maxHeader   = 8 << 10 // a request's header: a token, a run id, a step
	writeChunk  = 4 << 20 // bytes written per Write, so a stalled reader is noticed
	idleTimeout = 60 * time.Second
)

// Source is what a node's memory holds, for the Handler.
type Source interface {
	// Snapshot returns the replicated snapshot of step in memory, its
	// CRC32C (checked against what the arena recorded) and a function that
	// says, once the bytes are sent, whether they were still the
	// snapshot's (false: its slot was reused meanwhile). ok is false when
	// memory holds no such snapshot.
	Snapshot(step int64) (data []byte, crc uint32, intact func() bool, ok bool, err error)
}

// Handler serves the snapshots of src to the agents of run that present
// token.
type Handler struct {
	Run, Token string
	Src        Source
	Log        *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.Error(w, "not found: the peer endpoint serves "+Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method "+r.Method+": want GET", http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get(authHeader)
	if len(got) < len(authScheme) || subtle.ConstantTimeCompare([]byte(got), []byte(authScheme+h.Token)) != 1 {
		http.Error(w, "a peer snapshot request needs the job's token (Authorization: Bearer ...)", http.StatusUnauthorized)
		return
	}
	if run := r.Header.Get(HeaderRun); run != h.Run {
		http.Error(w, fmt.Sprintf("this agent serves run %q, not %q", h.Run, run), http.StatusConflict)
		return
	}
	step, err := strconv.ParseInt(r.URL.Query().Get("step"), 10, 64)
	if err != nil || step < 0 {
		http.Error(w, fmt.Sprintf("step %q: want a step >= 0", r.URL.Query().Get("step")), http.StatusBadRequest)
		return
	}
	data, crc, intact, ok, err := h.Src.Snapshot(step)
	switch {
	case err != nil:
		http.Error(w, fmt.Sprintf("step %d: %v", step, err), http.StatusInternalServerError)
		return
	case !ok:
		http.Error(w, fmt.Sprintf("step %d: not in this node's memory", step), http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set(HeaderRun, h.Run)
	hd.Set(HeaderStep, strconv.FormatInt(step, 10))
	hd.Set(HeaderCRC, fmt.Sprintf("%08x", crc))
	hd.Set("Content-Length", strconv.Itoa(len(data)))
	hd.Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	start := time.Now()
	// The last byte goes only once the slot is known not to have been
	// reused meanwhile: a receiver never gets all of a changed snapshot.
	body := data[:max(len(data)-1, 0)]
	rc := http.NewResponseController(w)
	for off := 0; off < len(body); off += writeChunk {
		_ = rc.SetWriteDeadline(time.Now().Add(idleTimeout)) // a receiver that stops reading is dropped
		if _, err := w.Write(body[off:min(off+writeChunk, len(body))]); err != nil {
			h.logger().Debug("peer snapshot not sent", "step", step, "err", err)
			return
		}
	}
	if !intact() {
		h.logger().Warn("a snapshot was overwritten while it was sent to a peer", "step", step)
		panic(http.ErrAbortHandler) // cut the connection
	}
	if len(data) > 0 {
		if _, err := w.Write(data[len(data)-1:]); err != nil {
			return
		}
	}
	h.logger().Info("sent a snapshot to a peer", "step", step, "bytes", len(data),
		"seconds", time.Since(start).Seconds(), "peer", r.RemoteAddr)
}

func (h *Handler) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// NewServer returns an HTTP server for h with the protocol's limits: a
// request's header at most 8 KiB, read within 10 s, no request body.
func NewServer(h *Handler) *http.Server {
	return &http.Server{Handler: h, MaxHeaderBytes: maxHeader, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 10 * time.Second, IdleTimeout: idleTimeout}
}

// errors callers branch on.
var (
	// ErrRefused: the peer refused the request or answered for another
	// job or step (a 4xx/5xx, or a mismatched header).
	ErrRefused = errors.New("peer refused the snapshot request")
	// ErrCorrupt: what the peer sent is not the snapshot it announced
	// (short, long, or a CRC32C mismatch).
	ErrCorrupt = errors.New("peer sent a damaged snapshot")
	// ErrTooLarge: the announced size is above the receiver's limit.
	ErrTooLarge = errors.New("peer snapshot too large")
)
