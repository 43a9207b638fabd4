package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// A configMap volume's files follow the ConfigMap while the pod runs, as a
// kubelet's do: each change is written to every running pod that mounts
// it, each file replaced atomically (written aside, then renamed), so that
// a reader sees the old content or the new, never a torn one. A real
// kubelet does the same through a symlink swap, within its sync period
// (about a minute); this one within the informer's delivery.

// configMapVolume is one pod's configMap volume, written under dir.
type configMapVolume struct {
	namespace string
	src       corev1.ConfigMapVolumeSource
	dir       string
	rewrite   func(string) string // Options.Rewrite, applied to every file as to env values

	mu      sync.Mutex
	written uint64 // the resource version last written; 0: none
}

// watchConfigMaps starts the informer that writes changed ConfigMaps to the
// volumes that mount them.
func (k *Kubelet) watchConfigMaps() error {
	lw := cache.NewListWatchFromClient(k.cs.CoreV1().RESTClient(), "configmaps", k.opts.Namespace, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	changed := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		k.mu.Lock()
		vols := append([]*configMapVolume(nil), k.cmVolumes[cm.Namespace+"/"+cm.Name]...)
		k.mu.Unlock()
		for _, v := range vols {
			if err := v.write(cm); err != nil {
				k.log.Warn("update a configMap volume", "configmap", cm.Namespace+"/"+cm.Name, "dir", v.dir, "err", err)
			}
		}
	}
	// Adds too: the informer's first list may bring a change made after
	// a volume's own read.
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch configmaps: %w", err)
	}
	k.wg.Add(1)
	go func() { defer k.wg.Done(); inf.RunWithContext(k.ctx) }()
	return nil
}

// mountConfigMap registers a pod's configMap volume for updates, then
// writes the ConfigMap's current keys under dir.
func (k *Kubelet) mountConfigMap(ctx context.Context, ns, dir string, src *corev1.ConfigMapVolumeSource) (*configMapVolume, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	v := &configMapVolume{namespace: ns, src: *src.DeepCopy(), dir: dir, rewrite: k.rewrite}
	key := ns + "/" + src.Name
	// Registered before the read: a change made after the read reaches
	// the volume through the informer, and write keeps the newer.
	k.mu.Lock()
	k.cmVolumes[key] = append(k.cmVolumes[key], v)
	k.mu.Unlock()
	cm, err := k.cs.CoreV1().ConfigMaps(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
			return v, nil
		}
		k.unmountConfigMap(v)
		return nil, fmt.Errorf("read ConfigMap %s: %w", key, err)
	}
	if err := v.write(cm); err != nil {
		k.unmountConfigMap(v)
		return nil, err
	}
	return v, nil
}

// unmountConfigMap stops updating v.
func (k *Kubelet) unmountConfigMap(v *configMapVolume) {
	key := v.namespace + "/" + v.src.Name
	k.mu.Lock()
	defer k.mu.Unlock()
	vols := k.cmVolumes[key]
	for i, w := range vols {
		if w == v {
			k.cmVolumes[key] = append(vols[:i:i], vols[i+1:]...)
			break
		}
	}
	if len(k.cmVolumes[key]) == 0 {
		delete(k.cmVolumes, key)
	}
}

// write writes cm's keys (or the items asked for) under the volume's
// directory, unless a newer version was written already.
func (v *configMapVolume) write(cm *corev1.ConfigMap) error {
	rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	v.mu.Lock()
	defer v.mu.Unlock()
	if rv != 0 && rv <= v.written {
		return nil
	}
	mode := os.FileMode(corev1.ConfigMapVolumeSourceDefaultMode)
	if v.src.DefaultMode != nil {
		mode = os.FileMode(*v.src.DefaultMode)
	}
	items := v.src.Items
	if len(items) == 0 {
		for key := range cm.Data {
			items = append(items, corev1.KeyToPath{Key: key, Path: key})
		}
	}
	for _, it := range items {
		data, ok := cm.Data[it.Key]
		if !ok {
			if v.src.Optional != nil && *v.src.Optional {
				continue
			}
			return fmt.Errorf("the ConfigMap %s/%s has no key %q", cm.Namespace, cm.Name, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(v.dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := filepath.Join(filepath.Dir(p), ".."+filepath.Base(p)+".tmp")
		_ = os.Remove(tmp)
		if err := os.WriteFile(tmp, []byte(v.rewrite(data)), m|0o200); err != nil {
			return err
		}
		if err := os.Chmod(tmp, m); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	v.written = rv
	return nil
}
