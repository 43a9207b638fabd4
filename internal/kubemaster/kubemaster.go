// Package kubemaster runs a job's master on Kubernetes: `rover master
// --platform kubernetes`, what the operator's master pod runs. It reads the
// job's ElasticJob, plans it as `rover submit` plans a local job (package
// jobplan), and runs the master with the pod platform
// (internal/platform/kubernetes), so that the same node manager creates,
// relaunches and deletes the worker pods. It keeps the job's status on the
// ElasticJob up to date with the master's view.
//
// It links no part of the operator: the names of the master's objects that
// both use are package kubenames'. It does link controller-runtime, for the
// typed client that reads and writes the ElasticJob (a custom resource with
// no generated clientset; status.go) and for the informer cache that watches
// the job and its ScalePlans (scale.go): replacing those would mean writing
// a clientset and informers for the custom resources.
package kubemaster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	elasticv1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/kubenames"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/platform"
	kubeplatform "github.com/roverml/rover/internal/platform/kubernetes"
	"github.com/roverml/rover/internal/store/kubestore"
	"github.com/roverml/rover/internal/userfile"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Options configure a Kubernetes master.
type Options struct {
	// Config reaches the API server (in-cluster, or a kubeconfig).
	Config *rest.Config
	// Namespace and Job name the ElasticJob.
	Namespace, Job string
	// Listen is the master's address ("0.0.0.0:29400").
	Listen string
	// MetricsAddr, when set, is where the master serves its Prometheus
	// metrics ("0.0.0.0:9400"), the pod's port named "metrics".
	MetricsAddr string
	// Token is the job's token (from the Secret the operator mounts).
	Token string
	// Store persists the master's state. Nil, with no StateDir: the
	// ConfigMaps "<job>-rover-master-state" in the job's namespace, owned
	// by the job (package kubestore), so that the operator's next master
	// pod resumes the job.
	Store master.Store
	// StateDir, when Store is nil, is a directory for the master's state;
	// DiscardState is master.Config's.
	StateDir     string
	DiscardState bool
	Logger       *slog.Logger
	// StatusEvery is how often the job's status is written back at most
	// (default 1s).
	StatusEvery time.Duration
	// QPS and Burst limit the master's requests to the API server
	// (client-go's token bucket): 0 takes DefaultQPS and DefaultBurst.
	// They replace whatever Config carries.
	QPS   float32
	Burst int
}

// The master's client-side limits on API requests, sized for the pod churn
// of a job of 1,000 nodes: relaunching all of them at once is 1,000 creates
// and 1,000 deletes (plus status writes and Events), which the burst starts
// at once and the rate finishes in under 10 s. client-go's defaults (5 per
// second, bursts of 10) took 98 s for 100 pods. The API server protects
// itself with priority and fairness, whatever a client asks.
const (
	DefaultQPS   = 200
	DefaultBurst = 400
)

// ClientConfig is cfg with the master's limits on API requests (qps and
// burst, 0 for the defaults): the config every client of the master is
// built from.
func ClientConfig(cfg *rest.Config, qps float32, burst int) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if qps <= 0 {
		qps = DefaultQPS
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	cfg.QPS, cfg.Burst = qps, max(burst, int(qps))
	cfg.RateLimiter = nil // one built from QPS and Burst
	return cfg
}

// Scheme knows the ElasticJob and the built-in types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = elasticv1.AddToScheme(s)
	return s
}

// Run runs the job's master until the job ends or ctx does. Its worker
// pods outlive a master that stops before the job ends: the next master
// adopts them.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StatusEvery <= 0 {
		o.StatusEvery = time.Second
	}
	ctrllog.SetLogger(logr.FromSlogHandler(o.Logger.Handler())) // controller-runtime's client logs there
	o.Config = ClientConfig(o.Config, o.QPS, o.Burst)
	cl, err := client.New(o.Config, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	var job elasticv1.ElasticJob
	if err := cl.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Job}, &job); err != nil {
		return fmt.Errorf("read ElasticJob %s/%s: %w", o.Namespace, o.Job, err)
	}
	plan, err := Plan(&job)
	if err != nil {
		return err
	}
	for _, n := range plan.Notes {
		o.Logger.Warn("job spec: "+n, "job", job.Name)
	}
	popts := kubeplatform.JobOptions(&job)
	popts.Client = cs
	popts.MasterAddr = kubenames.MasterAddr(job.Name, job.Namespace)
	popts.TokenSecret, popts.TokenKey = kubenames.TokenSecret(job.Name), kubenames.TokenKey
	popts.NodeNum = plan.Nodes.Groups[0].MaxNodes
	if o.MetricsAddr != "" { // the agents serve theirs on the pods' metrics port
		popts.MetricsAddr = kubenames.MetricsAddr()
	}
	popts.Logger = o.Logger
	if plan.Roles != nil {
		popts.ClusterConfigMap = kubenames.ClusterConfigMap(job.Name)
		popts.MetricsAddr = "" // the roles run no agent
	}
	kplat, err := kubeplatform.New(popts)
	if err != nil {
		return err
	}
	var plat platform.Platform = kplat
	if plan.Roles != nil {
		if plat, err = parameterServerNodes(ctx, kplat, &job, plan); err != nil {
			return err
		}
	}
	if o.Store == nil && o.StateDir == "" {
		st, err := openState(ctx, o.Config, &job, o.Logger)
		if err != nil {
			return err
		}
		defer st.Close()
		o.Store = st
	}
	preset := plan.Preset
	m, err := master.New(ctx, master.Config{
		Listen: o.Listen, Job: plan.Name, Token: o.Token, Preset: &preset, Checkpoint: plan.Checkpoint,
		Store: o.Store, StateDir: o.StateDir, DiscardState: o.DiscardState, Logger: o.Logger, MetricsAddr: o.MetricsAddr,
		Nodes:     &master.NodesConfig{Platform: plat, Name: "kubernetes", Spec: plan.Nodes, KeepNodes: true},
		AutoScale: plan.AutoScale,
		// No CPU reader: the roles run no agent, and the master reads no
		// metrics API; PS are migrated on a ScalePlan's migratePods.
		PSScale: plan.PSScale,
	})
	if err != nil {
		return err
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- m.Run(mctx) }()
	rec, stopEvents := eventRecorder(mctx, cs)
	defer stopEvents()
	sc := newScaler(cl, m, client.ObjectKeyFromObject(&job), plan.Roles != nil, o.Logger, rec)
	scaled := make(chan error, 1)
	go func() { scaled <- sc.run(mctx, o.Config) }()
	defer func() {
		stop()
		if err := <-scaled; err != nil {
			o.Logger.Warn("follow the job's scaling", "err", err)
		}
	}()
	sink := newEventSink(m.Events(), cs.EventsV1(), cl, &job, o.Logger)
	sunk := make(chan uint64, 1)
	go func() { sunk <- sink.run(mctx) }()
	w := &statusWriter{client: cl, job: client.ObjectKeyFromObject(&job), log: o.Logger}
	outcome, waitErr := waitEnded(ctx, m, w, o.StatusEvery)
	stop()
	serveErr := <-served
	sink.drain(context.WithoutCancel(ctx), <-sunk)
	w.write(context.WithoutCancel(ctx), m.Status())
	switch {
	case waitErr != nil && ctx.Err() == nil:
		// The master stopped on its own (its store failed): the pod exits
		// non-zero with the cause, and the operator's next master resumes.
		if serveErr != nil {
			return serveErr // the cause, with what to do
		}
		return waitErr
	case waitErr != nil:
		return nil // stopped before the job ended: the next master goes on
	case serveErr != nil:
		return serveErr
	case !outcome.Succeeded:
		return &JobFailedError{Reason: outcome.Reason}
	}
	return nil
}

// eventRecorder records the master's events on its job (events.k8s.io).
func eventRecorder(ctx context.Context, cs kubernetes.Interface) (events.EventRecorder, func()) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	return b.NewRecorder(Scheme(), "rover-master"), b.Shutdown
}

// StateName is the head ConfigMap of job's master state.
func StateName(job string) string { return job + "-rover-master-state" }

// openState opens the master's state in the API server, owned by job.
func openState(ctx context.Context, cfg *rest.Config, job *elasticv1.ElasticJob, log *slog.Logger) (*kubestore.Store, error) {
	cfg = rest.CopyConfig(cfg)
	// Protobuf: snapshots and journal entries travel as bytes, not base64.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	owner := metav1.NewControllerRef(job, elasticv1.GroupVersion.WithKind(elasticv1.ElasticJobKind))
	owner.Controller = nil // the operator controls the job's objects; the state is only owned
	st, err := kubestore.Open(ctx, kubestore.Options{Client: cs, Namespace: job.Namespace, Name: StateName(job.Name), Owner: owner, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the master's state %s/%s: %w", job.Namespace, StateName(job.Name), err)
	}
	return st, nil
}

// JobFailedError is Run's error when the job failed: the master pod exits 1
// with Reason as its termination message.
type JobFailedError struct{ Reason string }

func (e *JobFailedError) Error() string { return "the job failed: " + e.Reason }

// waitEnded writes the job's status as it changes until the job has ended
// and its pods are gone, or ctx ends.
func waitEnded(ctx context.Context, m *master.Master, w *statusWriter, every time.Duration) (master.Outcome, error) {
	finished := make(chan master.Outcome, 1)
	broken := make(chan error, 1) // the master stopped before the job ended
	go func() {
		out, err := m.WaitFinished(ctx)
		switch {
		case err == nil:
			finished <- out
		case ctx.Err() == nil:
			broken <- err
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return master.Outcome{}, ctx.Err()
		case err := <-broken:
			return master.Outcome{}, err
		case out := <-finished:
			select {
			case <-m.NodesGone():
			case <-ctx.Done():
			}
			return out, nil
		case <-tick.C:
			w.write(ctx, m.Status())
		}
	}
}

// Plan reads job as Rover's job spec and plans it for the Kubernetes
// platform. The pod template goes to the platform as it is; the job spec
// parser sees only what it reads of it (the training container's command,
// env values, image and resources).
func Plan(job *elasticv1.ElasticJob) (*jobplan.Plan, error) {
	doc, err := job.JobSpecDocument()
	if err != nil {
		return nil, err
	}
	if doc, err = launcherView(doc); err != nil {
		return nil, err
	}
	plan, err := jobplan.Check(doc, jobplan.Kubernetes)
	if err != nil {
		return nil, fmt.Errorf("ElasticJob %s/%s: %w", job.Namespace, job.Name, err)
	}
	return plan, nil
}

// containerFields are the container fields the job spec parser reads.
var containerFields = []string{"name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "resources"}

// launcherView reduces every replica template of the document to what the
// job spec parser reads: the pod's restartPolicy and containers, each
// with containerFields and the env entries that have a value.
func launcherView(doc []byte) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	replicas, _ := spec["replicaSpecs"].(map[string]any)
	for _, r := range replicas {
		rs, _ := r.(map[string]any)
		tmpl, _ := rs["template"].(map[string]any)
		if tmpl == nil {
			continue
		}
		pod, _ := tmpl["spec"].(map[string]any)
		kept := map[string]any{}
		if p, ok := pod["restartPolicy"]; ok {
			kept["restartPolicy"] = p
		}
		var ctrs []any
		list, _ := pod["containers"].([]any)
		for _, c := range list {
			cm, _ := c.(map[string]any)
			kc := map[string]any{}
			for _, f := range containerFields {
				if v, ok := cm[f]; ok {
					kc[f] = v
				}
			}
			if env, ok := kc["env"].([]any); ok {
				var vals []any
				for _, e := range env {
					if em, _ := e.(map[string]any); em != nil && em["valueFrom"] == nil {
						vals = append(vals, em)
					}
				}
				kc["env"] = vals
			}
			ctrs = append(ctrs, kc)
		}
		if ctrs != nil {
			kept["containers"] = ctrs
		}
		rs["template"] = map[string]any{"spec": kept}
	}
	return json.Marshal(obj)
}

// TokenFromFile reads the job's token from the file the operator mounts.
func TokenFromFile(path string) (string, error) {
	b, err := userfile.Read(path)
	if err != nil {
		return "", fmt.Errorf("read the job's token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("the job's token file is empty")
	}
	return t, nil
}
