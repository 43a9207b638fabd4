package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"
)

// Retryable reports whether a call's error is worth another try: the master
// is unreachable or restarting (Unavailable, Unknown, DeadlineExceeded,
// Aborted), and the caller did not end the call itself by cancelling its
// context or letting its deadline pass. Pass it to retry.Do.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return true
	}
	return false
}
