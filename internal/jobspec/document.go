package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/roverml/rover/internal/userfile"
	yaml "go.yaml.in/yaml/v3"
)

// The bounds of every document Rover reads from its users (job specs given
// to rover submit, ElasticJobs the operator and the master read, ScalePlans):
// how many bytes it may hold, how large it may grow once YAML aliases are
// expanded, and how many alias expansions it may make. A job spec is a few
// kilobytes; the bounds are far above any real one and keep a hostile or
// broken document from costing more than a few tens of megabytes.
const (
	MaxDocumentBytes   = 1 << 20 // 1 MiB, below Kubernetes' 1.5 MiB object limit
	MaxExpandedBytes   = 4 << 20 // 4 MiB of JSON after alias expansion
	MaxAliasExpansions = 1000
)

// ErrTooLarge is wrapped by the errors of documents past one of the bounds.
var ErrTooLarge = errors.New("the document is too large")

// ReadDocument reads a document file of at most MaxDocumentBytes, without
// reading more than one byte past the bound.
func ReadDocument(name string) ([]byte, error) {
	data, err := userfile.ReadMax(name, MaxDocumentBytes)
	if errors.Is(err, userfile.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w (MaxDocumentBytes, 1 MiB); a job spec is a few kilobytes: is it the right file?", ErrTooLarge, err)
	}
	return data, err
}

// DocumentToJSON converts one YAML (or JSON) document to JSON within the
// bounds above. It refuses a mapping that gives a key twice (naming the key
// and both lines), a file of several documents, and keys that are not
// strings. Merge keys (<<) are applied.
func DocumentToJSON(data []byte) ([]byte, error) {
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: it holds %d bytes, more than %d (MaxDocumentBytes, 1 MiB); a job spec is a few kilobytes", ErrTooLarge, len(data), MaxDocumentBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return []byte("null"), nil
		}
		return nil, fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			return nil, fmt.Errorf("not valid YAML after the first document: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, fmt.Errorf("a second document starts at line %d; give one object per file", line)
	}
	w := &jsonWriter{}
	if err := w.node(&doc); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

// jsonWriter writes a YAML node tree as JSON, counting what aliases expand.
type jsonWriter struct {
	buf     bytes.Buffer
	aliases int
	depth   int
}

func (w *jsonWriter) grow() error {
	if w.buf.Len() > MaxExpandedBytes {
		return fmt.Errorf("%w: it expands to more than %d bytes (MaxExpandedBytes, 4 MiB), through YAML aliases (*name) or sheer size: write it out without repeating big anchors", ErrTooLarge, MaxExpandedBytes)
	}
	return nil
}

func (w *jsonWriter) node(n *yaml.Node) error {
	if err := w.grow(); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			w.buf.WriteString("null")
			return nil
		}
		return w.node(n.Content[0])
	case yaml.AliasNode:
		w.aliases++
		if w.aliases > MaxAliasExpansions {
			return fmt.Errorf("%w: line %d: more than %d alias expansions (MaxAliasExpansions); write the repeated parts out", ErrTooLarge, n.Line, MaxAliasExpansions)
		}
		w.depth++
		defer func() { w.depth-- }()
		if w.depth > 100 {
			return fmt.Errorf("line %d: aliases nest more than 100 deep", n.Line)
		}
		return w.node(n.Alias)
	case yaml.SequenceNode:
		w.buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			if err := w.node(c); err != nil {
				return err
			}
		}
		w.buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		pairs, err := mappingPairs(n)
		if err != nil {
			return err
		}
		w.buf.WriteByte('{')
		for i, p := range pairs {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			writeString(&w.buf, p.key)
			w.buf.WriteByte(':')
			if err := w.node(p.value); err != nil {
				return err
			}
		}
		w.buf.WriteByte('}')
		return nil
	case yaml.ScalarNode:
		return w.scalar(n)
	}
	return fmt.Errorf("line %d: an unexpected YAML node", n.Line)
}

func (w *jsonWriter) scalar(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		w.buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("line %d: %q is not true or false", n.Line, n.Value)
		}
		w.buf.WriteString(strconv.FormatBool(b))
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			// Past int64: JSON's number as text; the field's check names it.
			writeString(&w.buf, n.Value)
			return nil
		}
		w.buf.WriteString(strconv.FormatInt(i, 10))
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			writeString(&w.buf, n.Value) // .inf, .nan: left for the field's check
			return nil
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			// 1e9 is a whole number: written so, it reads as one.
			w.buf.WriteString(strconv.FormatInt(int64(f), 10))
			return nil
		}
		w.buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	default:
		writeString(&w.buf, n.Value)
	}
	return nil
}

type pair struct {
	key   string
	value *yaml.Node
}

// mappingPairs returns a mapping's pairs in order, merge keys applied
// (explicit keys win), refusing a key given twice.
func mappingPairs(n *yaml.Node) ([]pair, error) {
	var pairs []pair
	line := map[string]int{}
	var merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			ms, err := mergeSources(v)
			if err != nil {
				return nil, err
			}
			merged = append(merged, ms...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a mapping key must be a plain value, not a list or mapping", k.Line)
		}
		if first, dup := line[k.Value]; dup {
			return nil, fmt.Errorf("line %d: the key %q is given twice (also at line %d); keep one", k.Line, k.Value, first)
		}
		line[k.Value] = k.Line
		pairs = append(pairs, pair{k.Value, v})
	}
	for _, p := range merged {
		if _, set := line[p.key]; !set {
			line[p.key] = 0
			pairs = append(pairs, p)
		}
	}
	return pairs, nil
}

// mergeSources returns the pairs a merge key's value brings: one mapping
// (or an alias of one) or a list of them, earlier ones first.
func mergeSources(v *yaml.Node) ([]pair, error) {
	for v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	var srcs []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		srcs = []*yaml.Node{v}
	case yaml.SequenceNode:
		srcs = v.Content
	default:
		return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", v.Line)
	}
	var out []pair
	seen := map[string]bool{}
	for _, s := range srcs {
		for s.Kind == yaml.AliasNode {
			s = s.Alias
		}
		if s.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", s.Line)
		}
		ps, err := mappingPairs(s)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if !seen[p.key] {
				seen[p.key] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}
