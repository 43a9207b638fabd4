package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/dashboard"
)

// bigJob is a job of n nodes, each with a managed node and a step time.
func bigJob(n int) *roverv1.GetJobResponse {
	j := runningJob()
	j.Nodes, j.ManagedNodes, j.Progress.Nodes = nil, nil, nil
	for i := range n {
		id := fmt.Sprintf("worker-%05d", i)
		j.Nodes = append(j.Nodes, &roverv1.NodeStatus{NodeId: id, NodeRank: int32(i), Addr: "10.0.0.1", GroupRank: int32(i), Host: "host-" + id})
		j.ManagedNodes = append(j.ManagedNodes, &roverv1.ManagedNode{Group: "worker", Rank: int32(i), NodeId: id, State: "Running", Budget: 3, Host: "host-" + id})
		j.Progress.Nodes = append(j.Progress.Nodes, &roverv1.NodeStepTime{NodeId: id, NodeRank: int32(i), Step: 50, StepSeconds: 0.2, BusySeconds: 0.18, Samples: 8})
	}
	return j
}

// BenchmarkJob10kNodes measures what /api/job of a job of 10,000 nodes
// costs: "look" when the job changed since the last look (the source is
// asked and the answer marshalled: a stream does that at most once a
// second for all its viewers), "shared" for another viewer served from
// that look.
func BenchmarkJob10kNodes(b *testing.B) {
	for _, fresh := range []bool{true, false} {
		name := "shared"
		if fresh {
			name = "look"
		}
		b.Run(name, func(b *testing.B) {
			src := newScriptedSource(bigJob(10_000))
			srv := serve(b, dashboard.Handler(src))
			var size int64
			for b.Loop() {
				if fresh {
					src.update(func(*roverv1.GetJobResponse) {})
				}
				resp, err := http.Get(srv.URL + "/api/job")
				if err != nil {
					b.Fatal(err)
				}
				size, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportMetric(float64(size)/1e6, "MB/answer")
		})
	}
}
