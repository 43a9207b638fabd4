package jobstate

import (
	"errors"
	"fmt"
	"testing"
)

// TestKeyLimits: a key past the store's limits is refused with ErrLimit and
// changes nothing; updating what exists is still allowed.
func TestKeyLimits(t *testing.T) {
	k := NewKeys()
	for i := range MaxKeys {
		k.Set(fmt.Sprint("k", i), nil)
	}
	if err := k.Check("one-more", 1); !errors.Is(err, ErrLimit) {
		t.Errorf("a key past the limit: %v, want ErrLimit", err)
	}
	if err := k.Check("k7", 3); err != nil {
		t.Errorf("updating an existing key at the limit: %v", err)
	}
	k = RestoreKeys(map[string][]byte{"filler": make([]byte, MaxKeyBytes-10)})
	if err := k.Check("b1", 11); !errors.Is(err, ErrLimit) {
		t.Errorf("a value past the byte limit: %v, want ErrLimit", err)
	}
	if err := k.Check("b1", 10); err != nil {
		t.Errorf("a value that just fits: %v", err)
	}
	k.Set("b1", make([]byte, 10))
	if err := k.Check("filler", MaxKeyBytes-10); err != nil {
		t.Errorf("replacing a value with one as large: %v", err)
	}
	if v, ok := k.Get("b1"); !ok || len(v) != 10 {
		t.Errorf("Get(b1) = %d bytes, %v", len(v), ok)
	}
}
