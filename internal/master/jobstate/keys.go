package jobstate

import "fmt"

// The limits of the key-value store: a round adds one key of a few dozen
// bytes, so a job goes through tens of thousands of rounds before it meets
// them.
const (
	MaxKeys     = 65536
	MaxKeyBytes = 64 << 20
)

// Keys is a job's key-value store (torchrun's rendezvous store): keys set
// by set-key events, bounded by MaxKeys keys and MaxKeyBytes bytes of
// values.
type Keys struct {
	kv    map[string][]byte
	bytes int // the values' bytes in kv
}

// NewKeys returns an empty store.
func NewKeys() *Keys { return &Keys{kv: map[string][]byte{}} }

// RestoreKeys returns a store holding kv, as Map returned it; it keeps kv.
func RestoreKeys(kv map[string][]byte) *Keys {
	k := NewKeys()
	if kv != nil {
		k.kv = kv
	}
	for _, v := range k.kv {
		k.bytes += len(v)
	}
	return k
}

// Check refuses a key of size bytes that would take the store past its
// limits (ErrLimit).
func (k *Keys) Check(key string, size int) error {
	old, exists := k.kv[key]
	switch {
	case !exists && len(k.kv) >= MaxKeys:
		return fmt.Errorf("%w: the key-value store holds %d keys, the most a job may have", ErrLimit, MaxKeys)
	case k.bytes-len(old)+size > MaxKeyBytes:
		return fmt.Errorf("%w: the key-value store's values would take more than %d bytes", ErrLimit, MaxKeyBytes)
	}
	return nil
}

// Set applies a set-key event. It keeps value.
func (k *Keys) Set(key string, value []byte) {
	k.bytes += len(value) - len(k.kv[key])
	k.kv[key] = value
}

// Get returns key's value; it is not to be changed.
func (k *Keys) Get(key string) ([]byte, bool) {
	v, ok := k.kv[key]
	return v, ok
}

// Map is the store's part of a snapshot: the map itself, to be encoded
// before the next event.
func (k *Keys) Map() map[string][]byte { return k.kv }
