package master

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
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
