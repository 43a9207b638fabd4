package eventlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Read returns the events after seq, oldest first, at most max (0: all
// there are): from the ring, and, for those older than the ring holds,
// from the files on disk (the rotated ones first). It reads the files
// without holding the log, so appends go on meanwhile; an event rotated
// away before it was read is missing (the numbers show the gap). oldest is
// the first event that could be found at all, 0 when there is none.
func (l *Log) Read(seq uint64, max int) (events []Event, oldest uint64, err error) {
	ring, ringOldest := l.Since(seq, max)
	if l.dir == "" || ringOldest == 0 || seq+1 >= ringOldest {
		return ring, ringOldest, nil
	}
	old, first, err := l.readFiles(seq, ringOldest, max)
	if err != nil {
		return ring, ringOldest, err
	}
	if first == 0 {
		first = ringOldest
	}
	events = old
	if max == 0 || len(events) < max {
		if max > 0 && len(ring) > max-len(events) {
			ring = ring[:max-len(events)]
		}
		events = append(events, ring...)
	}
	return events, first, nil
}

// readFiles reads the events numbered above seq and below before from the
// files, oldest first, at most max, and the number of the first event on
// disk.
func (l *Log) readFiles(seq, before uint64, max int) (events []Event, first uint64, err error) {
	last := seq
	for i := l.opts.KeepFiles; i >= 0; i-- {
		f, err := os.Open(l.path(i))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return events, first, fmt.Errorf("read the event log: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			if first == 0 {
				first = e.Seq
			}
			if e.Seq >= before {
				f.Close()
				return events, first, nil
			}
			if e.Seq <= last {
				continue
			}
			events, last = append(events, e), e.Seq
			if max > 0 && len(events) >= max {
				f.Close()
				return events, first, nil
			}
		}
		f.Close()
	}
	return events, first, nil
}
