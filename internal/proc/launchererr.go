package proc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/roverml/rover/internal/userfile"
)

// WriteRootCauseFile writes the error file of a launcher whose workers
// failed, to path (the launcher's own TORCHELASTIC_ERROR_FILE), as torch's
// ErrorHandler.dump_error_file does for torchrun: the root cause's error
// file, copied with its "message" object's "errorCode" set to the worker's
// exit code (-N for signal N). A root cause whose ErrorFile is "" or cannot
// be read as a JSON object (a worker without @record, or a failure on
// another node) gets a file in the same layout, which torchrun would not
// write:
//
//	{"message": {"message": "<error, or torchrun's hint or signal line>",
//	             "extraInfo": {"py_callstack": "<traceback, or stderr tail>", "timestamp": "<unix seconds>"},
//	             "errorCode": <exit code>}}
//
// An existing file at path is replaced.
func WriteRootCauseFile(path string, root Failure) error {
	data, err := rootCauseRecord(root)
	if err != nil {
		return fmt.Errorf("write the root cause's error file %s: %w", path, err)
	}
	return writeErrorFile(path, data)
}

// WriteExceptionFile writes a launcher's own failure to path, in the layout
// of torch's ErrorHandler.record_exception: message is "<Type>: <text>".
func WriteExceptionFile(path, message, callstack string, t time.Time) error {
	data, err := json.Marshal(map[string]any{"message": map[string]any{
		"message":   message,
		"extraInfo": map[string]string{"py_callstack": callstack, "timestamp": strconv.FormatInt(t.Unix(), 10)},
	}})
	if err != nil {
		return fmt.Errorf("write the error file %s: %w", path, err)
	}
	return writeErrorFile(path, data)
}

func writeErrorFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write the error file: %w", err)
	}
	_ = os.Remove(path)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write the error file: %w", err)
	}
	return nil
}

// errorCode is torch's ProcessFailure.exitcode: -N for signal N.
func errorCode(e Exit) int {
	if e.Signal != 0 {
		return -int(e.Signal)
	}
	return e.Code
}

func rootCauseRecord(root Failure) ([]byte, error) {
	if root.ErrorFile != "" {
		if data, err := copyWithErrorCode(root.ErrorFile, errorCode(root.Exit)); err == nil {
			return data, nil
		}
	}
	msg, stack := traceback(root), root.LogTail
	if root.Error != nil {
		msg, stack = orNA(root.Error.Message), root.Error.Traceback
	}
	t := root.Time
	if root.Error != nil && !root.Error.Time.IsZero() {
		t = root.Error.Time
	}
	return json.Marshal(object{{"message", mustJSON(object{
		{"message", mustJSON(msg)},
		{"extraInfo", mustJSON(object{
			{"py_callstack", mustJSON(stack)},
			{"timestamp", mustJSON(strconv.FormatInt(t.Unix(), 10))},
		})},
		{"errorCode", mustJSON(errorCode(root.Exit))},
	})}})
}

// copyWithErrorCode reads a worker's error file and sets errorCode in its
// "message" object, keeping every other member and their order. As in
// torch, a "message" that is a string, or none, is left alone, and code 0
// sets nothing.
func copyWithErrorCode(path string, code int) ([]byte, error) {
	data, err := userfile.ReadMax(path, maxErrorFileSize)
	if err != nil {
		return nil, err
	}
	top, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	if i := top.index("message"); i >= 0 && code != 0 && bytes.HasPrefix(top[i].value, []byte("{")) {
		msg, err := decodeObject(top[i].value)
		if err != nil {
			return nil, err
		}
		msg = msg.set("errorCode", mustJSON(code))
		top[i].value = mustJSON(msg)
	}
	return json.Marshal(top)
}

// object is a JSON object that keeps its members' order.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

func (o object) index(key string) int {
	for i, m := range o {
		if m.key == key {
			return i
		}
	}
	return -1
}

func (o object) set(key string, value json.RawMessage) object {
	if i := o.index(key); i >= 0 {
		o[i].value = value
		return o
	}
	return append(o, member{key, value})
}

// MarshalJSON writes the members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(m.key))
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeObject decodes a JSON object, keeping its members' order.
func decodeObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = o.set(key, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}

// mustJSON marshals values that always marshal: strings, ints, objects.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
