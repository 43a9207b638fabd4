package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/ckpt"
)

// TestCheckpointHeaderDecodesInGo writes a snapshot with the Python
// package's safetensors header and checks that the Go decoder (which follows
// the safetensors reference validation) accepts it with the same contents.
func TestCheckpointHeaderDecodesInGo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.safetensors")
	script := `
import struct, sys
sys.path.insert(0, ".")
from rover.checkpoint import encode_header
a = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
b = struct.pack("<3h", 7, 8, 9)
extra = b'{"a":1}'
head, offsets, size = encode_header(
    [("state.a", "F32", (2, 2), len(a)), ("state.b", "I16", (3,), len(b)), ("__rover_extra__", "U8", (len(extra),), len(extra))],
    {"rover.step": 12, "rover.rank": 3})
data = bytearray(size - len(head))
for blob, off in zip((a, b, extra), offsets):
    data[off:off + len(blob)] = blob
open(sys.argv[1], "wb").write(head + bytes(data))
`
	if out, err := exec.Command("python3", "-c", script, path).CombinedOutput(); err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tensors, meta, err := ckpt.Decode(raw)
	if err != nil {
		t.Fatalf("Go rejects the Python snapshot: %v", err)
	}
	if meta[ckpt.MetaStep] != "12" || meta[ckpt.MetaRank] != "3" {
		t.Errorf("metadata %v", meta)
	}
	got := map[string]ckpt.Tensor{}
	for _, x := range tensors {
		got[x.Name] = x
	}
	want := map[string]ckpt.Tensor{
		"state.a":         {Name: "state.a", DType: "F32", Shape: []int64{2, 2}, Data: []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40}},
		"state.b":         {Name: "state.b", DType: "I16", Shape: []int64{3}, Data: []byte{7, 0, 8, 0, 9, 0}},
		"__rover_extra__": {Name: "__rover_extra__", DType: "U8", Shape: []int64{7}, Data: []byte(`{"a":1}`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded tensors (-want +got):\n%s", diff)
	}
}
