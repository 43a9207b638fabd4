package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/kubemaster"
	"github.com/roverml/rover/internal/runconfig"
)

// masterConfig is the validated command line of `rover master`.
type masterConfig struct {
	Listen string
	Job    string
	// TokenFile is --token-file; "" when not given.
	TokenFile string
	AddrFile  string
	StateDir  string
	// StateKube is --state-kube: the namespace and name of the state kept
	// in the Kubernetes API (package kubestore); both empty when not given.
	StateKube struct{ Namespace, Name string }
	// TLSCert and TLSKey are --tls-cert and --tls-key: both, or neither
	// for cleartext HTTP/2.
	TLSCert, TLSKey string
	Linger          time.Duration
	// Preset fixes the job's rendezvous (--nnodes and friends); nil takes
	// the first agent's.
	Preset *runconfig.Policy
	// Checkpoint is --checkpoint-dir (absolute) and --checkpoint-keep.
	Checkpoint jobconfig.CheckpointStorage
	// Platform is --platform: "" (agents are started by someone else) or
	// "kubernetes" (the master creates the ElasticJob's worker pods).
	Platform string
	// Namespace and Kubeconfig are --namespace and --kubeconfig, with
	// --platform kubernetes.
	Namespace, Kubeconfig string
	// KubeQPS and KubeBurst are --kube-api-qps and --kube-api-burst: the
	// limits of the master's requests to the Kubernetes API server.
	KubeQPS   float32
	KubeBurst int
	// DiscardState is --discard-state: start from what can be trusted of
	// a damaged --state-dir, dropping the rest, instead of refusing it.
	DiscardState bool
	// MetricsAddr and MetricsAddrFile are --metrics-addr and
	// --metrics-addr-file: where to serve the master's Prometheus metrics
	// ("": nowhere) and the file that receives the address.
	MetricsAddr, MetricsAddrFile string
}

// masterPolicyFlags are the flags of the preset rendezvous, with their
// defaults, in the order problems are reported.
var masterPolicyFlags = []struct{ name, def, help string }{
	{runconfig.SettingNodeUnit, "1", "with --nnodes: the world is a multiple of this many nodes"},
	{runconfig.SettingMaxRestarts, "0", "with --nnodes: failure restarts allowed per job"},
	{runconfig.SettingLastCallTimeout, "30s", "with --nnodes: close a round this long after the last join once min nodes joined"},
	{runconfig.SettingJoinTimeout, "600s", "with --nnodes: fail the job when a round stays below min nodes this long"},
	{runconfig.SettingHeartbeatTimeout, "30s", "with --nnodes: a node without heartbeats this long is dead"},
	{runconfig.SettingDisconnectGrace, "5s", "with --nnodes: a node whose session stays closed this long is dead"},
	{runconfig.SettingHangTimeout, "5m", "with --nnodes: no worker progress for this long, after the job progressed, is a hang (0: off)"},
	{runconfig.SettingHangDetection, "1", "with --nnodes: what a hang does: 0 log it and collect stacks, 1 also warn, 2 also restart the workers"},
}

const stateDirHelp = "directory of the master's durable state (journal and snapshots); a master restarted on it resumes the job. Default: none (state in memory)"

// masterFlags are the flags of `rover master` that are read as text and
// checked before they go into a masterConfig, and the problems found.
type masterFlags struct {
	stateKube, ckptDir, ckptKeep, linger, nnodes, kubeQPS, kubeBurst string
	// policy holds the masterPolicyFlags' values by name.
	policy map[string]*string
	// given names the flags on the command line; args are the arguments
	// left after the flags.
	given map[string]bool
	args  []string
	errs  []error
}

// parseMasterFlags parses and validates the command line of `rover master`
// with the rules and messages of `rover run` (package runconfig), and
// reports every problem at once, each naming its flag.
func parseMasterFlags(args []string, stderr io.Writer) (*masterConfig, error) {
	c := &masterConfig{}
	fs := flag.NewFlagSet("rover master", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := defineMasterFlags(fs, c)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	f.args = fs.Args()
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	if err := f.check(c); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// defineMasterFlags defines the flags of `rover master` on fs: those taken
// as they are go into c, the others into the masterFlags returned.
func defineMasterFlags(fs *flag.FlagSet, c *masterConfig) *masterFlags {
	f := &masterFlags{policy: map[string]*string{}, given: map[string]bool{}}
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:29400", "TCP address to serve on (port 0 picks one)")
	fs.StringVar(&c.Job, "job", "none", "job name (agents' --rdzv-id must match unless it is \"none\")")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the job's secret token, created (mode 0600) when missing; wins over $ROVER_TOKEN. Default: $ROVER_TOKEN, else <job>.token in the working directory")
	fs.StringVar(&c.AddrFile, "addr-file", "", "write the address the master listens on to this file")
	fs.StringVar(&c.StateDir, "state-dir", "", stateDirHelp)
	fs.StringVar(&f.stateKube, "state-kube", "", "keep the master's durable state in the Kubernetes API, as ConfigMaps NAMESPACE/NAME and NAME-snap-*, reached with the in-cluster config or else $KUBECONFIG; a master restarted on it, on any node, resumes the job and fences off the old one")
	fs.StringVar(&f.ckptDir, "checkpoint-dir", "", "the job's checkpoint storage: a directory, or a file://, s3://, gs:// or azblob:// URL (which may carry the driver's parameters); agents that name another are refused. Default: the first agent's --checkpoint-dir")
	fs.StringVar(&f.ckptKeep, "checkpoint-keep", "1", "with --checkpoint-dir: committed checkpoint steps kept in storage (0: all)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "serve HTTP/2 over TLS with this PEM certificate (chain); agents then need --tls-ca. Default: cleartext HTTP/2 (h2c)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.StringVar(&f.linger, "linger", "5s", "how long to keep serving after the job ended, so every agent learns the outcome")
	fs.StringVar(&f.nnodes, "nnodes", "", "fix the rendezvous instead of taking the first agent's: N or MIN:MAX")
	fs.StringVar(&c.Platform, "platform", "", `"kubernetes": run the ElasticJob named by --job in --namespace, creating and relaunching its worker pods (what the operator's master pod runs). Default: none, agents are started by hand`)
	fs.StringVar(&c.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "with --platform kubernetes: the ElasticJob's namespace (default $POD_NAMESPACE)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "with --platform kubernetes: the kubeconfig to reach the API server (default $KUBECONFIG, else the pod's service account)")
	fs.StringVar(&f.kubeQPS, "kube-api-qps", strconv.Itoa(kubemaster.DefaultQPS), "with --platform kubernetes or --state-kube: requests per second the master may send the API server, sustained (client-go's limit, sized for relaunching 1,000 pods at once)")
	fs.StringVar(&f.kubeBurst, "kube-api-burst", strconv.Itoa(kubemaster.DefaultBurst), "with --platform kubernetes or --state-kube: requests the master may send the API server at once, above --kube-api-qps")
	fs.BoolVar(&c.DiscardState, "discard-state", false, "with --state-dir: start even if the journal is damaged, dropping what cannot be trusted (the records from the damage on, or the whole file when it cannot be read) and saying what was dropped. Default: refuse a damaged journal")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", os.Getenv("ROVER_METRICS_ADDR"), "serve the master's Prometheus metrics at http://HOST:PORT/metrics, on a listener of their own (port 0 picks one; see docs/metrics.md). Default: $ROVER_METRICS_ADDR, else none")
	fs.StringVar(&c.MetricsAddrFile, "metrics-addr-file", "", "with --metrics-addr: write the address the metrics are served on to this file")
	for _, p := range masterPolicyFlags {
		f.policy[p.name] = fs.String(p.name, p.def, p.help)
	}
	return f
}

// check reads the flags' values into c and returns every problem, joined,
// in the order they are reported.
func (f *masterFlags) check(c *masterConfig) error {
	if len(f.args) > 0 {
		f.errs = append(f.errs, fmt.Errorf("rover master takes no arguments, got %q", f.args))
	}
	f.checkStateKube(c)
	f.checkKubeLimits(c)
	if c.DiscardState && c.StateDir == "" {
		f.errs = append(f.errs, errors.New("--discard-state takes effect only with --state-dir: a master without one has no journal to discard"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		f.errs = append(f.errs, errors.New("--tls-cert and --tls-key go together: give both to serve TLS, or neither to serve cleartext HTTP/2"))
	}
	if err := runconfig.CheckListenAddr(c.MetricsAddr); err != nil {
		f.errs = append(f.errs, fmt.Errorf("--metrics-addr: %w", err))
	}
	if c.MetricsAddrFile != "" && c.MetricsAddr == "" {
		f.errs = append(f.errs, errors.New("--metrics-addr-file takes effect only with --metrics-addr: give the address to serve the metrics on"))
	}
	f.read("linger", f.linger, "5s", seconds(&c.Linger))
	f.checkCheckpoint(c)
	if err := runconfig.CheckDuration(runconfig.FlagRef("linger", c.Linger.String()), c.Linger, true); err != nil {
		f.errs = append(f.errs, err)
	}
	f.checkPreset(c)
	f.errs = append(f.errs, checkPlatform(c, f.given)...)
	return errors.Join(f.errs...)
}

// read reads value as `rover run` reads it; a bad one is reported and its
// default read instead, so that it is reported once.
func (f *masterFlags) read(name, value, def string, parse func(string) error) {
	if err := parse(value); err != nil {
		f.errs = append(f.errs, runconfig.ValueError(name, value, err))
		_ = parse(def)
	}
}

// seconds parses a duration as `rover run` does into d.
func seconds(d *time.Duration) func(string) error {
	return func(s string) (err error) { *d, err = runconfig.ParseSeconds(s); return err }
}

// integer parses a whole number as `rover run` does into n.
func integer(n *int) func(string) error {
	return func(s string) (err error) { *n, err = runconfig.ParseInt(s); return err }
}

// checkStateKube reads --state-kube NAMESPACE/NAME, which excludes
// --state-dir.
func (f *masterFlags) checkStateKube(c *masterConfig) {
	if f.stateKube == "" {
		return
	}
	ns, name, ok := strings.Cut(f.stateKube, "/")
	switch {
	case !ok || ns == "" || name == "" || strings.Contains(name, "/"):
		f.errs = append(f.errs, fmt.Errorf("%s: want NAMESPACE/NAME, such as team-a/llama-rover-master-state", runconfig.FlagRef("state-kube", f.stateKube)))
	case c.StateDir != "":
		f.errs = append(f.errs, errors.New("--state-dir and --state-kube both say where the state goes: give one"))
	default:
		c.StateKube.Namespace, c.StateKube.Name = ns, name
	}
}

// checkKubeLimits reads --kube-api-qps and --kube-api-burst, which take
// effect only where the master talks to Kubernetes.
func (f *masterFlags) checkKubeLimits(c *masterConfig) {
	qps, err := strconv.ParseFloat(f.kubeQPS, 32)
	switch {
	case err != nil || qps <= 0:
		f.errs = append(f.errs, fmt.Errorf("%s: want a number of requests per second above 0, such as %d", runconfig.FlagRef("kube-api-qps", f.kubeQPS), kubemaster.DefaultQPS))
	default:
		c.KubeQPS = float32(qps)
	}
	burst, err := strconv.Atoi(f.kubeBurst)
	switch {
	case err != nil || burst < 1:
		f.errs = append(f.errs, fmt.Errorf("%s: want a whole number of requests of 1 or more, such as %d", runconfig.FlagRef("kube-api-burst", f.kubeBurst), kubemaster.DefaultBurst))
	case c.KubeQPS > 0 && float32(burst) < c.KubeQPS:
		f.errs = append(f.errs, fmt.Errorf("%s: must be at least --kube-api-qps (%s)", runconfig.FlagRef("kube-api-burst", f.kubeBurst), f.kubeQPS))
	default:
		c.KubeBurst = burst
	}
	if c.Platform != "kubernetes" && f.stateKube == "" {
		for _, name := range []string{"kube-api-qps", "kube-api-burst"} {
			if f.given[name] {
				f.errs = append(f.errs, fmt.Errorf("--%s takes effect only with --platform kubernetes or --state-kube", name))
			}
		}
	}
}

// checkCheckpoint reads --checkpoint-dir and --checkpoint-keep.
func (f *masterFlags) checkCheckpoint(c *masterConfig) {
	f.read("checkpoint-keep", f.ckptKeep, "1", integer(&c.Checkpoint.Keep))
	switch {
	case f.ckptDir == "" && f.given["checkpoint-keep"]:
		f.errs = append(f.errs, fmt.Errorf("%s takes effect only with --checkpoint-dir", runconfig.FlagRef("checkpoint-keep", f.ckptKeep)))
		c.Checkpoint.Keep = 0
	case f.ckptDir == "":
		c.Checkpoint.Keep = 0
	case c.Checkpoint.Keep < 0 || c.Checkpoint.Keep > runconfig.MaxCheckpointKeep:
		f.errs = append(f.errs, fmt.Errorf("%s: want 0 (keep all) to %d", runconfig.FlagRef("checkpoint-keep", f.ckptKeep), runconfig.MaxCheckpointKeep))
	default:
		dir, err := ckpt.AbsLocation(f.ckptDir)
		if err == nil {
			err = ckpt.CheckLocation(dir, ckpt.FromOperator)
		}
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s: %w", runconfig.FlagRef("checkpoint-dir", f.ckptDir), err))
		}
		c.Checkpoint.URL = dir
		c.Checkpoint.KeepDefault = !f.given["checkpoint-keep"] // a worker's Checkpointer may set it
	}
}

// checkPreset reads the preset rendezvous: --nnodes and the
// masterPolicyFlags, which take effect only with it.
func (f *masterFlags) checkPreset(c *masterConfig) {
	var p runconfig.Policy
	fields := map[string]func(string) error{
		runconfig.SettingNodeUnit:         integer(&p.NodeUnit),
		runconfig.SettingMaxRestarts:      integer(&p.MaxRestarts),
		runconfig.SettingLastCallTimeout:  seconds(&p.LastCallTimeout),
		runconfig.SettingJoinTimeout:      seconds(&p.JoinTimeout),
		runconfig.SettingHeartbeatTimeout: seconds(&p.HeartbeatTimeout),
		runconfig.SettingDisconnectGrace:  seconds(&p.DisconnectGrace),
		runconfig.SettingHangTimeout:      seconds(&p.HangTimeout),
		runconfig.SettingHangDetection:    integer(&p.HangDetection),
	}
	for _, pf := range masterPolicyFlags {
		f.read(pf.name, *f.policy[pf.name], pf.def, fields[pf.name])
	}
	if f.nnodes == "" {
		for _, pf := range masterPolicyFlags {
			if f.given[pf.name] {
				f.errs = append(f.errs, fmt.Errorf("%s takes effect only with --nnodes: add --nnodes N or MIN:MAX, or drop it to take the first agent's settings",
					runconfig.FlagRef(pf.name, *f.policy[pf.name])))
			}
		}
		return
	}
	lo, hi, err := runconfig.ParseNNodes(f.nnodes)
	if err != nil {
		f.errs = append(f.errs, runconfig.ValueError("nnodes", f.nnodes, err))
		lo = max(p.NodeUnit, 1) // check the other settings against a world they fit
		hi = lo
	}
	p.MinNodes, p.MaxNodes = lo, hi
	f.errs = append(f.errs, p.Check(runconfig.FlagRef)...)
	c.Preset = &p
}

// checkPlatform checks --platform and the flags that go with it: on
// Kubernetes the ElasticJob fixes the rendezvous and checkpoint storage.
func checkPlatform(c *masterConfig, given map[string]bool) []error {
	var errs []error
	switch c.Platform {
	case "":
		for _, f := range []string{"namespace", "kubeconfig"} {
			if given[f] {
				errs = append(errs, fmt.Errorf("--%s takes effect only with --platform kubernetes", f))
			}
		}
		return errs
	case "kubernetes":
	default:
		return []error{fmt.Errorf("--platform=%s: want kubernetes, or leave it out for agents started by hand", c.Platform)}
	}
	if c.Namespace == "" || c.Job == "none" {
		errs = append(errs, errors.New("--platform kubernetes needs --namespace (or $POD_NAMESPACE) and --job: the ElasticJob to run"))
	}
	for _, f := range append([]string{"nnodes", "checkpoint-dir", "checkpoint-keep"}, policyNames()...) {
		if given[f] {
			errs = append(errs, fmt.Errorf("--%s: with --platform kubernetes the ElasticJob's command sets it", f))
		}
	}
	return errs
}

func policyNames() []string {
	var out []string
	for _, f := range masterPolicyFlags {
		out = append(out, f.name)
	}
	return out
}
