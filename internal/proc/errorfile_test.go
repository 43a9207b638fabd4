package proc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const torchErrorFile = `{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\nValueError: boom\n", "timestamp": "1764464523"}}}`

func TestReadErrorFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    *ErrorRecord
	}{
		{"torch record", torchErrorFile, &ErrorRecord{
			Message:   "ValueError: boom",
			Traceback: "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\nValueError: boom\n",
			Time:      time.Unix(1764464523, 0),
		}},
		{"string message", `{"message": "RuntimeError: old style", "timestamp": 1764464523}`,
			&ErrorRecord{Message: "RuntimeError: old style", Time: time.Unix(1764464523, 0)}},
		{"string message string timestamp", `{"message": "m", "timestamp": "1764464523"}`,
			&ErrorRecord{Message: "m", Time: time.Unix(1764464523, 0)}},
		{"string message no timestamp", `{"message": "m"}`, &ErrorRecord{Message: "m"}},
		{"no extraInfo", `{"message": {"message": "m"}}`, &ErrorRecord{Message: "m"}},
		{"zero timestamp", `{"message": {"message": "m", "extraInfo": {"timestamp": "0"}}}`, &ErrorRecord{Message: "m"}},
		{"bad timestamp", `{"message": {"message": "m", "extraInfo": {"timestamp": "soon"}}}`, &ErrorRecord{Message: "m"}},
		{"fractional timestamp", `{"message": {"message": "m", "extraInfo": {"timestamp": 1764464523.5}}}`,
			&ErrorRecord{Message: "m", Time: time.Unix(1764464523, 500_000_000)}},
		{"extra fields ignored", `{"message": {"message": "m", "errorCode": 3, "extraInfo": {"py_callstack": "tb"}}, "x": []}`,
			&ErrorRecord{Message: "m", Traceback: "tb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "error.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadErrorFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadErrorFile mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadErrorFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{"empty", ""},
		{"truncated", `{"message": {"message": "m"`},
		{"not an object", `["message"]`},
		{"null", `null`},
		{"no message", `{"timestamp": "1"}`},
		{"null message", `{"message": null}`},
		{"numeric message", `{"message": 42}`},
		{"wrong inner type", `{"message": {"message": 42}}`},
		{"wrong traceback type", `{"message": {"message": "m", "extraInfo": {"py_callstack": ["tb"]}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "error.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			rec, err := ReadErrorFile(path)
			if err == nil {
				t.Fatalf("ReadErrorFile = %+v, want an error", rec)
			}
			if errors.Is(err, os.ErrNotExist) {
				t.Errorf("malformed file reported as missing: %v", err)
			}
		})
	}
}

func TestReadErrorFileMissing(t *testing.T) {
	_, err := ReadErrorFile(filepath.Join(t.TempDir(), "error.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadErrorFile(missing) error %v, want os.ErrNotExist", err)
	}
}

func FuzzParseErrorFile(f *testing.F) {
	for _, seed := range []string{
		torchErrorFile,
		`{"message": "m", "timestamp": 1}`,
		`{"message": {"message": "m", "extraInfo": {"timestamp": 1e300}}}`,
		`{"message": {"message": "m", "extraInfo": {"timestamp": "-9223372036854775808"}}}`,
		`{"message": {"extraInfo": {"timestamp": "NaN"}}}`,
		`{"message": 1}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := parseErrorFile(data)
		if (rec == nil) == (err == nil) {
			t.Fatalf("parseErrorFile = %v, %v: want exactly one of record and error", rec, err)
		}
		if rec != nil {
			_ = FormatReport("fuzz", []Failure{{Error: rec, Time: rec.Time}})
		}
	})
}
