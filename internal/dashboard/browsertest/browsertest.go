// Package browsertest drives a real headless chromium (Debian's) for the
// tests of the web dashboard: it starts the browser, collects the page's
// console, waits for conditions in the page and saves screenshots as test
// artifacts. A test that needs the browser fails when there is none: the
// browser tests are part of the suite, not an option. It is test support:
// no program imports it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Timeout bounds every wait in the page: it only turns a hang into a
// failure.
const Timeout = 90 * time.Second

// Chromium finds the browser, and fails the test when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no chromium on this machine: the dashboard's browser tests need Debian's chromium; install it with `make deps-test` (or scripts/apt-install chromium)")
	return ""
}

// Start starts a headless chromium for the test and returns its context
// and the page's console; the test's cleanup stops it, before the servers
// the test started earlier.
func Start(t testing.TB) (context.Context, *Console) {
	t.Helper()
	path := Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // chromium refuses to run as root with its sandbox
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1800),
		chromedp.Flag("disable-gpu", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not have a timeout, which
	// would stop the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	log := &Console{}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			log.add(m.String())
		}
	}()
	return ctx, log
}

// Open navigates the browser to url.
func Open(t testing.TB, ctx context.Context, url string) {
	t.Helper()
	navCtx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if err := chromedp.Do(navCtx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// Console is what the page wrote to its console.
type Console struct {
	mu    sync.Mutex
	lines []string
}

func (l *Console) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

// Lines returns what the page wrote so far, one entry per message.
func (l *Console) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// WaitFor polls the page until the JavaScript expression is true.
func WaitFor(t testing.TB, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(Timeout),
		chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("the page did not show %s within %v (%s): %v", what, Timeout, expr, err)
	}
}

// Eval evaluates the JavaScript expression in the page.
func Eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s in the page: %v", expr, err)
	}
	return v
}

// Screenshot saves a full-page screenshot as name in the test's artifact
// directory ($ROVER_TEST_ARTIFACTS/TEST when set, which CI keeps; else the
// test's artifact directory) and logs its path.
func Screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("take a screenshot: %v", err)
	}
	dir := t.ArtifactDir()
	if env := os.Getenv("ROVER_TEST_ARTIFACTS"); env != "" {
		dir = filepath.Join(env, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("make the artifact directory: %v", err)
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatalf("save the screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	return path
}
