package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// filled returns n bytes of a pattern that depends on seed.
func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// rawFile assembles a safetensors file from a header string and data.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func byName(ts []Tensor) []Tensor {
	out := slices.Clone(ts)
	slices.SortFunc(out, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func TestEncodeDecode(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
	}{
		{"empty", nil, nil},
		{"metadata only", nil, map[string]string{MetaStep: "12", MetaRank: "3"}},
		{"one f32", []Tensor{{Name: "w", DType: "F32", Shape: []int64{2, 3}, Data: filled(24, 1)}}, nil},
		{"scalar", []Tensor{{Name: "s", DType: "I64", Shape: []int64{}, Data: filled(8, 2)}}, nil},
		{"zero-size", []Tensor{
			{Name: "z", DType: "F32", Shape: []int64{0, 4}, Data: nil},
			{Name: "a", DType: "U8", Shape: []int64{3}, Data: filled(3, 3)},
		}, nil},
		{"mixed dtypes keep alignment", []Tensor{
			{Name: "b", DType: "U8", Shape: []int64{3}, Data: filled(3, 4)},
			{Name: "h", DType: "BF16", Shape: []int64{5}, Data: filled(10, 5)},
			{Name: "d", DType: "F64", Shape: []int64{1, 1}, Data: filled(8, 6)},
			{Name: "f", DType: "F32", Shape: []int64{3}, Data: filled(12, 7)},
			{Name: "e", DType: "F8_E4M3", Shape: []int64{7}, Data: filled(7, 8)},
			{Name: "q", DType: "BOOL", Shape: []int64{2}, Data: []byte{0, 1}},
		}, map[string]string{"format": "pt", "quote\"key<&>": "value\nwith newline"}},
		{"extra", []Tensor{
			{Name: "w", DType: "F16", Shape: []int64{4}, Data: filled(8, 9)},
			Extra([]byte(`{"rover_extras":1,"state":null}`)),
		}, map[string]string{MetaStep: "7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Encode(&buf, tt.tensors, tt.meta); err != nil {
				t.Fatal(err)
			}
			size, err := EncodedSize(tt.tensors, tt.meta)
			if err != nil || size != int64(buf.Len()) {
				t.Errorf("EncodedSize = %d, %v; Encode wrote %d bytes", size, err, buf.Len())
			}
			// Layout.Place into a larger buffer writes the same bytes.
			l, err := NewLayout(tt.tensors, tt.meta)
			if err != nil {
				t.Fatal(err)
			}
			placed := make([]byte, l.Size+100)
			if err := l.Place(placed, tt.tensors); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(placed[:l.Size], buf.Bytes()) {
				t.Error("Layout.Place and Encode differ")
			}
			if len(l.Header)%8 != 0 {
				t.Errorf("data starts at %d, not 8-aligned", len(l.Header))
			}
			tensors, meta, err := Decode(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range l.Tensors {
				es, _ := DTypeSize(tensors[i].DType)
				if p.Name != tensors[i].Name || p.Begin%es != 0 {
					t.Errorf("placement %+v: decoded %q, or not aligned to %d", p, tensors[i].Name, es)
				}
			}
			if diff := cmp.Diff(byName(tt.tensors), byName(tensors), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("tensors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.meta, meta, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			headerOnly, err := Metadata(placed) // trailing bytes do not matter
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.meta, headerOnly, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Metadata (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeReference reads a file laid out as the reference (Rust/Python)
// safetensors writer lays it out.
func TestDecodeReference(t *testing.T) {
	hdr := `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"format":"pt"}}`
	hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
	data := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}
	tensors, meta, err := Decode(rawFile(hdr, data))
	if err != nil {
		t.Fatal(err)
	}
	want := []Tensor{{Name: "test", DType: "I32", Shape: []int64{2, 2}, Data: data}}
	if diff := cmp.Diff(want, tensors); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"format": "pt"}, meta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	t4 := func(name, off string) string {
		return `"` + name + `":{"dtype":"F32","shape":[1],"data_offsets":` + off + `}`
	}
	good := rawFile(`{`+t4("a", "[0,4]")+`}`, make([]byte, 4))
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"header length past end", rawFile(`{}`, nil)[:9], "does not fit"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, 1<<62), "does not fit"},
		{"not an object", rawFile(`[1]`, nil), "start with '{'"},
		{"bad json", rawFile(`{"a":`, nil), "header"},
		{"garbage after object", rawFile(`{}x`, nil), "after the JSON"},
		{"two objects", rawFile(`{}{}`, nil), "after the JSON"},
		{"invalid utf-8", rawFile("{\"\xff\":{}}", nil), "UTF-8"},
		{"duplicate name", rawFile(`{`+t4("a", "[0,4]")+`,`+t4("a", "[4,8]")+`}`, make([]byte, 8)), "duplicate"},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, make([]byte, 16)), "unknown dtype"},
		{"size mismatch", rawFile(`{`+t4("a", "[0,8]")+`}`, make([]byte, 8)), "do not hold"},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)), "negative"},
		{"overflowing shape", rawFile(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, make([]byte, 8)), "overflows"},
		{"overlap", rawFile(`{`+t4("a", "[0,4]")+`,`+t4("b", "[2,6]")+`}`, make([]byte, 6)), "gap or overlap"},
		{"gap", rawFile(`{`+t4("a", "[0,4]")+`,`+t4("b", "[8,12]")+`}`, make([]byte, 12)), "gap or overlap"},
		{"not from zero", rawFile(`{`+t4("a", "[4,8]")+`}`, make([]byte, 8)), "gap or overlap"},
		{"truncated data", good[:len(good)-1], "past the"},
		{"trailing bytes", append(slices.Clone(good), 0), "trailing garbage"},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), "two data_offsets"},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, make([]byte, 4)), "two data_offsets"},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, make([]byte, 4)), "shape"},
		{"non-string metadata", rawFile(`{"__metadata__":{"step":12}}`, nil), "must be strings"},
		{"bad extra", rawFile(`{"__rover_extra__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), "1-D U8"},
		{"empty name", rawFile(`{`+t4("", "[0,4]")+`}`, make([]byte, 4)), "needs a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Decode(tt.file)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %v, want ErrCorrupt mentioning %q", err, tt.want)
			}
		})
	}
	if _, _, err := Decode(good); err != nil {
		t.Errorf("the good file is rejected: %v", err)
	}
	// Fields the format does not define are ignored, as the reference
	// reader ignores them.
	extraField := rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, make([]byte, 4))
	if _, _, err := Decode(extraField); err != nil {
		t.Errorf("a tensor with an extra field is rejected: %v", err)
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"empty name", []Tensor{{Name: "", DType: "U8", Shape: []int64{0}}}, nil, "not allowed"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: "U8", Shape: []int64{0}}}, nil, "not allowed"},
		{"duplicate", []Tensor{{Name: "a", DType: "U8", Shape: []int64{0}}, {Name: "a", DType: "U8", Shape: []int64{0}}}, nil, "duplicate"},
		{"unknown dtype", []Tensor{{Name: "a", DType: "F4", Shape: []int64{2}, Data: []byte{0}}}, nil, "unknown dtype"},
		{"negative dim", []Tensor{{Name: "a", DType: "U8", Shape: []int64{-1}}}, nil, "negative"},
		{"data size", []Tensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: make([]byte, 4)}}, nil, "need 8"},
		{"bad extra", []Tensor{{Name: ExtraName, DType: "F32", Shape: []int64{1}, Data: make([]byte, 4)}}, nil, "1-D U8"},
		{"bad utf-8 name", []Tensor{{Name: "\xff", DType: "U8", Shape: []int64{0}}}, nil, "not allowed"},
		{"bad utf-8 metadata", nil, map[string]string{"k": "\xff"}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Encode(&bytes.Buffer{}, tt.tensors, tt.meta)
			if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode = %v, want ErrInvalidInput mentioning %q", err, tt.want)
			}
		})
	}
}

func TestPlaceRejects(t *testing.T) {
	ts := []Tensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: make([]byte, 8)}}
	l, err := NewLayout(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Place(make([]byte, l.Size-1), ts); !errors.Is(err, ErrSlotTooSmall) {
		t.Errorf("Place into a short buffer = %v, want ErrSlotTooSmall", err)
	}
	if err := l.Place(make([]byte, l.Size), nil); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Place without the tensor = %v, want ErrInvalidInput", err)
	}
	short := []Tensor{{Name: "a", DType: "F32", Shape: []int64{2}, Data: make([]byte, 4)}}
	if err := l.Place(make([]byte, l.Size), short); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Place with a short tensor = %v, want ErrInvalidInput", err)
	}
}

func TestSplitExtra(t *testing.T) {
	w := Tensor{Name: "w", DType: "U8", Shape: []int64{1}, Data: []byte{1}}
	rest, extra := SplitExtra([]Tensor{w, Extra([]byte("x"))})
	if diff := cmp.Diff([]Tensor{w}, rest); diff != "" || string(extra) != "x" {
		t.Errorf("SplitExtra: extra %q, rest (-want +got):\n%s", extra, diff)
	}
	if _, extra := SplitExtra([]Tensor{w}); extra != nil {
		t.Errorf("SplitExtra without extra = %q, want nil", extra)
	}
}
