package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Capabilities says what a platform can honour. Check refuses every field
// of a spec outside it rather than ignoring it.
type Capabilities struct {
	// Platform describes the platform for messages, e.g. "the local
	// platform runs processes on this machine".
	Platform string
	// Instead says what to do instead, e.g. "submit to Kubernetes".
	Instead string
	// ReplicaTypes are the replica types it runs in an allreduce job.
	ReplicaTypes []ReplicaType
	// ParameterServer: it runs parameter-server jobs
	// (ParameterServerStrategy), with all their replica types.
	ParameterServer bool
	// Resources are the resource names it can reserve (cpu, memory,
	// nvidia.com/gpu); Notes lists the others as ignored.
	Resources []string
	// Images: it runs container images (image, imagePullPolicy). Without
	// it, an image is refused (the job would run other programs) and
	// imagePullPolicy ignored.
	Images bool
	// Namespaces: it places jobs in namespaces.
	Namespaces bool
	// Scheduling: it honours priority, autoScale, restartTimeout,
	// pendingTimeout, suspend and resourceLimits.
	Scheduling bool
	// Suspend and PendingTimeout: it honours suspend and pendingTimeout
	// even without Scheduling.
	Suspend, PendingTimeout bool
	// AutoScale: the master decides the node count (autoScale), even
	// without Scheduling.
	AutoScale bool
	// CriticalNodes: it honours criticalNodes.
	CriticalNodes bool
	// LauncherFeatures are the dlrover-run switches it implements.
	LauncherFeatures []string
	// MaxNodes, when above 0, is the most nodes a group may have on it
	// (below jobspec's MaxNodes).
	MaxNodes int
	// RightSize: it sets each relaunched or rescaled node's requests from
	// what its rank used, and so honours resourceLimits (the bound of
	// right-sizing) even without Scheduling.
	RightSize bool
	// PodTemplate: it runs pods from the template as written (volumes,
	// securityContext, sidecars, ...); otherwise Notes lists those fields
	// as ignored.
	PodTemplate bool
}

// LocalMaxNodes is the most nodes a group may have on the local platform:
// every node is an agent and its workers on this machine.
const LocalMaxNodes = 64

// NodeCheckFeatures are the dlrover-run switches of the pre-flight node
// check, which `rover run` implements on every platform.
var NodeCheckFeatures = []string{"network-check", "exclude-straggler", "comm-perf-test"}

// LocalCapabilities is what the local platform honours: worker processes
// on this machine, no images, no resource reservations, no scheduler; the
// pending timeout (nodes beyond rover submit --max-nodes-here pend).
var LocalCapabilities = Capabilities{
	Platform:         "the local platform runs processes on this machine",
	Instead:          "submit to Kubernetes",
	PendingTimeout:   true, // nodes beyond --max-nodes-here pend
	ReplicaTypes:     []ReplicaType{Worker},
	ParameterServer:  true,
	AutoScale:        true,
	LauncherFeatures: NodeCheckFeatures,
	MaxNodes:         LocalMaxNodes,
}

// KubernetesCapabilities is what Rover's Kubernetes platform honours:
// worker pods from the template, with images and resources, in a
// namespace; parameter-server jobs (a pod per replica of every role, a
// Service per replica); suspend (the operator) and the pending timeout
// (the node manager), autoScale (the master's policy) and resourceLimits
// (the bound of right-sized nodes). Priorities and restartTimeout are not
// acted on yet, so they are refused.
var KubernetesCapabilities = Capabilities{
	Platform:         "Rover's Kubernetes platform",
	Instead:          "wait for a Rover that implements it",
	ReplicaTypes:     []ReplicaType{Worker},
	ParameterServer:  true,
	Resources:        []string{CPU, Memory, GPU},
	Images:           true,
	Namespaces:       true,
	Suspend:          true,
	PendingTimeout:   true,
	AutoScale:        true,
	CriticalNodes:    true,
	RightSize:        true,
	LauncherFeatures: NodeCheckFeatures,
	PodTemplate:      true,
}

// ErrUnsupported is wrapped by Check's errors.
var ErrUnsupported = errors.New("not supported by the platform")

// Check returns an error listing every field of s that c cannot honour,
// each naming the field path, or nil. Its errors match ErrUnsupported.
func (s JobSpec) Check(c Capabilities) error {
	var errs []error
	refuse := func(path, remove string) {
		errs = append(errs, &unsupportedError{msg: fmt.Sprintf("%s: it cannot honour %s; %s or %s", c.Platform, path, remove, c.Instead)})
	}
	if !c.Scheduling {
		if s.Suspend && !c.Suspend {
			refuse(s.prefix+"suspend", "remove it")
		}
		if s.PendingTimeout != 0 && !c.PendingTimeout {
			refuse(s.prefix+"pendingTimeout (or the pending_timeout annotation)", "remove it")
		}
		if s.PendingFailStrategy != 1 && !c.PendingTimeout {
			refuse("metadata.annotations.pending_fail_strategy", "remove it")
		}
		if len(s.ResourceLimits) > 0 && !c.RightSize {
			refuse(s.prefix+"resourceLimits", "remove it")
		}
	}
	if s.IsParameterServer() && !c.ParameterServer {
		refuse(s.prefix+"distributionStrategy: ParameterServerStrategy (parameter-server jobs are not implemented here yet)", "use AllreduceStrategy")
		return errors.Join(errs...)
	}
	for _, t := range replicaTypes {
		g := s.Replicas[t]
		if g == nil {
			continue
		}
		base := s.prefix + "replicaSpecs." + string(t)
		ctr := g.ctrPath
		if ctr == "" {
			ctr = base
		}
		if !c.runs(s, t) {
			errs = append(errs, &unsupportedError{msg: fmt.Sprintf("%s: an AllreduceStrategy job runs worker groups only; remove it, or set %sdistributionStrategy: ParameterServerStrategy for a parameter-server job", base, s.prefix)})
			continue
		}
		if c.MaxNodes > 0 && g.MaxNodes > c.MaxNodes {
			errs = append(errs, &unsupportedError{msg: fmt.Sprintf("%s: %s: %d nodes is above its limit of %d nodes per group (each node is an agent with its workers on this machine); give %d or less, or %s",
				c.Platform, base+nodesField(g), g.MaxNodes, c.MaxNodes, c.MaxNodes, c.Instead)})
		}
		if !c.Scheduling {
			if g.Priority != "" {
				refuse(base+".priority", "remove it")
			}
			if g.AutoScale && !c.AutoScale {
				refuse(base+".autoScale", "remove it")
			}
			if g.RestartTimeout != 0 {
				refuse(base+".restartTimeout", "remove it")
			}
		}
		if len(g.CriticalNodes) > 0 && !c.CriticalNodes {
			refuse(base+".criticalNodes", "remove it")
		}
		if !c.Images && g.Image != "" {
			// Not ignored: the job would run this machine's programs,
			// not the image's.
			refuse(ctr+".image (the nodes would run this machine's python and script, not the image's)", "remove it")
		}
		for _, f := range g.LauncherFeatures {
			if !slices.Contains(c.LauncherFeatures, f) {
				refuse(ctr+".command flag --"+f+" (not implemented yet in Rover)", "remove the flag")
			}
		}
	}
	return errors.Join(errs...)
}

// runs reports whether c runs s's groups of type t.
func (c Capabilities) runs(s JobSpec, t ReplicaType) bool {
	if s.IsParameterServer() {
		return c.ParameterServer
	}
	return slices.Contains(c.ReplicaTypes, t)
}

// unsupportedError is one field a platform cannot honour.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string        { return e.msg }
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }

// nodesField names the field that gave a group's most nodes.
func nodesField(g *ReplicaGroup) string {
	if g.Launch != nil && g.ctrPath != "" {
		return " (--nnodes in " + g.ctrPath + ".command)"
	}
	return ".replicas"
}

// Notes returns what c does with s that a user may not expect, without
// refusing it: fields of the pod template a platform without pods ignores,
// a restartPolicy run as Never, a shell line's launcher flags read only
// when the job runs. rover submit shows them as warnings.
func (s JobSpec) Notes(c Capabilities) []string {
	var out []string
	if s.Namespace != "" && !c.Namespaces {
		out = append(out, fmt.Sprintf("metadata.namespace: ignored: %s, which has no namespaces", c.Platform))
	}
	for _, t := range replicaTypes {
		g := s.Replicas[t]
		if g == nil || !c.runs(s, t) {
			continue
		}
		if g.RestartPolicy != "" && g.RestartPolicy != "Never" {
			out = append(out, fmt.Sprintf("%sreplicaSpecs.%s.template.spec.restartPolicy: %s is run as Never: Rover relaunches a failed node itself (restartCount: %d), as DLRover does",
				s.prefix, t, g.RestartPolicy, g.RestartCount))
		}
		ctr := g.ctrPath
		if ctr == "" {
			ctr = s.prefix + "replicaSpecs." + string(t)
		}
		if !c.Images && g.ImagePullPolicy != "" {
			out = append(out, fmt.Sprintf("%s.imagePullPolicy: ignored: %s, which runs no images", ctr, c.Platform))
		}
		for _, list := range []struct {
			name string
			rl   ResourceList
		}{{"limits", g.Limits}, {"requests", g.Requests}} {
			for _, r := range slices.Sorted(maps.Keys(list.rl)) {
				if !slices.Contains(c.Resources, r) {
					out = append(out, fmt.Sprintf("%s: ignored: %s, which reserves no resources; Kubernetes honours it", join(ctr+".resources."+list.name, r), c.Platform))
				}
			}
		}
		if !c.PodTemplate {
			for _, f := range g.PodFields {
				out = append(out, fmt.Sprintf("%s: ignored: %s, which has no pods; Kubernetes honours it", f, c.Platform))
			}
		}
		out = append(out, g.notes...)
	}
	return out
}
