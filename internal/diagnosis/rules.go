package diagnosis

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Rule is one row of the table: when it matches a failure, the failure
// has Cause and calls for Action.
type Rule struct {
	// ID names the rule in decisions, the journal and the docs.
	ID string
	// Cause and Action are the rule's verdict. Action may be lowered by
	// [Decide] where the platform cannot carry it out.
	Cause  Cause
	Action Action
	// MarkHostBad asks the platform not to schedule on the host again.
	MarkHostBad bool
	// Repeatable says the failure can be a deterministic fault of the
	// program, so the fail-fast rule applies to it (see [History]).
	Repeatable bool
	// When is the condition, in a few words, and Why the reasoning, for
	// the docs.
	When, Why string

	match func(Failure) bool
}

// Rules is the table, in order: the first rule that matches decides, and
// the last matches everything. It is data; do not modify it.
var Rules = []Rule{
	{
		ID: "restore-failure", Cause: RestoreFailure, Action: Regroup,
		When: "the agent started no workers: it could not restore the round's agreed checkpoint step from any peer's memory " +
			"(every transfer refused, cut or damaged)",
		Why: "Nothing of the program ran and nothing of it failed. Its ranks would resume at another step than the others', " +
			"so the world forms again and agrees on a step every rank can load without peers (the newest in every rank's " +
			"memory, else storage's). A membership change, not counted against --max-restarts.",
		match: func(f Failure) bool { return f.RestoreFailed },
	},
	{
		ID: "oom-killed", Cause: OutOfMemory, Action: RelaunchWithMoreMemory,
		When: "killed for memory: the kernel OOM killer (SIGKILL plus evidence) or the platform's `OOMKilled` reason",
		Why:  "The node's memory limit is too small for the job; the same limit would fail again.",
		match: func(f Failure) bool {
			return f.OOMKilled || strings.EqualFold(f.PlatformReason, ReasonOOMKilled)
		},
	},
	{
		ID: "oom-exit", Cause: OutOfMemory, Action: RelaunchWithMoreMemory,
		When:  "exit status 247",
		Why:   "DLRover's exit status for a worker out of host memory.",
		match: func(f Failure) bool { return f.ExitCode == 247 },
	},
	{
		ID: "preempted", Cause: Preempted, Action: RelaunchNode,
		When: "the platform's reason is `Preempted` or `Evicted`",
		Why:  "The node is gone or going; the workers cannot restart on it. Nothing is wrong with the host or the program.",
		match: func(f Failure) bool {
			return strings.EqualFold(f.PlatformReason, ReasonPreempted) || strings.EqualFold(f.PlatformReason, ReasonEvicted)
		},
	},
	{
		ID: "hardware-exit", Cause: Hardware, Action: RelaunchNode, MarkHostBad: true,
		When: "exit status 201 (GPU driver), 202 (GPU residue) or 14 (GPU InfoROM corrupted)",
		Why:  "DLRover's exit statuses for a broken GPU; a restart on the same host would meet the same GPU.",
		match: func(f Failure) bool {
			return f.Signal == 0 && (f.ExitCode == 201 || f.ExitCode == 202 || f.ExitCode == 14)
		},
	},
	{
		ID: "hardware-log", Cause: Hardware, Action: RelaunchNode, MarkHostBad: true,
		When: "an NVIDIA Xid line with a hardware code (" + xidList() + "), `uncorrectable ECC error`, `Double Bit ECC`, `GPU has fallen off the bus`",
		Why: "The GPU reported a hardware fault. Other Xid codes (13, 31, 43, ...) are faults of the program, such as an " +
			"illegal memory access, and are not matched here.",
		match: func(f Failure) bool {
			t := f.text()
			return hardwareXid(t) || containsAny(t, []string{"uncorrectable ECC error", "Double Bit ECC", "GPU has fallen off the bus"})
		},
	},
	{
		ID: "host-alloc", Cause: OutOfMemory, Action: RelaunchWithMoreMemory,
		When: "`DefaultCPUAllocator: can't allocate memory`, or `[enforce fail at` with `out of memory` or `can't allocate memory`",
		Why:  "A host allocation failed: the same out of memory as an OOM kill, reported by the allocator instead of the kernel.",
		match: func(f Failure) bool {
			t := f.text()
			return strings.Contains(t, "DefaultCPUAllocator: can't allocate memory") ||
				(strings.Contains(t, "[enforce fail at") && containsAny(t, []string{"out of memory", "can't allocate memory"}))
		},
	},
	{
		ID: "cuda-oom", Cause: OutOfMemory, Action: RestartInPlace, Repeatable: true,
		When: "`CUDA out of memory`, `torch.cuda.OutOfMemoryError`, `torch.OutOfMemoryError`, `CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`",
		Why: "Device memory ran out. More host memory would not help, so the workers restart in place; a batch too " +
			"large fails at the same line every time, which the fail-fast rule catches.",
		match: func(f Failure) bool {
			return f.ExceptionType == "torch.cuda.OutOfMemoryError" || f.ExceptionType == "torch.OutOfMemoryError" ||
				containsAny(f.text(), []string{"CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED"})
		},
	},
	{
		ID: "crash", Cause: Crash, Action: RestartInPlace,
		When: "SIGSEGV or SIGBUS (exit 139, 135), `Segmentation fault` or `Bus error` in the log",
		Why: "A native crash. As DLRover does, it is a process failure and the workers restart in place: crashes in " +
			"native code are often races, and a bus error is often a full /dev/shm. There is no Python place to compare, " +
			"so fail fast does not apply.",
		match: func(f Failure) bool {
			s := f.signal()
			return s == syscall.SIGSEGV || s == syscall.SIGBUS ||
				containsAny(f.text(), []string{"Segmentation fault", "Fatal Python error: Segmentation fault", "Bus error"})
		},
	},
	{
		ID: "nccl-system-error", Cause: Unknown, Action: RestartInPlace,
		When: "NCCL's `unhandled system error` or `unhandled cuda error`",
		Why: "NCCL could not use the network or the GPU: a flaky link, a full /dev/shm, a misconfigured interface, a " +
			"driver. That is not proof of broken hardware, so the host is not marked; a real GPU fault also shows an Xid " +
			"and matches hardware-log first. The node health check decides about the host.",
		match: func(f Failure) bool {
			t := f.text()
			return strings.Contains(t, "NCCL") && containsAny(t, []string{"unhandled system error", "unhandled cuda error"})
		},
	},
	{
		ID: "peer-failure", Cause: PeerFailure, Action: RestartInPlace,
		When: "a broken collective: NCCL `remote process exited`, `NCCL communicator was aborted`, `Watchdog caught collective " +
			"operation timeout`, gloo `Connection closed by peer` or `Connection reset by peer`, `DistNetworkError`",
		Why: "A survivor whose peer died. It is a consequence, never a round's root cause while the round has another " +
			"failure (see the root-cause rule); alone, the peer most likely vanished without a report (a lost node), and " +
			"the workers restart.",
		match: func(f Failure) bool {
			return containsAny(f.text(), []string{
				"remote process exited", "NCCL communicator was aborted", "Watchdog caught collective operation timeout",
				"Connection closed by peer", "Connection reset by peer", "DistNetworkError",
			})
		},
	},
	{
		ID: "killed", Cause: Killed, Action: RestartInPlace,
		When: "SIGKILL, SIGTERM or SIGINT (exit 137, 143, 130) without evidence of memory exhaustion",
		Why: "Something outside the program stopped it: an operator, the agent, a platform without a reason. The program " +
			"did nothing wrong; restart it.",
		match: func(f Failure) bool {
			s := f.signal()
			return s == syscall.SIGKILL || s == syscall.SIGTERM || s == syscall.SIGINT
		},
	},
	{
		ID: "start-failure", Cause: StartFailure, Action: FailFast,
		When: "exit status 126 or 127 without a signal: the agent could not start the worker (the program not found, " +
			"not executable, an environment the kernel refuses, the machine out of processes), or a shell could not run a command",
		Why: "Nothing ran, so nothing transient went wrong: the same command on the same machine fails the same way. " +
			"Restarting or relaunching would only repeat it, so the job fails at once with the reason.",
		match: func(f Failure) bool { return f.Signal == 0 && (f.ExitCode == 126 || f.ExitCode == 127) },
	},
	{
		ID: "user-error", Cause: UserError, Action: RestartInPlace, Repeatable: true,
		When: "exit status 1, SIGABRT (exit 134), or any exit with a Python exception",
		Why: "A fault of the program. It may be transient (a file not there yet), so the workers restart; the same " +
			"exception at the same place twice in a row fails the job (fail-fast rule).",
		match: func(f Failure) bool {
			return (f.Signal == 0 && f.ExitCode == 1) || f.signal() == syscall.SIGABRT || f.ExceptionType != ""
		},
	},
	{
		ID: "unknown", Cause: Unknown, Action: RestartInPlace,
		When:  "anything else",
		Why:   "No rule explains the failure; restarting is the cheapest action and is bounded by --max-restarts.",
		match: func(Failure) bool { return true },
	},
}

// hardwareXids are the NVIDIA Xid codes that mean a hardware fault: ECC
// errors and page retirement (48, 63, 64, 92, 94, 95), internal
// microcontroller faults (61, 62), NVLink (74), a GPU off the bus (79) and
// GSP errors (119, 120).
var hardwareXids = []int{48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}

func xidList() string {
	s := make([]string, len(hardwareXids))
	for i, x := range hardwareXids {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// xidLine matches "NVRM: Xid (PCI:0000:3b:00): 79, pid=...", "Xid 79" and
// "Xid: 79".
var xidLine = regexp.MustCompile(`\bXid\s*(?:\([^)\n]*\))?\s*:?\s*(\d{1,4})\b`)

func hardwareXid(t string) bool {
	for _, m := range xidLine.FindAllStringSubmatch(t, -1) {
		n, _ := strconv.Atoi(m[1])
		for _, x := range hardwareXids {
			if n == x {
				return true
			}
		}
	}
	return false
}

// Match returns the first rule of [Rules] that matches f.
func Match(f Failure) Rule {
	for _, r := range Rules {
		if r.match(f) {
			return r
		}
	}
	panic("diagnosis: the last rule must match everything")
}

// Markdown renders [Rules] as the table in docs/fault-tolerance.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| # | rule | when | cause | action | why |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for i, r := range Rules {
		action := "`" + r.Action.String() + "`"
		if r.MarkHostBad {
			action += ", mark the host bad"
		}
		why := r.Why
		if r.Repeatable {
			why += " Fail fast applies."
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | `%s` | %s | %s |\n", i+1, r.ID, r.When, r.Cause, action, why)
	}
	return b.String()
}
