package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/jobview"
)

func TestEventsFlags(t *testing.T) {
	env := map[string]string{"ROVER_MASTER_ADDR": "m:1", "ROVER_TOKEN_FILE": "t"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		args    []string
		getenv  func(string) string
		want    *eventsConfig
		wantErr string
	}{
		{"from the variables", nil, getenv, &eventsConfig{statusConfig: statusConfig{Master: "m:1", TokenFile: "t"}, Reconnect: 10 * time.Minute}, ""},
		{"follow as JSON since 7", []string{"--follow", "--json", "--since", "7", "--reconnect", "0"}, getenv,
			&eventsConfig{statusConfig: statusConfig{Master: "m:1", TokenFile: "t"}, Follow: true, JSON: true, Since: 7}, ""},
		{"a negative reconnect", []string{"--reconnect", "-1s"}, getenv, nil, "--reconnect=-1s: want a duration of 0 or more"},
		{"no master", nil, func(string) string { return "" }, nil, "rover events needs --master HOST:PORT (or ROVER_MASTER_ADDR)"},
		{"a URL", []string{"--master", "http://h:2"}, getenv, nil,
			"--master=http://h:2: want HOST:PORT, not a URL; for a master that serves TLS, add --tls-ca FILE"},
		{"since not a number", []string{"--since", "yesterday"}, getenv, nil,
			`invalid value "yesterday" for flag -since: parse error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEventsFlags(tt.args, io.Discard, tt.getenv)
			if tt.wantErr != "" {
				if _, ok := err.(usageError); !ok || err.Error() != tt.wantErr {
					t.Fatalf("parseEventsFlags(%q) = %+v, %v (%T); want the usage error %q", tt.args, got, err, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(eventsConfig{})); diff != "" {
				t.Errorf("parseEventsFlags(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

// TestEventLineAndJSON: an event prints on one line, whatever its strings
// hold, and --json gives back the line of events.jsonl.
func TestEventLineAndJSON(t *testing.T) {
	e := &roverv1.Event{Seq: 3, TimeUnixNanos: 1_000_000_000, Kind: "worker_failed", Severity: "Warning", Node: "node\x1b[31m0", Round: 1,
		Message: "rank 2 on node node0 exited 1; cause user-error, action restart-in-place", Rank: new(int32(2)), ExitCode: new(int32(1)),
		Cause: "user-error", Action: "restart-in-place", Excerpt: "Traceback (most recent call last):\n  File \"train.py\"\nRuntimeError: boom\n"}
	line := jobview.EventLine(e)
	if strings.ContainsAny(line, "\n\x1b") {
		t.Errorf("line %q holds a newline or an escape", line)
	}
	for _, want := range []string{"     3", "1970-01-01T00:00:01.000Z", "Warning", "worker_failed", "round 1", "exited 1", "RuntimeError: boom"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q does not hold %q", line, want)
		}
	}
	b, err := json.Marshal(eventFromProto(e))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":3,"time":"1970-01-01T00:00:01Z","kind":"worker_failed","severity":"Warning","node":"node\u001b[31m0","round":1,` +
		`"message":"rank 2 on node node0 exited 1; cause user-error, action restart-in-place","rank":2,"exit_code":1,"cause":"user-error",` +
		`"action":"restart-in-place","excerpt":"Traceback (most recent call last):\n  File \"train.py\"\nRuntimeError: boom\n"}`
	if string(b) != want {
		t.Errorf("--json line\n%s\nwant\n%s", b, want)
	}
}

// TestRenumberedMaster: a follower that finds a master whose newest event
// is older than the last it printed (a master without a state dir,
// restarted) follows it from its first event, saying so; one that numbers
// on is followed on.
func TestRenumberedMaster(t *testing.T) {
	addr, tokenFile := startTestMaster(t) // one event: master_started
	c := &statusConfig{Master: addr, TokenFile: tokenFile}
	mc, closeConns, err := c.client()
	if err != nil {
		t.Fatal(err)
	}
	defer closeConns()
	var stderr strings.Builder
	if got := renumbered(t.Context(), mc, 1, &stderr); got != 1 || stderr.Len() != 0 {
		t.Errorf("renumbered(1) = %d (%q), want 1 silently: the master numbers on", got, stderr.String())
	}
	if got := renumbered(t.Context(), mc, 40, &stderr); got != 0 || !strings.Contains(stderr.String(), "numbers its events afresh") {
		t.Errorf("renumbered(40) = %d (%q), want 0, saying why", got, stderr.String())
	}
}
