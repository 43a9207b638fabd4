// Package peer moves flash-checkpoint snapshots between node agents'
// shared memory (docs/design/flash-checkpoint.md, "Peer restore" and
// "Backup peers"): a node that joins a world holding nothing (a
// replacement for a lost machine) fetches the replicated node copy from a
// survivor, or, in sharded mode, its own shards from the backup peer that
// kept a copy of them; and each node pushes its shards to its backup peer
// in the background after each save.
//
// It owns the wire protocol, its checks and its limits: a Handler serves
// the snapshots a Source holds and accepts the backups a BackupStore keeps;
// Fetch streams a snapshot straight into the memory a Sink hands out, and
// Push sends one, each checking the size and CRC32C the sender announced
// (the CRC32C the sender's arena recorded for the snapshot) and the job it
// answers for. It does not know arenas, the master or which step to move:
// the agent's checkpoint saver adapts its arenas to Source, Sink and
// BackupStore, and the master's assignment names the step and the peers.
//
// The protocol is HTTP/1.1 over TCP. A fetch is one GET:
//
//	GET /rover/peer/v1/snapshot?step=25[&rank=3]
//	Authorization: Bearer <job token>
//	Rover-Run: <run id>
//
//	200 OK
//	Rover-Run: <run id>
//	Rover-Step: 25
//	[Rover-Rank: 3]
//	Rover-Crc32c: 1a2b3c4d
//	Content-Length: 1073741824
//
//	<the snapshot's bytes: a safetensors file>
//
// Without rank it asks for the node's replicated copy; with rank, for the
// backup of global rank's sharded snapshot. A push is one PUT:
//
//	PUT /rover/peer/v1/backup?step=25&rank=3&local=1
//	Authorization: Bearer <job token>
//	Rover-Run: <run id>
//	Rover-Node: <the sender's node id>
//	Rover-Round: <the round its workers saved the step in>
//	Rover-Crc32c: 1a2b3c4d
//	Content-Length: 1073741824
//
//	<the snapshot's bytes>
//
// answered 204 once the backup is committed, or with an error status and
// a line saying why. A request without the job's token is refused (401)
// before anything is looked up; a request naming another run is refused
// (409). A GET's request is read no further than its header (bounded by
// the server's limits); a PUT's body is read into the store's memory only
// up to the size its store accepted, and committed only once its CRC32C
// and the store's check agree.
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

// Paths of the protocol's endpoints.
const (
	Path       = "/rover/peer/v1/snapshot"
	BackupPath = "/rover/peer/v1/backup"
)

// Headers of the protocol.
const (
	HeaderRun   = "Rover-Run"
	HeaderStep  = "Rover-Step"
	HeaderRank  = "Rover-Rank"
	HeaderCRC   = "Rover-Crc32c"
	HeaderNode  = "Rover-Node"
	HeaderRound = "Rover-Round"
	authHeader  = "Authorization"
	authScheme  = "Bearer "
	maxHeader   = 8 << 10 // a request's header: a token, a run id, a step
	writeChunk  = 4 << 20 // bytes written per Write, so a stalled reader is noticed
	idleTimeout = 60 * time.Second
)

// Source is what a node's memory holds, for the Handler.
type Source interface {
	// Snapshot returns, for rank -1, the node's replicated snapshot of
	// step, and for a rank >= 0 the backup it keeps of that global rank's
	// sharded snapshot of step: its bytes, its CRC32C (checked against
	// what the arena recorded) and a function that says, once the bytes
	// are sent, whether they were still the snapshot's (false: its slot
	// was reused meanwhile). ok is false when memory holds no such
	// snapshot.
	Snapshot(step int64, rank int) (data []byte, crc uint32, intact func() bool, ok bool, err error)
}

// Handler serves the snapshots of Src to the agents of run that present
// token, and, when Backups is set, keeps the backups they push.
type Handler struct {
	Run, Token string
	Src        Source
	// Backups keeps the sharded snapshots other nodes push (nil: this
	// agent keeps none, and a push is refused).
	Backups BackupStore
	Log     *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := http.MethodGet
	switch r.URL.Path {
	case Path:
	case BackupPath:
		want = http.MethodPut
	default:
		http.Error(w, "not found: the peer endpoint serves "+Path+" and "+BackupPath, http.StatusNotFound)
		return
	}
	if r.Method != want {
		http.Error(w, "method "+r.Method+": want "+want, http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get(authHeader)
	if len(got) < len(authScheme) || subtle.ConstantTimeCompare([]byte(got), []byte(authScheme+h.Token)) != 1 {
		http.Error(w, "a peer request needs the job's token (Authorization: Bearer ...)", http.StatusUnauthorized)
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
	if want == http.MethodPut {
		h.keepBackup(w, r, step)
		return
	}
	rank := -1
	if q := r.URL.Query().Get("rank"); q != "" {
		if rank, err = strconv.Atoi(q); err != nil || rank < 0 {
			http.Error(w, fmt.Sprintf("rank %q: want a global rank >= 0", q), http.StatusBadRequest)
			return
		}
	}
	h.serveSnapshot(w, r, step, rank)
}

func (h *Handler) serveSnapshot(w http.ResponseWriter, r *http.Request, step int64, rank int) {
	what := fmt.Sprintf("step %d", step)
	if rank >= 0 {
		what = fmt.Sprintf("step %d of rank %d", step, rank)
	}
	data, crc, intact, ok, err := h.Src.Snapshot(step, rank)
	switch {
	case err != nil:
		http.Error(w, fmt.Sprintf("%s: %v", what, err), http.StatusInternalServerError)
		return
	case !ok:
		http.Error(w, what+": not in this node's memory", http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set(HeaderRun, h.Run)
	hd.Set(HeaderStep, strconv.FormatInt(step, 10))
	if rank >= 0 {
		hd.Set(HeaderRank, strconv.Itoa(rank))
	}
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
			h.logger().Debug("peer snapshot not sent", "step", step, "rank", rank, "err", err)
			return
		}
	}
	if !intact() {
		h.logger().Warn("a snapshot was overwritten while it was sent to a peer", "step", step, "rank", rank)
		panic(http.ErrAbortHandler) // cut the connection
	}
	if len(data) > 0 {
		if _, err := w.Write(data[len(data)-1:]); err != nil {
			return
		}
	}
	h.logger().Info("sent a snapshot to a peer", "step", step, "rank", rank, "bytes", len(data),
		"seconds", time.Since(start).Seconds(), "peer", r.RemoteAddr)
}

func (h *Handler) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// NewServer returns an HTTP server for h with the protocol's limits: a
// request's header at most 8 KiB, read within 10 s; a GET has no body,
// and a push's body must make progress every 30 s (Handler extends the
// read deadline as it arrives).
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
	// ErrChanged: the snapshot being pushed was overwritten in the
	// sender's memory before its last byte went (a newer save reused its
	// slot); nothing of it was committed.
	ErrChanged = errors.New("snapshot overwritten while it was sent")
)
