package diagnosis

import (
	"regexp"
	"strconv"
	"strings"
)

// maxTracebackScan bounds how much of a traceback is parsed: the end, where
// the innermost frame and the exception are.
const maxTracebackScan = 64 << 10

// maxSignatureMessage bounds a normalized message, in bytes.
const maxSignatureMessage = 256

// Traceback is what [ParseTraceback] finds in a Python traceback.
type Traceback struct {
	// Type is the exception's type as printed, such as "ValueError" or
	// "torch.cuda.OutOfMemoryError"; "" if none was found.
	Type string
	// Message is the text after "Type: "; "" if none.
	Message string
	// File and Line locate the innermost frame (the last "File" line of the
	// last traceback, where the exception was raised); "" and 0 if none.
	File string
	Line int
	// Func is the innermost frame's function, such as "main" or "<module>".
	Func string
}

// Place returns "file:line" of the innermost frame, or "" without one.
func (t Traceback) Place() string {
	if t.File == "" {
		return ""
	}
	return t.File + ":" + strconv.Itoa(t.Line)
}

var (
	// frameLine is a frame header: `  File "/w/train.py", line 42, in main`.
	frameLine = regexp.MustCompile(`^\s*File "([^"]+)", line (\d+)(?:, in (.+))?$`)
	// exceptionLine is the last line of a traceback: `Type` or `Type: msg`,
	// the type a dotted Python name.
	exceptionLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::\s?(.*))?$`)
	// logPrefix is what torchrun and Rover put before a worker's lines:
	// "[default0]:", "[rank3]:".
	logPrefix = regexp.MustCompile(`^\[[A-Za-z0-9_-]{1,32}\]:`)
)

// ParseTraceback finds the innermost frame and the exception of the last
// Python traceback in s, which may be a bare traceback (an error file's
// py_callstack) or a worker's log with other lines around it. Line prefixes
// such as "[default0]:" are ignored. With chained exceptions ("During
// handling of the above exception ...") the last one, the one that ended
// the program, is used. Parts not found are left empty. It never panics.
func ParseTraceback(s string) Traceback {
	if len(s) > maxTracebackScan {
		s = s[len(s)-maxTracebackScan:]
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if loc := logPrefix.FindStringIndex(l); loc != nil {
			l = l[loc[1]:]
		}
		lines[i] = l
	}
	start := 0
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "Traceback (most recent call last):") {
			start = i
			break
		}
	}
	var t Traceback
	lastFrame := -1
	for i := start; i < len(lines); i++ {
		m := frameLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[2])
		if err != nil {
			continue // a line number beyond int
		}
		t.File, t.Line, t.Func, lastFrame = m[1], n, m[3], i
	}
	if lastFrame < 0 {
		return t
	}
	// The exception is the first unindented line after the innermost
	// frame; the indented lines between are source and caret lines.
	for _, l := range lines[lastFrame+1:] {
		if l == "" || l[0] == ' ' || l[0] == '\t' {
			continue
		}
		if m := exceptionLine.FindStringSubmatch(l); m != nil {
			t.Type, t.Message = m[1], strings.TrimSpace(m[2])
		}
		break
	}
	return t
}

// splitException splits torch's error file message "Type: msg" into its
// type and text. A message that does not start with a Python name and a
// colon has no type.
func splitException(msg string) (typ, text string) {
	first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	m := exceptionLine.FindStringSubmatch(first)
	if m == nil || !strings.Contains(first, ":") {
		return "", strings.TrimSpace(msg)
	}
	return m[1], strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(msg), m[1]+":"))
}

// number is a hexadecimal number (an address) or a run of digits.
var number = regexp.MustCompile(`0[xX][0-9a-fA-F]+|[0-9]+`)

// normalizeMessage makes an exception message comparable across attempts:
// hexadecimal numbers (addresses) become "0x#", other digit runs (sizes,
// ranks, ports, times) become "#", runs of white space become one space,
// and the result is cut to 256 bytes.
func normalizeMessage(msg string) string {
	msg = number.ReplaceAllStringFunc(msg, func(n string) string {
		if len(n) > 2 && (n[1] == 'x' || n[1] == 'X') {
			return "0x#"
		}
		return "#"
	})
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxSignatureMessage {
		// A rune cut in two at the end is dropped.
		msg = strings.ToValidUTF8(msg[:maxSignatureMessage], "")
	}
	return msg
}
