package diagnosis

import (
	"encoding/json"
	"fmt"
	"slices"
)

// MaxHistory is how many failed rounds a History keeps: the latest.
const MaxHistory = 64

// Entry is the diagnosis of one failed round.
type Entry struct {
	Round  int64  `json:"round"`
	Cause  Cause  `json:"cause"`
	Action Action `json:"action"`
	Rule   string `json:"rule"`
	// Signature is set for Repeatable rules only.
	Signature Signature `json:"signature,omitzero"`
}

// History is the diagnoses of a job's failed rounds, oldest first, one per
// round. It is a value: Record returns a new History and leaves the old
// one as it was. The zero History is empty and ready to use. It encodes to
// JSON for the master's journal.
//
// The fail-fast rule reads it: a failure whose signature equals that of
// the last failed round before its own fails the job. Only consecutive
// failed rounds count (rounds that ended without a failure, such as a
// membership change, do not break the run); any other failure in between,
// with another signature or none, resets it.
type History struct {
	entries []Entry // sorted by Round, unique
}

// Record returns h with d recorded as the diagnosis of round. A round
// already recorded is replaced (a later report of the same round, decided
// again). Only the latest MaxHistory rounds are kept.
func (h History) Record(round int64, d Decision) History {
	e := Entry{Round: round, Cause: d.Cause, Action: d.Action, Rule: d.Rule, Signature: d.Signature}
	entries := slices.Clone(h.entries)
	i, found := slices.BinarySearchFunc(entries, round, func(e Entry, r int64) int {
		switch {
		case e.Round < r:
			return -1
		case e.Round > r:
			return 1
		}
		return 0
	})
	if found {
		entries[i] = e
	} else {
		entries = slices.Insert(entries, i, e)
	}
	if n := len(entries); n > MaxHistory {
		entries = slices.Delete(entries, 0, n-MaxHistory)
	}
	return History{entries: entries}
}

// Entries returns a copy of the recorded diagnoses, oldest first.
func (h History) Entries() []Entry { return slices.Clone(h.entries) }

// Len returns the number of recorded rounds.
func (h History) Len() int { return len(h.entries) }

// before returns the latest entry of a round before round.
func (h History) before(round int64) (Entry, bool) {
	for i := len(h.entries) - 1; i >= 0; i-- {
		if h.entries[i].Round < round {
			return h.entries[i], true
		}
	}
	return Entry{}, false
}

type historyJSON struct {
	Entries []Entry `json:"entries"`
}

// MarshalJSON encodes h as {"entries": [...]}.
func (h History) MarshalJSON() ([]byte, error) {
	entries := h.entries
	if entries == nil {
		entries = []Entry{}
	}
	return json.Marshal(historyJSON{Entries: entries})
}

// UnmarshalJSON decodes what MarshalJSON wrote. Rounds must be strictly
// increasing; of more than MaxHistory entries the latest are kept.
func (h *History) UnmarshalJSON(b []byte) error {
	var v historyJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode diagnosis history: %w", err)
	}
	for i := 1; i < len(v.Entries); i++ {
		if v.Entries[i].Round <= v.Entries[i-1].Round {
			return fmt.Errorf("decode diagnosis history: round %d follows round %d", v.Entries[i].Round, v.Entries[i-1].Round)
		}
	}
	if n := len(v.Entries); n > MaxHistory {
		v.Entries = v.Entries[n-MaxHistory:]
	}
	h.entries = v.Entries
	if len(h.entries) == 0 {
		h.entries = nil
	}
	return nil
}
