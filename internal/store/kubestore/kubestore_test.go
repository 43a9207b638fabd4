package kubestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/store"
	"github.com/roverml/rover/internal/store/kubestore"
	"github.com/roverml/rover/internal/store/storetest"
)

var _ storetest.Journal = (*kubestore.Store)(nil)

const namespace = "rover-state"

// cluster is a real API server shared by the subtests of one test.
type cluster struct {
	cfg    *rest.Config
	client kubernetes.Interface
	names  atomic.Int64
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	env := k8stest.Start(t, k8stest.Options{})
	c := &cluster{cfg: protobuf(env.Config)}
	c.client = kubernetes.NewForConfigOrDie(c.cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// protobuf returns a copy of cfg that speaks protobuf, as rover master does.
func protobuf(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling
	return cfg
}

// name returns a state name no other subtest uses.
func (c *cluster) name(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, c.names.Add(1))
}

// open opens the state name with client (the cluster's when nil), closing
// the store at the end of the test.
func (c *cluster) open(t testing.TB, client kubernetes.Interface, name string, mod ...func(*kubestore.Options)) *kubestore.Store {
	t.Helper()
	s, err := c.tryOpen(client, name, mod...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (c *cluster) tryOpen(client kubernetes.Interface, name string, mod ...func(*kubestore.Options)) (*kubestore.Store, error) {
	if client == nil {
		client = c.client
	}
	opts := kubestore.Options{Client: client, Namespace: namespace, Name: name, Identity: "test", Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&opts)
	}
	return kubestore.Open(context.Background(), opts)
}

// chunks returns the names of the state's snapshot chunks, sorted.
func (c *cluster) chunks(t testing.TB, name string) []string {
	t.Helper()
	list, err := c.client.CoreV1().ConfigMaps(namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "rover.dev/part=snapshot,rover.dev/state=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	return names
}

func recs(ss ...string) [][]byte {
	r := make([][]byte, len(ss))
	for i, s := range ss {
		r[i] = []byte(s)
	}
	return r
}

func random(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

func checkLoad(t testing.TB, s *kubestore.Store, want store.Contents) {
	t.Helper()
	got, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := diffContents(want, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

// diffContents is cmp.Diff, fast for snapshots of megabytes.
func diffContents(want, got store.Contents) string {
	if !bytes.Equal(want.Snapshot, got.Snapshot) || (want.Snapshot == nil) != (got.Snapshot == nil) {
		return fmt.Sprintf("snapshot: want %d bytes (nil: %t), got %d (nil: %t), or other bytes",
			len(want.Snapshot), want.Snapshot == nil, len(got.Snapshot), got.Snapshot == nil)
	}
	return cmp.Diff(want.Records, got.Records)
}

func TestStore(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()

	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) (storetest.Journal, storetest.Reopen) {
			name := c.name("conformance")
			return c.open(t, nil, name), func(t *testing.T, s storetest.Journal) storetest.Journal {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return c.open(t, nil, name)
			}
		})
	})

	t.Run("a snapshot of many chunks comes back exactly", func(t *testing.T) {
		name := c.name("big")
		s := c.open(t, nil, name)
		state := random(3<<20+12345, 1) // 4 chunks, the last one short
		if err := s.Append(ctx, recs("a")); err != nil {
			t.Fatal(err)
		}
		if err := s.Snapshot(ctx, state); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, recs("b", "c")); err != nil {
			t.Fatal(err)
		}
		want := store.Contents{Snapshot: state, Records: recs("b", "c")}
		checkLoad(t, s, want)
		if got := len(c.chunks(t, name)); got != 4 {
			t.Errorf("%d chunk objects, want 4", got)
		}
		s2 := c.open(t, nil, name)
		checkLoad(t, s2, want)
		// A smaller snapshot replaces the chunks of the first.
		if err := s2.Snapshot(ctx, state[:100]); err != nil {
			t.Fatal(err)
		}
		checkLoad(t, s2, store.Contents{Snapshot: state[:100], Records: [][]byte{}})
		if got := c.chunks(t, name); len(got) != 1 {
			t.Errorf("chunk objects %v, want one", got)
		}
	})

	t.Run("a second master fences the first", func(t *testing.T) {
		name := c.name("fence")
		s1 := c.open(t, nil, name)
		if err := s1.Append(ctx, recs("a")); err != nil {
			t.Fatal(err)
		}
		s2 := c.open(t, nil, name)
		if s1.Owner() == s2.Owner() {
			t.Fatalf("both stores have owner token %q", s1.Owner())
		}
		if err := s1.Append(ctx, recs("stale")); !errors.Is(err, kubestore.ErrFenced) {
			t.Errorf("the first master's Append = %v, want ErrFenced", err)
		}
		if err := s1.Snapshot(ctx, random(chunkBytesTimes(1.5), 2)); !errors.Is(err, kubestore.ErrFenced) {
			t.Errorf("the first master's Snapshot = %v, want ErrFenced", err)
		}
		if _, err := s1.Load(ctx); !errors.Is(err, kubestore.ErrFenced) {
			t.Errorf("the first master's Load = %v, want ErrFenced", err)
		}
		if got := c.chunks(t, name); len(got) != 0 {
			t.Errorf("the fenced snapshot left chunks %v", got)
		}
		if err := s2.Append(ctx, recs("b")); err != nil {
			t.Fatal(err)
		}
		checkLoad(t, s2, store.Contents{Records: recs("a", "b")})
		if err := s1.Append(ctx, recs("stale")); !errors.Is(err, kubestore.ErrFenced) || !strings.Contains(err.Error(), s2.Owner()) {
			t.Errorf("the first master's Append = %v, want ErrFenced naming %q", err, s2.Owner())
		}
	})

	t.Run("a label added meanwhile is no conflict", func(t *testing.T) {
		name := c.name("label")
		s := c.open(t, nil, name)
		cms := c.client.CoreV1().ConfigMaps(namespace)
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Labels["team"] = "a"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, recs("a")); err != nil {
			t.Fatalf("Append after a label change: %v", err)
		}
		checkLoad(t, s, store.Contents{Records: recs("a")})
	})

	t.Run("owner references", func(t *testing.T) {
		name := c.name("owned")
		job, err := c.client.CoreV1().ConfigMaps(namespace).Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-job"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: job.Name, UID: job.UID}
		s := c.open(t, nil, name, func(o *kubestore.Options) { o.Owner = &ref })
		if err := s.Snapshot(ctx, random(chunkBytesTimes(1.2), 3)); err != nil {
			t.Fatal(err)
		}
		objs := append(c.chunks(t, name), name)
		if len(objs) != 3 {
			t.Fatalf("objects %v, want a head and two chunks", objs)
		}
		for _, o := range objs {
			cm, err := c.client.CoreV1().ConfigMaps(namespace).Get(ctx, o, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{ref}, cm.OwnerReferences); diff != "" {
				t.Errorf("owner references of %s (-want +got):\n%s", o, diff)
			}
		}
	})

	t.Run("a full journal fails until a snapshot", func(t *testing.T) {
		name := c.name("full")
		s := c.open(t, nil, name, func(o *kubestore.Options) { o.JournalBytes = 4 << 10 })
		rec := bytes.Repeat([]byte("r"), 1000)
		var appended [][]byte
		for {
			err := s.Append(ctx, [][]byte{rec})
			if errors.Is(err, store.ErrFull) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			appended = append(appended, rec)
		}
		if len(appended) != 3 {
			t.Errorf("%d records of 1000 bytes fit in 4 KiB, want 3", len(appended))
		}
		checkLoad(t, s, store.Contents{Records: appended})
		if err := s.Snapshot(ctx, []byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, [][]byte{rec}); err != nil {
			t.Fatalf("Append after a snapshot: %v", err)
		}
		checkLoad(t, s, store.Contents{Snapshot: []byte("state"), Records: [][]byte{rec}})
	})

	t.Run("a missing chunk is an error", func(t *testing.T) {
		name := c.name("damaged")
		s := c.open(t, nil, name)
		if err := s.Snapshot(ctx, random(chunkBytesTimes(2.5), 4)); err != nil {
			t.Fatal(err)
		}
		if err := c.client.CoreV1().ConfigMaps(namespace).Delete(ctx, c.chunks(t, name)[1], metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx); err == nil || !strings.Contains(err.Error(), "is missing") {
			t.Errorf("Load = %v, want an error naming the missing chunk", err)
		}
	})

	t.Run("a newer format is refused", func(t *testing.T) {
		name := c.name("newer")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"format": "2"}}
		if _, err := c.client.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := c.tryOpen(nil, name)
		if err == nil || !strings.Contains(err.Error(), `format "2"`) || !strings.Contains(err.Error(), "format 1") {
			t.Errorf("Open = %v, want an error naming both formats", err)
		}
	})

	t.Run("bad options", func(t *testing.T) {
		_, err := kubestore.Open(ctx, kubestore.Options{Name: strings.Repeat("n", 64), JournalBytes: 1 << 20})
		for _, want := range []string{"Client", "Namespace", "longer than 63", "JournalBytes"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Open = %v, want it to name %s", err, want)
			}
		}
	})
}

// chunkBytesTimes returns f chunks' worth of bytes.
func chunkBytesTimes(f float64) int { return int(f * kubestore.ChunkBytes) }
