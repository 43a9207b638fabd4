package agent

import (
	"errors"
	"fmt"
)

// Exit codes of `rover run`, documented in docs/exit-codes.md.
const (
	ExitOK         = 0
	ExitJobFailed  = 1
	ExitUsage      = 2
	ExitRendezvous = 3
	ExitMasterLost = 4
	ExitNodeCheck  = 5
	// ExitStateFailed: the master's state store refused a write (a full
	// disk), so nothing more could be made durable and the master stopped:
	// `rover master`, and the agent that hosted an embedded master.
	ExitStateFailed = 6
	exitSignalCodes = 128
)

// ExitError carries the process exit code an agent failure maps to.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func exitErr(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// ExitCode maps an error returned by Run to a process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitJobFailed
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
