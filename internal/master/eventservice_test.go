package master

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/eventlog"
)

// TestListAndWatchEvents: ListEvents answers the events after a number,
// within its limit; WatchEvents sends what there is, then each new event
// as it is appended; both want the job's token.
func TestListAndWatchEvents(t *testing.T) {
	m, c := startMaster(t, Config{StateDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		m.core.logEvents(eventlog.Event{Time: time.Now(), Kind: eventlog.Restart, Severity: eventlog.Warning, Round: i + 2, Message: "round opens"})
	}
	resp, err := c.ListEvents(ctx, connect.NewRequest(&roverv1.ListEventsRequest{Since: 2, Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	evs := resp.Msg.GetEvents()
	if len(evs) != 2 || evs[0].GetSeq() != 3 || evs[1].GetSeq() != 4 || resp.Msg.GetLast() != 6 || resp.Msg.GetOldest() != 1 {
		t.Fatalf("ListEvents(since 2, limit 2): %v, oldest %d, last %d; want 3 and 4 of 1..6", evs, resp.Msg.GetOldest(), resp.Msg.GetLast())
	}
	if evs[0].GetKind() != string(eventlog.Restart) || evs[0].GetRound() != 3 || evs[0].GetSeverity() != "Warning" {
		t.Errorf("event 3: %v", evs[0])
	}
	if _, err := c.ListEvents(ctx, connect.NewRequest(&roverv1.ListEventsRequest{Limit: -1})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListEvents(limit -1): %v, want InvalidArgument", err)
	}

	stream, err := c.WatchEvents(ctx, connect.NewRequest(&roverv1.WatchEventsRequest{Since: 5}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("WatchEvents: %v", stream.Err())
	}
	if evs := stream.Msg().GetEvents(); len(evs) != 1 || evs[0].GetSeq() != 6 {
		t.Fatalf("WatchEvents(since 5) first message %v, want event 6", evs)
	}
	m.core.logEvents(eventlog.Event{Time: time.Now(), Kind: eventlog.JobSucceeded, Severity: eventlog.Normal, Message: "the job succeeded"})
	if !stream.Receive() {
		t.Fatalf("WatchEvents: %v", stream.Err())
	}
	if evs := stream.Msg().GetEvents(); len(evs) != 1 || evs[0].GetSeq() != 7 || evs[0].GetKind() != string(eventlog.JobSucceeded) {
		t.Fatalf("WatchEvents next message %v, want event 7, job_succeeded", evs)
	}

	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	stranger := client.New(hc, m.Addr(), "wrong-token")
	if _, err := stranger.ListEvents(ctx, connect.NewRequest(&roverv1.ListEventsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("ListEvents with a wrong token: %v, want Unauthenticated", err)
	}
	ws, err := stranger.WatchEvents(ctx, connect.NewRequest(&roverv1.WatchEventsRequest{}))
	if err == nil {
		ws.Receive()
		err = ws.Err()
		ws.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("WatchEvents with a wrong token: %v, want Unauthenticated", err)
	}
}

// TestWatchEventsOverHTTP1: a browser's page (the dashboard) follows the
// events with the Connect protocol over HTTP/1.1: a server stream of
// enveloped JSON messages.
func TestWatchEventsOverHTTP1(t *testing.T) {
	m, _ := startMaster(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := append([]byte{0, 0, 0, 0, 2}, "{}"...) // one envelope: flags, length, message
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.Addr()+roverv1connect.MasterServiceWatchEventsProcedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set(client.AuthHeader, client.AuthScheme+testToken)
	hc := &http.Client{Transport: &http.Transport{}} // HTTP/1.1
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("%s %s", resp.Proto, resp.Status)
	}
	readMessage := func() map[string]any {
		t.Helper()
		head := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(msg, &v); err != nil {
			t.Fatalf("message %q: %v", msg, err)
		}
		return v
	}
	if first := readMessage(); !strings.Contains(fmt.Sprint(first), "master_started") {
		t.Fatalf("first message %v, want the master_started event", first)
	}
	m.core.logEvents(eventlog.Event{Time: time.Now(), Kind: eventlog.WorkerFailed, Severity: eventlog.Warning, Message: "<img src=x onerror=alert(1)>"})
	if next := readMessage(); !strings.Contains(fmt.Sprint(next), "<img src=x onerror=alert(1)>") {
		t.Fatalf("next message %v, want the failure, its message as data", next)
	}
}

// TestWatchEventsEndsWithTheMaster: a master that stops ends its event
// streams in order, so that `rover events --follow` exits 0 at the job's
// end.
func TestWatchEventsEndsWithTheMaster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := New(ctx, Config{Listen: "127.0.0.1:0", Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute) // the client's own
	defer ccancel()
	stream, err := client.New(hc, m.Addr(), testToken).WatchEvents(cctx, connect.NewRequest(&roverv1.WatchEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("WatchEvents: %v", stream.Err())
	}
	cancel() // the master stops
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Errorf("the stream of a stopping master ended with %v, want no error", err)
	}
	if err := <-done; err != nil {
		t.Errorf("master Run: %v", err)
	}
}
