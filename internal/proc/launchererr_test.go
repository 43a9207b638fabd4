package proc

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWriteRootCauseFile(t *testing.T) {
	dir := t.TempDir()
	worker := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	at := time.Unix(1700000000, 0)
	tests := []struct {
		name string
		root Failure
		want string
	}{
		{"record's file gets errorCode, keeping its members and their order",
			Failure{Exit: Exit{Code: 3}, ErrorFile: worker("a.json",
				`{"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "tb", "timestamp": "1700000000"}}, "other": [1]}`)},
			`{"message":{"message":"ValueError: bad","extraInfo":{"py_callstack":"tb","timestamp":"1700000000"},"errorCode":3},"other":[1]}`},
		{"an existing errorCode is overridden with the signal",
			Failure{Exit: Exit{Signal: syscall.SIGSEGV}, ErrorFile: worker("b.json", `{"message": {"errorCode": 1, "message": "x"}}`)},
			`{"message":{"errorCode":-11,"message":"x"}}`},
		{"a string message is copied as is",
			Failure{Exit: Exit{Code: 1}, ErrorFile: worker("c.json", `{"message": "boom", "timestamp": 1700000000}`)},
			`{"message":"boom","timestamp":1700000000}`},
		{"without a file: torchrun's hint and the stderr tail",
			Failure{Time: at, Exit: Exit{Code: 2}, LogTail: "Traceback...\nKeyError: 'x'\n"},
			`{"message":{"message":"To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html","extraInfo":{"py_callstack":"Traceback...\nKeyError: 'x'\n","timestamp":"1700000000"},"errorCode":2}}`},
		{"without a file: the signal",
			Failure{Time: at, Pid: 42, Exit: Exit{Signal: syscall.SIGKILL}},
			`{"message":{"message":"Signal 9 (SIGKILL) received by PID 42","extraInfo":{"py_callstack":"","timestamp":"1700000000"},"errorCode":-9}}`},
		{"a file elsewhere: its record from the report",
			Failure{Time: at, Exit: Exit{Code: 1}, ErrorFile: filepath.Join(dir, "on-another-node.json"),
				Error: &ErrorRecord{Message: "RuntimeError: far", Traceback: "tb", Time: at.Add(-time.Second)}},
			`{"message":{"message":"RuntimeError: far","extraInfo":{"py_callstack":"tb","timestamp":"1699999999"},"errorCode":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "launcher", "error.json")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("stale"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := WriteRootCauseFile(path, tt.root); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("error file (-want +got):\n%s", diff)
			}
			if _, err := ReadErrorFile(path); err != nil {
				t.Errorf("the written file does not read back: %v", err)
			}
		})
	}
}

func TestWriteExceptionFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "error.json")
	if err := WriteExceptionFile(path, "SignalException: Process 7 got signal: 1", "", time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadErrorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &ErrorRecord{Message: "SignalException: Process 7 got signal: 1", Time: time.Unix(1700000000, 0)}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}
