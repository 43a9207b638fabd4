package master

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// damagedStateDir writes, through a real bbolt store, a job configured and
// joined by nodes a and b with a key set, then flips a byte of node a's
// join record (the second record) in the file.
func damagedStateDir(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	c := configuredCore(t, st, now)
	for _, id := range []string{"a", "b"} {
		req, _, err := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.join(context.Background(), req, memoryReport{}, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.apply(context.Background(), &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "journal.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mark := []byte(`"NodeID":"a"`)
	if bytes.Count(b, mark) == 0 {
		t.Fatalf("node a's join is not in %s", path)
	}
	for i := bytes.Index(b, mark); i >= 0; i = bytes.Index(b, mark) {
		b[i+1] ^= 0x20 // every copy: bbolt leaves stale ones in freed pages
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

// TestNewRefusesDamagedState: a master refuses a state dir whose journal
// is damaged, saying which file, what is wrong and what starting would
// drop (the records, what they recorded, the nodes they name), and starts
// from the intact records only when told to (--discard-state), saying so.
func TestNewRefusesDamagedState(t *testing.T) {
	dir, path := damagedStateDir(t)
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken, StateDir: dir})
	if !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("New = %v, want the damaged state refused", err)
	}
	for _, want := range []string{path, "record 2 is bad", "checksum mismatch",
		"3 journal records from record 2 on (1 join, 1 set_key, 1 unreadable), naming nodes b",
		"the job would resume from the 1 records before them", "--discard-state"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New = %v\nwant it to say %q", err, want)
		}
	}

	var logs bytes.Buffer
	m, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken, StateDir: dir, DiscardState: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New with DiscardState = %v", err)
	}
	logged := logs.String() // New's logs: Run writes on
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	if n := len(m.Status().GetNodes()); n != 0 {
		t.Errorf("the master kept %d nodes, want none: their joins were dropped", n)
	}
	if !strings.Contains(logged, "--discard-state: dropped") || !strings.Contains(logged, "naming nodes b") {
		t.Errorf("the master logged:\n%s\nwant it to say what --discard-state dropped", logged)
	}
}

// TestNewRefusesEmptyStateFile: an empty journal.db is not a new job.
func TestNewRefusesEmptyStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Token: testToken, StateDir: dir})
	if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "empty (0 bytes)") ||
		!strings.Contains(err.Error(), "the whole job state") {
		t.Errorf("New = %v, want the empty file refused, saying the whole job state would be dropped", err)
	}
}
