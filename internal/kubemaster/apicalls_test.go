package kubemaster

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// apiCalls records the requests a client makes to the API server, for
// the relaunch benchmark's breakdown: how many of each kind, and when the
// pod creates were sent. Watches are counted when they are opened.
type apiCalls struct {
	mu      sync.Mutex
	counts  map[string]int // "POST pods", "GET configmaps", ...
	creates []time.Time    // pod creates, when they returned
}

func newAPICalls() *apiCalls { return &apiCalls{counts: map[string]int{}} }

// wrap returns cfg with every request recorded by a.
func (a *apiCalls) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			a.record(r)
			return resp, err
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (a *apiCalls) record(r *http.Request) {
	kind := r.Method + " " + resourceOf(r.URL.Path)
	if r.URL.Query().Get("watch") == "true" {
		kind = "WATCH " + resourceOf(r.URL.Path)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts[kind]++
	if kind == "POST pods" {
		a.creates = append(a.creates, time.Now())
	}
}

// resourceOf names the resource of an API path: the segment after the
// namespace's name, or the last resource segment ("pods", "pods/status",
// "configmaps", "events", "elasticjobs/status").
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 { // pods/NAME/status
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return parts[len(parts)-1]
}

// reset forgets what was recorded.
func (a *apiCalls) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counts, a.creates = map[string]int{}, nil
}

// snapshot returns the counts and the pod creates' times so far.
func (a *apiCalls) snapshot() (map[string]int, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.counts), slices.Clone(a.creates)
}

// describe writes counts per replacement of n, most frequent first.
func describe(counts map[string]int, n int) string {
	kinds := slices.SortedFunc(maps.Keys(counts), func(x, y string) int { return counts[y] - counts[x] })
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %.2f;", k, float64(counts[k])/float64(n))
	}
	return strings.TrimSuffix(strings.TrimSpace(b.String()), ";")
}
