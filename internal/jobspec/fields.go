package jobspec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roverml/rover/internal/runconfig"
)

// validEnvName reports whether name is a portable environment variable name.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// env merges the job's envs with a container's env: job envs first (those
// the container does not set), then the container's in order.
func (b *builder) env(path string, job []EnvVar, ctr []wireEnv) []EnvVar {
	set := map[string]int{}
	for i, e := range ctr {
		p := fmt.Sprintf("%s[%d].name", path, i)
		switch {
		case !validEnvName(e.Name):
			b.addf(p, "%q is not a valid environment variable name; use letters, digits and _, not starting with a digit", e.Name)
		case set[e.Name] > 0:
			b.addf(p, "%s is set twice (also at %s[%d]); keep one", e.Name, path, set[e.Name]-1)
		}
		set[e.Name] = i + 1
	}
	var out []EnvVar
	for _, e := range job {
		if set[e.Name] == 0 {
			out = append(out, e)
		}
	}
	for _, e := range ctr {
		if e.ValueFrom != nil {
			// Kubernetes fills it in from the template; the node's agent
			// inherits it there. PodFields lists it for other platforms.
			continue
		}
		out = append(out, EnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

// resources parses a resource list; "gpu" is read as nvidia.com/gpu.
func (b *builder) resources(path string, in map[string]scalar) ResourceList {
	if len(in) == 0 {
		return nil
	}
	out := ResourceList{}
	for _, name := range slices.Sorted(maps.Keys(in)) {
		q, err := ParseQuantity(string(in[name]))
		if err != nil {
			b.addf(join(path, name), "%v", err)
			continue
		}
		key := name
		if name == "gpu" {
			key = GPU
		}
		if _, dup := out[key]; dup {
			b.addf(join(path, name), "gives %s twice (gpu and nvidia.com/gpu); keep one", GPU)
		}
		out[key] = q
	}
	return out
}

// duration reads seconds ("600", "0.5") or a Go duration ("10m").
func (b *builder) duration(path, raw string) time.Duration {
	d, err := time.ParseDuration(raw)
	if err != nil {
		d, err = runconfig.ParseSeconds(raw)
	}
	if err != nil || d < 0 {
		b.addf(path, "%q is not a duration; give seconds (600) or a duration (10m), 0 or more", raw)
		return 0
	}
	return d
}

// criticalNodes reads DLRover's criticalNodes: comma-separated node ids,
// each optionally with its own relaunch budget ("0:3,1").
func (b *builder) criticalNodes(path, raw string) []CriticalNode {
	var out []CriticalNode
	seen := map[int]bool{}
	for item := range strings.SplitSeq(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		idText, budget, hasBudget := strings.Cut(item, ":")
		id, err := strconv.Atoi(strings.TrimSpace(idText))
		n := CriticalNode{ID: id, Relaunches: -1}
		if hasBudget && err == nil {
			n.Relaunches, err = strconv.Atoi(strings.TrimSpace(budget))
		}
		switch {
		case err != nil || id < 0 || n.Relaunches < -1 || hasBudget && n.Relaunches < 0:
			b.addf(path, "%q is not a node: want NODE_ID or NODE_ID:RELAUNCHES, comma-separated, e.g. \"0:3,1\"", item)
		case n.Relaunches > MaxRestartCount:
			b.addf(path, "%q: %d relaunches is above the cap of %d", item, n.Relaunches, MaxRestartCount)
		case seen[id]:
			b.addf(path, "node %d is listed twice; keep one", id)
		default:
			seen[id] = true
			out = append(out, n)
		}
	}
	return out
}
