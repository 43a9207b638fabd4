package kubelet

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostIP is the address of every pod and of the node: pods share the
// host's network.
const HostIP = "127.0.0.1"

// environ is the process environment of container c of pod: the base
// environment, then the container's envFrom and env in order (a later
// variable replaces an earlier one), with every value rewritten, a path
// under a mount's mountPath included (as in the command's arguments).
func (k *Kubelet) environ(ctx context.Context, pod *corev1.Pod, c *corev1.Container, mounts []mount) ([]string, error) {
	env := append([]string(nil), k.opts.Env...)
	env = append(env, "HOSTNAME="+pod.Name)
	add := func(name, value string) { env = append(env, name+"="+rewritePaths(k.rewrite(value), mounts)) }
	for _, from := range c.EnvFrom {
		data, err := k.envFromData(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for name, value := range data {
			add(from.Prefix+name, value)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			add(e.Name, e.Value)
			continue
		}
		value, ok, err := k.resolve(ctx, pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			add(e.Name, value)
		}
	}
	return env, nil
}

// rewrite replaces every Options.Rewrite key in value by its value.
func (k *Kubelet) rewrite(value string) string {
	for from, to := range k.opts.Rewrite {
		value = strings.ReplaceAll(value, from, to)
	}
	return value
}

// resolve reads one valueFrom; ok is false when an optional source is
// missing, which leaves the variable unset.
func (k *Kubelet) resolve(ctx context.Context, pod *corev1.Pod, src *corev1.EnvVarSource) (value string, ok bool, err error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && ref.Optional != nil && *ref.Optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("read Secret %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		if v, found := s.Data[ref.Key]; found {
			return string(v), true, nil
		}
		if v, found := s.StringData[ref.Key]; found {
			return v, true, nil
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("the Secret %s/%s has no key %q", pod.Namespace, ref.Name, ref.Key)
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && ref.Optional != nil && *ref.Optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("read ConfigMap %s/%s: %w", pod.Namespace, ref.Name, err)
		}
		if v, found := cm.Data[ref.Key]; found {
			return v, true, nil
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("ConfigMap %s/%s has no key %q", pod.Namespace, ref.Name, ref.Key)
	case src.ResourceFieldRef != nil:
		return "", false, nil // no resource limits here: leave it unset
	}
	return "", false, fmt.Errorf("unsupported valueFrom %v", src)
}

// envFromData reads the keys of one envFrom source.
func (k *Kubelet) envFromData(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.SecretRef != nil:
		s, err := k.cs.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom Secret %s/%s: %w", ns, from.SecretRef.Name, err)
		}
		data := map[string]string{}
		for key, v := range s.Data {
			data[key] = string(v)
		}
		return data, nil
	case from.ConfigMapRef != nil:
		cm, err := k.cs.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom ConfigMap %s/%s: %w", ns, from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	}
	return nil, nil
}

// fieldValue is the downward API's value of path for pod, which runs on
// the host's network.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		return HostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}
