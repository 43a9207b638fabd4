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
	return kubemaster.Run(ctx, kubemaster.Options{
		Config: cfg, Namespace: c.Namespace, Job: c.Job, Listen: c.Listen, Token: token,
		StateDir: c.StateDir, Logger: newLogger(stderr),
	})
}

// kubeConfig is the API server's config: from the kubeconfig file when one
// is named, else the pod's service account.
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
		return nil, fmt.Errorf("reach the API server: no --kubeconfig or $KUBECONFIG, and not in a pod (%w)", err)
	}
	return cfg, nil
}
