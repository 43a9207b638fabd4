package diagnosis

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/roverml/rover/internal/proc"
)

const gib64 = int64(1) << 30

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// valueError is rank 0 raising ValueError at line of /workspace/train.py,
// as the agent reports it from the error file.
func valueError(round int64, line, size int) *Report {
	tb := strings.ReplaceAll(valueErrorAt42, "line 42", "line "+itoa(line))
	tb = strings.ReplaceAll(tb, "size 3", "size "+itoa(size))
	return &Report{
		Host: "h0", Round: round, ExitCode: 1, TimeUnixNanos: t0.UnixNano(),
		Message: "ValueError: bad batch size " + itoa(size), Traceback: tb,
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestDecide(t *testing.T) {
	relaunch := Caps{Relaunch: true}
	grow := func(mem int64) Caps { return Caps{Relaunch: true, MoreMemory: true, Memory: mem} }
	tests := []struct {
		name        string
		f           Failure
		caps        Caps
		rule        string
		cause       Cause
		action      Action
		memory      int64
		markHostBad bool
		reason      string // a substring of Reason
	}{
		{"exit 137 without OOM evidence", Failure{ExitCode: 137}, relaunch, "killed", Killed, RestartInPlace, 0, false, "exited with status 137"},
		{"SIGKILL as the agent reports it", FromReport(Report{ExitCode: -1, Signal: 9}), relaunch, "killed", Killed, RestartInPlace, 0, false, "signal 9 (SIGKILL)"},
		{"SIGTERM as torchrun shows it", Failure{ExitCode: -15}, relaunch, "killed", Killed, RestartInPlace, 0, false, "SIGTERM"},
		{"OOM kill, 16 GiB grows by 8", Failure{ExitCode: -1, Signal: 9, OOMKilled: true}, grow(16 * gib64), "oom-killed", OutOfMemory, RelaunchWithMoreMemory, 24 * gib64, false, "24 GiB of memory instead of 16 GiB"},
		{"OOM kill, 4 GiB doubles", Failure{Signal: 9, OOMKilled: true}, grow(4 * gib64), "oom-killed", OutOfMemory, RelaunchWithMoreMemory, 8 * gib64, false, "8 GiB"},
		{"OOM kill, 60 GiB stops at 64", Failure{Signal: 9, OOMKilled: true}, grow(60 * gib64), "oom-killed", OutOfMemory, RelaunchWithMoreMemory, 64 * gib64, false, "64 GiB"},
		{"OOM kill at the cap", Failure{Signal: 9, OOMKilled: true}, grow(64 * gib64), "oom-killed", OutOfMemory, RestartInPlace, 0, false, "already has 64 GiB"},
		{"OOM kill, memory unknown", Failure{Signal: 9, OOMKilled: true}, grow(0), "oom-killed", OutOfMemory, RestartInPlace, 0, false, "memory is unknown"},
		{"OOM kill without resources", Failure{Signal: 9, OOMKilled: true}, Caps{Relaunch: true, Memory: 16 * gib64}, "oom-killed", OutOfMemory, RestartInPlace, 0, false, "no resources"},
		{"kernel OOM line in the log", FromReport(Report{Signal: 9, ExitCode: -1, LogTail: "Out of memory: Killed process 4242 (python)"}), grow(8 * gib64), "oom-killed", OutOfMemory, RelaunchWithMoreMemory, 16 * gib64, false, ""},
		{"platform OOMKilled", Failure{ExitCode: 137, PlatformReason: "OOMKilled"}, grow(32 * gib64), "oom-killed", OutOfMemory, RelaunchWithMoreMemory, 40 * gib64, false, "platform reason OOMKilled"},
		{"exit 247", Failure{ExitCode: 247}, grow(2 * gib64), "oom-exit", OutOfMemory, RelaunchWithMoreMemory, 4 * gib64, false, ""},
		{"host allocator", FromReport(Report{ExitCode: 1, Message: "RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"}), grow(8 * gib64), "host-alloc", OutOfMemory, RelaunchWithMoreMemory, 16 * gib64, false, ""},
		{"CUDA out of memory in the log tail", FromReport(Report{ExitCode: 1, LogTail: "[default0]:step 3\n[default0]:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)"}), grow(8 * gib64), "cuda-oom", OutOfMemory, RestartInPlace, 0, false, "restarting the workers in place"},
		{"program not found", FromReport(Report{ExitCode: 127, Message: "could not start the worker: start worker of local rank 0 (nope): start process \"nope\": exec: no such file"}), relaunch, "start-failure", StartFailure, FailFast, 0, false,
			"starting the workers again would fail the same way, so the job fails now"},
		{"environment refused", FromReport(Report{ExitCode: 126, Message: "could not start the worker: fork/exec /usr/bin/python3: invalid argument"}), relaunch, "start-failure", StartFailure, FailFast, 0, false, ""},
		{"peer restore failed, budget spent", FromReport(Report{ExitCode: -1, RestoreFailed: true, Message: "no peer gave the round's checkpoint: step 24: peer a:1: crc mismatch"}),
			Caps{Relaunch: true, NoRestartsLeft: true}, "restore-failure", RestoreFailure, Regroup, 0, false,
			"forming the world again without peer restore, not counted against --max-restarts"},
		{"restart budget spent", Failure{ExitCode: 1, ExceptionType: "ValueError"}, Caps{NoRestartsLeft: true, MaxRestarts: 0}, "user-error", UserError, RestartInPlace, 0, false,
			"the restart budget (--max-restarts=0) is spent, so the job fails instead of restarting the workers"},
		{"restart budget of 3 spent", Failure{ExitCode: 1}, Caps{NoRestartsLeft: true, MaxRestarts: 3}, "user-error", UserError, RestartInPlace, 0, false,
			"the restart budget (--max-restarts=3) is spent"},
		{"torch.cuda.OutOfMemoryError", FromReport(Report{ExitCode: 1, Message: "torch.cuda.OutOfMemoryError: CUDA out of memory."}), relaunch, "cuda-oom", OutOfMemory, RestartInPlace, 0, false, ""},
		{"exit 201", Failure{ExitCode: 201, Host: "gpu-7"}, relaunch, "hardware-exit", Hardware, RelaunchNode, 0, true, "host gpu-7"},
		{"exit 14 on the local platform", Failure{ExitCode: 14}, Caps{}, "hardware-exit", Hardware, RestartInPlace, 0, true, "cannot replace nodes"},
		{"Xid 79", FromReport(Report{ExitCode: 1, LogTail: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\nRuntimeError: CUDA error: unspecified launch failure"}), relaunch, "hardware-log", Hardware, RelaunchNode, 0, true, "marking the host bad"},
		{"uncorrectable ECC", FromReport(Report{ExitCode: 1, Message: "RuntimeError: CUDA error: uncorrectable ECC error encountered"}), relaunch, "hardware-log", Hardware, RelaunchNode, 0, true, ""},
		{"Xid 13 is the program's", FromReport(Report{ExitCode: 1, LogTail: "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\nRuntimeError: CUDA error: an illegal memory access was encountered"}), relaunch, "user-error", UserError, RestartInPlace, 0, false, ""},
		{"SIGSEGV", Failure{ExitCode: -1, Signal: int(syscall.SIGSEGV)}, relaunch, "crash", Crash, RestartInPlace, 0, false, "SIGSEGV"},
		{"exit 139", Failure{ExitCode: 139}, relaunch, "crash", Crash, RestartInPlace, 0, false, ""},
		{"Segmentation fault in the log", Failure{ExitCode: 1, LogTail: []string{"Fatal Python error: Segmentation fault"}}, relaunch, "crash", Crash, RestartInPlace, 0, false, ""},
		{"SIGBUS", Failure{Signal: int(syscall.SIGBUS)}, relaunch, "crash", Crash, RestartInPlace, 0, false, ""},
		{"NCCL unhandled system error", FromReport(Report{ExitCode: 1, Message: "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"}), relaunch, "nccl-system-error", Unknown, RestartInPlace, 0, false, ""},
		{"NCCL remote process exited alone", FromReport(Report{ExitCode: 1, Message: "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.19.3"}), relaunch, "peer-failure", PeerFailure, RestartInPlace, 0, false, ""},
		{"watchdog abort", Failure{ExitCode: -6, LogTail: []string{"[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."}}, relaunch, "peer-failure", PeerFailure, RestartInPlace, 0, false, ""},
		{"preempted", Failure{ExitCode: 143, PlatformReason: "Preempted"}, relaunch, "preempted", Preempted, RelaunchNode, 0, false, "relaunching the node."},
		{"evicted", Failure{ExitCode: 137, PlatformReason: "evicted"}, relaunch, "preempted", Preempted, RelaunchNode, 0, false, ""},
		{"ValueError", FromReport(*valueError(1, 42, 3)), relaunch, "user-error", UserError, RestartInPlace, 0, false, "raising ValueError at /workspace/train.py:42"},
		{"SIGABRT", Failure{ExitCode: 134}, relaunch, "user-error", UserError, RestartInPlace, 0, false, ""},
		{"unknown exit 3", Failure{ExitCode: 3}, relaunch, "unknown", Unknown, RestartInPlace, 0, false, "exited with status 3"},
		{"workers did not start", FromReport(Report{ExitCode: -1, Message: "start worker 0: fork/exec python: no such file"}), relaunch, "unknown", Unknown, RestartInPlace, 0, false, "exited with status -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(History{}, tt.f, tt.caps)
			got := []any{d.Rule, d.Cause, d.Action, d.Memory, d.MarkHostBad, d.FailFast}
			want := []any{tt.rule, tt.cause, tt.action, tt.memory, tt.markHostBad, tt.action == FailFast}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Decide: [rule cause action memory markHostBad failFast] (-want +got):\n%s\nreason: %s", diff, d.Reason)
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Reason %q lacks %q", d.Reason, tt.reason)
			}
		})
	}
}

func TestFailFast(t *testing.T) {
	cudaOOM := func(round int64) *Report {
		return &Report{Round: round, ExitCode: 1, Message: "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
			Traceback: "Traceback (most recent call last):\n  File \"/w/train.py\", line 60, in step\n    loss = model(x)\ntorch.cuda.OutOfMemoryError: CUDA out of memory."}
	}
	killed := func(round int64) *Report {
		return &Report{Round: round, ExitCode: -1, Signal: 9}
	}
	segv := func(round int64) *Report {
		return &Report{Round: round, ExitCode: -1, Signal: 11}
	}
	tests := []struct {
		name   string
		rounds []*Report // decided and recorded in order
		want   []bool    // FailFast per decision
	}{
		{"same ValueError at train.py:42 twice", []*Report{valueError(1, 42, 3), valueError(2, 42, 3)}, []bool{false, true}},
		{"numbers in the message do not matter", []*Report{valueError(1, 42, 3), valueError(2, 42, 5)}, []bool{false, true}},
		{"rounds without failures in between do not matter", []*Report{valueError(1, 42, 3), valueError(4, 42, 3)}, []bool{false, true}},
		{"another line in between resets", []*Report{valueError(1, 42, 3), valueError(2, 57, 3), valueError(3, 42, 3)}, []bool{false, false, false}},
		{"then the same line twice fails", []*Report{valueError(1, 42, 3), valueError(2, 57, 3), valueError(3, 57, 3)}, []bool{false, false, true}},
		{"a kill in between resets", []*Report{valueError(1, 42, 3), killed(2), valueError(3, 42, 3)}, []bool{false, false, false}},
		{"the same round reported twice is not a repeat", []*Report{valueError(1, 42, 3), valueError(1, 42, 3)}, []bool{false, false}},
		{"CUDA OOM at the same line twice", []*Report{cudaOOM(1), cudaOOM(2)}, []bool{false, true}},
		{"crashes never fail fast", []*Report{segv(1), segv(2), segv(3)}, []bool{false, false, false}},
		{"kills never fail fast", []*Report{killed(1), killed(2)}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h History
			var got []bool
			for _, w := range tt.rounds {
				d := Decide(h, FromReport(*w), Caps{Relaunch: true})
				if d.FailFast != (d.Action == FailFast) {
					t.Errorf("round %d: FailFast %v with action %s", w.Round, d.FailFast, d.Action)
				}
				if d.FailFast && !strings.Contains(d.Reason, "same ") {
					t.Errorf("round %d: fail-fast reason %q", w.Round, d.Reason)
				}
				got = append(got, d.FailFast)
				h = h.Record(w.Round, d)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FailFast per round (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRootCause(t *testing.T) {
	at := func(sec int, w *Report) *Report {
		w.TimeUnixNanos = t0.Add(time.Duration(sec) * time.Second).UnixNano()
		return w
	}
	ncclPeer := func(rank int) *Report {
		return &Report{Rank: rank, ExitCode: 1, Message: "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error"}
	}
	glooPeer := func(rank int) *Report {
		return &Report{Rank: rank, ExitCode: 1, LogTail: "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:4242"}
	}
	oomKilled := func(rank int) *Report {
		return &Report{Rank: rank, ExitCode: -1, Signal: 9, LogTail: "Memory cgroup out of memory: Killed process 77 (python)"}
	}
	tests := []struct {
		name     string
		fs       []*Report
		wantRank int
		wantRule string
	}{
		{"the earliest failure", []*Report{at(5, glooPeer(1)), at(3, oomKilled(2)), at(4, glooPeer(0))}, 2, "oom-killed"},
		{"an NCCL survivor stamped earlier is not the root", []*Report{at(9, ncclPeer(1)), at(10, valueError(0, 42, 3))}, 0, "user-error"},
		{"a gloo survivor is not the root", []*Report{at(1, glooPeer(0)), at(2, &Report{Rank: 3, ExitCode: 201})}, 3, "hardware-exit"},
		{"only survivors: the earliest", []*Report{at(2, glooPeer(0)), at(1, ncclPeer(5))}, 5, "peer-failure"},
		{"ties go to the lowest rank", []*Report{at(1, &Report{Rank: 4, ExitCode: 3}), at(1, &Report{Rank: 2, ExitCode: 1})}, 2, "user-error"},
		{"none", nil, 0, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs []Failure
			for _, w := range tt.fs {
				fs = append(fs, FromReport(*w))
			}
			root, others := RootCause(fs)
			if root.Rank != tt.wantRank || len(others) != max(len(fs)-1, 0) {
				t.Errorf("RootCause: rank %d with %d others; want rank %d with %d", root.Rank, len(others), tt.wantRank, len(fs)-1)
			}
			if d := DecideRound(History{}, fs, Caps{Relaunch: true, MoreMemory: true, Memory: gib64}); d.Rule != tt.wantRule || d.Root.Rank != tt.wantRank {
				t.Errorf("DecideRound: rule %s about rank %d; want %s about rank %d", d.Rule, d.Root.Rank, tt.wantRule, tt.wantRank)
			}
		})
	}
}

func TestFromReport(t *testing.T) {
	tests := []struct {
		name string
		in   *Report
		want Failure
	}{
		{"error file", valueError(7, 42, 3), Failure{Host: "h0", Round: 7, Time: t0, ExitCode: 1, ExceptionType: "ValueError",
			Message: "bad batch size 3", Place: "/workspace/train.py:42", Traceback: strings.ReplaceAll(valueErrorAt42, "line 42", "line 42")}},
		{"traceback only in the log", &Report{Rank: 2, LocalRank: 1, NodeRank: 1, ExitCode: 1,
			LogTail: "[default1]:Traceback (most recent call last):\n[default1]:  File \"/w/t.py\", line 3, in <module>\n[default1]:KeyError: 'x'\n"},
			Failure{Rank: 2, LocalRank: 1, NodeRank: 1, ExitCode: 1, ExceptionType: "KeyError", Message: "'x'", Place: "/w/t.py:3",
				LogTail: []string{"[default1]:Traceback (most recent call last):", "[default1]:  File \"/w/t.py\", line 3, in <module>", "[default1]:KeyError: 'x'"}}},
		{"OOM evidence needs SIGKILL", &Report{ExitCode: 1, LogTail: "oom-kill: constraint=CONSTRAINT_MEMCG"},
			Failure{ExitCode: 1, LogTail: []string{"oom-kill: constraint=CONSTRAINT_MEMCG"}}},
		{"OOM evidence with exit 137", &Report{ExitCode: 137, Message: "oom-kill: constraint=CONSTRAINT_MEMCG"},
			Failure{ExitCode: 137, OOMKilled: true, Message: "oom-kill: constraint=CONSTRAINT_MEMCG"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, FromReport(*tt.in)); diff != "" {
				t.Errorf("FromReport (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextMemory(t *testing.T) {
	tests := []struct {
		old, want int64
		ok        bool
	}{
		{0, 0, false}, {-1, 0, false}, {gib64, 2 * gib64, true}, {8 * gib64, 16 * gib64, true},
		{10 * gib64, 18 * gib64, true}, {56 * gib64, 64 * gib64, true}, {63 * gib64, 64 * gib64, true},
		{64 * gib64, 0, false}, {100 * gib64, 0, false},
	}
	for _, tt := range tests {
		if got, ok := NextMemory(tt.old); got != tt.want || ok != tt.ok {
			t.Errorf("NextMemory(%d GiB) = %d, %v; want %d, %v", tt.old/gib64, got, ok, tt.want, tt.ok)
		}
	}
}

// TestExitClassesMatchProc checks that, on exit statuses alone, the rules
// agree with proc.Classify (the report's classes), except where this
// package is finer: crashes and "could not start".
func TestExitClassesMatchProc(t *testing.T) {
	want := map[proc.Class]Cause{proc.Unknown: Unknown, proc.UserError: UserError, proc.Killed: Killed,
		proc.OutOfMemory: OutOfMemory, proc.Hardware: Hardware}
	for code := 1; code < 256; code++ {
		got := Match(Failure{ExitCode: code}).Cause
		if code == 128+int(syscall.SIGSEGV) || code == 128+int(syscall.SIGBUS) {
			if got != Crash {
				t.Errorf("exit %d: %s; want crash", code, got)
			}
			continue
		}
		if code == 126 || code == 127 {
			if got != StartFailure {
				t.Errorf("exit %d: %s; want start-failure", code, got)
			}
			continue
		}
		if c := proc.Classify(proc.Exit{Code: code}); got != want[c] {
			t.Errorf("exit %d: %s; proc says %s", code, got, c)
		}
	}
}

func FuzzFromReport(f *testing.F) {
	f.Add(int32(1), int32(0), "ValueError: x", valueErrorAt42, "")
	f.Add(int32(-1), int32(9), "", "", "Out of memory: Killed process 1\nNVRM: Xid (PCI:0): 79")
	f.Fuzz(func(t *testing.T, code, sig int32, msg, tb, tail string) {
		w := &Report{ExitCode: int(code), Signal: int(sig), Message: msg, Traceback: tb, LogTail: tail}
		d := Decide(History{}, FromReport(*w), Caps{Relaunch: true, MoreMemory: true, Memory: gib64})
		if d.Rule == "" || d.Reason == "" || d.FailFast {
			t.Errorf("Decide = %+v", d)
		}
	})
}

// TestActionNameWhenRestartsSpent: a failure that would restart the
// workers in place is reported as failing the job once the restart budget
// is spent, and only then.
func TestActionNameWhenRestartsSpent(t *testing.T) {
	tests := []struct {
		name string
		f    Failure
		caps Caps
		want string
	}{
		{"budget spent", Failure{ExitCode: 1}, Caps{NoRestartsLeft: true, MaxRestarts: 2}, "fail-restarts-spent"},
		{"budget left", Failure{ExitCode: 1}, Caps{MaxRestarts: 2}, "restart-in-place"},
		{"relaunch is not a restart", Failure{ExitCode: 143, PlatformReason: "Preempted"}, Caps{Relaunch: true, NoRestartsLeft: true}, "relaunch-node"},
		{"fail fast stays fail fast", Failure{ExitCode: 127, Message: "could not start the worker: start worker of local rank 0 (nope): start process \"nope\": exec: no such file"}, Caps{NoRestartsLeft: true}, "fail-fast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(History{}, tt.f, tt.caps)
			if got := d.ActionName(); got != tt.want {
				t.Errorf("ActionName() = %q, want %q (reason: %s)", got, tt.want, d.Reason)
			}
			if d.RestartsSpent != (tt.want == "fail-restarts-spent") {
				t.Errorf("RestartsSpent = %v for %q", d.RestartsSpent, tt.want)
			}
		})
	}
}
