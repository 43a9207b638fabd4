package peer

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Backup names one sharded snapshot a node pushes to its backup peer.
type Backup struct {
	// From is the sender's node id, and Round the round its workers saved
	// the snapshot in.
	From  string
	Round int
	Step  int64
	// Rank is the global rank that saved it, and Local its local rank on
	// the sender.
	Rank, Local int
}

func (b Backup) String() string {
	return fmt.Sprintf("step %d of rank %d (local rank %d of %s, round %d)", b.Step, b.Rank, b.Local, b.From, b.Round)
}

// BackupStore keeps the sharded snapshots other nodes push, for the
// Handler.
type BackupStore interface {
	// Open accepts b, of size bytes, and returns the memory it goes to
	// and a check of its bytes, run once their CRC32C matched and before
	// they are committed (nil: none). It refuses b with an error wrapping
	// ErrBusy when a push of the same local rank is being received,
	// ErrTooLarge when it does not fit the store's shared-memory budget,
	// and any other error (answered 409) when the store does not keep
	// backups of that node or round.
	Open(b Backup, size int64) (Sink, func(data []byte) error, error)
}

// ErrBusy: the peer is receiving another push of the same local rank; the
// sender tries again with its next save.
var ErrBusy = errors.New("peer busy with another backup of that rank")

// Bounds of a push's header values.
const (
	maxNodeID = 256
	maxLocal  = 1 << 16
	// pushIdle is how long a push's body may make no progress.
	pushIdle = 30 * time.Second
)

// keepBackup receives a pushed backup of step into h.Backups.
func (h *Handler) keepBackup(w http.ResponseWriter, r *http.Request, step int64) {
	if h.Backups == nil {
		http.Error(w, "this agent keeps no backups of other nodes' snapshots", http.StatusNotFound)
		return
	}
	b, crc, err := parseBackup(r, step)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	size := r.ContentLength
	if size <= 0 {
		http.Error(w, "a backup push needs a Content-Length above 0 (a snapshot's size)", http.StatusLengthRequired)
		return
	}
	sink, check, err := h.Backups.Open(b, size)
	if err != nil {
		code := http.StatusConflict
		switch {
		case errors.Is(err, ErrBusy):
			code = http.StatusServiceUnavailable
		case errors.Is(err, ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		}
		h.logger().Debug("refused a peer's backup", "step", b.Step, "rank", b.Rank, "peer", b.From, "err", err)
		http.Error(w, fmt.Sprintf("backup of %s refused: %v", b, err), code)
		return
	}
	start := time.Now()
	rc := http.NewResponseController(w)
	progress := func() { _ = rc.SetReadDeadline(time.Now().Add(pushIdle)) }
	progress()
	if err := receive(r.Body, step, size, crc, sink, check, progress, func(err error) error { return err }); err != nil {
		h.logger().Warn("refused a peer's backup", "step", b.Step, "rank", b.Rank, "peer", b.From, "err", err)
		http.Error(w, fmt.Sprintf("backup of %s refused: %v", b, err), http.StatusBadRequest)
		return
	}
	h.logger().Debug("kept a peer's backup", "step", b.Step, "rank", b.Rank, "peer", b.From, "bytes", size,
		"seconds", time.Since(start).Seconds())
	w.WriteHeader(http.StatusNoContent)
}

// parseBackup reads a push's query and headers.
func parseBackup(r *http.Request, step int64) (Backup, uint32, error) {
	q := r.URL.Query()
	rank, err := strconv.Atoi(q.Get("rank"))
	if err != nil || rank < 0 {
		return Backup{}, 0, fmt.Errorf("rank %q: want a global rank >= 0", q.Get("rank"))
	}
	local, err := strconv.Atoi(q.Get("local"))
	if err != nil || local < 0 || local >= maxLocal {
		return Backup{}, 0, fmt.Errorf("local %q: want a local rank from 0 to %d", q.Get("local"), maxLocal-1)
	}
	round, err := strconv.Atoi(r.Header.Get(HeaderRound))
	if err != nil || round < 0 {
		return Backup{}, 0, fmt.Errorf("%s %q: want a round >= 0", HeaderRound, r.Header.Get(HeaderRound))
	}
	node := r.Header.Get(HeaderNode)
	if node == "" || len(node) > maxNodeID {
		return Backup{}, 0, fmt.Errorf("%s: want the sender's node id, 1 to %d bytes", HeaderNode, maxNodeID)
	}
	crc, err := strconv.ParseUint(r.Header.Get(HeaderCRC), 16, 32)
	if err != nil {
		return Backup{}, 0, fmt.Errorf("%s %q is not a CRC32C in hex", HeaderCRC, r.Header.Get(HeaderCRC))
	}
	return Backup{From: node, Round: round, Step: step, Rank: rank, Local: local}, uint32(crc), nil
}
