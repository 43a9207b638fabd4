package proc

import (
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	t0 = time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	t1 = t0.Add(time.Second)
	t2 = t0.Add(2 * time.Second)
)

func TestRootCause(t *testing.T) {
	f := func(rank int, at time.Time) Failure { return Failure{Rank: rank, Time: at} }
	tests := []struct {
		name       string
		in         []Failure
		wantRoot   Failure
		wantOthers []Failure
	}{
		{"none", nil, Failure{}, nil},
		{"one", []Failure{f(3, t1)}, f(3, t1), []Failure{}},
		{"earliest wins", []Failure{f(0, t2), f(1, t0), f(2, t1)}, f(1, t0), []Failure{f(2, t1), f(0, t2)}},
		{"tie goes to lowest rank", []Failure{f(5, t0), f(2, t0), f(7, t0)}, f(2, t0), []Failure{f(5, t0), f(7, t0)}},
		{"others by time then rank", []Failure{f(9, t2), f(4, t1), f(1, t2), f(0, t0)}, f(0, t0), []Failure{f(4, t1), f(1, t2), f(9, t2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Failure(nil), tt.in...)
			root, others := RootCause(tt.in)
			if diff := cmp.Diff(tt.wantRoot, root); diff != "" {
				t.Errorf("root (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOthers, others); diff != "" {
				t.Errorf("others (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(in, tt.in); diff != "" {
				t.Errorf("RootCause modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestFormatReport(t *testing.T) {
	userError := Failure{
		Time: t1, Host: "myhost", Node: 1, Rank: 2, LocalRank: 0, Pid: 1234,
		Exit:      Exit{Code: 1},
		ErrorFile: "/tmp/rover/attempt_0/2/error.json",
		Error: &ErrorRecord{
			Message:   "ValueError: boom",
			Traceback: "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n\n    main()\nValueError: boom\n",
			Time:      t1,
		},
		LogTail: "ignored: there is an error record",
	}
	killed := Failure{
		Time: t0, Host: "otherhost", Node: 0, Rank: 0, LocalRank: 0, Pid: 99,
		Exit: Exit{Code: -1, Signal: syscall.SIGKILL},
	}
	noTraceback := Failure{
		Time: t2, Host: "myhost", Node: 1, Rank: 3, LocalRank: 1, Pid: 1235,
		Exit:    Exit{Code: 247},
		LogTail: "loading data\nCUDA out of memory\n",
	}
	const rule = "========================================================================\n"
	const section = "------------------------------------------------------------------------\n"
	tests := []struct {
		name string
		fs   []Failure
		want string
	}{
		{"single failure", []Failure{userError}, rule +
			"train.py FAILED\n" +
			section +
			"Failures:\n" +
			"  <NO_OTHER_FAILURES>\n" +
			section +
			"Root Cause (first observed failure):\n" +
			"[0]:\n" +
			"  time      : 2026-11-30_01:02:04\n" +
			"  host      : myhost\n" +
			"  rank      : 2 (local_rank: 0, node: 1)\n" +
			"  exitcode  : 1 (pid: 1234)\n" +
			"  error_file: /tmp/rover/attempt_0/2/error.json\n" +
			"  traceback : Traceback (most recent call last):\n" +
			"    File \"train.py\", line 3, in <module>\n" +
			"\n" +
			"      main()\n" +
			"  ValueError: boom\n" +
			rule},
		{"several failures", []Failure{noTraceback, userError, killed}, rule +
			"train.py FAILED\n" +
			section +
			"Failures:\n" +
			"[1]:\n" +
			"  time      : 2026-11-30_01:02:04\n" +
			"  host      : myhost\n" +
			"  rank      : 2 (local_rank: 0, node: 1)\n" +
			"  exitcode  : 1 (pid: 1234)\n" +
			"  error_file: /tmp/rover/attempt_0/2/error.json\n" +
			"  traceback : Traceback (most recent call last):\n" +
			"    File \"train.py\", line 3, in <module>\n" +
			"\n" +
			"      main()\n" +
			"  ValueError: boom\n" +
			"[2]:\n" +
			"  time      : 2026-11-30_01:02:05\n" +
			"  host      : myhost\n" +
			"  rank      : 3 (local_rank: 1, node: 1)\n" +
			"  exitcode  : 247 (pid: 1235)\n" +
			"  error_file: <N/A>\n" +
			"  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n" +
			"  log tail  : loading data\n" +
			"  CUDA out of memory\n" +
			section +
			"Root Cause (first observed failure):\n" +
			"[0]:\n" +
			"  time      : 2026-11-30_01:02:03\n" +
			"  host      : otherhost\n" +
			"  rank      : 0 (local_rank: 0, node: 0)\n" +
			"  exitcode  : -9 (pid: 99)\n" +
			"  error_file: <N/A>\n" +
			"  traceback : Signal 9 (SIGKILL) received by PID 99\n" +
			rule},
		{"string message record", []Failure{{
			Time: t0, Host: "h", Pid: 7, Exit: Exit{Code: 1}, ErrorFile: "/e.json",
			Error: &ErrorRecord{Message: "RuntimeError: old style"},
		}}, rule +
			"train.py FAILED\n" +
			section +
			"Failures:\n" +
			"  <NO_OTHER_FAILURES>\n" +
			section +
			"Root Cause (first observed failure):\n" +
			"[0]:\n" +
			"  time      : 2026-11-30_01:02:03\n" +
			"  host      : h\n" +
			"  rank      : 0 (local_rank: 0, node: 0)\n" +
			"  exitcode  : 1 (pid: 7)\n" +
			"  error_file: /e.json\n" +
			"  traceback : RuntimeError: old style\n" +
			rule},
		{"no failures", nil, rule +
			"train.py FAILED\n" +
			section +
			"Failures:\n" +
			"  <NO_OTHER_FAILURES>\n" +
			section +
			"Root Cause (first observed failure):\n" +
			"  <NO_FAILURES>\n" +
			rule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, FormatReport("train.py FAILED", tt.fs)); diff != "" {
				t.Errorf("FormatReport mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
