// Package kubelet is a test-only node agent that plays the kubelet on a
// machine with no container runtime. It registers a Node, binds pods that
// have no node to it (as a one-node scheduler would), runs the command of
// each of its pods' main container as a local process with the pod's
// environment, and writes the pod's status back: Running, then Succeeded or
// Failed with the exit code and the reason a kubelet gives (Completed, Error,
// OOMKilled). A pod being deleted has its process group stopped with SIGTERM,
// then SIGKILL after the pod's grace period, and is then removed.
//
// Its pods share the host's network and have neither cluster DNS nor a
// service-account mount: tests hand the processes a kubeconfig and the
// addresses they need through Options.Env and Options.Rewrite. What it does
// not do: images, volumes other than secret, configMap and emptyDir ones
// (written under WorkDir, with the command's and the env's paths under a
// mountPath rewritten to them: see Options.Rewrite; a configMap volume's
// files follow the ConfigMap while the pod runs, as a kubelet's do),
// probes, restarts (pods are run once, as with
// restartPolicy Never), init or sidecar containers, resource limits (a
// process is killed "for memory" only when a test says so, with
// Kubelet.KillForMemory).
//
// Usage, in a test with a real API server (package internal/k8stest):
//
//	k, err := kubelet.Start(ctx, kubelet.Options{
//		Config: env.Config, NodeName: "node-0", WorkDir: t.TempDir(),
//		Env:     []string{"PATH=" + os.Getenv("PATH"), "KUBECONFIG=" + env.Kubeconfig},
//		Rewrite: map[string]string{"job-rover-master.ns.svc:29400": "127.0.0.1:" + port},
//	})
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer k.Stop()
package kubelet
