package python

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/roverml/rover/internal/ckpt"
)

// TestCRC32CMatchesGo checks the Python package's pure-Python CRC32C
// against Go's hash/crc32 (what internal/ckpt records in manifests and
// checks on load), whole and continued from a prefix's CRC, at sizes around
// the block fold's boundaries: one 67,540-byte block, and two blocks plus
// the 1,264 bytes a fold reaches into the block after.
func TestCRC32CMatchesGo(t *testing.T) {
	const block, reach = 67540, 1264
	sizes := []int{0, 1, 7, 8, 9, 100, 4095, 8195, 13070, block - 1, block, block + 1,
		2*block + reach - 1, 2*block + reach, 2*block + reach + 1, 3*block + reach, 1<<20 + 5, 5<<20 + 3}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	type split struct {
		Path string `json:"path"`
		At   int    `json:"at"`
	}
	var cases []split
	var want []uint32
	for i, n := range sizes {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		path := filepath.Join(dir, "data"+string(rune('a'+i)))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, split{path, rng.IntN(n + 1)})
		want = append(want, ckpt.CRC32C(data))
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys
sys.path.insert(0, ".")
from rover._crc32c import crc32c
out = []
for c in json.loads(sys.argv[1]):
    data = open(c["path"], "rb").read()
    at = c["at"]
    out.append([crc32c(data), crc32c(memoryview(data)[at:], crc32c(data[:at]))])
print(json.dumps(out))
`
	raw, err := exec.Command("python3", "-c", script, string(in)).Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got [][2]uint32
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if len(got) != len(sizes) {
		t.Fatalf("python3 returned %d checksums for %d inputs", len(got), len(sizes))
	}
	for i, n := range sizes {
		if got[i][0] != want[i] || got[i][1] != want[i] {
			t.Errorf("%d bytes (split at %d): Python CRC32C %08x, continued %08x; Go %08x", n, cases[i].At, got[i][0], got[i][1], want[i])
		}
	}
}
