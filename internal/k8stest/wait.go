package k8stest

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitTimeout bounds WaitFor and WaitNoError: a deadline that only turns a
// hang into a failure, generous for a loaded CI machine.
const WaitTimeout = 2 * time.Minute

// WaitFor polls ok until it holds, and fails tb, naming what it waited for,
// once WaitTimeout has passed.
func WaitFor(tb testing.TB, what string, ok func() bool) {
	tb.Helper()
	WaitNoError(tb, what, func() error {
		if ok() {
			return nil
		}
		return errNotYet
	})
}

// WaitNoError polls check until it returns nil, and fails tb with what and
// check's last error once WaitTimeout has passed.
func WaitNoError(tb testing.TB, what string, check func() error) {
	tb.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, WaitTimeout, true,
		func(context.Context) (bool, error) {
			last = check()
			return last == nil, nil
		})
	if err != nil {
		tb.Fatalf("%s: not within %v: %v", what, WaitTimeout, last)
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
