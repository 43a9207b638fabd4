package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VolumeDir is where the test kubelet materializes volume name of pod
// namespace/pod: WorkDir/<namespace>_<pod>/<name>.
func VolumeDir(workDir, namespace, pod, name string) string {
	return filepath.Join(workDir, namespace+"_"+pod, name)
}

// mount is one of a container's volumeMounts, materialized here.
type mount struct {
	path string // the container's mountPath
	dir  string // where its files are on this machine
}

// mountVolumes writes the files of the volumes that container c of pod
// mounts and returns the mounts, longest mountPath first, and the
// configMap volumes, whose files follow their ConfigMap until they are
// unmounted (configmap.go). Secret and configMap volumes are written out;
// an emptyDir is an empty directory (at /dev/shm, the host's /dev/shm).
// Other volumes are refused.
func (k *Kubelet) mountVolumes(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (mounts []mount, live []*configMapVolume, err error) {
	defer func() {
		if err != nil {
			for _, v := range live {
				k.unmountConfigMap(v)
			}
			live = nil
		}
	}()
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, live, fmt.Errorf("volumeMount %s: the pod has no volume of that name", vm.Name)
		}
		dir := VolumeDir(k.opts.WorkDir, pod.Namespace, pod.Name, vol.Name)
		switch {
		case vol.Secret != nil:
			if err := k.writeSecretVolume(ctx, pod.Namespace, dir, vol.Secret); err != nil {
				return nil, live, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
		case vol.ConfigMap != nil:
			v, err := k.mountConfigMap(ctx, pod.Namespace, dir, vol.ConfigMap)
			if err != nil {
				return nil, live, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			live = append(live, v)
		case vol.EmptyDir != nil && filepath.Clean(vm.MountPath) == "/dev/shm":
			// The host's /dev/shm stands in: shared memory, as an
			// emptyDir of medium Memory gives a pod.
			continue
		case vol.EmptyDir != nil:
			if err := os.MkdirAll(filepath.Join(dir, vm.SubPath), 0o755); err != nil {
				return nil, live, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
		default:
			return nil, live, fmt.Errorf("volume %s: the test kubelet supports only secret, configMap and emptyDir volumes", vol.Name)
		}
		mounts = append(mounts, mount{path: filepath.Clean(vm.MountPath), dir: filepath.Join(dir, vm.SubPath)})
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].path) > len(mounts[j].path) })
	return mounts, live, nil
}

// writeSecretVolume writes the keys of a Secret (or the items asked for)
// as files under dir, with the volume's modes.
func (k *Kubelet) writeSecretVolume(ctx context.Context, ns, dir string, src *corev1.SecretVolumeSource) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s, err := k.cs.CoreV1().Secrets(ns).Get(ctx, src.SecretName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
			return nil
		}
		return fmt.Errorf("read Secret %s/%s: %w", ns, src.SecretName, err)
	}
	mode := os.FileMode(corev1.SecretVolumeSourceDefaultMode)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode)
	}
	items := src.Items
	if len(items) == 0 {
		for key := range s.Data {
			items = append(items, corev1.KeyToPath{Key: key, Path: key})
		}
	}
	for _, it := range items {
		data, ok := s.Data[it.Key]
		if !ok {
			if src.Optional != nil && *src.Optional {
				continue
			}
			return fmt.Errorf("the Secret %s/%s has no key %q", ns, src.SecretName, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// Replace the file, whose mode may not let its owner write it.
		_ = os.Remove(p)
		if err := os.WriteFile(p, data, m|0o200); err != nil {
			return err
		}
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	return nil
}

// rewritePaths replaces, in arg, each mount's mountPath where it begins a
// path (at the start of arg or after '=', followed by '/' or the end) by the
// mount's directory here.
func rewritePaths(arg string, mounts []mount) string {
	prefix, value := "", arg
	if i := strings.IndexByte(arg, '='); i >= 0 && !strings.HasPrefix(arg, "/") {
		prefix, value = arg[:i+1], arg[i+1:]
	}
	for _, m := range mounts {
		if rest, ok := strings.CutPrefix(value, m.path); ok && (rest == "" || rest[0] == '/') {
			return prefix + m.dir + rest
		}
	}
	return arg
}
