package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-logr/logr"
	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Defaults of Config.
const (
	DefaultMasterImage          = "rover:latest"
	DefaultMasterServiceAccount = "rover-master"
	DefaultNamespace            = "rover-system"
	DefaultProbeAddr            = ":8081"
	// LeaderElectionID names the Lease of leader election, in the
	// operator's namespace.
	LeaderElectionID = "rover-operator.elastic.rover.dev"
	// Name is the operator's name on the Events it records.
	Name = "rover-operator"
)

// Config is what the operator runs with; `rover operator`'s flags.
type Config struct {
	// Master says how master pods are made.
	Master MasterConfig
	// Namespace is the operator's own namespace, where its leader election
	// Lease is.
	Namespace string
	// LeaderElect makes the operator act only while it holds the Lease, so
	// that replicas of it can run for availability.
	LeaderElect bool
	// MetricsAddr is where Prometheus metrics are served; "" or "0" for
	// none.
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz; "" or "0" for none.
	ProbeAddr string
	// WebhookCertDir, when it holds a certificate and key
	// (WebhookCertName, WebhookKeyName; reloaded when they change), serves
	// the admission webhook of ElasticJobs (WebhookPath) over TLS on
	// WebhookAddr. "", or a folder without them (the operator's optional
	// Secret not made yet), serves none: a job Rover cannot run is then
	// refused after its creation, as Failed/InvalidSpec.
	WebhookCertDir string
	// WebhookAddr is where the webhook listens, host:port;
	// DefaultWebhookAddr when empty.
	WebhookAddr string
	// Logger logs; nil for slog.Default().
	Logger *slog.Logger
	// Clock reads the time of status fields; nil for the real clock.
	Clock clock.PassiveClock

	// skipNameValidation lets a test run more than one operator in a
	// process.
	skipNameValidation bool
}

// Default fills the fields left empty with their defaults.
func (c *Config) Default() {
	if c.Master.Image == "" {
		c.Master.Image = DefaultMasterImage
	}
	if c.Master.ServiceAccount == "" {
		c.Master.ServiceAccount = DefaultMasterServiceAccount
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.WebhookAddr == "" {
		c.WebhookAddr = DefaultWebhookAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// Validate returns every problem of c, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if c.Master.Image == "" {
		errs = append(errs, errors.New("--master-image is empty: give the image of Rover's master, e.g. registry.example/rover:v1"))
	}
	switch c.Master.PullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("--master-image-pull-policy=%s: use Always, IfNotPresent or Never (or leave it out for the cluster's default)", c.Master.PullPolicy))
	}
	if msgs := validation.IsDNS1123Subdomain(c.Master.ServiceAccount); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--master-service-account=%q: not a service account name: %v", c.Master.ServiceAccount, msgs))
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); c.LeaderElect && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace=%q: not a namespace name: %v", c.Namespace, msgs))
	}
	if c.WebhookCertDir != "" {
		if _, _, err := splitAddr(c.WebhookAddr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NewScheme returns the scheme the operator reads and writes with.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager returns a manager with the ElasticJob reconciler, its probes
// and metrics, ready to Start. c must be defaulted and valid.
func NewManager(cfg *rest.Config, c Config) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("operator scheme: %w", err)
	}
	metrics := c.MetricsAddr
	if metrics == "" {
		metrics = "0"
	}
	// Only the pods and Services of jobs are cached (all carry app=dlrover);
	// Secrets are never cached, as that would mean reading every Secret.
	ours := labels.SelectorFromSet(labels.Set{v1alpha1.LabelApp: v1alpha1.AppValue})
	hooks, err := webhookServer(c)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:                 hooks,
		Scheme:                        scheme,
		Logger:                        logr.FromSlogHandler(c.Logger.Handler()),
		LeaderElection:                c.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       c.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:        c.ProbeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: ours},
			&corev1.Service{}: {Label: ours},
		}},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("operator manager: %w", err)
	}
	if c.ProbeAddr != "" && c.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, fmt.Errorf("operator health check: %w", err)
		}
		if hooks != nil {
			if err := mgr.AddReadyzCheck("webhook", hooks.StartedChecker()); err != nil {
				return nil, fmt.Errorf("operator ready check: %w", err)
			}
		}
		if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return errors.New("the cache has not synced")
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("operator ready check: %w", err)
		}
	}
	r := &Reconciler{
		client: mgr.GetClient(),
		reader: mgr.GetAPIReader(),
		events: mgr.GetEventRecorder(Name),
		clock:  c.Clock,
		log:    c.Logger.With("component", "operator"),
		master: c.Master,
	}
	skip := c.skipNameValidation
	opts := func(b *builder.Builder) *builder.Builder {
		return b.WithOptions(controller.Options{SkipNameValidation: &skip})
	}
	if err := r.SetupWithManager(mgr, opts); err != nil {
		return nil, fmt.Errorf("operator controller: %w", err)
	}
	if hooks != nil {
		if err := setupWebhook(mgr, r.log); err != nil {
			return nil, fmt.Errorf("operator webhook: %w", err)
		}
	}
	return mgr, nil
}

// Run runs the operator until ctx ends. c must be defaulted and valid.
func Run(ctx context.Context, cfg *rest.Config, c Config) error {
	mgr, err := NewManager(cfg, c)
	if err != nil {
		return err
	}
	c.Logger.Info("operator starting", "master_image", c.Master.Image, "leader_elect", c.LeaderElect, "namespace", c.Namespace)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}
