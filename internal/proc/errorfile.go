package proc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/roverml/rover/internal/userfile"
)

// maxErrorFileSize bounds how much of an error file is read.
const maxErrorFileSize = 16 << 20

// ErrorRecord is the content of an error file written by torch's
// torch.distributed.elastic.multiprocessing.errors.record decorator to the
// path in TORCHELASTIC_ERROR_FILE.
type ErrorRecord struct {
	// Message is the error, such as "ValueError: bad input".
	Message string
	// Traceback is the Python call stack; "" for files without one.
	Traceback string
	// Time is when the error was recorded; zero if absent or unparsable.
	Time time.Time
}

// ReadErrorFile reads and parses an error file. If the file does not exist
// the error wraps os.ErrNotExist.
func ReadErrorFile(path string) (*ErrorRecord, error) {
	data, err := userfile.ReadMax(path, maxErrorFileSize)
	if err != nil {
		return nil, fmt.Errorf("read error file: %w", err)
	}
	rec, err := parseErrorFile(data)
	if err != nil {
		return nil, fmt.Errorf("read error file %s: %w", path, err)
	}
	return rec, nil
}

// parseErrorFile decodes either of torch's error file layouts:
//
//	{"message": {"message": "<Type>: <msg>",
//	             "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix seconds>"}}}
//	{"message": "<msg>", "timestamp": <unix seconds>}
func parseErrorFile(data []byte) (*ErrorRecord, error) {
	var top struct {
		Message   json.RawMessage `json:"message"`
		Timestamp json.RawMessage `json:"timestamp"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("malformed error file: %w", err)
	}
	msg := bytes.TrimSpace(top.Message)
	switch {
	case len(msg) == 0 || bytes.Equal(msg, []byte("null")):
		return nil, errors.New(`malformed error file: no "message"`)
	case msg[0] == '"':
		rec := &ErrorRecord{Time: parseTimestamp(top.Timestamp)}
		if err := json.Unmarshal(msg, &rec.Message); err != nil {
			return nil, fmt.Errorf("malformed error file: message: %w", err)
		}
		return rec, nil
	case msg[0] == '{':
		var m struct {
			Message   string `json:"message"`
			ExtraInfo struct {
				PyCallstack string          `json:"py_callstack"`
				Timestamp   json.RawMessage `json:"timestamp"`
			} `json:"extraInfo"`
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			return nil, fmt.Errorf("malformed error file: message: %w", err)
		}
		return &ErrorRecord{
			Message:   m.Message,
			Traceback: m.ExtraInfo.PyCallstack,
			Time:      parseTimestamp(m.ExtraInfo.Timestamp),
		}, nil
	default:
		return nil, errors.New(`malformed error file: "message" is neither a string nor an object`)
	}
}

// parseTimestamp accepts unix seconds as a JSON number or string. It returns
// the zero time for anything else, and for 0, which torch writes when it has
// no timestamp.
func parseTimestamp(raw json.RawMessage) time.Time {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return time.Time{}
	}
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case float64:
		s = string(bytes.TrimSpace(raw))
	default:
		return time.Time{}
	}
	if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
		if sec <= 0 {
			return time.Time{}
		}
		return time.Unix(sec, 0)
	}
	f, err := strconv.ParseFloat(s, 64)
	// Beyond ±2^53 seconds float seconds are meaningless; also keeps the
	// conversion to int64 defined.
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1<<53 {
		return time.Time{}
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9))
}
