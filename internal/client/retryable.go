package client

import (
	"context"
	"errors"
	"io"
	"syscall"

	"connectrpc.com/connect"
)

// Retryable reports whether a call's error is worth another try: the master
// is unreachable or restarting (Unavailable, Unknown, DeadlineExceeded,
// Aborted, or an answer cut short by a connection that broke), and the
// caller did not end the call itself by cancelling its context or letting
// its deadline pass. A TLS misconfiguration (a *TLSError) and a server that
// is no master (a *NotMasterError) are not worth another try. Pass it to retry.Do.
func Retryable(err error) bool {
	var (
		te *TLSError
		nm *NotMasterError
	)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &te) || errors.As(err, &nm) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return true
	}
	return cutShort(err)
}

// cutShort reports whether err is the client's own verdict on an answer the
// connection cut off (a master killed mid-answer): connect calls a truncated
// message a protocol error (InvalidArgument), but no server said so. The
// call may or may not have taken effect, as with Unavailable after sending.
func cutShort(err error) bool {
	if connect.IsWireError(err) {
		return false // the master itself answered with this error
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
