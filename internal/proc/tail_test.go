package proc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTail(t *testing.T) {
	big := strings.Repeat("y", 100) + "\n"
	tests := []struct {
		name     string
		content  string
		maxLines int
		want     string
	}{
		{"empty file", "", 5, ""},
		{"fewer lines", "a\nb\n", 5, "a\nb"},
		{"last lines", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no trailing newline", "a\nb\nc", 2, "b\nc"},
		{"zero lines", "a\n", 0, ""},
		{"blank lines kept", "a\n\n\nb\n", 3, "\n\nb"},
		{"window drops cut line", "cut-" + strings.Repeat(big, 1000) + "end\n", 1 << 20,
			strings.TrimSuffix(strings.Repeat(big, tailWindow/len(big)), "\n") + "\nend"},
		{"window on line boundary", strings.Repeat("x", 9) + "\n" + strings.Repeat("w", tailWindow-1) + "\n", 10,
			strings.Repeat("w", tailWindow-1)},
		{"single huge line", strings.Repeat("q", 2*tailWindow), 3, strings.Repeat("q", tailWindow)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stderr.log")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Tail(path, tt.maxLines)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Tail mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTailMissing(t *testing.T) {
	_, err := Tail(filepath.Join(t.TempDir(), "missing.log"), 10)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Tail(missing) error %v, want os.ErrNotExist", err)
	}
}
