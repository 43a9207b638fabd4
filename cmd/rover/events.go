package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/jobview"
	"github.com/roverml/rover/internal/retry"
)

// eventsConfig is the validated command line of `rover events`.
type eventsConfig struct {
	statusConfig
	// JSON is --json: the events as events.jsonl holds them.
	JSON bool
	// Follow is --follow: stream new events until interrupted.
	Follow bool
	// Since is --since N: only the events after number N.
	Since uint64
	// Reconnect is --reconnect: how long --follow tries to reach a master
	// that went away (killed, restarting) before it gives up; 0 never.
	Reconnect time.Duration
}

func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseEventsFlags(args, stderr, os.Getenv)
	if err != nil {
		return helpIsNoError(err)
	}
	return showEvents(ctx, c, stdout, stderr)
}

// parseEventsFlags parses and checks the command line of `rover events`.
func parseEventsFlags(args []string, stderr io.Writer, getenv func(string) string) (*eventsConfig, error) {
	c := &eventsConfig{}
	fs := flag.NewFlagSet("rover events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.addFlags(fs, getenv)
	fs.BoolVar(&c.JSON, "json", false, "print each event as the JSON line the job's events.jsonl holds")
	fs.BoolVar(&c.Follow, "follow", false, "after the events so far, print each new one as it happens, until interrupted")
	fs.Uint64Var(&c.Since, "since", 0, "print only the events numbered above N (each event's first column)")
	fs.DurationVar(&c.Reconnect, "reconnect", 10*time.Minute, "with --follow: how long to try to reach a master whose connection broke (killed, restarting) before giving up; 0: do not")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := c.check("rover events"); err != nil {
		return nil, err
	}
	if c.Reconnect < 0 {
		return nil, usageError{fmt.Errorf("--reconnect=%s: want a duration of 0 or more", c.Reconnect)}
	}
	return c, nil
}

// showEvents prints the job's events, and with Follow the new ones as
// they come, until ctx ends.
func showEvents(ctx context.Context, c *eventsConfig, stdout, stderr io.Writer) error {
	mc, closeConns, err := c.client()
	if err != nil {
		return err
	}
	defer closeConns()
	print := func(evs []*roverv1.Event) error {
		for _, e := range evs {
			line := jobview.EventLine(e)
			if c.JSON {
				b, err := json.Marshal(eventFromProto(e))
				if err != nil {
					return err
				}
				line = string(b)
			}
			if _, err := fmt.Fprintln(stdout, line); err != nil {
				return err
			}
		}
		return nil
	}
	if !c.Follow {
		since := c.Since
		for {
			resp, err := mc.ListEvents(ctx, connect.NewRequest(&roverv1.ListEventsRequest{Since: since}))
			if err != nil {
				return fmt.Errorf("ask the master at %s for the job's events: %w", c.Master, err)
			}
			evs := resp.Msg.GetEvents()
			if err := print(evs); err != nil {
				return err
			}
			if len(evs) == 0 || evs[len(evs)-1].GetSeq() >= resp.Msg.GetLast() {
				return nil
			}
			since = evs[len(evs)-1].GetSeq()
		}
	}
	since := c.Since
	var lostAt time.Time
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 0; ; attempt++ {
		if !lostAt.IsZero() {
			since = renumbered(ctx, mc, since, stderr)
		}
		connected, printErr, err := followEvents(ctx, mc, &since, print)
		if printErr != nil {
			return printErr // stdout is gone: nothing to follow for
		}
		if err == nil || ctx.Err() != nil {
			return nil // the master stopped in order, or we were interrupted
		}
		if !client.Retryable(err) || c.Reconnect == 0 {
			return fmt.Errorf("follow the job's events at %s: %w", c.Master, err)
		}
		if connected || lostAt.IsZero() {
			lostAt, attempt = time.Now(), 0
			fmt.Fprintf(stderr, "rover events: lost the master at %s (%v); reconnecting for up to %s\n", c.Master, err, c.Reconnect)
		}
		if time.Since(lostAt) > c.Reconnect {
			return fmt.Errorf("follow the job's events: the master at %s stayed unreachable for %s: %w", c.Master, c.Reconnect, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff.Delay(attempt)):
		}
	}
}

// renumbered is where to follow a master found again from: since, unless
// its newest event is older (a master without a state dir numbers its
// events afresh when it restarts): then from its first.
func renumbered(ctx context.Context, mc roverv1connect.MasterServiceClient, since uint64, stderr io.Writer) uint64 {
	resp, err := mc.ListEvents(ctx, connect.NewRequest(&roverv1.ListEventsRequest{Since: since, Limit: 1}))
	if err != nil || resp.Msg.GetLast() >= since {
		return since // unreachable yet, or numbering on
	}
	fmt.Fprintf(stderr, "rover events: the master numbers its events afresh (its newest is %d, the last printed %d): it keeps them without a state dir; following from its first\n",
		resp.Msg.GetLast(), since)
	return 0
}

// followEvents streams the events after *since, printing them and moving
// *since on, until the stream ends: streamErr nil when the master ended it
// in order; printErr when printing failed. connected says the master
// answered this time.
func followEvents(ctx context.Context, mc roverv1connect.MasterServiceClient, since *uint64, print func([]*roverv1.Event) error) (connected bool, printErr, streamErr error) {
	stream, err := mc.WatchEvents(ctx, connect.NewRequest(&roverv1.WatchEventsRequest{Since: *since}))
	if err != nil {
		return false, nil, err
	}
	defer stream.Close()
	for stream.Receive() {
		connected = true
		evs := stream.Msg().GetEvents()
		if err := print(evs); err != nil {
			return connected, err, nil
		}
		if len(evs) > 0 {
			*since = evs[len(evs)-1].GetSeq()
		}
	}
	return connected, nil, stream.Err()
}

// eventFromProto is an event of the job's log as events.jsonl holds it,
// for `rover events --json`.
func eventFromProto(p *roverv1.Event) eventlog.Event {
	e := eventlog.Event{
		Seq: p.GetSeq(), Kind: eventlog.Kind(p.GetKind()), Severity: eventlog.Severity(p.GetSeverity()), Node: p.GetNode(),
		Round: int(p.GetRound()), Message: p.GetMessage(), Cause: p.GetCause(), Action: p.GetAction(), Excerpt: p.GetExcerpt(),
		Reason: p.GetReason(), WorldSize: int(p.GetWorldSize()), Nodes: int(p.GetNodes()), Verdict: p.GetVerdict(),
	}
	if t := p.GetTimeUnixNanos(); t != 0 {
		e.Time = time.Unix(0, t).UTC()
	}
	if p.Rank != nil {
		e.Rank = eventlog.Int(int(p.GetRank()))
	}
	if p.ExitCode != nil {
		e.ExitCode = eventlog.Int(int(p.GetExitCode()))
	}
	if p.Step != nil {
		e.Step = eventlog.Int64(p.GetStep())
	}
	return e
}
