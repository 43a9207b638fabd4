package agent

import (
	"context"
	"fmt"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// onHang carries out the master's hang notice: it logs the hang, warns on
// the console (policy 1 and 2), and collects the running workers' stacks
// into the log directory (package stacks); the master restarts them after
// (policy 2).
func (a *agent) onHang(ctx context.Context, h *roverv1.HangNotice, running bool) {
	a.log.Warn("the job hangs", "reason", h.GetReason(), "policy", h.GetPolicy())
	if !running {
		return
	}
	path, err := a.hangs.Collect(ctx, h)
	if err != nil {
		a.log.Error("could not write the workers' stacks", "err", err)
		return
	}
	if path == "" {
		return
	}
	a.log.Warn("wrote the workers' stacks", "file", path)
	if h.GetPolicy() >= 1 {
		fmt.Fprintf(a.errOut, "rover: the job hangs: %s; this node's workers' stacks are in %s\n", h.GetReason(), path)
	}
}
