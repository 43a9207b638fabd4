package jobspec

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/roverml/rover/internal/runconfig"
)

// groupView is the part of a ReplicaGroup the parse tests compare.
type groupView struct {
	Min, Max, Nproc, RestartCount int
	Command, LaunchArgs, Features []string
	Env                           []EnvVar
	Image                         string
	LimitsMilli                   map[string]int64
}

func view(g *ReplicaGroup) groupView {
	v := groupView{Min: g.MinNodes, Max: g.MaxNodes, Nproc: g.NprocPerNode, RestartCount: g.RestartCount,
		Command: g.Command, LaunchArgs: g.LaunchArgs, Features: g.LauncherFeatures, Env: g.Env, Image: g.Image}
	for k, q := range g.Limits {
		if v.LimitsMilli == nil {
			v.LimitsMilli = map[string]int64{}
		}
		v.LimitsMilli[k] = q.Milli
	}
	return v
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseGood(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		wantName    string
		maxRestarts int
		pending     time.Duration
		worker      groupView
	}{{
		name: "reference example", yaml: readTestdata(t, "torch-mnist.yaml"), wantName: "torch-mnist", maxRestarts: 3,
		worker: groupView{Min: 3, Max: 4, Nproc: 2, RestartCount: 3,
			Command:    []string{"python", "-u", "train.py"},
			LaunchArgs: []string{"--network-check", "--nnodes=3:4", "--nproc_per_node=2", "--max_restarts=3", "train.py"},
			Features:   []string{"network-check"}, Image: "registry.example/train:latest",
			LimitsMilli: map[string]int64{"cpu": 2000, "memory": 4 << 30 * 1000}},
	}, {
		name: "bare spec with rover run, env and envs merged", yaml: readTestdata(t, "local.yaml"), maxRestarts: 2,
		worker: groupView{Min: 1, Max: 2, Nproc: 2, RestartCount: 3,
			Command:    []string{"python", "-u", "train.py", "--lr", "0.1"},
			LaunchArgs: []string{"--nnodes=1:2", "--nproc-per-node=2", "--max-restarts=2", "train.py", "--lr", "0.1"},
			Env:        []EnvVar{{"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "1"}}},
	}, {
		name: "plain worker command, container env overrides envs",
		yaml: `
envs: {A: job, B: job}
pendingTimeout: 10m
maxRestarts: 1
replicaSpecs:
  worker:
    minReplicas: 2
    maxReplicas: 3
    nprocPerNode: 4
    restartCount: 5
    template: {spec: {containers: [{name: main, command: [python, train.py], env: [{name: B, value: ctr}]}]}}`,
		maxRestarts: 1, pending: 10 * time.Minute,
		worker: groupView{Min: 2, Max: 3, Nproc: 4, RestartCount: 5, Command: []string{"python", "train.py"},
			Env: []EnvVar{{"A", "job"}, {"B", "ctr"}}},
	}, {
		name: "torchrun in sh -c with quotes, pending_timeout annotation",
		yaml: `
apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: j, annotations: {pending_timeout: "600"}}
spec:
  replicaSpecs:
    worker:
      replicas: 2
      template: {spec: {containers: [{command: [sh, -c, "torchrun --nnodes 2 --nproc-per-node=1 'my train.py' --msg \"a b\""]}]}}`,
		wantName: "j", pending: 600 * time.Second,
		worker: groupView{Min: 2, Max: 2, Nproc: 1, RestartCount: 3,
			Command:    []string{"python", "-u", "my train.py", "--msg", "a b"},
			LaunchArgs: []string{"--nnodes", "2", "--nproc-per-node=1", "my train.py", "--msg", "a b"}},
	}, {
		name: "python -m torch.distributed.run, gpu from resources",
		yaml: `
replicaSpecs:
  worker:
    template: {spec: {containers: [{command: [python3, -m, torch.distributed.run, --nproc-per-node=gpu, t.py],
      resources: {limits: {nvidia.com/gpu: 8}}}]}}`,
		worker: groupView{Min: 1, Max: 1, Nproc: 8, RestartCount: 3, Command: []string{"python", "-u", "t.py"},
			LaunchArgs: []string{"--nproc-per-node=gpu", "t.py"}, LimitsMilli: map[string]int64{GPU: 8000}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if spec.Name != tt.wantName || spec.MaxRestarts != tt.maxRestarts || spec.PendingTimeout != tt.pending || spec.NodeUnit != 1 {
				t.Errorf("name %q maxRestarts %d pending %v nodeUnit %d; want %q %d %v 1",
					spec.Name, spec.MaxRestarts, spec.PendingTimeout, spec.NodeUnit, tt.wantName, tt.maxRestarts, tt.pending)
			}
			if diff := cmp.Diff(tt.worker, view(spec.Replicas[Worker]), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("worker (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseBad(t *testing.T) {
	const ok = `{name: main, command: [python, train.py]}`
	worker := func(fields, ctr string) string {
		return "replicaSpecs:\n  worker: {" + fields + " template: {spec: {containers: [" + ctr + "]}}}\n"
	}
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error, each naming a field
	}{
		{"malformed YAML", "replicaSpecs: [a\n  b: c", []string{"not valid YAML", "line"}},
		{"empty", "  \n", []string{"empty"}},
		{"not a mapping", "- a", []string{"want a mapping"}},
		{"unknown fields", "replicaSpecs: {worker: {replica: 2, template: {spec: {nodeSelecter: {}, containers: [" + ok + "]}}}}\nfoo: 1",
			[]string{"foo: unknown field", "replicaSpecs.worker.replica: unknown field", "replicaSpecs.worker.template.spec.nodeSelecter: unknown field"}},
		{"wrong types", worker("replicas: two, autoScale: 3,", ok), []string{"replicaSpecs.worker.replicas: want a whole number", "replicaSpecs.worker.autoScale: want true or false"}},
		{"min above max", worker("minReplicas: 3, maxReplicas: 2,", ok), []string{"replicaSpecs.worker.minReplicas: 3 is above maxReplicas: 2"}},
		{"zero and negative nodes", worker("replicas: 0, nprocPerNode: -1,", ok),
			[]string{"replicaSpecs.worker.replicas: 0 is too small", "replicaSpecs.worker.nprocPerNode: -1 is negative"}},
		{"unknown replica type", worker("", ok) + "  master: {}", []string{"replicaSpecs.master: unknown replica type"}},
		{"no worker", "replicaSpecs: {chief: {template: {spec: {containers: [" + ok + "]}}}}", []string{"replicaSpecs.worker: missing"}},
		{"empty command", worker("", "{name: main, command: []}"), []string{"replicaSpecs.worker.template.spec.containers[0].command: empty"}},
		{"restartCount above the cap", worker("restartCount: 6,", ok), []string{"replicaSpecs.worker.restartCount: 6 is above the cap of 5"}},
		{"negative restartCount", worker("restartCount: -1,", ok), []string{"replicaSpecs.worker.restartCount: -1 is negative"}},
		{"bad quantities", worker("", `{command: [a], resources: {limits: {cpu: 2x, memory: -1Gi}, requests: {cpu: 0.0001}}}`),
			[]string{"containers[0].resources.limits.cpu:", "unknown suffix", "containers[0].resources.limits.memory:", "negative",
				"containers[0].resources.requests.cpu:", "more precise"}},
		{"parameter server without ps", "distributionStrategy: ParameterServerStrategy\n" + worker("", ok), []string{"replicaSpecs.ps: missing"}},
		{"parameter server roles", "distributionStrategy: ParameterServerStrategy\n" + worker("minReplicas: 1, maxReplicas: 2,", ok) +
			"  ps: {template: {spec: {containers: [{command: [dlrover-run, --nnodes=2, t.py]}]}}}\n" +
			"  chief: {replicas: 2, template: {spec: {containers: [" + ok + "]}}}\n" +
			"  evaluator: {nprocPerNode: 2, template: {spec: {containers: [" + ok + "]}}}\n",
			[]string{"replicaSpecs.ps.template.spec.containers.command: a ParameterServerStrategy job's roles run their program directly",
				"replicaSpecs.chief.replicas: 2: a parameter-server job has at most one chief",
				"replicaSpecs.worker.minReplicas: 1..2: a parameter-server job's worker group runs a fixed number of nodes",
				"replicaSpecs.evaluator.nprocPerNode: 2: each replica of a parameter-server job is one process"}},
		{"parameter server auto-scaling", "distributionStrategy: ParameterServerStrategy\n" + worker("autoScale: true,", ok) +
			"  ps: {autoScale: true, replicas: 2, minReplicas: 1, maxReplicas: 4, template: {spec: {containers: [" + ok + "]}}}\n",
			[]string{"replicaSpecs.worker.autoScale: a parameter-server job auto-scales its ps group only",
				"replicaSpecs.ps.minReplicas: 1: an auto-scaled ps group starts at replicas (2) and only grows"}},
		{"unknown strategy", "distributionStrategy: Mirrored\n" + worker("", ok), []string{`distributionStrategy: "Mirrored" is unknown; use AllreduceStrategy or ParameterServerStrategy`}},
		{"replicas contradict --nnodes", worker("replicas: 4,", `{command: [dlrover-run, --nnodes=2, t.py]}`),
			[]string{"replicaSpecs.worker.replicas: 4 is outside --nnodes=2 in replicaSpecs.worker.template.spec.containers[0].command"}},
		{"script of a shell line not known statically", worker("", `{command: [bash, -c, "pip install x && dlrover-run --nnodes=2 $SCRIPT"]}`),
			[]string{"containers[0].command:", `the script "$SCRIPT" depends on $SCRIPT`}},
		{"replicas 1e9", worker("replicas: 1e9,", ok), []string{"replicaSpecs.worker.replicas: 1000000000 is above the limit of 10000 nodes per group (MaxNodes)"}},
		{"replicas 1048576 and nprocPerNode", worker("replicas: 1048576, nprocPerNode: 5000,", ok), []string{"replicaSpecs.worker.replicas: 1048576 is above the limit", "nprocPerNode: 5000 is above the limit of 1024"}},
		{"--nnodes above the limit", worker("", `{command: [dlrover-run, --nnodes=1:20000, t.py]}`), []string{"containers[0].command: dlrover-run: --nnodes=1:20000 is above the limit of 10000"}},
		{"bad launcher flag", worker("", `{command: [torchrun, --nnodes=3:2, t.py]}`), []string{"containers[0].command: torchrun: --nnodes=3:2"}},
		{"wrong kind and apiVersion", "apiVersion: v1\nkind: Job\nmetadata: {name: Bad_Name}\nspec:\n  " + strings.ReplaceAll(worker("", ok), "\n", "\n  "),
			[]string{"kind:", "apiVersion:", "metadata.name:"}},
		{"object paths start with spec.", "apiVersion: elastic.iml.github.io/v1alpha1\nkind: ElasticJob\nmetadata: {name: a}\nspec:\n  " + strings.ReplaceAll(worker("restartCount: 9,", ok), "\n", "\n  "),
			[]string{"spec.replicaSpecs.worker.restartCount"}},
		{"two containers, none main", worker("", `{name: a, command: [x]}, {name: b, command: [z]}`), []string{"replicaSpecs.worker.template.spec.containers: 2 containers"}},
		{"restartPolicy", "replicaSpecs: {worker: {template: {spec: {restartPolicy: Sometimes, containers: [" + ok + "]}}}}", []string{"template.spec.restartPolicy"}},
		{"maxRestarts contradicts the launcher", "maxRestarts: 1\n" + worker("", `{command: [torchrun, --max-restarts=2, t.py]}`), []string{"maxRestarts: 1 disagrees with --max-restarts=2"}},
		{"bad env", "envs: {1A: x}\n" + worker("", `{command: [x], env: [{name: A, value: b}, {name: A}]}`), []string{"envs.1A:", "containers[0].env[1].name: A is set twice"}},
		{"criticalNodes", worker(`criticalNodes: "0:9,x",`, ok), []string{"replicaSpecs.worker.criticalNodes:", "above the cap", `"x" is not a node`}},
		{"dlrover-master with containers", worker("", ok) + "  dlrover-master: {template: {spec: {containers: [{name: main, image: dlrover-master}]}}}",
			[]string{"replicaSpecs.dlrover-master.template.spec.containers: Rover makes the job's master"}},
		{"another API group", strings.Replace(readTestdata(t, "torch-mnist.yaml"), "elastic.iml.github.io", "elastic.example.com", 1),
			[]string{`apiVersion: "elastic.example.com/v1alpha1" is not supported; use apiVersion: elastic.rover.dev/v1alpha1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("Parse succeeded; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestParseBothAPIVersions: DLRover's ElasticJob and Rover's (the same
// document under elastic.rover.dev) give the same JobSpec, and an empty
// dlrover-master group, or one whose container names no image or
// command, is accepted and ignored.
func TestParseBothAPIVersions(t *testing.T) {
	dlrover := readTestdata(t, "torch-mnist.yaml")
	rover := strings.Replace(dlrover, "apiVersion: "+APIVersion, "apiVersion: "+RoverAPIVersion, 1)
	if rover == dlrover {
		t.Fatal("testdata/torch-mnist.yaml has no DLRover apiVersion line")
	}
	master := rover + "    dlrover-master:\n      template: {}\n"
	// DLRover's PS examples give the master a container with only a
	// name and a pull policy.
	masterCtr := rover + "    dlrover-master:\n      template: {spec: {restartPolicy: Never, containers: [{name: main, imagePullPolicy: Always}]}}\n"
	want, err := Parse([]byte(dlrover))
	if err != nil {
		t.Fatalf("Parse DLRover's: %v", err)
	}
	opts := cmp.Options{cmpopts.IgnoreUnexported(JobSpec{}, ReplicaGroup{}, runconfig.Config{}), cmpopts.EquateEmpty()}
	for name, doc := range map[string]string{"rover": rover, "rover with dlrover-master": master, "rover with dlrover-master's container": masterCtr} {
		got, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse %s: %v", name, err)
		}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("%s differs from DLRover's (-dlrover +%s):\n%s", name, name, diff)
		}
	}
}

func TestFromLaunchArgsMatchesYAML(t *testing.T) {
	args := []string{"--nnodes", "2:3", "--nproc-per-node", "2", "train.py", "--epochs", "3"}
	fromFlags, err := FromLaunchArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := Parse([]byte(`
replicaSpecs:
  worker:
    template: {spec: {containers: [{command: [rover, run, --nnodes, "2:3", --nproc-per-node, "2", train.py, --epochs, "3"]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	opts := cmp.Options{cmpopts.IgnoreUnexported(JobSpec{}, ReplicaGroup{}, runconfig.Config{}), cmpopts.EquateEmpty()}
	if diff := cmp.Diff(*fromYAML, fromFlags, opts); diff != "" {
		t.Errorf("flags and YAML differ (-yaml +flags):\n%s", diff)
	}
	if g := fromFlags.Replicas[Worker]; g.MinNodes != 2 || g.MaxNodes != 3 || g.NprocPerNode != 2 || g.Launch.RdzvEndpoint != "" {
		t.Errorf("worker group %+v", g)
	}
}

func TestParseFileNamesBareSpec(t *testing.T) {
	spec, err := ParseFile("testdata/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "local" {
		t.Errorf("Name = %q, want local", spec.Name)
	}
}

// TestParseReplicasWithinNNodes: replicas is how many nodes start, anywhere
// within --nnodes (or minReplicas..maxReplicas), so the job can be scaled.
func TestParseReplicasWithinNNodes(t *testing.T) {
	tests := []struct {
		name, ctr       string
		replicas        string
		min, nodes, max int
	}{
		{"launcher, replicas below max", `command: [dlrover-run, --nnodes=2:4, --nproc_per_node=2, train.py]`, "replicas: 3", 2, 3, 4},
		{"launcher, no replicas", `command: [dlrover-run, --nnodes=2:4, train.py]`, "", 2, 4, 4},
		{"plain command, min and max", `command: [python, train.py]`, "replicas: 2\n      minReplicas: 1\n      maxReplicas: 3", 1, 2, 3},
		{"plain command, replicas only", `command: [python, train.py]`, "replicas: 2", 2, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "kind: ElasticJob\napiVersion: elastic.rover.dev/v1alpha1\nmetadata: {name: j}\nspec:\n  replicaSpecs:\n    worker:\n      " +
				tc.replicas + "\n      template:\n        spec:\n          containers:\n          - name: main\n            " + tc.ctr + "\n"
			spec, err := Parse([]byte(doc))
			if err != nil {
				t.Fatalf("Parse: %v\n%s", err, doc)
			}
			g := spec.Replicas[Worker]
			if g.MinNodes != tc.min || g.Nodes != tc.nodes || g.MaxNodes != tc.max {
				t.Fatalf("nodes %d..%d starting %d, want %d..%d starting %d", g.MinNodes, g.MaxNodes, g.Nodes, tc.min, tc.max, tc.nodes)
			}
		})
	}
}

// TestPendingFailStrategy: DLRover's annotation is read, checked, and
// refused where the platform has no pending nodes; the local platform has
// them (rover submit --max-nodes-here).
func TestPendingFailStrategy(t *testing.T) {
	doc := func(v string) []byte {
		return []byte("kind: ElasticJob\napiVersion: elastic.rover.dev/v1alpha1\nmetadata:\n  name: j\n  annotations: {pending_fail_strategy: \"" + v +
			"\"}\nspec:\n  replicaSpecs:\n    worker:\n      template:\n        spec:\n          containers:\n          - name: main\n            command: [dlrover-run, --nnodes=2, train.py]\n")
	}
	for _, v := range []string{"-1", "0", "1", "2"} {
		spec, err := Parse(doc(v))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := strconv.Itoa(spec.PendingFailStrategy); got != v {
			t.Errorf("pending_fail_strategy %s read as %s", v, got)
		}
	}
	for _, v := range []string{"3", "-2", "all"} {
		if _, err := Parse(doc(v)); err == nil || !strings.Contains(err.Error(), "metadata.annotations.pending_fail_strategy") {
			t.Errorf("pending_fail_strategy %q: err %v, want one naming the annotation", v, err)
		}
	}
	spec, err := Parse(doc("2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Check(Capabilities{Platform: "none", ReplicaTypes: []ReplicaType{Worker}}); err == nil || !strings.Contains(err.Error(), "pending_fail_strategy") {
		t.Errorf("Check without pending nodes = %v, want pending_fail_strategy refused", err)
	}
	for _, c := range []Capabilities{LocalCapabilities, KubernetesCapabilities} {
		if err := spec.Check(c); err != nil {
			t.Errorf("%s: Check = %v", c.Platform, err)
		}
	}
}

// TestAutoScaleAnnotation: an ElasticJob's auto-scaling knobs come from
// the elastic.rover.dev/auto-scale annotation, as rover submit
// --auto-scale takes them; a bad one is refused naming the annotation.
func TestAutoScaleAnnotation(t *testing.T) {
	doc := func(knobs string) string {
		return `
apiVersion: elastic.rover.dev/v1alpha1
kind: ElasticJob
metadata: {name: j, annotations: {elastic.rover.dev/auto-scale: "` + knobs + `"}}
spec:
  replicaSpecs:
    worker: {replicas: 1, autoScale: true, template: {spec: {containers: [{command: [torchrun, --nnodes=1:3, t.py]}]}}}`
	}
	spec, err := Parse([]byte(doc("cool-down=30s,capacity-retry=1m")))
	if err != nil {
		t.Fatal(err)
	}
	if k := spec.AutoScaleKnobs; k.CoolDown != 30*time.Second || k.CapacityRetry != time.Minute || !spec.Replicas[Worker].AutoScale {
		t.Errorf("knobs %+v, autoScale %v", k, spec.Replicas[Worker].AutoScale)
	}
	_, err = Parse([]byte(doc("cool-down=soon")))
	if err == nil || !strings.Contains(err.Error(), "metadata.annotations.elastic.rover.dev/auto-scale") || !strings.Contains(err.Error(), "not a duration") {
		t.Errorf("bad knobs: %v", err)
	}
}
