package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"
)

// Names the format reserves.
const (
	// ExtraName is the tensor that carries a snapshot's opaque extra bytes
	// (the Python package's JSON document of the non-tensor state, see
	// docs/flash-checkpoint.md), as a 1-D U8 tensor so that standard
	// safetensors readers still load the file.
	ExtraName = "__rover_extra__"
	// MetaStep, MetaRank and MetaWorldSize are the __metadata__ keys for
	// the training step, the global rank and the world size, as decimal
	// strings. MetaMode is "sharded" or "replicated" (the checkpointer's
	// mode; absent means sharded).
	MetaStep      = "rover.step"
	MetaRank      = "rover.rank"
	MetaWorldSize = "rover.world_size"
	MetaMode      = "rover.mode"

	metadataKey = "__metadata__"
	// maxHeaderLen bounds the JSON header, as the reference implementation
	// does; a larger length is taken for corruption.
	maxHeaderLen = 100_000_000
)

// dtypeSizes are the element sizes of the safetensors dtypes this package
// reads and writes. Sub-byte types (F4, F6_*) are not supported.
var dtypeSizes = map[string]int64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U64": 8, "U32": 4, "U16": 2, "U8": 1,
	"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}

// DTypeSize returns the size in bytes of one element of dtype, and false for
// a dtype this package does not know.
func DTypeSize(dtype string) (int64, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// Tensor is one named tensor: its safetensors dtype, its shape (empty for a
// scalar) and its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// Extra wraps opaque bytes as the [ExtraName] tensor.
func Extra(b []byte) Tensor {
	return Tensor{Name: ExtraName, DType: "U8", Shape: []int64{int64(len(b))}, Data: b}
}

// SplitExtra separates the [ExtraName] tensor from the others. extra is nil
// when there is none.
func SplitExtra(tensors []Tensor) (rest []Tensor, extra []byte) {
	for _, t := range tensors {
		if t.Name == ExtraName {
			extra = t.Data
			continue
		}
		rest = append(rest, t)
	}
	return rest, extra
}

// byteSize is product(shape) * element size, or an error on a bad dtype, a
// negative dimension or overflow.
func byteSize(dtype string, shape []int64) (int64, error) {
	size, ok := dtypeSizes[dtype]
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q", dtype)
	}
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(uint64(size), uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		size = int64(lo)
	}
	return size, nil
}

// Placement is where one tensor's bytes go in an encoded file: the byte
// range [Begin, End) measured from the start of the file.
type Placement struct {
	Name       string
	Begin, End int64
}

// Layout is an encoded file laid out in advance: its header bytes and where
// each tensor's bytes go. A writer can copy Header to offset 0 of a buffer
// (an arena slot, say) and each tensor straight to its Placement, with no
// intermediate copy; the result is exactly what [Encode] writes.
type Layout struct {
	// Header is the 8-byte header length and the JSON header, padded with
	// spaces so that the tensor data starts 8-byte aligned.
	Header []byte
	// Tensors are in file order: by decreasing element size, then by name,
	// so that every tensor is aligned to its element size.
	Tensors []Placement
	// Size is the size of the whole file.
	Size int64
}

type tensorInfo struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// NewLayout lays out a file for tensors (their Data is ignored and may be
// nil) and metadata. It fails with ErrInvalidInput on an empty or duplicate
// name, the reserved name "__metadata__", an unknown dtype or a bad shape.
func NewLayout(tensors []Tensor, meta map[string]string) (*Layout, error) {
	order := make([]int, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i, t := range tensors {
		order[i] = i
		switch {
		case t.Name == "" || t.Name == metadataKey || !utf8.ValidString(t.Name):
			return nil, invalidf("tensor name %q is not allowed", t.Name)
		case seen[t.Name]:
			return nil, invalidf("duplicate tensor name %q", t.Name)
		case t.Name == ExtraName && (t.DType != "U8" || len(t.Shape) != 1):
			return nil, invalidf("tensor %q must be 1-D U8, got %s %v", ExtraName, t.DType, t.Shape)
		}
		seen[t.Name] = true
	}
	slices.SortFunc(order, func(a, b int) int {
		sa, sb := dtypeSizes[tensors[a].DType], dtypeSizes[tensors[b].DType]
		if sa != sb {
			return int(sb - sa)
		}
		return strings.Compare(tensors[a].Name, tensors[b].Name)
	})
	header := make(map[string]any, len(tensors)+1)
	l := &Layout{Tensors: make([]Placement, len(tensors))}
	var off int64
	for i, idx := range order {
		t := tensors[idx]
		n, err := byteSize(t.DType, t.Shape)
		if err != nil {
			return nil, invalidf("tensor %q: %v", t.Name, err)
		}
		if off > math.MaxInt64-n {
			return nil, invalidf("tensors add up to more than 2^63 bytes")
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[t.Name] = tensorInfo{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + n}}
		l.Tensors[i] = Placement{Name: t.Name, Begin: off, End: off + n}
		off += n
	}
	if len(meta) > 0 {
		for k, v := range meta {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, invalidf("metadata %q: %q is not valid UTF-8", k, v)
			}
		}
		header[metadataKey] = meta
	}
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(header); err != nil {
		return nil, invalidf("encoding header: %v", err)
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	hdr := buf.Bytes()
	binary.LittleEndian.PutUint64(hdr, uint64(len(hdr)-8))
	start := int64(len(hdr))
	if off > math.MaxInt64-start {
		return nil, invalidf("tensors add up to more than 2^63 bytes")
	}
	for i := range l.Tensors {
		l.Tensors[i].Begin += start
		l.Tensors[i].End += start
	}
	l.Header, l.Size = hdr, start+off
	return l, nil
}

// Place copies the header and every tensor's Data into dst at their final
// offsets. tensors must be the ones the layout was made from (in any order);
// each Data must have the size its dtype and shape say, and dst must hold at
// least l.Size bytes.
func (l *Layout) Place(dst []byte, tensors []Tensor) error {
	if int64(len(dst)) < l.Size {
		return fmt.Errorf("%w: layout needs %d bytes, buffer has %d", ErrSlotTooSmall, l.Size, len(dst))
	}
	byName := make(map[string][]byte, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t.Data
	}
	for _, p := range l.Tensors {
		data, ok := byName[p.Name]
		if !ok {
			return invalidf("tensor %q is in the layout but not given", p.Name)
		}
		if int64(len(data)) != p.End-p.Begin {
			return invalidf("tensor %q has %d bytes, its dtype and shape need %d", p.Name, len(data), p.End-p.Begin)
		}
	}
	copy(dst, l.Header)
	for _, p := range l.Tensors {
		copy(dst[p.Begin:p.End], byName[p.Name])
	}
	return nil
}

// EncodedSize is the size of the file [Encode] writes for tensors and meta.
func EncodedSize(tensors []Tensor, meta map[string]string) (int64, error) {
	l, err := NewLayout(tensors, meta)
	if err != nil {
		return 0, err
	}
	return l.Size, nil
}

// Encode writes tensors and meta to w as one safetensors file. Each tensor's
// Data must have the size its dtype and shape say.
func Encode(w io.Writer, tensors []Tensor, meta map[string]string) error {
	l, err := NewLayout(tensors, meta)
	if err != nil {
		return err
	}
	byName := make(map[string][]byte, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t.Data
	}
	for _, p := range l.Tensors {
		if int64(len(byName[p.Name])) != p.End-p.Begin {
			return invalidf("tensor %q has %d bytes, its dtype and shape need %d", p.Name, len(byName[p.Name]), p.End-p.Begin)
		}
	}
	if _, err := w.Write(l.Header); err != nil {
		return err
	}
	for _, p := range l.Tensors {
		if _, err := w.Write(byName[p.Name]); err != nil {
			return err
		}
	}
	return nil
}

// Decode parses a safetensors file. It validates everything before
// returning: the header length against the file size, the JSON (a single
// object, valid UTF-8, no duplicate names), each dtype and shape, and
// that the tensors' byte ranges tile the data buffer exactly (no overlap, no
// gap, no trailing bytes). Any failure is ErrCorrupt: a partial or damaged
// file is never loaded. The returned Data slices alias data, in file order.
func Decode(data []byte) ([]Tensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, corruptf("safetensors file of %d bytes is shorter than its 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeaderLen || n > uint64(len(data)-8) {
		return nil, nil, corruptf("safetensors header length %d does not fit a file of %d bytes (truncated or not safetensors)", n, len(data))
	}
	hdr, buf := data[8:8+n], data[8+n:]
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, nil, corruptf("safetensors header does not start with '{'")
	}
	if !utf8.Valid(hdr) {
		return nil, nil, corruptf("safetensors header is not valid UTF-8")
	}
	entries, meta, err := parseHeader(hdr)
	if err != nil {
		return nil, nil, corruptf("safetensors header: %v", err)
	}
	tensors := make([]Tensor, len(entries))
	var off int64
	for i, e := range entries {
		if e.begin != off {
			return nil, nil, corruptf("tensor %q starts at %d, want %d (gap or overlap)", e.t.Name, e.begin, off)
		}
		if e.end > int64(len(buf)) {
			return nil, nil, corruptf("tensor %q ends at %d, past the %d-byte data buffer (truncated file?)", e.t.Name, e.end, len(buf))
		}
		tensors[i] = e.t
		tensors[i].Data = buf[e.begin:e.end:e.end]
		off = e.end
	}
	if off != int64(len(buf)) {
		return nil, nil, corruptf("%d bytes after the last tensor (trailing garbage)", int64(len(buf))-off)
	}
	return tensors, meta, nil
}

// Metadata returns the __metadata__ of a safetensors file, parsing only its
// header: a cheap look at a snapshot's step and rank. The tensors are not
// checked; use [Decode] before trusting the data. data may be shared memory
// that a writer changes meanwhile (an arena slot being reused): the header
// is copied before it is parsed, so a torn read is an ErrCorrupt, never a
// panic, and the caller checks the slot was not reused before trusting the
// answer ([Arena.Check]).
func Metadata(data []byte) (map[string]string, error) {
	if len(data) < 8 {
		return nil, corruptf("safetensors file of %d bytes is shorter than its 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxHeaderLen || n > uint64(len(data)-8) {
		return nil, corruptf("safetensors header length %d does not fit a file of %d bytes (truncated or not safetensors)", n, len(data))
	}
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	// encoding/json panics when its input changes between its validity scan
	// and its decode; a private copy cannot.
	if err := json.Unmarshal(bytes.Clone(data[8:8+n]), &h); err != nil {
		return nil, corruptf("safetensors header: %v", err)
	}
	return h.Meta, nil
}

// headerEntry is one tensor of a parsed header and its data offsets.
type headerEntry struct {
	t          Tensor
	begin, end int64
}

// parseHeader parses and checks the JSON header; the entries come sorted by
// data offsets.
func parseHeader(hdr []byte) (entries []headerEntry, meta map[string]string, err error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("object key is not a string")
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("duplicate key %q", name)
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("%s: %v (values must be strings)", metadataKey, err)
			}
			continue
		}
		var info struct {
			DType       *string `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := dec.Decode(&info); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %v", name, err)
		}
		if name == "" || info.DType == nil || info.Shape == nil || len(info.DataOffsets) != 2 {
			return nil, nil, fmt.Errorf("tensor %q: needs a name, dtype, shape and two data_offsets", name)
		}
		begin, end := info.DataOffsets[0], info.DataOffsets[1]
		size, err := byteSize(*info.DType, info.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %v", name, err)
		}
		if begin < 0 || end < begin || end-begin != size {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] do not hold %s %v (%d bytes)", name, begin, end, *info.DType, info.Shape, size)
		}
		if name == ExtraName && (*info.DType != "U8" || len(info.Shape) != 1) {
			return nil, nil, fmt.Errorf("tensor %q must be 1-D U8", ExtraName)
		}
		entries = append(entries, headerEntry{Tensor{Name: name, DType: *info.DType, Shape: info.Shape}, begin, end})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, nil, err
	}
	if rest := bytes.TrimLeft(hdr[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, nil, fmt.Errorf("%d bytes after the JSON object", len(rest))
	}
	slices.SortStableFunc(entries, func(a, b headerEntry) int {
		if a.begin != b.begin {
			return cmpInt64(a.begin, b.begin)
		}
		return cmpInt64(a.end, b.end)
	})
	return entries, meta, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
