package kubelet

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// bindLimit models a node's capacity for some pods: at most n of the pods
// match selects are bound at once; the others stay Pending, unbound, as
// pods a scheduler cannot place do, until one ends or the limit rises.
type bindLimit struct {
	match   func(*corev1.Pod) bool
	n       int
	bound   map[types.UID]bool
	waiting map[types.UID]*corev1.Pod
}

// LimitBinding binds at most n pods that match at once (n < 0: no limit);
// calling it again changes the limit, binding the waiting pods, oldest
// first, that now fit. Pods bound before the first call are not counted.
func (k *Kubelet) LimitBinding(match func(*corev1.Pod) bool, n int) {
	k.mu.Lock()
	if k.limit == nil {
		k.limit = &bindLimit{bound: map[types.UID]bool{}, waiting: map[types.UID]*corev1.Pod{}}
	}
	k.limit.match, k.limit.n = match, n
	next := k.limit.admitLocked()
	k.mu.Unlock()
	for _, p := range next {
		k.bind(p)
	}
}

// admitLocked takes the waiting pods that fit, oldest first.
func (l *bindLimit) admitLocked() []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, len(l.waiting))
	for _, p := range l.waiting {
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	var out []*corev1.Pod
	for _, p := range pods {
		if l.n >= 0 && len(l.bound) >= l.n {
			break
		}
		delete(l.waiting, p.UID)
		l.bound[p.UID] = true
		out = append(out, p)
	}
	return out
}

// admit says whether an unbound pod may be bound now; one that may not
// waits.
func (k *Kubelet) admit(pod *corev1.Pod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.limit
	if l == nil || !l.match(pod) || l.bound[pod.UID] {
		return true
	}
	if l.n >= 0 && len(l.bound) >= l.n {
		l.waiting[pod.UID] = pod
		return false
	}
	l.bound[pod.UID] = true
	return true
}

// release frees a limited pod's place (it ended or is gone) and binds the
// waiting pods that now fit.
func (k *Kubelet) release(pod *corev1.Pod) {
	k.mu.Lock()
	var next []*corev1.Pod
	if l := k.limit; l != nil && (l.bound[pod.UID] || l.waiting[pod.UID] != nil) {
		delete(l.bound, pod.UID)
		delete(l.waiting, pod.UID)
		next = l.admitLocked()
	}
	k.mu.Unlock()
	for _, p := range next {
		k.bind(p)
	}
}
