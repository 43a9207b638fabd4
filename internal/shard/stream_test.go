package shard

import (
	"errors"
	"math"
	"testing"
	"time"
)

func stream(name string, size, shard int64) Dataset {
	return Dataset{Name: name, Size: size, BatchSize: 1, ShardSize: shard, Streaming: true, LeaseTimeout: time.Minute}
}

func (e *env) append(ds string, n, wantEnd int64, want error) {
	e.t.Helper()
	end, err := e.m.Append(ds, n, e.now)
	if !errors.Is(err, want) || (err == nil) != (want == nil) || end != wantEnd {
		e.t.Fatalf("Append(%s, %d) = %d, %v; want %d, %v", ds, n, end, err, wantEnd, want)
	}
	e.check()
}

func TestStreamAppendSeal(t *testing.T) {
	e := newEnv(t, stream("s", 0, 4))
	e.wantWait("s", "w")
	e.append("s", 3, 3, nil)
	e.wantWait("s", "w") // only a partial shard
	if s := e.status("s"); s.Buffered != 3 || s.Todo != 0 || s.Appended != 3 {
		t.Fatalf("status %+v", s)
	}
	e.append("s", 6, 9, nil)
	a := e.lease1("s", "w1", 0, 4)
	b := e.lease1("s", "w2", 4, 8)
	e.wantWait("s", "w3")
	e.append("s", -1, 9, ErrInvalidRequest)
	e.append("s", 0, 9, nil)
	e.m.WorkerLost("w2", e.now)
	e.check()
	b2 := e.lease1("s", "w3", 4, 8) // requeued to the front
	if err := e.m.Seal("s", e.now); err != nil {
		t.Fatal(err)
	}
	e.append("s", 1, 9, ErrSealed)
	c := e.lease1("s", "w1", 8, 9) // sealed: the partial tail is handed out
	e.complete("s", b, "w2", ErrUnknownLease)
	for _, l := range []Lease{a, c} {
		e.complete("s", l, "w1", nil)
	}
	e.wantWait("s", "w1") // w3 still holds a shard
	e.complete("s", b2, "w3", nil)
	if s := e.status("s"); !s.Finished || !s.Sealed || s.DoneSamples != 9 || s.Epoch != 0 {
		t.Fatalf("status %+v", s)
	}
	e.wantEnd("s", "w1")
	if err := e.m.Seal("s", e.now); err != nil {
		t.Fatalf("sealing again: %v", err)
	}
}

func TestStreamBounded(t *testing.T) {
	e := newEnv(t, stream("s", 10, 4), stream("e", 0, 4))
	e.append("s", 11, 0, ErrSealed)
	e.append("s", 6, 6, nil)
	e.append("s", 4, 10, nil) // reaches Size: sealed
	if s := e.status("s"); !s.Sealed || s.Todo != 3 {
		t.Fatalf("status %+v", s)
	}
	e.append("s", 1, 10, ErrSealed)
	// Sealing an empty stream finishes it.
	if err := e.m.Seal("e", e.now); err != nil {
		t.Fatal(err)
	}
	e.wantEnd("e", "w")
	// The largest stream.
	e2 := newEnv(t, stream("big", 0, math.MaxInt64))
	e2.append("big", math.MaxInt64, math.MaxInt64, nil)
	e2.append("big", 1, math.MaxInt64, ErrSealed)
	e2.lease1("big", "w", 0, math.MaxInt64)
}
