package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// op is one transaction of a scripted run: an Append of recs, or a Snapshot
// of state when snapshot is set.
type op struct {
	recs     [][]byte
	snapshot bool
	state    []byte
}

// crashScript returns a run of transactions mixing small and large records
// (the large ones span overflow pages), groups of many records (they split
// leaves), and snapshots, small, large and empty, whose freed pages later
// transactions reuse.
func crashScript(pageSize int) []op {
	n := 0
	rec := func(size int) []byte {
		n++
		b := fmt.Appendf(nil, "rec-%04d-", n)
		for len(b) < size {
			b = append(b, byte('a'+n%26))
		}
		return b
	}
	group := func(count, size int) op {
		var o op
		for range count {
			o.recs = append(o.recs, rec(size))
		}
		return o
	}
	snap := func(size int) op {
		return op{snapshot: true, state: bytes.Repeat(fmt.Appendf(nil, "state-%04d;", n), size/11)}
	}
	return []op{
		group(1, 50),
		group(3, 200),
		group(16, 100),
		group(1, 3*pageSize+100), // overflow pages
		group(2, 20),
		snap(500),
		group(1, 10),
		group(1, 16*pageSize), // a large one
		group(5, 300),
		group(5, 300),
		group(5, 300),
		group(5, 300),
		snap(10 * pageSize), // a large snapshot frees the journal's pages
		group(4, 2*pageSize),
		group(30, 200),
		group(1, 40),
		snap(12 * pageSize), // replaces the large snapshot
		group(2, 5*pageSize),
		group(1, 8),
		snap(0),
		group(10, 150),
		group(1, 1),
		group(1, 9*pageSize),
	}
}

// TestCrashAfterEveryWrite simulates a crash after every page write of every
// transaction of a scripted run and checks that the store opens, holds
// exactly the records acknowledged before the transaction or exactly those
// after it, and takes a new Append.
//
// bbolt commits by writing the dirty pages, fsyncing, then writing the meta
// page and fsyncing again. The test keeps the file after each committed
// transaction, diffs consecutive copies page by page (the file may grow
// between them; growth comes first, with an fsync), and rebuilds the file as
// it would be after each prefix of the transaction's writes: data pages in
// ascending order, then the meta page, torn (only its first bytes written)
// and whole. Which data pages reach the disk before the first fsync does not
// matter: until the meta page names them no reader sees them.
func TestCrashAfterEveryWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName)

	// Image 0: the file bbolt creates, before Open lays out the store.
	db, err := bolt.Open(path, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		t.Fatal(err)
	}
	pageSize := db.Info().PageSize
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	images := [][]byte{readFile(t, path)}
	wants := []Contents{{Records: [][]byte{}}}
	names := []string{"lay out a new store"}

	s := mustOpen(t, dir, Options{}) // with fsyncs, so that bbolt grows the file as in production
	model := NewMemory()
	record := func(name string) {
		t.Helper()
		c, err := model.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		images, wants, names = append(images, readFile(t, path)), append(wants, c), append(names, name)
	}
	record("")
	for i, o := range crashScript(pageSize) {
		if o.snapshot {
			mustSnapshot(t, s, string(o.state))
			mustSnapshot(t, model, string(o.state))
			names[len(names)-1] = fmt.Sprintf("op %d: snapshot of %d bytes", i, len(o.state))
		} else {
			mustAppend(t, s, o.recs)
			mustAppend(t, model, o.recs)
			names[len(names)-1] = fmt.Sprintf("op %d: append %d records of %d bytes", i, len(o.recs), len(o.recs[0]))
		}
		record("")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	crashDir := t.TempDir()
	states := 0
	for k := range len(images) - 1 {
		for _, st := range crashStates(t, images[k], images[k+1], pageSize) {
			states++
			name := fmt.Sprintf("%s: %s", names[k], st.name)
			allowed := map[int]bool{k: st.when <= 0, k + 1: st.when >= 0}
			checkCrashState(t, name, crashDir, st.image, wants, allowed)
		}
	}
	t.Logf("checked %d crash states over %d transactions", states, len(images)-1)
}

// crashState is the file after a crash in a transaction: when is -1 if it
// must hold the state before the transaction, 1 after, 0 either.
type crashState struct {
	name  string
	image []byte
	when  int
}

// crashStates returns the files a crash can leave while the transaction
// that turned old into new is being written.
func crashStates(t *testing.T, old, new []byte, pageSize int) []crashState {
	t.Helper()
	if len(new) < len(old) || len(new)%pageSize != 0 {
		t.Fatalf("the file went from %d to %d bytes; want growth in whole pages of %d", len(old), len(new), pageSize)
	}
	base := append(append([]byte(nil), old...), make([]byte, len(new)-len(old))...)
	page := func(b []byte, p int) []byte { return b[p*pageSize : (p+1)*pageSize] }
	var data, meta []int
	for p := range len(new) / pageSize {
		if !bytes.Equal(page(base, p), page(new, p)) {
			if p < 2 {
				meta = append(meta, p)
			} else {
				data = append(data, p)
			}
		}
	}
	if len(meta) != 1 {
		t.Fatalf("meta pages %v changed; want exactly one, as one transaction writes", meta)
	}
	img := append([]byte(nil), base...)
	states := []crashState{{"nothing written", append([]byte(nil), old...), -1}}
	if len(new) > len(old) {
		states = append(states, crashState{"file grown, nothing written", append([]byte(nil), img...), -1})
	}
	for i, p := range data {
		copy(page(img, p), page(new, p))
		states = append(states, crashState{fmt.Sprintf("%d of %d data pages written", i+1, len(data)), append([]byte(nil), img...), -1})
	}
	m := meta[0]
	for _, n := range []int{48, pageSize / 2} {
		torn := append([]byte(nil), img...)
		copy(torn[m*pageSize:m*pageSize+n], new[m*pageSize:])
		states = append(states, crashState{fmt.Sprintf("meta page torn after %d bytes", n), torn, 0})
	}
	copy(page(img, m), page(new, m))
	if !bytes.Equal(img, new) {
		t.Fatal("replaying the page writes did not give the new file")
	}
	return append(states, crashState{"meta page written", img, 1})
}

// checkCrashState opens image as a state dir and checks that it holds one of
// the allowed contents, takes an Append, and passes bbolt's own check.
func checkCrashState(t *testing.T, name, dir string, image []byte, wants []Contents, allowed map[int]bool) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, fileName), image, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{NoSync: true, Logger: discard()})
	if err != nil {
		t.Errorf("%s: Open: %v", name, err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	got, err := s.Load(ctx)
	if err != nil {
		t.Errorf("%s: Load: %v", name, err)
		return
	}
	match := -1
	for k, ok := range allowed {
		if ok && sameContents(wants[k], got) {
			match = k
		}
	}
	if match < 0 {
		for k, ok := range allowed {
			if ok {
				t.Errorf("%s: Load does not match transaction %d (-want +got):\n%s", name, k, cmp.Diff(wants[k], got))
			}
		}
		return
	}
	after := []byte("after the crash")
	if err := s.Append(ctx, [][]byte{after}); err != nil {
		t.Errorf("%s: Append after the crash: %v", name, err)
		return
	}
	want := Contents{Snapshot: wants[match].Snapshot, Records: append(append([][]byte{}, wants[match].Records...), after)}
	got, err = s.Load(ctx)
	if err != nil {
		t.Errorf("%s: Load after an Append: %v", name, err)
		return
	}
	if !sameContents(want, got) {
		t.Errorf("%s: Load after an Append (-want +got):\n%s", name, cmp.Diff(want, got))
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("%s: bbolt check: %v", name, err)
		}
		return nil
	}); err != nil {
		t.Errorf("%s: bbolt check: %v", name, err)
	}
}

// sameContents is cmp.Equal for Contents, without its cost on large byte
// slices.
func sameContents(a, b Contents) bool {
	if !bytes.Equal(a.Snapshot, b.Snapshot) || (a.Snapshot == nil) != (b.Snapshot == nil) ||
		len(a.Records) != len(b.Records) || (a.Records == nil) != (b.Records == nil) {
		return false
	}
	for i := range a.Records {
		if !bytes.Equal(a.Records[i], b.Records[i]) || (a.Records[i] == nil) != (b.Records[i] == nil) {
			return false
		}
	}
	return true
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
