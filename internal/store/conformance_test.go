package store_test

import (
	"log/slog"
	"testing"

	"github.com/roverml/rover/internal/store"
	"github.com/roverml/rover/internal/store/storetest"
)

var (
	_ storetest.Journal = (*store.Memory)(nil)
	_ storetest.Journal = (*store.Bolt)(nil)
)

func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(*testing.T) (storetest.Journal, storetest.Reopen) {
			// A Memory survives a master restarted in the same process:
			// the master is handed the same value.
			s := store.NewMemory()
			return s, func(_ *testing.T, s storetest.Journal) storetest.Journal { return s }
		})
	})
	t.Run("bolt", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) (storetest.Journal, storetest.Reopen) {
			dir := t.TempDir()
			open := func(t *testing.T) storetest.Journal {
				s, err := store.Open(dir, store.Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			return open(t), func(t *testing.T, s storetest.Journal) storetest.Journal {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return open(t)
			}
		})
	})
}
