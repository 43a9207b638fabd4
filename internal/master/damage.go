package master

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// stateError is New's error for a state dir it cannot open. A damaged state
// file is refused, never started from silently: the error names the file,
// says what is wrong and exactly what starting would drop, and how to go on.
func stateError(err error) error {
	var de *store.DamageError
	if !errors.As(err, &de) {
		return fmt.Errorf("open the master's state: %w", err)
	}
	return fmt.Errorf("open the master's state: %w; that is %s. Restore the state dir from a backup to keep the job, "+
		"or start the master with --discard-state to drop that and go on (a whole file is moved aside, not deleted)", err, describeLoss(de))
}

// describeLoss says what a damaged state file costs: the whole job, or the
// records from the damage on, with what their intact ones recorded (the
// kinds of transition, the nodes and rounds they name).
func describeLoss(de *store.DamageError) string {
	if de.Whole {
		s := "the whole job state: its rounds, nodes, restarts, keys, datasets and checkpoint commits"
		if de.MovedTo != "" {
			s += " (the file is now " + de.MovedTo + ")"
		}
		return s
	}
	if de.LastTxLost {
		return "the last write to the file"
	}
	kinds := map[jobstate.EventType]int{}
	nodes, rounds := map[string]bool{}, map[int]bool{}
	unreadable := de.DroppedRecords - len(de.Dropped)
	for _, p := range de.Dropped {
		e, err := jobstate.UnmarshalEvent(p)
		if err != nil {
			unreadable++
			continue
		}
		kinds[e.Type]++
		if e.Node != "" {
			nodes[e.Node] = true
		}
		if e.Join != nil && e.Join.NodeID != "" {
			nodes[e.Join.NodeID] = true
		}
		if e.Round > 0 {
			rounds[e.Round] = true
		}
	}
	var what []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		what = append(what, fmt.Sprintf("%d %s", kinds[k], k))
	}
	if unreadable > 0 {
		what = append(what, fmt.Sprintf("%d unreadable", unreadable))
	}
	s := fmt.Sprintf("%d journal records from record %d on (%s)", de.DroppedRecords, de.FirstBad, strings.Join(what, ", "))
	if len(nodes) > 0 {
		s += ", naming nodes " + strings.Join(slices.Sorted(maps.Keys(nodes)), ", ")
	}
	if len(rounds) > 0 {
		var rs []string
		for _, r := range slices.Sorted(maps.Keys(rounds)) {
			rs = append(rs, fmt.Sprint(r))
		}
		s += ", and rounds " + strings.Join(rs, ", ")
	}
	return s + fmt.Sprintf("; the job would resume from the %d records before them", de.Kept)
}
