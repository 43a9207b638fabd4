package soak

import (
	"strings"
	"testing"
	"time"
)

func TestParseKinds(t *testing.T) {
	got, err := ParseKinds("worker, node,master,hang,slow")
	if err != nil || len(got) != 5 || got[1] != Node || got[4] != Slow {
		t.Errorf("ParseKinds = %v, %v; want the five kinds in order", got, err)
	}
	if _, err := ParseKinds("worker,disk"); err == nil || !strings.Contains(err.Error(), `"disk"`) {
		t.Errorf("ParseKinds(worker,disk) = %v, want an error naming disk", err)
	}
}

func TestValidateNamesEveryBadFlag(t *testing.T) {
	c := Defaults()
	c.RoverBin, c.Python, c.Script, c.Dir = "rover", "python3", "train.py", "/tmp/x"
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	c.FaultRate, c.SaveEvery, c.StepTime = -1, 0, time.Millisecond
	err := c.Validate()
	for _, flag := range []string{"--fault-rate", "--save-every", "--step-time"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate() = %v, want it to name %s", err, flag)
		}
	}
}

// lives builds the lives of a scripted log.
func lives(t *testing.T, ls ...scriptLife) map[int][]Life {
	t.Helper()
	events, _, err := ParseStepLog(strings.NewReader(scriptLog(ls...)))
	if err != nil {
		t.Fatal(err)
	}
	return Lives(events)
}

func TestTrainingWaitsForTheRestart(t *testing.T) {
	before := lives(t, scriptLife{0, 1, 0, 10, 0}, scriptLife{1, 2, 0, 10, 0}) // steps at 1..10 s
	kill := Fault{Injected: Worker, at: at(10.5), end: at(10.5)}
	if !training(before, 2, nil, 1000) {
		t.Error("a job whose ranks all completed steps is not training")
	}
	if training(before, 2, []Fault{kill}, 1000) {
		t.Error("training before the workers restarted after a kill")
	}
	after := lives(t, scriptLife{0, 1, 0, 10, 0}, scriptLife{1, 2, 0, 10, 0}, scriptLife{0, 3, 10, 11, 12}, scriptLife{1, 4, 10, 11, 12})
	if !training(after, 2, []Fault{kill}, 1000) {
		t.Error("not training after every rank restarted and completed a step")
	}
	master := Fault{Injected: Master, at: at(10.5), end: at(10.8)}
	if training(before, 2, []Fault{master}, 1000) || !training(after, 2, []Fault{master}, 1000) {
		t.Error("after a master restart, training is a step after it on every rank, without a restart")
	}
	if training(after, 2, nil, 30) {
		t.Error("training within the job's last steps: no fault may come there")
	}
	if training(lives(t, scriptLife{0, 1, 0, 10, 0}), 2, nil, 1000) {
		t.Error("training with one of two ranks started")
	}
}

func TestObserve(t *testing.T) {
	ls := lives(t, scriptLife{0, 1, 0, 10, 0}, scriptLife{1, 2, 0, 10, 0}, scriptLife{0, 3, 10, 20, 12}, scriptLife{1, 4, 10, 20, 12})
	faults := []Fault{
		{Injected: Worker, at: at(10.5)},                              // both ranks restarted at 12 s
		{Injected: Worker, at: at(15)},                                // nothing restarted after it
		{Injected: Master, at: at(13), end: at(13.5), Observed: true}, // served again, and steps came after it
		{Injected: Master, at: at(40), end: at(41), Observed: true},   // no step after it
		{Injected: Slow, Rank: 0, at: at(5), end: at(9)},              // steps a second apart: slow at 100 ms
		{Injected: Slow, Rank: 0, at: at(30), end: at(31)},            // no step in its window
	}
	observe(faults, ls, 100*time.Millisecond)
	for i, want := range []bool{true, false, true, false, true, false} {
		if faults[i].Observed != want {
			t.Errorf("fault %d (%s at %v): observed %v, want %v", i, faults[i].Injected, faults[i].at.Sub(t0), faults[i].Observed, want)
		}
	}
}
