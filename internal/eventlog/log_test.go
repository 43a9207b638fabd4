package eventlog

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func restart(i int) Event {
	return Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: Restart, Severity: Warning, Round: i, Message: "round opens"}
}

func appendN(t *testing.T, l *Log, n int) {
	t.Helper()
	for i := range n {
		if _, err := l.Append(restart(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// readFile returns the Seqs of the lines of one file.
func readFile(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seqs []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

func TestAppendNumbersAndWritesLines(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wake := l.Wait()
	out, err := l.Append(restart(1), restart(2))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	default:
		t.Fatal("Append did not wake the readers")
	}
	if out[0].Seq != 1 || out[1].Seq != 2 {
		t.Fatalf("seqs %d %d, want 1 2", out[0].Seq, out[1].Seq)
	}
	l.Close()
	if got := readFile(t, filepath.Join(dir, FileName)); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("file holds %v, want [1 2]", got)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("events.jsonl has mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestRestartGoesOnNumbering(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 5)
	l.Close()
	// A kill in the middle of a write leaves a torn last line.
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":6,"kind":"resta`)
	f.Close()

	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Last() != 5 {
		t.Fatalf("restarted log's last seq %d, want 5", l.Last())
	}
	out, err := l.Append(restart(9))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Seq != 6 {
		t.Fatalf("first event after restart has seq %d, want 6", out[0].Seq)
	}
	evs, oldest := l.Since(0, 0)
	if len(evs) != 6 || oldest != 1 {
		t.Fatalf("ring after restart holds %d events from %d, want 6 from 1", len(evs), oldest)
	}
	l.Close()
	got := readFile(t, filepath.Join(dir, FileName))
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("file holds %v, want 1..6 without the torn line", got)
		}
	}
}

func TestRotateBoundsDiskAndKeepsNumbering(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxFileBytes: 2000, KeepFiles: 2, Ring: 1000}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 200)
	l.Close()
	var total int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, _ := e.Info()
		total += fi.Size()
		if !strings.HasPrefix(e.Name(), FileName) {
			t.Fatalf("unexpected file %s", e.Name())
		}
	}
	if len(entries) != 3 {
		t.Fatalf("%d files, want events.jsonl and 2 rotated", len(entries))
	}
	if total > 3*opts.MaxFileBytes {
		t.Fatalf("the log takes %d bytes, bound %d", total, 3*opts.MaxFileBytes)
	}
	// The files hold contiguous numbers, newest in events.jsonl.
	var all []uint64
	for _, name := range []string{FileName + ".2", FileName + ".1", FileName} {
		all = append(all, readFile(t, filepath.Join(dir, name))...)
	}
	for i := 1; i < len(all); i++ {
		if all[i] != all[i-1]+1 {
			t.Fatalf("files hold %v: not contiguous", all)
		}
	}
	if all[len(all)-1] != 200 {
		t.Fatalf("newest event on disk %d, want 200", all[len(all)-1])
	}
	l, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Last() != 200 {
		t.Fatalf("reopened log's last %d, want 200", l.Last())
	}
	if evs, oldest := l.Since(0, 0); oldest != all[0] || len(evs) != len(all) {
		t.Fatalf("reopened ring holds %d from %d, want %d from %d", len(evs), oldest, len(all), all[0])
	}
}

func TestRotatedJustBeforeRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxFileBytes: 500, KeepFiles: 1}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20)
	l.Close()
	// events.jsonl may be empty right after a rotation: the numbers come
	// from the rotated file then.
	if err := os.Rename(filepath.Join(dir, FileName), filepath.Join(dir, FileName+".1")); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Last() != 20 {
		t.Fatalf("last %d, want 20", l.Last())
	}
}

func TestRingIsBounded(t *testing.T) {
	l, err := Open("", Options{Ring: 10})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 25)
	evs, oldest := l.Since(0, 0)
	if len(evs) != 10 || oldest != 16 || evs[9].Seq != 25 {
		t.Fatalf("ring holds %d events from %d, want 10 from 16 to 25", len(evs), oldest)
	}
	if evs, _ := l.Since(20, 0); len(evs) != 5 || evs[0].Seq != 21 {
		t.Fatalf("since 20: %d events, want 21..25", len(evs))
	}
	if evs, _ := l.Since(20, 2); len(evs) != 2 || evs[1].Seq != 22 {
		t.Fatalf("since 20, max 2: %v", evs)
	}
	if evs, _ := l.Since(25, 0); len(evs) != 0 {
		t.Fatalf("since the newest: %d events, want none", len(evs))
	}
	if evs, _ := l.Since(99, 0); len(evs) != 0 {
		t.Fatalf("since a seq not reached: %d events, want none", len(evs))
	}
}

func TestHostileStringsAreBounded(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("é", 1<<20) // 2 MiB of two-byte runes
	out, err := l.Append(Event{
		Kind: WorkerFailed, Severity: Warning, Node: huge, Cause: huge, Action: huge,
		Message: "<img src=x onerror=alert(1)>\n" + huge, Excerpt: "bad \xff\xfe utf-8 " + huge, Reason: huge,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := out[0]
	for name, c := range map[string]struct {
		s   string
		max int
	}{"node": {e.Node, MaxShort}, "cause": {e.Cause, MaxShort}, "action": {e.Action, MaxShort},
		"message": {e.Message, MaxMessage}, "excerpt": {e.Excerpt, MaxExcerpt}, "reason": {e.Reason, MaxReason}} {
		if len(c.s) > c.max || !utf8.ValidString(c.s) || !strings.HasSuffix(c.s, ellipsis) {
			t.Errorf("%s: %d bytes (bound %d), valid UTF-8 %v, ends %q", name, len(c.s), c.max, utf8.ValidString(c.s), c.s[max(0, len(c.s)-8):])
		}
	}
	if !strings.HasPrefix(e.Message, "<img src=x onerror=alert(1)>") {
		t.Errorf("message %q: the text is data, kept as it came", e.Message[:40])
	}
	l.Close()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "\n") != 1 {
		t.Fatalf("one event took %d lines", strings.Count(string(b), "\n"))
	}
	if strings.Contains(string(b), "<img") {
		t.Fatal("the file holds markup unescaped; JSON escapes < and >")
	}
	if len(b) > 16<<10 {
		t.Fatalf("one hostile event took %d bytes on disk", len(b))
	}
}

func TestDamagedLineIsSkipped(t *testing.T) {
	dir := t.TempDir()
	content := `{"seq":1,"kind":"restart","severity":"Warning","message":"a"}` + "\n" +
		"not json\n" +
		`{"seq":2,"kind":"restart","severity":"Warning","message":"b"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if evs, _ := l.Since(0, 0); len(evs) != 2 || l.Last() != 2 {
		t.Fatalf("ring holds %d events, last %d; want 2 and 2", len(evs), l.Last())
	}
}

// BenchmarkAppend appends one worker_failed event at a time to a log on
// disk with a full ring: the cost the master's commit pays per event.
//
//	go test -run '^$' -bench Append ./internal/eventlog/
func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	e := Event{Time: t0, Kind: WorkerFailed, Severity: Warning, Node: "node-17", Round: 3, Rank: Int(5), ExitCode: Int(1),
		Cause: "user-error", Action: "restart-in-place", Message: "rank 5 on node node-17 exited 1; cause user-error, action restart-in-place",
		Excerpt: strings.Repeat("Traceback line\n", 40)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadGoesToTheFiles: events older than the ring are read from the
// files, rotated ones first, then the ring's follow.
func TestReadGoesToTheFiles(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxFileBytes: 2000, KeepFiles: 5, Ring: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendN(t, l, 100)
	evs, oldest, err := l.Read(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Seq != 100 {
		t.Fatalf("Read(0) returned %d events, want through 100", len(evs))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("Read(0): %d follows %d", evs[i].Seq, evs[i-1].Seq)
		}
	}
	if evs[0].Seq != oldest || oldest > 91 {
		t.Errorf("Read(0) starts at %d, oldest %d: want what the files keep, before the ring's 91", evs[0].Seq, oldest)
	}
	from := oldest + 5
	evs, _, err = l.Read(from, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 7 || evs[0].Seq != from+1 || evs[6].Seq != from+7 {
		t.Errorf("Read(%d, 7): %d events from %d", from, len(evs), evs[0].Seq)
	}
	evs, _, err = l.Read(85, 10) // across the files and the ring
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 10 || evs[0].Seq != 86 || evs[9].Seq != 95 {
		t.Errorf("Read(85, 10): %d events, %d..%d; want 86..95", len(evs), evs[0].Seq, evs[len(evs)-1].Seq)
	}
	if evs, _, _ := l.Read(95, 0); len(evs) != 5 || evs[0].Seq != 96 {
		t.Errorf("Read(95) within the ring: %d events", len(evs))
	}
}
