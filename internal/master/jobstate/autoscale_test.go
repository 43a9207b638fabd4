package jobstate

import (
	"testing"
	"time"

	"github.com/roverml/rover/internal/autoscale"
)

// TestAutoScaleJournalDoesNotUndoALiveRound: the driver marshals the
// policy, a round forms before that state's event is committed, and the
// event is then applied. A live state keeps what its policy learnt (the
// round); a replay takes the journaled state as it is.
func TestAutoScaleJournalDoesNotUndoALiveRound(t *testing.T) {
	cfg := twoNodeConfig()
	cfg.Rendezvous.MinNodes = 1
	for _, live := range []bool{true, false} {
		s := NewState(sameString, jsonFailures{})
		s.Live = live
		if err := s.AutoScale.Enable(autoscale.Config{}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(&Event{Type: EventConfigure, Time: t0, Config: cfg}); err != nil {
			t.Fatal(err)
		}
		stale, err := s.AutoScale.Marshal() // before any round
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b"} {
			if _, err := s.Apply(joinEvent(id, t0)); err != nil {
				t.Fatalf("join %s: %v", id, err)
			}
		}
		if st := s.Members.Status(); st.Open {
			t.Fatalf("live=%v: round %d still open after both joins", live, st.Round)
		}
		if _, err := s.Apply(&Event{Type: EventAutoScale, Time: t0.Add(time.Second), AutoScale: stale}); err != nil {
			t.Fatalf("live=%v: apply the journaled state: %v", live, err)
		}
		d := s.AutoScale.Policy().Decide(t0.Add(2 * time.Second))
		if noRound := d.Reason == autoscale.ReasonNoRound; noRound == live {
			t.Errorf("live=%v: after the journaled state the policy decides %q (%s); want a round known only when live",
				live, d.Reason, d.Message)
		}
	}
}
