package jobstate

import (
	"errors"
	"testing"
	"time"

	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/liveness"
	"github.com/roverml/rover/internal/rendezvous"
)

var t0 = time.Unix(1_700_000_000, 0)

// sameString compares locations as strings: the rule is DeclareStorage's,
// tested with the real comparison in declare_test.go.
func sameString(a, b string) bool { return a == b }

func twoNodeConfig() *jobconfig.Config {
	return &jobconfig.Config{
		Rendezvous: rendezvous.Config{MinNodes: 2, MaxNodes: 2, MaxRestarts: 3},
		Nodes:      liveness.Config{HeartbeatTimeout: time.Minute, DisconnectGrace: 5 * time.Second},
	}
}

func join(t *testing.T, m *Membership, id string, now time.Time) *WorldLoss {
	t.Helper()
	loss, err := m.Join(rendezvous.JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 2, Addr: id + ".host"}, now)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	return loss
}

// TestMembershipBeforeConfigure: a job without its configuration refuses
// node events and has no rendezvous to show.
func TestMembershipBeforeConfigure(t *testing.T) {
	m := NewMembership(sameString)
	if m.Configured() || m.Config() != nil || m.Rendezvous() != nil {
		t.Fatalf("a new membership is configured")
	}
	if err := m.CheckNode("a"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("CheckNode: %v, want ErrNotConfigured", err)
	}
	if _, _, err := m.CheckDeclare(StorageDeclaration{Node: "a", URL: "/c"}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("CheckDeclare: %v, want ErrNotConfigured", err)
	}
	if _, _, err := m.CheckpointWorld("a", 1, 0); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("CheckpointWorld: %v, want ErrNotConfigured", err)
	}
	if err := m.Seen("a", t0); !errors.Is(err, rendezvous.ErrUnknownNode) {
		t.Errorf("Seen: %v, want ErrUnknownNode", err)
	}
	m.Expect(4, t0) // nothing to expect yet
	if got := m.Expired(t0.Add(time.Hour)); got != nil {
		t.Errorf("Expired: %v", got)
	}
}

// TestMembershipRounds: the first configure sets the job, a later one keeps
// it; two joins form a world; a member's rejoin ends it and is the world's
// loss; an unplanned loss of a member of the running world is too, a
// planned one is not.
func TestMembershipRounds(t *testing.T) {
	m := NewMembership(sameString)
	cfg := twoNodeConfig()
	if first, err := m.Configure(cfg, 0, t0); err != nil || !first {
		t.Fatalf("Configure: first %v, %v", first, err)
	}
	other := twoNodeConfig()
	other.Rendezvous.MaxRestarts = 9
	if first, err := m.Configure(other, 0, t0); err != nil || first {
		t.Fatalf("second Configure: first %v, %v", first, err)
	}
	if m.Config() != cfg {
		t.Errorf("a second configure replaced the configuration")
	}
	if err := m.CheckNode("a"); !errors.Is(err, rendezvous.ErrUnknownNode) {
		t.Errorf("CheckNode before join: %v", err)
	}
	if join(t, m, "a", t0) != nil || join(t, m, "b", t0) != nil {
		t.Fatalf("a first join ended a world")
	}
	s := m.Status()
	if s.Open || s.WorldRound != s.Round || s.WorldSize != 4 || s.Job != rendezvous.Running {
		t.Fatalf("after two joins: %+v, want a closed round of world size 4", s)
	}
	if addr, ok := m.Addr("a"); !ok || addr != "a.host" {
		t.Errorf("Addr(a) = %q, %v", addr, ok)
	}
	if err := m.CheckNode("a"); err != nil {
		t.Errorf("CheckNode(a): %v", err)
	}
	world := s.Round
	loss := join(t, m, "a", t0.Add(time.Second)) // its agent restarted
	if loss == nil || loss.Round != world || loss.Member.NodeID != "a" {
		t.Fatalf("rejoin of a member: loss %+v, want a's in round %d", loss, world)
	}
	if m.Status().Round <= world {
		t.Errorf("the rejoin did not end round %d: %+v", world, m.Status())
	}
	join(t, m, "b", t0.Add(time.Second))
	if loss := m.Lose("b", "gone", time.Time{}, true, t0.Add(2*time.Second)); loss != nil {
		t.Errorf("a planned loss: %+v, want none", loss)
	}
	if info, ok := m.Liveness("b"); !ok || !info.Lost || info.LostReason != "gone" {
		t.Errorf("Liveness(b) = %+v, %v", info, ok)
	}
	join(t, m, "a", t0.Add(3*time.Second)) // the new round's world
	join(t, m, "b", t0.Add(3*time.Second))
	world = m.Status().Round
	if s := m.Status(); s.Open || s.WorldRound != world {
		t.Fatalf("after the rejoins: %+v, want a closed round", s)
	}
	if loss := m.Lose("a", "silent", t0.Add(3*time.Second), false, t0.Add(4*time.Second)); loss == nil || loss.Round != world {
		t.Errorf("an unplanned loss of a member: %+v, want one in round %d", loss, world)
	}
}

// TestMembershipLiveness: heartbeats and streams keep known nodes alive;
// silence expires them; a restored job gives them a fresh timeout.
func TestMembershipLiveness(t *testing.T) {
	m := NewMembership(sameString)
	if _, err := m.Configure(twoNodeConfig(), 0, t0); err != nil {
		t.Fatal(err)
	}
	join(t, m, "a", t0)
	if err := m.Seen("z", t0); !errors.Is(err, rendezvous.ErrUnknownNode) {
		t.Errorf("Seen(z): %v", err)
	}
	if err := m.Connected("a", true, t0); err != nil {
		t.Fatal(err)
	}
	if err := m.Connected("a", false, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	lost := m.Expired(t0.Add(10 * time.Second))
	if len(lost) != 1 || lost[0].ID != "a" {
		t.Fatalf("Expired after the grace: %+v, want a", lost)
	}
	state, err := m.MarshalRendezvous()
	if err != nil {
		t.Fatal(err)
	}
	r := NewMembership(sameString)
	if err := r.Restore(m.Config(), state, map[string]string{"a": "a.host"}); err != nil {
		t.Fatal(err)
	}
	if r.Status() != m.Status() {
		t.Errorf("restored status %+v, want %+v", r.Status(), m.Status())
	}
	later := t0.Add(time.Hour)
	r.Refresh(later)
	if got := r.Expired(later.Add(30 * time.Second)); len(got) != 0 {
		t.Errorf("Expired after a refresh: %+v, want none", got)
	}
	if err := NewMembership(sameString).Restore(m.Config(), nil, nil); err == nil {
		t.Errorf("restored a configured job without its rendezvous")
	}
}

// TestMembershipDeclareAndCheckpointWorld: a declaration comes from a joined
// node and changes the configuration; a checkpoint report must name a rank
// of its node in the last world.
func TestMembershipDeclareAndCheckpointWorld(t *testing.T) {
	m := NewMembership(sameString)
	if _, err := m.Configure(twoNodeConfig(), 0, t0); err != nil {
		t.Fatal(err)
	}
	if err := m.Declare(StorageDeclaration{Node: "a", URL: "/c"}); !errors.Is(err, rendezvous.ErrUnknownNode) {
		t.Errorf("a declaration from a stranger: %v", err)
	}
	join(t, m, "a", t0)
	join(t, m, "b", t0)
	before := m.Config()
	if err := m.Declare(StorageDeclaration{Node: "a", URL: "/c"}); err != nil {
		t.Fatal(err)
	}
	if got := m.Config().Checkpoint; got.URL != "/c" || !got.Declared || before.Checkpoint.URL != "" {
		t.Errorf("storage after the declaration %+v (before: %+v)", got, before.Checkpoint)
	}
	if err := m.Declare(StorageDeclaration{Node: "b", URL: "/other"}); !errors.Is(err, ErrStorageConflict) {
		t.Errorf("another location: %v, want ErrStorageConflict", err)
	}
	round := m.Status().WorldRound
	mb, _, _, _ := m.Rendezvous().WorldMember("b")
	storage, size, err := m.CheckpointWorld("b", round, mb.RankOffset+1)
	if err != nil || storage.URL != "/c" || size != 4 {
		t.Errorf("CheckpointWorld(b) = %+v, %d, %v", storage, size, err)
	}
	if _, _, err := m.CheckpointWorld("b", round-1, mb.RankOffset); !errors.Is(err, ErrStaleRound) {
		t.Errorf("an earlier round: %v, want ErrStaleRound", err)
	}
	if _, _, err := m.CheckpointWorld("b", round, mb.RankOffset+2); !errors.Is(err, ErrInvalid) {
		t.Errorf("another node's rank: %v, want ErrInvalid", err)
	}
}
