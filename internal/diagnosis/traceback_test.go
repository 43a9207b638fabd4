package diagnosis

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

const valueErrorAt42 = `Traceback (most recent call last):
  File "/workspace/train.py", line 87, in <module>
    main()
  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper
    return f(*args, **kwargs)
  File "/workspace/train.py", line 42, in main
    raise ValueError(f"bad batch size {bs}")
ValueError: bad batch size 3
`

func TestParseTraceback(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Traceback
	}{
		{"error file py_callstack", valueErrorAt42,
			Traceback{Type: "ValueError", Message: "bad batch size 3", File: "/workspace/train.py", Line: 42, Func: "main"}},
		{"log with prefixes and other lines", "[default0]:step 10 loss 0.3\n" +
			strings.ReplaceAll(strings.TrimSpace(valueErrorAt42), "\n", "\n[default0]:") + "\n[default0]:bye",
			Traceback{Type: "ValueError", Message: "bad batch size 3", File: "/workspace/train.py", Line: 42, Func: "main"}},
		{"python 3.11 carets", `Traceback (most recent call last):
  File "/w/train.py", line 9, in <module>
    x = d["k"]
        ~^^^^^
KeyError: 'k'`, Traceback{Type: "KeyError", Message: "'k'", File: "/w/train.py", Line: 9, Func: "<module>"}},
		{"chained: the last exception counts", `Traceback (most recent call last):
  File "/w/a.py", line 3, in f
    open("x")
FileNotFoundError: [Errno 2] No such file or directory: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/w/a.py", line 5, in f
    raise RuntimeError("no data")
RuntimeError: no data`, Traceback{Type: "RuntimeError", Message: "no data", File: "/w/a.py", Line: 5, Func: "f"}},
		{"dotted type", `Traceback (most recent call last):
  File "/w/t.py", line 12, in step
    y = model(x)
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB`,
			Traceback{Type: "torch.cuda.OutOfMemoryError", Message: "CUDA out of memory. Tried to allocate 2.00 GiB", File: "/w/t.py", Line: 12, Func: "step"}},
		{"no message", "Traceback (most recent call last):\n  File \"/w/t.py\", line 1, in <module>\n    f()\nKeyboardInterrupt\n",
			Traceback{Type: "KeyboardInterrupt", File: "/w/t.py", Line: 1, Func: "<module>"}},
		{"frames only, cut before the exception", "Traceback (most recent call last):\n  File \"/w/t.py\", line 7, in g\n",
			Traceback{File: "/w/t.py", Line: 7, Func: "g"}},
		{"no traceback", "Segmentation fault (core dumped)\n", Traceback{}},
		{"empty", "", Traceback{}},
		{"huge line number", "  File \"/w/t.py\", line 99999999999999999999999, in g\nValueError: x", Traceback{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseTraceback(tt.in)); diff != "" {
				t.Errorf("ParseTraceback (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitException(t *testing.T) {
	tests := []struct{ in, typ, text string }{
		{"ValueError: bad batch size 3", "ValueError", "bad batch size 3"},
		{"torch.cuda.OutOfMemoryError: CUDA out of memory.", "torch.cuda.OutOfMemoryError", "CUDA out of memory."},
		{"worker exited", "", "worker exited"},
		{"could not start: exec: python: not found", "", "could not start: exec: python: not found"},
		{"", "", ""},
	}
	for _, tt := range tests {
		typ, text := splitException(tt.in)
		if typ != tt.typ || text != tt.text {
			t.Errorf("splitException(%q) = %q, %q; want %q, %q", tt.in, typ, text, tt.typ, tt.text)
		}
	}
}

func TestNormalizeMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"bad batch size 3", "bad batch size #"},
		{"tensor at 0x7f3a9c001e80 is\n  freed", "tensor at 0x# is freed"},
		{"Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)", "Tried to allocate #.# GiB (GPU #; #.# GiB total)"},
		{strings.Repeat("é", 200), strings.Repeat("é", 128)},
	}
	for _, tt := range tests {
		if got := normalizeMessage(tt.in); got != tt.want {
			t.Errorf("normalizeMessage(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzParseTraceback(f *testing.F) {
	f.Add(valueErrorAt42)
	f.Add("[rank0]: File \"x\", line 1, in y\n[rank0]:E: m")
	f.Add("Traceback (most recent call last):\n  File \"\", line 0\n\tX")
	f.Add("  File \"a\", line 1\nA.B.: x")
	f.Fuzz(func(t *testing.T, s string) {
		tb := ParseTraceback(s)
		if tb.Line < 0 {
			t.Errorf("negative line %d", tb.Line)
		}
		if (tb.File == "") != (tb.Place() == "") {
			t.Errorf("Place %q for file %q", tb.Place(), tb.File)
		}
		if strings.Contains(tb.Type, "\n") || strings.Contains(tb.Message, "\n") {
			t.Errorf("multi-line exception %q: %q", tb.Type, tb.Message)
		}
		if m := normalizeMessage(s); len(m) > maxSignatureMessage || (utf8.ValidString(s) && !utf8.ValidString(m)) {
			t.Errorf("normalizeMessage gave %d bytes, valid %v", len(m), utf8.ValidString(m))
		}
	})
}
