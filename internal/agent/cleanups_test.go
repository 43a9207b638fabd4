package agent

import (
	"slices"
	"testing"
)

// TestCleanupsRunWhatWasAddedAfterTheDefer: Run defers done.run() before
// its steps add their cleanups; every one of them must run, the last added
// first. (A value receiver ran none: the agent left its shared memory.)
func TestCleanupsRunWhatWasAddedAfterTheDefer(t *testing.T) {
	var order []int
	func() {
		var done cleanups
		defer done.run()
		for i := range 3 {
			done.add(func() { order = append(order, i) })
		}
	}()
	if want := []int{2, 1, 0}; !slices.Equal(order, want) {
		t.Errorf("cleanups ran %v, want %v", order, want)
	}
}
