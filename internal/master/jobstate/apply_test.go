package jobstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/roverml/rover/internal/rendezvous"
)

// jsonFailures encodes failures as their own JSON: the master's codec is
// the protocol's, which jobstate does not import.
type jsonFailures struct{}

func (jsonFailures) Encode(f Failure) (json.RawMessage, error) { return json.Marshal(f) }
func (jsonFailures) Decode(b json.RawMessage) (f Failure, err error) {
	err = json.Unmarshal(b, &f)
	return f, err
}

func joinEvent(id string, now time.Time) *Event {
	return &Event{Type: EventJoin, Time: now, Join: &rendezvous.JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 2, Addr: id + ".host"}}
}

// TestApplyEffects: Apply says what changed: the views when the rounds
// move, a key, the fleet's notices (only live, and only for a master that
// owns its nodes); an event of an unknown type stops a replay.
func TestApplyEffects(t *testing.T) {
	s := NewState(sameString, jsonFailures{})
	s.Owned, s.Live = true, true
	if _, err := s.Apply(joinEvent("a", t0)); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("a join before the configuration: %v, want ErrNotConfigured", err)
	}
	if fx, err := s.Apply(&Event{Type: EventConfigure, Time: t0, Config: twoNodeConfig()}); err != nil || fx.Views != 1 {
		t.Fatalf("configure: %+v, %v; want one views change", fx, err)
	}
	// The first join leaves the round's status as it was; the second
	// closes the round.
	for i, id := range []string{"a", "b"} {
		if fx, err := s.Apply(joinEvent(id, t0)); err != nil || fx.Views != i {
			t.Fatalf("join %s: %+v, %v; want %d views changes", id, fx, err, i)
		}
	}
	if fx, err := s.Apply(&Event{Type: EventSetKey, Time: t0, Key: "k", Value: []byte("v")}); err != nil || !fx.Keys || fx.Views != 0 {
		t.Errorf("set key: %+v, %v; want a key change only", fx, err)
	}
	fx, err := s.Apply(&Event{Type: EventNodeLost, Time: t0.Add(time.Second), Node: "b", Reason: "silent"})
	if err != nil || !fx.Notices || fx.Views != 1 {
		t.Errorf("node lost: %+v, %v; want a notice and a views change", fx, err)
	}
	if n := s.Fleet.TakeNotices(); len(n) != 1 || !n[0].Lost || n[0].Node != "b" {
		t.Errorf("notices %+v, want b's loss", n)
	}
	s.Live = false // replaying
	if fx, _ := s.Apply(&Event{Type: EventNodeLost, Time: t0.Add(2 * time.Second), Node: "a", Reason: "silent"}); fx.Notices {
		t.Errorf("a replayed loss queued a notice")
	}
	if _, err := s.Apply(&Event{Type: "from_the_future", Time: t0}); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("an unknown event: %v, want ErrUnknownEvent", err)
	}
}

// TestApplyReplay: the journal's records, decoded and applied again to a
// new State, rebuild the same state; its snapshot restores to the same.
func TestApplyReplay(t *testing.T) {
	events := []*Event{
		{Type: EventConfigure, Time: t0, Config: twoNodeConfig()},
		joinEvent("a", t0), joinEvent("b", t0),
		{Type: EventWorkerFailed, Time: t0.Add(time.Second), Node: "a", Round: 1,
			Failures: []json.RawMessage{json.RawMessage(`{"NodeID":"a","Rank":1,"ExitCode":1,"Round":1}`)}},
		joinEvent("a", t0.Add(2*time.Second)),
		{Type: EventNodeLost, Time: t0.Add(3 * time.Second), Node: "b", Reason: "gone"},
	}
	live, replay := NewState(sameString, jsonFailures{}), NewState(sameString, jsonFailures{})
	for i, e := range events {
		_, want := live.Apply(e)
		rec, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := UnmarshalEvent(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := replay.Apply(again); (got == nil) != (want == nil) {
			t.Errorf("event %d: replayed error %v, live %v", i, got, want)
		}
	}
	a, err := live.MarshalSnapshot("run")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := replay.MarshalSnapshot("run")
	if !bytes.Equal(a, b) || live.Members.Status() != replay.Members.Status() {
		t.Errorf("the replay's state differs:\n%s\n%s", a, b)
	}
	restored := NewState(sameString, jsonFailures{})
	if err := restored.RestoreSnapshot(a, "run"); err != nil {
		t.Fatal(err)
	}
	if fs, want := restored.Failures.Records(), live.Failures.Records(); len(fs) != 1 || fs[0] != want[0] {
		t.Errorf("restored failures %+v, want %+v", fs, want)
	}
	if again, _ := restored.MarshalSnapshot("run"); !bytes.Equal(a, again) {
		t.Errorf("a restored snapshot encodes differently:\n%s\n%s", a, again)
	}
	if err := NewState(sameString, jsonFailures{}).RestoreSnapshot(a, "other"); err == nil {
		t.Errorf("restored another job's snapshot")
	}
}
