package jobspec

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/runconfig"
)

// builder turns the wire form into a JobSpec, collecting every problem.
type builder struct {
	prefix string // "spec." for an ElasticJob, "" for a bare spec
	errs   []error
}

func (b *builder) addf(path, format string, a ...any) {
	b.errs = append(b.errs, fmt.Errorf(b.prefix+path+": "+format, a...))
}

// build validates ws and returns the JobSpec, and every problem: groups
// with problems are built as far as they go.
func build(meta wireMeta, ws wireSpec, prefix string) (*JobSpec, error) {
	b := &builder{prefix: prefix}
	spec := &JobSpec{
		Name:         meta.Name,
		Namespace:    meta.Namespace,
		Strategy:     AllreduceStrategy,
		OptimizeMode: "single-job",
		Replicas:     map[ReplicaType]*ReplicaGroup{},
		Suspend:      ws.Suspend,
		NodeUnit:     1,
		prefix:       prefix,
	}
	switch ws.DistributionStrategy {
	case "", AllreduceStrategy:
	case ParameterServerStrategy:
		spec.Strategy = ParameterServerStrategy
	default:
		b.addf("distributionStrategy", "%q is unknown; use AllreduceStrategy or ParameterServerStrategy", ws.DistributionStrategy)
	}
	switch ws.OptimizeMode {
	case "", "single-job":
	case "cluster", "manual":
		b.addf("optimizeMode", "%q is not supported: Rover optimizes each job on its own; use single-job or leave it out", ws.OptimizeMode)
	default:
		b.addf("optimizeMode", "%q is unknown; use single-job or leave it out", ws.OptimizeMode)
	}
	for _, name := range slices.Sorted(maps.Keys(ws.Envs)) {
		if !validEnvName(name) {
			b.addf("envs."+name, "not a valid environment variable name; use letters, digits and _, not starting with a digit")
		}
		spec.Env = append(spec.Env, EnvVar{Name: name, Value: ws.Envs[name].Value})
	}
	spec.ResourceLimits = b.resources("resourceLimits", ws.ResourceLimits)
	if ws.PendingTimeout != nil {
		spec.PendingTimeout = b.duration("pendingTimeout", string(*ws.PendingTimeout))
	} else if v, ok := meta.Annotations["pending_timeout"]; ok {
		b2 := &builder{}
		spec.PendingTimeout = b2.duration("metadata.annotations.pending_timeout", v)
		b.errs = append(b.errs, b2.errs...)
	}

	if v, ok := meta.Annotations[AutoScaleAnnotation]; ok {
		knobs, err := autoscale.ParseKnobs(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("metadata.annotations.%s: %w", AutoScaleAnnotation, err))
		}
		spec.AutoScaleKnobs = knobs
	}

	spec.PendingFailStrategy = 1
	if v, ok := meta.Annotations["pending_fail_strategy"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < -1 || n > 2 {
			b.errs = append(b.errs, fmt.Errorf("metadata.annotations.pending_fail_strategy: %q is not one of DLRover's strategies; use -1 or 0 (never fail for pending nodes), 1 (fail when the job cannot run without them; the default) or 2 (fail when any node pends too long)", v))
		} else {
			spec.PendingFailStrategy = n
		}
	}

	if len(ws.ReplicaSpecs) == 0 {
		b.addf("replicaSpecs", "missing; give at least replicaSpecs.worker with the training container")
	}
	for _, key := range slices.Sorted(maps.Keys(ws.ReplicaSpecs)) {
		t := ReplicaType(key)
		if t == dlroverMaster {
			// DLRover's master group: Rover makes its own master, so
			// one whose containers name no image and no command (as
			// DLRover's examples write it: a name and an
			// imagePullPolicy) is accepted and ignored.
			if w := ws.ReplicaSpecs[key]; w != nil {
				for _, c := range w.Template.Spec.Containers {
					if c.Image != "" || len(c.Command) > 0 || len(c.Args) > 0 {
						b.addf("replicaSpecs."+key+".template.spec.containers", "Rover makes the job's master from its own image; remove dlrover-master's containers, or their image, command and args")
						break
					}
				}
			}
			continue
		}
		if !slices.Contains(replicaTypes, t) {
			b.addf("replicaSpecs."+key, "unknown replica type; use worker (also accepted: ps, chief, evaluator)")
			continue
		}
		if g := b.group(t, ws.ReplicaSpecs[key], spec.Env); g != nil {
			spec.Replicas[t] = g
		}
	}
	if _, ok := ws.ReplicaSpecs[string(Worker)]; len(ws.ReplicaSpecs) > 0 && !ok {
		b.addf("replicaSpecs.worker", "missing; every job needs a worker group")
	}
	if spec.IsParameterServer() {
		b.parameterServer(spec, ws)
	}

	// Job-wide settings: the worker launcher's flags, or the spec's fields.
	spec.MaxRestarts = b.jobInt("maxRestarts", ws.MaxRestarts, spec.Replicas[Worker], "max-restarts",
		func(c *runconfig.Config) int { return c.MaxRestarts }, 0, 0)
	spec.NodeUnit = b.jobInt("nodeUnit", ws.NodeUnit, spec.Replicas[Worker], "node-unit",
		func(c *runconfig.Config) int { return c.NodeUnit }, 1, 1)

	// The spec is returned with its problems, so that a caller can check
	// the rest of it against a platform (ParseFor); Parse drops it.
	return spec, errors.Join(b.errs...)
}

// parameterServer checks the groups of a parameter-server job: a ps group,
// at most one chief and one evaluator, each role's command run as written
// (a launcher rendezvouses a torch world, which these roles do not), and a
// fixed node count per role, except an auto-scaled ps group, which starts
// at replicas and may grow to maxReplicas (the PS scaling rule).
func (b *builder) parameterServer(spec *JobSpec, ws wireSpec) {
	if _, ok := ws.ReplicaSpecs[string(PS)]; len(ws.ReplicaSpecs) > 0 && !ok {
		b.addf("replicaSpecs.ps", "missing; a ParameterServerStrategy job needs a ps group (or use AllreduceStrategy)")
	}
	for _, t := range replicaTypes {
		g := spec.Replicas[t]
		if g == nil || g.broken {
			continue
		}
		base := "replicaSpecs." + string(t)
		if g.Launch != nil || g.Shell != nil {
			b.addf(base+".template.spec.containers.command", "a ParameterServerStrategy job's roles run their program directly, with TF_CONFIG, and do not rendezvous: give the program (e.g. [python, train.py]) without dlrover-run, torchrun or rover run")
			continue
		}
		if (t == Chief || t == Evaluator) && g.MaxNodes > 1 {
			b.addf(base+".replicas", "%d: a parameter-server job has at most one %s (as TensorFlow); give replicas: 1", g.MaxNodes, t)
		}
		switch {
		case t == PS && g.AutoScale:
			if g.MinNodes != g.Nodes {
				b.addf(base+".minReplicas", "%d: an auto-scaled ps group starts at replicas (%d) and only grows; leave minReplicas out", g.MinNodes, g.Nodes)
			}
		case g.MinNodes != g.MaxNodes:
			b.addf(base+".minReplicas", "%d..%d: a parameter-server job's %s group runs a fixed number of nodes (only an auto-scaled ps group grows, up to maxReplicas); give replicas only", g.MinNodes, g.MaxNodes, t)
		case g.AutoScale:
			b.addf(base+".autoScale", "a parameter-server job auto-scales its ps group only (its PS are migrated to more CPU, and added up to maxReplicas); remove it here")
		}
		if g.NprocPerNode > 1 {
			b.addf(base+".nprocPerNode", "%d: each replica of a parameter-server job is one process, with its own TF_CONFIG task; give more replicas instead", g.NprocPerNode)
		}
	}
}

// jobInt settles a job-wide number given by the spec's field, the worker
// launcher's flag, or both (which must agree).
func (b *builder) jobInt(field string, v *int, w *ReplicaGroup, flag string, get func(*runconfig.Config) int, def, least int) int {
	if v != nil && *v < least {
		b.addf(field, "%d is too small; use %d or more", *v, least)
		return def
	}
	if w == nil || w.Launch == nil {
		if v != nil {
			return *v
		}
		return def
	}
	fromFlag := get(w.Launch)
	if v != nil && *v != fromFlag {
		b.addf(field, "%d disagrees with --%s=%d in %s; give the value once, in the launcher flags or here", *v, flag, fromFlag, w.ctrPath+".command")
	}
	return fromFlag
}

// group builds and validates one replica group.
func (b *builder) group(t ReplicaType, w *wireReplica, jobEnv []EnvVar) *ReplicaGroup {
	base := "replicaSpecs." + string(t)
	if w == nil {
		b.addf(base, "empty; give replicas and a template with the training container")
		return nil
	}
	g := &ReplicaGroup{Type: t, AutoScale: w.AutoScale, RestartCount: DefaultRestartCount}
	n := len(b.errs)

	if w.RestartCount != nil {
		switch rc := *w.RestartCount; {
		case rc < 0:
			b.addf(base+".restartCount", "%d is negative; use 0 to %d relaunches per node", rc, MaxRestartCount)
		case rc > MaxRestartCount:
			b.addf(base+".restartCount", "%d is above the cap of %d relaunches per node (as in DLRover); use %d or less", rc, MaxRestartCount, MaxRestartCount)
		default:
			g.RestartCount = rc
		}
	}
	if w.RestartTimeout != nil {
		if *w.RestartTimeout < 0 {
			b.addf(base+".restartTimeout", "%d is negative; give seconds, 0 or more", *w.RestartTimeout)
		}
		g.RestartTimeout = time.Duration(*w.RestartTimeout) * time.Second
	}
	if w.Priority != nil {
		g.Priority = string(*w.Priority)
		if f, err := strconv.ParseFloat(g.Priority, 64); g.Priority != "high" && g.Priority != "low" && (err != nil || f < 0 || f > 1) {
			b.addf(base+".priority", "%q is not a priority; use high, low, or a fraction between 0 and 1 such as 0.5", g.Priority)
		}
	}
	switch w.RestartPolicy {
	case "", "Never", "Always", "OnFailure", "ExitCode":
	default:
		b.addf(base+".restartPolicy", "%q is not a restart policy; use Never (Rover relaunches failed nodes itself, restartCount), or leave it out", w.RestartPolicy)
	}
	if w.BatchScheduler != "" && w.BatchScheduler != "default" {
		b.addf(base+".BatchScheduler", "%q is not supported: Rover uses the cluster's default scheduler; use default or leave it out", w.BatchScheduler)
	}
	if w.CriticalNodes != nil {
		g.CriticalNodes = b.criticalNodes(base+".criticalNodes", string(*w.CriticalNodes))
	}

	ctr, ctrPath := b.container(base, w)
	if ctr != nil {
		g.ctrPath = b.prefix + ctrPath
		g.Container, g.Image, g.ImagePullPolicy, g.WorkingDir = ctr.Name, ctr.Image, string(ctr.ImagePullPolicy), ctr.WorkingDir
		g.RestartPolicy = cmp.Or(string(w.Template.Spec.RestartPolicy), w.RestartPolicy)
		g.PodFields = b.podFields(base, w, ctr)
		g.Requests = b.resources(ctrPath+".resources.requests", ctr.Resources.Requests)
		g.Limits = b.resources(ctrPath+".resources.limits", ctr.Resources.Limits)
		g.Env = b.env(ctrPath+".env", jobEnv, ctr.Env)
		b.command(g, w, ctr, ctrPath)
	}
	if len(b.errs) > n {
		g.broken = true
	}
	return g
}

// container finds the training container: the one named main, or the only one.
func (b *builder) container(base string, w *wireReplica) (*wireContainer, string) {
	ps := &w.Template.Spec
	switch ps.RestartPolicy {
	case "", corev1.RestartPolicyNever, corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure:
	default:
		b.addf(base+".template.spec.restartPolicy", "%q is not a restart policy; use Never (Rover relaunches failed nodes itself, restartCount), or leave it out", ps.RestartPolicy)
	}
	cs := ps.Containers
	path := base + ".template.spec.containers"
	switch {
	case len(cs) == 0:
		b.addf(path, "no containers; give one container (named main) with the training command")
		return nil, ""
	case len(cs) == 1:
		return &cs[0], path + "[0]"
	}
	for i := range cs {
		if cs[i].Name == "main" {
			return &cs[i], fmt.Sprintf("%s[%d]", path, i)
		}
	}
	b.addf(path, "%d containers and none is named main; name the training container main", len(cs))
	return nil, ""
}

// podFields lists the pod template's fields beyond those the job spec
// reads, as field paths (prefixed): the pod's own fields, the training
// container's, its env entries with valueFrom, and the other containers.
func (b *builder) podFields(base string, w *wireReplica, main *wireContainer) []string {
	var out []string
	tmpl := b.prefix + base + ".template"
	if len(w.Template.Metadata.Labels) > 0 || len(w.Template.Metadata.Annotations) > 0 {
		out = append(out, tmpl+".metadata")
	}
	for _, k := range setFields(w.Template.Spec.PodSpec, "containers", "restartPolicy") {
		out = append(out, tmpl+".spec."+k)
	}
	for i := range w.Template.Spec.Containers {
		c := &w.Template.Spec.Containers[i]
		p := fmt.Sprintf("%s.spec.containers[%d]", tmpl, i)
		if c != main {
			out = append(out, fmt.Sprintf("%s (the sidecar container %q)", p, c.Name))
			continue
		}
		for _, k := range setFields(c.Container, "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "resources") {
			out = append(out, p+"."+k)
		}
		for j, e := range c.Env {
			if e.ValueFrom != nil {
				out = append(out, fmt.Sprintf("%s.env[%d].valueFrom (%s)", p, j, e.Name))
			}
		}
		if len(c.Resources.Claims) > 0 {
			out = append(out, p+".resources.claims")
		}
	}
	return out
}

// setFields returns the JSON names of v's fields that are set, less skip,
// sorted.
func setFields(v any, skip ...string) []string {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if slices.Contains(skip, k) {
			continue
		}
		switch string(m[k]) {
		case "null", "{}", "[]", `""`, "0", "false":
			continue
		}
		out = append(out, k)
	}
	return out
}

// command sets the group's command, launcher and node counts.
func (b *builder) command(g *ReplicaGroup, w *wireReplica, ctr *wireContainer, ctrPath string) {
	argv := append(append([]string{}, ctr.Command...), ctr.Args...)
	cmdPath := ctrPath + ".command"
	if len(argv) == 0 || strings.TrimSpace(strings.Join(argv, "")) == "" {
		b.addf(cmdPath, "empty; give the training command, e.g. [dlrover-run, --nnodes=2, --nproc_per_node=2, train.py]")
		return
	}
	base := "replicaSpecs." + string(g.Type)
	bad := false
	count := func(f string, p *int, least, most int, what string) {
		switch {
		case p == nil:
		case *p < least:
			how := "negative"
			if *p >= 0 {
				how = "too small"
			}
			b.addf(base+"."+f, "%d is %s; a group needs at least %d", *p, how, least)
			bad = true
		case *p > most:
			b.addf(base+"."+f, "%d is above the limit of %d %s; give %d or less", *p, most, what, most)
			bad = true
		}
	}
	count("replicas", w.Replicas, 1, MaxNodes, "nodes per group (MaxNodes)")
	count("minReplicas", w.MinReplicas, 1, MaxNodes, "nodes per group (MaxNodes)")
	count("maxReplicas", w.MaxReplicas, 1, MaxNodes, "nodes per group (MaxNodes)")
	count("nprocPerNode", w.NprocPerNode, 1, MaxNprocPerNode, "processes per node (MaxNprocPerNode)")
	if bad {
		return // the counts below would only repeat it
	}

	line, err := findLauncher(argv, lineVars(g, w))
	if err != nil {
		b.addf(cmdPath, "%v", err)
		return
	}
	if line != nil && line.shell != nil {
		args, notes, err := staticArgs(line, cmpOr(w.Replicas, w.MaxReplicas, 1), b.prefix+cmdPath)
		if err != nil {
			b.addf(cmdPath, "%v", err)
			return
		}
		line.args, g.Shell, g.notes = args, line.shell, notes
	}
	if line == nil {
		g.Command = argv
		g.NprocPerNode = deref(w.NprocPerNode, 1)
		lo, hi := deref(w.MinReplicas, 0), deref(w.MaxReplicas, 0)
		r := deref(w.Replicas, 0)
		switch {
		case lo == 0 && hi == 0:
			lo, hi = max(r, 1), max(r, 1)
		case hi == 0:
			hi = max(r, lo)
		case lo == 0 && r > 0:
			lo = min(r, hi) // replicas start, and may grow to maxReplicas
		case lo == 0:
			lo = hi
		}
		if r != 0 && (r < lo || r > hi) {
			b.addf(base+".replicas", "%d is outside minReplicas..maxReplicas (%d..%d); replicas is how many nodes start: give a count in that range", r, lo, hi)
		}
		if lo > hi {
			b.addf(base+".minReplicas", "%d is above maxReplicas: %d; the minimum must not exceed the maximum", lo, hi)
		}
		g.MinNodes, g.MaxNodes, g.Nodes = lo, hi, cmp.Or(r, hi)
		return
	}

	args, features := stripFeatures(line.args)
	cfg, err := launchParser(g.Limits).Parse(args)
	if err != nil {
		for _, e := range unjoin(err) {
			b.addf(cmdPath, "%s: %v", line.name, e)
		}
		return
	}
	if cfg.MaxNodes > MaxNodes {
		b.addf(cmdPath, "%s: --nnodes=%s is above the limit of %d nodes per group (MaxNodes); give %d or less", line.name, cfg.Policy().NNodesText(), MaxNodes, MaxNodes)
		return
	}
	if cfg.NprocPerNode > MaxNprocPerNode {
		b.addf(cmdPath, "%s: --nproc-per-node=%d is above the limit of %d processes per node (MaxNprocPerNode); give %d or less", line.name, cfg.NprocPerNode, MaxNprocPerNode, MaxNprocPerNode)
		return
	}
	g.Launch, g.LaunchArgs, g.LauncherFeatures = cfg, args, features
	g.Command = cfg.WorkerArgv("python")
	g.MinNodes, g.MaxNodes, g.NprocPerNode = cfg.MinNodes, cfg.MaxNodes, cfg.NprocPerNode
	nn := fmt.Sprintf("--nnodes=%s in %s%s", cfg.Policy().NNodesText(), b.prefix, cmdPath)
	agree := func(field string, p *int, want int, what string) {
		if p != nil && *p != want {
			b.addf(base+"."+field, "%d disagrees with %s; %s: set %s: %d or change --nnodes", *p, nn, what, field, want)
		}
	}
	g.Nodes = cfg.MaxNodes
	if r := w.Replicas; r != nil {
		if *r < cfg.MinNodes || *r > cfg.MaxNodes {
			b.addf(base+".replicas", "%d is outside %s; replicas is how many nodes start, and scaling stays within --nnodes: set replicas from %d to %d or change --nnodes",
				*r, nn, cfg.MinNodes, cfg.MaxNodes)
		} else {
			g.Nodes = *r
		}
	}
	agree("maxReplicas", w.MaxReplicas, cfg.MaxNodes, "maxReplicas is the most nodes the group runs")
	agree("minReplicas", w.MinReplicas, cfg.MinNodes, "minReplicas is the fewest nodes the job trains with")
	if w.NprocPerNode != nil && *w.NprocPerNode != cfg.NprocPerNode {
		b.addf(base+".nprocPerNode", "%d disagrees with --nproc-per-node=%d in %s%s; give it once", *w.NprocPerNode, cfg.NprocPerNode, b.prefix, cmdPath)
	}
}

// featureFlags are dlrover-run switches that a platform may not honour;
// stripFeatures lists them so that Check can refuse them per platform
// (Capabilities.LauncherFeatures). Those `rover run` implements
// (NodeCheckFeatures) stay in the launcher line; the others are lifted out
// of it, so that the spec parses.
var featureFlags = []string{"network-check", "exclude-straggler", "comm-perf-test", "auto-config", "auto-tunning"}

// stripFeatures removes the feature switches (exact spellings, with - or _,
// optionally =true) that come before the script. Switches are booleans, so
// they never take the next argument, and an option-looking argument is
// never a flag's value: everything before the first non-option argument
// that is not a flag's value is an option. To stay exact it stops at the
// first argument that does not start with "-" and is not preceded by a
// value-taking flag; it treats "--" as the end.
func stripFeatures(args []string) (kept, features []string) {
	kept = make([]string, 0, len(args))
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		if strings.HasPrefix(a, "--") && slices.Contains(featureFlags, name) && (!hasVal || val == "true" || val == "false") {
			if val != "false" {
				features = append(features, name)
			}
			if slices.Contains(NodeCheckFeatures, name) {
				kept = append(kept, a) // rover run implements it: the nodes' agents need it
			}
			continue
		}
		kept = append(kept, a)
		if !hasVal && strings.HasPrefix(a, "--") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && takesValue(name) {
			i++
			kept = append(kept, args[i])
		}
	}
	return append(kept, args[i:]...), features
}

// takesValue reports whether a long flag (or a prefix of one) takes a
// value; booleans of rover run do not.
func takesValue(name string) bool {
	for _, b := range []string{"standalone", "module", "no-python", "run-path", "help"} {
		if strings.HasPrefix(b, name) {
			return false
		}
	}
	return true
}

func deref(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
