package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/roverml/rover/internal/store"
	"github.com/roverml/rover/internal/store/kubestore"
)

// errCrashed is what a crashed master's requests fail with.
var errCrashed = errors.New("the master crashed")

// crashAt is a transport that crashes the master at its n-th request: that
// request and every later one fail. When sent, the n-th request reaches the
// API server and only its answer is lost. With only, the master lives on:
// the n-th request fails and the later ones go through, as when one times
// out (the store then fails the call, and the master stops).
type crashAt struct {
	rt         http.RoundTripper
	n          int64
	sent, only bool
	count      atomic.Int64
}

// crashModes are the ways TestCrash fails the n-th request.
var crashModes = []struct{ sent, only bool }{{false, false}, {true, false}, {false, true}, {true, true}}

func (c *crashAt) RoundTrip(req *http.Request) (*http.Response, error) {
	i := c.count.Add(1)
	if i < c.n || i > c.n && c.only {
		return c.rt.RoundTrip(req)
	}
	if i == c.n && c.sent {
		if resp, err := c.rt.RoundTrip(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
	return nil, errCrashed
}

// crashStep is one call of a master's life, and what the store holds after
// it.
type crashStep struct {
	name string
	do   func(ctx context.Context, s *kubestore.Store) error
	want store.Contents
}

// crashSteps is a master's life on a state that already holds a snapshot of
// two chunks and records: it takes the state over, appends, snapshots into
// three chunks, appends, snapshots into one, snapshots nothing, appends.
func crashSteps() (setup []crashStep, life []crashStep) {
	big, bigger := random(chunkBytesTimes(1.5), 10), random(chunkBytesTimes(2.2), 11)
	var cur store.Contents
	step := func(name string, do func(context.Context, *kubestore.Store) error, next func()) crashStep {
		next()
		return crashStep{name, do, store.Contents{Snapshot: cur.Snapshot, Records: append([][]byte{}, cur.Records...)}}
	}
	appendStep := func(rs ...string) crashStep {
		return step("append "+fmt.Sprint(rs), func(ctx context.Context, s *kubestore.Store) error { return s.Append(ctx, recs(rs...)) },
			func() { cur.Records = append(cur.Records, recs(rs...)...) })
	}
	snapshotStep := func(state []byte) crashStep {
		return step(fmt.Sprintf("snapshot %d bytes", len(state)), func(ctx context.Context, s *kubestore.Store) error { return s.Snapshot(ctx, state) },
			func() {
				cur.Snapshot, cur.Records = state, nil
				if len(state) == 0 {
					cur.Snapshot = nil
				}
			})
	}
	setup = []crashStep{appendStep("p"), snapshotStep(big), appendStep("q", "r")}
	life = []crashStep{
		step("open", nil, func() {}),
		appendStep("a"),
		snapshotStep(bigger),
		appendStep("b", "c"),
		appendStep("d"),
		snapshotStep(big[:100]),
		appendStep("e"),
		snapshotStep(nil),
		appendStep("f"),
	}
	return setup, life
}

// TestCrash crashes a master at every request of its life, the request lost
// or sent with its answer lost, and checks that the next master loads what
// was acknowledged, with the step in flight done or not, that the head names
// no missing chunk, and that the chunks no head names are deleted.
func TestCrash(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	setup, life := crashSteps()
	for _, mode := range crashModes {
		for n := int64(1); ; n++ {
			name := c.name(fmt.Sprintf("crash-%t-%t-%d", mode.sent, mode.only, n))
			s := c.open(t, nil, name)
			for _, st := range setup {
				if err := st.do(ctx, s); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
			}
			cfg := rest.CopyConfig(c.cfg)
			crash := &crashAt{n: n, sent: mode.sent, only: mode.only}
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { crash.rt = rt; return crash }
			crashing := kubernetes.NewForConfigOrDie(cfg)

			before := setup[len(setup)-1].want
			failed := -1
			var dead *kubestore.Store
			for i, st := range life {
				var err error
				if st.do == nil {
					dead, err = c.tryOpen(crashing, name)
				} else {
					err = st.do(ctx, dead)
				}
				if err != nil {
					if !errors.Is(err, errCrashed) {
						t.Fatalf("crash at request %d (%+v): %s failed with %v, not the crash", n, mode, st.name, err)
					}
					failed = i
					break
				}
				before = st.want
			}
			if failed < 0 && crash.count.Load() < n {
				t.Logf("a master's life takes %d requests; failed at each (%+v)", crash.count.Load(), mode)
				break
			}
			after, label := before, fmt.Sprintf("request %d failed (%+v), and the master lived on", n, mode)
			if failed >= 0 {
				after = life[failed].want
				label = fmt.Sprintf("request %d failed (%+v) during %q", n, mode, life[failed].name)
			}

			if dead != nil {
				_ = dead.Close() // the master stops on a failed store
			}
			next := c.open(t, nil, name)
			got, err := next.Load(ctx)
			if err != nil {
				t.Fatalf("%s: the next master's Load: %v", label, err)
			}
			if diffContents(before, got) != "" && diffContents(after, got) != "" {
				t.Errorf("%s: the next master loads neither the state before the step nor after it:\n%s", label, diffContents(after, got))
			}
			checkChunks(t, c, label, name)
			if err := next.Append(ctx, recs("next")); err != nil {
				t.Fatalf("%s: the next master's Append: %v", label, err)
			}
			_ = s.Close()
		}
	}
}

// checkChunks checks that the chunk objects of name are exactly those its
// head names.
func checkChunks(t *testing.T, c *cluster, label, name string) {
	t.Helper()
	head, err := c.client.CoreV1().ConfigMaps(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	if gen := head.Data["snapshot"]; gen != "" {
		n, _ := strconv.Atoi(head.Data["snapshot-chunks"])
		for i := range n {
			want[fmt.Sprintf("%s-snap-%s-%d", name, gen, i)] = true
		}
	}
	got := c.chunks(t, name)
	for _, ch := range got {
		if !want[ch] {
			t.Errorf("%s: chunk %s is left, and the head names only %v", label, ch, want)
		}
	}
	if len(got) < len(want) {
		t.Errorf("%s: chunks %v, and the head names %v", label, got, want)
	}
}
