package diagnosis

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHistoryJSON(t *testing.T) {
	var h History
	d1 := Decide(h, FromReport(*valueError(1, 42, 3)), Caps{})
	h = h.Record(1, d1)
	h = h.Record(3, Decide(h, Failure{Round: 3, ExitCode: 137}, Caps{}))
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"entries":[{"round":1,"cause":"user-error","action":"restart-in-place","rule":"user-error",` +
		`"signature":{"type":"ValueError","message":"bad batch size #","place":"/workspace/train.py:42"}},` +
		`{"round":3,"cause":"killed","action":"restart-in-place","rule":"killed"}]}`
	if string(b) != want {
		t.Errorf("Marshal:\n got %s\nwant %s", b, want)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(h.Entries(), back.Entries()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// The decoded history still drives fail fast.
	if d := Decide(back.Record(3, d1), FromReport(*valueError(4, 42, 3)), Caps{}); !d.FailFast {
		t.Errorf("after a decoded history: %+v", d)
	}
	if b, _ := json.Marshal(History{}); string(b) != `{"entries":[]}` {
		t.Errorf("empty history: %s", b)
	}
}

func TestHistoryUnmarshalErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"wrong shape", `{"entries":3}`, "decode diagnosis history"},
		{"unknown cause", `{"entries":[{"round":1,"cause":"gremlins","action":"fail-fast"}]}`, `unknown cause "gremlins"`},
		{"unknown action", `{"entries":[{"round":1,"cause":"unknown","action":"pray"}]}`, `unknown action "pray"`},
		{"rounds out of order", `{"entries":[{"round":2,"cause":"unknown","action":"fail-fast"},{"round":2,"cause":"unknown","action":"fail-fast"}]}`, "round 2 follows round 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h History
			if err := json.Unmarshal([]byte(tt.in), &h); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Unmarshal(%s) = %v; want an error with %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestHistoryRecord(t *testing.T) {
	var h History
	for r := int64(MaxHistory + 10); r > 0; r-- { // newest first: inserts in order
		h2 := h.Record(r, Decision{Cause: Killed, Rule: "killed"})
		if h.Len() > 0 && h2.Len() == h.Len() && h.Len() < MaxHistory {
			t.Fatalf("Record(%d) replaced instead of inserting", r)
		}
		h = h2
	}
	es := h.Entries()
	if len(es) != MaxHistory || es[0].Round != 11 || es[len(es)-1].Round != MaxHistory+10 {
		t.Errorf("kept %d entries, rounds %d..%d; want %d, 11..%d", len(es), es[0].Round, es[len(es)-1].Round, MaxHistory, MaxHistory+10)
	}
	before := h
	after := h.Record(20, Decision{Cause: UserError, Rule: "user-error"})
	if before.Entries()[9].Cause != Killed || after.Entries()[9].Cause != UserError || after.Len() != MaxHistory {
		t.Errorf("replacing round 20: before %v, after %v", before.Entries()[9], after.Entries()[9])
	}
}

var update = flag.Bool("update", false, "rewrite the rule table in docs/fault-tolerance.md")

const (
	docsPath   = "../../docs/fault-tolerance.md"
	beginTable = "<!-- BEGIN RULES: generated from internal/diagnosis.Rules; go test ./internal/diagnosis -update -->\n"
	endTable   = "<!-- END RULES -->\n"
)

// TestDocs checks that docs/fault-tolerance.md holds the table as
// Markdown renders it, and names every rule and the memory policy.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	before, rest, ok1 := strings.Cut(doc, beginTable)
	table, after, ok2 := strings.Cut(rest, endTable)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q", docsPath, beginTable, endTable)
	}
	if *update {
		doc = before + beginTable + Markdown() + endTable + after
		if err := os.WriteFile(docsPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		table = Markdown()
	}
	if diff := cmp.Diff(Markdown(), table); diff != "" {
		t.Errorf("%s's table is out of date; run go test ./internal/diagnosis -update (-want +got):\n%s", docsPath, diff)
	}
	seen := map[string]bool{}
	for _, r := range Rules {
		if seen[r.ID] {
			t.Errorf("rule %s appears twice in Rules", r.ID)
		}
		seen[r.ID] = true
		if !strings.Contains(doc, "| `"+r.ID+"` |") {
			t.Errorf("%s has no row for rule `%s`", docsPath, r.ID)
		}
	}
	for _, s := range []string{"8 GiB", "64 GiB", "min(", "fail fast", "root cause"} {
		if !strings.Contains(strings.ToLower(doc), strings.ToLower(s)) {
			t.Errorf("%s lacks %q", docsPath, s)
		}
	}
}
