package nodemanager

import (
	"fmt"
	"testing"
	"time"

	"github.com/roverml/rover/internal/platform"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one input at t0+at; want lists the commands it must yield as
// "Create id", "Delete id" or "Fail".
type step struct {
	at   time.Duration
	do   func(m *Manager, now time.Time) []Command
	want []string
	ev   *platform.Event // the platform event fed, if any
}

func (s step) then(want ...string) step   { s.want = want; return s }
func (s step) after(d time.Duration) step { s.at = d; return s }

func start() step {
	return step{do: func(m *Manager, now time.Time) []Command { return m.Start(now) }}
}

func event(ev platform.Event) step {
	return step{ev: &ev, do: func(m *Manager, now time.Time) []Command { ev.Time = now; return m.Observe(ev, now) }}
}

func running(id, host string) step {
	return event(platform.Event{NodeID: id, Kind: platform.Running, Host: host})
}
func pending(id string) step { return event(platform.Event{NodeID: id, Kind: platform.Pending}) }
func exit(id string, code int) step {
	return event(platform.Event{NodeID: id, Kind: platform.Exited, ExitCode: code})
}
func oom(id string) step {
	return event(platform.Event{NodeID: id, Kind: platform.Exited, ExitCode: 137, Signal: 9, Reason: "OOMKilled"})
}
func evicted(id string) step {
	return event(platform.Event{NodeID: id, Kind: platform.Deleted, Reason: "Evicted"})
}
func lost(id string) step {
	return step{do: func(m *Manager, now time.Time) []Command { return m.Lost(id, "no heartbeat for 600s", now) }}
}
func act(a Action) step {
	return step{do: func(m *Manager, now time.Time) []Command { return m.Act(a, now) }}
}

// scale asks for n nodes of group; a refused request yields no commands.
func scale(group string, n int) step {
	return step{do: func(m *Manager, now time.Time) []Command {
		cmds, _ := m.Scale(group, n, "test", now)
		return cmds
	}}
}

func tick() step {
	return step{do: func(m *Manager, now time.Time) []Command { return m.Tick(now) }}
}

func summary(cmds []Command) []string {
	out := make([]string, 0, len(cmds))
	for _, c := range cmds {
		switch c.Kind {
		case FailJob:
			out = append(out, "Fail")
		case SucceedJob:
			out = append(out, "Succeed")
		default:
			out = append(out, fmt.Sprintf("%s %s", c.Kind, c.NodeID))
		}
	}
	return out
}

func spec(groups ...GroupSpec) Spec { return Spec{Job: "train", Groups: groups} }

func workers(min, max int) GroupSpec {
	return GroupSpec{MinNodes: min, MaxNodes: max, Argv: []string{"rover", "run", "train.py"}}
}

// run applies steps to m, checking each step's commands when want is set,
// and returns every command.
func run(t *testing.T, m *Manager, steps []step) []Command {
	t.Helper()
	var all []Command
	for i, s := range steps {
		cmds := s.do(m, t0.Add(s.at))
		if s.want != nil && fmt.Sprint(summary(cmds)) != fmt.Sprint(s.want) {
			t.Fatalf("step %d: commands %q, want %q", i, summary(cmds), s.want)
		}
		for _, c := range cmds {
			if c.Reason == "" {
				t.Fatalf("step %d: command %v has no reason", i, c)
			}
		}
		all = append(all, cmds...)
	}
	return all
}

func mustNew(t *testing.T, sp Spec) *Manager {
	t.Helper()
	m, err := New(sp)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
