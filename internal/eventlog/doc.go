// Package eventlog is a job's event log: the transitions a user cares about
// (a world formed, a worker failed and what the master did about it, a
// restart, a relaunch, a committed checkpoint, a hang, the job's end), one
// JSON object per line in events.jsonl in the job's directory, numbered
// without gaps across master restarts, bounded on disk by rotation and in
// memory by a ring that the master's API serves ("everything since N" and a
// live follow). It does not decide what happened: the master derives the
// events from its state machines' transitions and appends them.
//
//	l, err := eventlog.Open(stateDir, eventlog.Options{})
//	if err != nil { ... }
//	l.Append(eventlog.Event{Time: now, Kind: eventlog.Restart, Severity: eventlog.Warning, Message: "..."})
//	evs, _ := l.Since(0, 0) // every event the ring holds
//	<-l.Wait()              // the next Append
package eventlog
