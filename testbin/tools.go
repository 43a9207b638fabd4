//go:build tools

// Package testbin pins the Kubernetes and etcd binaries that Rover's tests run
// against: kube-apiserver and etcd for envtest, plus kubectl, kube-scheduler,
// kube-controller-manager and kwok for tests that need a fuller cluster. It is
// a separate module so that the root module never requires k8s.io/kubernetes;
// build.sh compiles the binaries from the Go module proxy.
package testbin

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
