package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	"github.com/roverml/rover/internal/operator"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// operatorConfig is the validated command line of `rover operator`.
type operatorConfig struct {
	operator.Config
	// Kubeconfig is --kubeconfig; "" for $KUBECONFIG, ~/.kube/config or
	// the pod's service account, in that order.
	Kubeconfig string
}

// parseOperatorFlags parses and validates the command line of `rover
// operator`, reporting every problem at once, each naming its flag.
func parseOperatorFlags(args []string, stderr io.Writer, getenv func(string) string) (*operatorConfig, error) {
	c := &operatorConfig{}
	fs := flag.NewFlagSet("rover operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: rover operator [options]\n\nRun the ElasticJob operator: it makes each job's master (pod, Service, token Secret),\nrelaunches it, honours spec.suspend and writes the job's status. See docs/kubernetes.md.\n\n")
		fs.PrintDefaults()
	}
	ns := getenv("POD_NAMESPACE")
	if ns == "" {
		ns = operator.DefaultNamespace
	}
	fs.StringVar(&c.Master.Image, "master-image", operator.DefaultMasterImage, "image of the jobs' master pods (Rover's)")
	pull := fs.String("master-image-pull-policy", "", "imagePullPolicy of the master pods: Always, IfNotPresent or Never. Default: the cluster's (Always for :latest)")
	fs.StringVar(&c.Master.ServiceAccount, "master-service-account", operator.DefaultMasterServiceAccount, "service account of the master pods, in each job's namespace (deploy/rbac/master-role.yaml)")
	fs.StringVar(&c.Namespace, "namespace", ns, "the operator's namespace, where the leader election Lease is (default: $POD_NAMESPACE when set)")
	fs.BoolVar(&c.LeaderElect, "leader-elect", true, "act only while holding the leader election Lease, so that several replicas can run")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", "0", "serve Prometheus metrics on this address, e.g. :8080; 0 for none")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", operator.DefaultProbeAddr, "serve /healthz and /readyz on this address; 0 for none")
	fs.StringVar(&c.WebhookCertDir, "webhook-cert-dir", "", "serve the admission webhook of ElasticJobs over TLS with tls.crt and tls.key in this folder, when they are there (deploy/webhook, docs/kubernetes.md). Default: none; a job Rover cannot run is then marked Failed/InvalidSpec after its creation")
	fs.StringVar(&c.WebhookAddr, "webhook-bind-address", operator.DefaultWebhookAddr, "where the admission webhook listens, with --webhook-cert-dir")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster. Default: $KUBECONFIG, ~/.kube/config, else the pod's service account")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	c.Master.PullPolicy = corev1.PullPolicy(*pull)
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("rover operator takes no arguments, got %q", fs.Args()))
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// restConfig returns the config of the cluster kubeconfig names, or the
// default one (see operatorConfig.Kubeconfig).
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("find the cluster: %w (give --kubeconfig, or run in a pod)", err)
	}
	return cfg, nil
}

func runOperator(ctx context.Context, args []string, _, stderr io.Writer) error {
	c, err := parseOperatorFlags(args, stderr, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	c.Logger = newLogger(stderr)
	c.Default()
	ctrllog.SetLogger(logr.FromSlogHandler(c.Logger.Handler()))
	cfg, err := restConfig(c.Kubeconfig)
	if err != nil {
		return usageError{err}
	}
	return operator.Run(ctx, cfg, c.Config)
}
