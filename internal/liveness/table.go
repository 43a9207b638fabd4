package liveness

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/deadline"
)

// Config says when a node counts as lost.
type Config struct {
	// HeartbeatTimeout: a node not seen for this long is lost. Zero disables
	// the heartbeat rule (nodes are then lost only by disconnecting).
	HeartbeatTimeout time.Duration
	// DisconnectGrace: a node whose last push stream closed this long ago,
	// with none reopened, is lost. Zero means it is lost at the first Tick
	// after the stream closed.
	DisconnectGrace time.Duration
}

// Validate reports every field that is out of range, joined into one error
// whose parts wrap [ErrInvalidConfig].
func (c Config) Validate() error {
	var errs []error
	if c.HeartbeatTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: HeartbeatTimeout is %v; use a positive duration, or 0 to disable heartbeat expiry", ErrInvalidConfig, c.HeartbeatTimeout))
	}
	if c.DisconnectGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: DisconnectGrace is %v; use 0 or a positive duration", ErrInvalidConfig, c.DisconnectGrace))
	}
	return errors.Join(errs...)
}

// Info is what the table knows about one node.
type Info struct {
	ID       string
	LastSeen time.Time // latest Seen or Connected
	// Connected is the number of push streams open now. An agent may briefly
	// hold two while it replaces one.
	Connected int
	// DisconnectedSince is when the node's last open stream closed; zero while
	// a stream is open, or when none was ever opened since the node was last
	// (re)registered.
	DisconnectedSince time.Time
	Lost              bool
	LostReason        string // why, while Lost: "no heartbeat for 10s", "disconnected for 3s"
}

// Lost reports one node that [Table.Tick] found newly lost.
type Lost struct {
	ID     string
	Reason string
	// Since is when the node was last known alive: the end of its
	// session, or its last heartbeat.
	Since time.Time
}

type cause uint8

const (
	causeNone cause = iota
	causeHeartbeat
	causeDisconnect
)

type entry struct {
	id        string
	lastSeen  time.Time
	conns     int
	disc      bool      // a stream closed and none is open
	discSince time.Time // valid when disc
	lost      bool
	reason    string
	cause     cause // which rule sets the deadline, when queued
	deadline.Slot
}

// Table is the node table. The zero value is not usable; call [NewTable].
// A Table is not safe for concurrent use; its driver serialises calls.
type Table struct {
	cfg   Config
	nodes map[string]*entry
	dl    deadline.Queue[*entry] // live nodes that can expire, by deadline
}

// NewTable returns an empty table. Negative durations in cfg are treated as
// zero; call [Config.Validate] first to reject them instead.
func NewTable(cfg Config) *Table {
	cfg.HeartbeatTimeout = max(cfg.HeartbeatTimeout, 0)
	cfg.DisconnectGrace = max(cfg.DisconnectGrace, 0)
	return &Table{cfg: cfg, nodes: make(map[string]*entry)}
}

// Config returns the table's configuration (negative durations already zeroed).
func (t *Table) Config() Config { return t.cfg }

func (t *Table) entry(id string) *entry {
	e := t.nodes[id]
	if e == nil {
		e = &entry{id: id}
		t.nodes[id] = e
	}
	return e
}

// seen records a sign of life and revives a lost node. Reviving forgets the
// disconnect that may have caused the loss: that episode has been reported,
// and the node is judged afresh from here on.
func (e *entry) seen(now time.Time) {
	if now.After(e.lastSeen) {
		e.lastSeen = now
	}
	if e.lost {
		e.lost, e.reason = false, ""
		e.disc, e.discSince = false, time.Time{}
	}
}

// Seen registers id, or records a heartbeat from it, at now. A lost node
// becomes live again. O(log n).
func (t *Table) Seen(id string, now time.Time) {
	e := t.entry(id)
	e.seen(now)
	t.update(e)
}

// Connected records that id opened a push stream at now. It registers the node
// if needed and counts as a heartbeat (so it also revives a lost node). O(log n).
func (t *Table) Connected(id string, now time.Time) {
	e := t.entry(id)
	e.seen(now)
	e.conns++
	e.disc, e.discSince = false, time.Time{}
	t.update(e)
}

// Disconnected records that one of id's push streams closed at now. When it
// was the last one, the DisconnectGrace clock starts. Unknown nodes and
// closes without a matching [Table.Connected] are ignored. O(log n).
func (t *Table) Disconnected(id string, now time.Time) {
	e := t.nodes[id]
	if e == nil || e.conns == 0 {
		return
	}
	e.conns--
	if e.conns == 0 {
		e.disc, e.discSince = true, now
	}
	t.update(e)
}

// Lose marks id lost for reason, as found by someone else (the platform
// saw its agent exit): it is not reported by Tick. A heartbeat brings it
// back, as after Tick. Unknown and lost ids are ignored. O(log n).
func (t *Table) Lose(id, reason string) {
	e := t.nodes[id]
	if e == nil || e.lost {
		return
	}
	e.lost, e.reason = true, reason
	t.update(e)
}

// Forget removes id from the table (the node left the job for good). Unknown
// ids are ignored. O(log n).
func (t *Table) Forget(id string) {
	e := t.nodes[id]
	if e == nil {
		return
	}
	t.dl.Remove(e)
	delete(t.nodes, id)
}

// update recomputes e's deadline and its place in the heap.
func (t *Table) update(e *entry) {
	var d time.Time
	c := causeNone
	if !e.lost {
		if t.cfg.HeartbeatTimeout > 0 {
			d, c = e.lastSeen.Add(t.cfg.HeartbeatTimeout), causeHeartbeat
		}
		if e.disc {
			if dd := e.discSince.Add(t.cfg.DisconnectGrace); c == causeNone || dd.Before(d) {
				d, c = dd, causeDisconnect
			}
		}
	}
	if c == causeNone {
		t.dl.Remove(e)
		return
	}
	e.cause = c
	t.dl.Set(e, d)
}

// Tick marks every node whose deadline is at or before now as lost and returns
// them, sorted by ID. Each loss is returned once. It costs O(1) when nothing
// expires and O(k log n) for k losses.
func (t *Table) Tick(now time.Time) []Lost {
	var out []Lost
	for e, ok := t.dl.PopDue(now); ok; e, ok = t.dl.PopDue(now) {
		e.lost = true
		since := e.lastSeen
		switch e.cause {
		case causeDisconnect:
			e.reason = "disconnected for " + t.cfg.DisconnectGrace.String()
			since = e.discSince
		default:
			e.reason = "no heartbeat for " + t.cfg.HeartbeatTimeout.String()
		}
		out = append(out, Lost{ID: e.id, Reason: e.reason, Since: since})
	}
	slices.SortFunc(out, func(a, b Lost) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// NextDeadline returns the earliest time at which [Table.Tick] would find a
// node lost, and false when no live node can expire.
func (t *Table) NextDeadline() (time.Time, bool) {
	return t.dl.Next()
}

// Get returns what the table knows about id.
func (t *Table) Get(id string) (Info, bool) {
	e := t.nodes[id]
	if e == nil {
		return Info{}, false
	}
	return Info{
		ID:                e.id,
		LastSeen:          e.lastSeen,
		Connected:         e.conns,
		DisconnectedSince: e.discSince,
		Lost:              e.lost,
		LostReason:        e.reason,
	}, true
}

// Len returns the number of nodes in the table, lost ones included.
func (t *Table) Len() int { return len(t.nodes) }
