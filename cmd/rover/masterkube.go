package main

import (
	"context"
	"fmt"
	"io"

	"github.com/roverml/rover/internal/kubemaster"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// runKubeMaster runs `rover master --platform kubernetes`: the master of
// the ElasticJob --job in --namespace, which creates its worker pods.
func runKubeMaster(ctx context.Context, c *masterConfig, stderr io.Writer) error {
	if c.TokenFile == "" {
		return usageError{fmt.Errorf("--platform kubernetes needs --token-file: the job's token, from the Secret the operator mounts")}
	}
	token, err := kubemaster.TokenFromFile(c.TokenFile)
	if err != nil {
		return usageError{err}
	}
	cfg, err := kubeConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	o := kubemaster.Options{
		Config: cfg, Namespace: c.Namespace, Job: c.Job, Listen: c.Listen, Token: token, MetricsAddr: c.MetricsAddr,
		StateDir: c.StateDir, DiscardState: c.DiscardState, Logger: newLogger(stderr), QPS: c.KubeQPS, Burst: c.KubeBurst,
	}
	if c.StateKube.Name != "" { // else the job's own, owned by it
		st, err := openKubeState(ctx, c, o.Logger)
		if err != nil {
			return err
		}
		defer st.Close()
		o.Store = st
	}
	return kubemaster.Run(ctx, o)
}

// kubeConfig is the API server's config: from the kubeconfig file when one
// is named, else the pod's service account, else $KUBECONFIG or
// ~/.kube/config. It is a copy, for the caller to change.
func kubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("read the kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("no in-cluster config and no usable kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config): %w", err)
		}
	}
	return rest.CopyConfig(cfg), nil
}
