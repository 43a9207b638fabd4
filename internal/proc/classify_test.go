package proc

import (
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	sig := func(s syscall.Signal) Exit { return Exit{Code: -1, Signal: s} }
	code := func(c int) Exit { return Exit{Code: c} }
	tests := []struct {
		exit Exit
		want Class
	}{
		{code(0), Succeeded},
		{code(1), UserError},
		{code(134), UserError},
		{sig(syscall.SIGABRT), UserError},
		{sig(syscall.SIGKILL), Killed},
		{code(137), Killed},
		{sig(syscall.SIGTERM), Killed},
		{code(143), Killed},
		{sig(syscall.SIGINT), Killed},
		{code(130), Killed},
		{code(247), OutOfMemory},
		{code(201), Hardware},
		{code(202), Hardware},
		{code(14), Hardware},
		{sig(syscall.SIGALRM), Unknown}, // signal 14 is not exit status 14
		{sig(syscall.SIGSEGV), Unknown},
		{code(2), Unknown},
		{code(255), Unknown},
		{code(-1), Unknown},
	}
	for _, tt := range tests {
		if got := Classify(tt.exit); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.exit, got, tt.want)
		}
	}
}

func TestClassString(t *testing.T) {
	tests := []struct {
		c    Class
		want string
	}{
		{Unknown, "unknown"},
		{Succeeded, "succeeded"},
		{UserError, "user-error"},
		{Killed, "killed"},
		{OutOfMemory, "out-of-memory"},
		{Hardware, "hardware"},
		{Class(99), "unknown"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("Class(%d).String() = %q, want %q", int(tt.c), got, tt.want)
		}
	}
}

func TestExitString(t *testing.T) {
	tests := []struct {
		exit Exit
		want string
	}{
		{Exit{}, "exit status 0"},
		{Exit{Code: 2}, "exit status 2"},
		{Exit{Code: -1, Signal: syscall.SIGKILL}, "killed by signal 9 (SIGKILL)"},
		{Exit{Code: -1, Signal: syscall.Signal(77)}, "killed by signal 77"},
	}
	for _, tt := range tests {
		if got := tt.exit.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.exit, got, tt.want)
		}
	}
}

func TestStdHas(t *testing.T) {
	tests := []struct {
		s, o Std
		want bool
	}{
		{None, Stdout, false},
		{Stdout, Stdout, true},
		{Stdout, Stderr, false},
		{All, Stderr, true},
		{All, All, true},
		{Stderr, All, false},
		{Stdout, None, true},
	}
	for _, tt := range tests {
		if got := tt.s.Has(tt.o); got != tt.want {
			t.Errorf("%v.Has(%v) = %v, want %v", tt.s, tt.o, got, tt.want)
		}
	}
}
