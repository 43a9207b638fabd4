package agent

import (
	"strings"
	"sync"
)

// lineRing keeps the last lines written to it, for failure reports of workers
// whose output is not in a log file.
type lineRing struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial strings.Builder
}

func newLineRing(max int) *lineRing { return &lineRing{max: max} }

func (r *lineRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := string(p)
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			if r.partial.Len() < 4096 {
				r.partial.WriteString(s)
			}
			return len(p), nil
		}
		r.partial.WriteString(s[:i])
		r.push(r.partial.String())
		r.partial.Reset()
		s = s[i+1:]
	}
}

func (r *lineRing) push(line string) {
	if len(line) > 1024 {
		line = line[:1024] + "..."
	}
	r.lines = append(r.lines, line)
	if len(r.lines) > r.max {
		r.lines = r.lines[len(r.lines)-r.max:]
	}
}

func (r *lineRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.lines...)
	if r.partial.Len() > 0 {
		out = append(out, r.partial.String())
	}
	return strings.Join(out, "\n")
}
