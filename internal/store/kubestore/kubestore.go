package kubestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/roverml/rover/internal/store"
)

const (
	// format is the layout this package writes; Open refuses another.
	format = "1"

	// DefaultJournalBytes is the default bound on the records the head
	// holds between snapshots; MaxJournalBytes is the most Options may ask:
	// the head must stay under the API server's 1 MiB per object.
	DefaultJournalBytes = 700 << 10
	MaxJournalBytes     = 900 << 10
	// ChunkBytes is the most snapshot bytes one chunk object holds.
	ChunkBytes = 900 << 10

	// openAttempts bounds Open's retries when another master races it.
	openAttempts = 10
)

// Keys of the head's data, and labels of every object.
const (
	keyFormat       = "format"
	keyOwner        = "owner"
	keyEpoch        = "epoch"
	keySnapshot     = "snapshot"
	keyChunks       = "snapshot-chunks"
	keySnapBytes    = "snapshot-bytes"
	keySnapCRC      = "snapshot-crc32c"
	keyJournalStart = "journal-start"
	keyChunk        = "chunk" // the binaryData entry of a chunk object

	labelManagedBy  = "app.kubernetes.io/managed-by"
	labelState      = "rover.dev/state"
	labelPart       = "rover.dev/part"
	labelEpoch      = "rover.dev/epoch"
	labelGeneration = "rover.dev/generation"
	partHead        = "head"
	partSnapshot    = "snapshot"
)

// Options say where the state lives. Client, Namespace and Name are required.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	// Name is the head ConfigMap's, such as "<job>-rover-master-state": a
	// DNS subdomain of at most 63 characters (it is also a label value).
	Name string
	// Owner, when set, is the owner reference of every object (the
	// ElasticJob), so that deleting the job deletes its state.
	Owner *metav1.OwnerReference
	// Identity names this master in the owner token (a random suffix makes
	// the token unique). Empty means the host name: the pod's name.
	Identity string
	// JournalBytes bounds the records the head holds between snapshots;
	// 0 means DefaultJournalBytes.
	JournalBytes int
	// Logger receives the take-over and clean-up events. nil means
	// slog.Default().
	Logger *slog.Logger
}

// Store is a master's journal in the Kubernetes API. Its methods are safe
// for concurrent use and run one at a time.
type Store struct {
	cm     typedcorev1.ConfigMapInterface
	opts   Options
	log    *slog.Logger
	token  string
	budget int

	mu     sync.Mutex
	closed bool
	head   *corev1.ConfigMap // as last written or read, with its resourceVersion
	h      head              // head, parsed
	next   uint64            // the sequence number of the next Append's entry
	gens   uint64            // snapshots attempted in this epoch
	bytes  int               // the head's journal bytes
}

// head is what the head object's data says.
type head struct {
	owner  string
	epoch  uint64
	snap   string // the snapshot's generation; "" for none
	chunks int
	size   int
	crc    uint32
	start  uint64 // the sequence number of the first entry after the snapshot
}

// Open takes the state over and returns the store: it creates the head when
// there is none, and otherwise writes its own owner token and the next epoch
// into it, fencing off the master that wrote before. It then deletes chunk
// objects that no head names, left by a crash or a fenced master.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open the master's state in the Kubernetes API: %w", err)
	}
	id := opts.Identity
	if id == "" {
		id, _ = os.Hostname()
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	s := &Store{
		cm:     opts.Client.CoreV1().ConfigMaps(opts.Namespace),
		opts:   opts,
		log:    opts.Logger,
		token:  strings.TrimPrefix(id+"-", "-") + hex.EncodeToString(rnd[:]),
		budget: opts.JournalBytes,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("state", opts.Namespace+"/"+opts.Name)
	if s.budget == 0 {
		s.budget = DefaultJournalBytes
	}
	var prev head
	var err error
	for range openAttempts {
		if prev, err = s.takeOver(ctx); err == nil || !errors.Is(err, errRace) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("take over the master's state %s/%s: %w", opts.Namespace, opts.Name, err)
	}
	if prev.owner != "" {
		s.log.Info("took over the master's state", "previous_owner", prev.owner, "epoch", s.h.epoch)
	}
	s.sweep(ctx)
	return s, nil
}

func (o Options) validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("Options.Client is nil"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("Options.Namespace is empty"))
	}
	if msgs := validation.IsDNS1123Subdomain(o.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("Options.Name %q is not a valid object name: %s", o.Name, strings.Join(msgs, "; ")))
	} else if len(o.Name) > validation.LabelValueMaxLength {
		errs = append(errs, fmt.Errorf("Options.Name %q is longer than %d characters; it labels the state's objects: give a shorter one",
			o.Name, validation.LabelValueMaxLength))
	}
	if o.JournalBytes < 0 || o.JournalBytes > MaxJournalBytes {
		errs = append(errs, fmt.Errorf("Options.JournalBytes %d is not between 0 and %d", o.JournalBytes, MaxJournalBytes))
	}
	return errors.Join(errs...)
}

// errRace marks a write that another master raced; Open tries again.
var errRace = errors.New("raced by another master")

// takeOver writes a new head or makes the existing one this store's, and
// returns what the head said before.
func (s *Store) takeOver(ctx context.Context) (head, error) {
	cur, err := s.cm.Get(ctx, s.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		h := head{owner: s.token, epoch: 1, start: 1}
		cm := s.object(s.opts.Name, partHead)
		h.write(cm)
		created, err := s.cm.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return head{}, errRace
		}
		if err != nil {
			return head{}, fmt.Errorf("create the head: %w", err)
		}
		return head{}, s.adopt(created)
	}
	if err != nil {
		return head{}, fmt.Errorf("read the head: %w", err)
	}
	prev, err := parseHead(cur)
	if err != nil {
		return head{}, err
	}
	h := prev
	h.owner, h.epoch = s.token, prev.epoch+1
	cm := cur.DeepCopy()
	h.write(cm)
	s.own(cm)
	updated, err := s.cm.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return head{}, errRace
	}
	if err != nil {
		return head{}, fmt.Errorf("write the owner token into the head: %w", err)
	}
	return prev, s.adopt(updated)
}

// adopt makes cm, just read or written, the store's head.
func (s *Store) adopt(cm *corev1.ConfigMap) error {
	h, err := parseHead(cm)
	if err != nil {
		return err
	}
	entries, err := journalKeys(cm, h.start)
	if err != nil {
		return err
	}
	s.head, s.h = cm, h
	s.next = h.start + uint64(len(entries))
	s.bytes = 0
	for k, v := range cm.BinaryData {
		s.bytes += len(k) + len(v)
	}
	return nil
}

// object returns a new object of the store named name, with its labels and
// owner reference.
func (s *Store) object(name, part string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.opts.Namespace}}
	cm.Labels = map[string]string{labelManagedBy: "rover", labelState: s.opts.Name, labelPart: part}
	s.own(cm)
	return cm
}

// own sets the owner reference of cm, when the store has one.
func (s *Store) own(cm *corev1.ConfigMap) {
	if s.opts.Owner == nil {
		return
	}
	for _, r := range cm.OwnerReferences {
		if r.UID == s.opts.Owner.UID {
			return
		}
	}
	cm.OwnerReferences = append(cm.OwnerReferences, *s.opts.Owner)
}

// parseHead reads the head's data.
func parseHead(cm *corev1.ConfigMap) (head, error) {
	d := cm.Data
	if f := d[keyFormat]; f != format {
		if f == "" {
			return head{}, fmt.Errorf("%w: ConfigMap %s has no %q key: it is not a Rover master's state", errDamaged, cm.Name, keyFormat)
		}
		return head{}, fmt.Errorf("the master's state in ConfigMap %s has format %q, and this Rover reads format %s: run a newer Rover, or name another state",
			cm.Name, f, format)
	}
	var errs []error
	num := func(key string, bits int) uint64 {
		n, err := strconv.ParseUint(d[key], 10, bits)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q", key, d[key]))
		}
		return n
	}
	h := head{owner: d[keyOwner], snap: d[keySnapshot], epoch: num(keyEpoch, 64), start: num(keyJournalStart, 64)}
	if h.snap != "" {
		h.chunks, h.size = int(num(keyChunks, 31)), int(num(keySnapBytes, 62))
		crc, err := strconv.ParseUint(d[keySnapCRC], 16, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q", keySnapCRC, d[keySnapCRC]))
		}
		h.crc = uint32(crc)
	}
	if len(errs) > 0 {
		return head{}, fmt.Errorf("%w: the head %s has a malformed %w", errDamaged, cm.Name, errors.Join(errs...))
	}
	return h, nil
}

// write puts h into the data of cm.
func (h head) write(cm *corev1.ConfigMap) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[keyFormat] = format
	cm.Data[keyOwner] = h.owner
	cm.Data[keyEpoch] = strconv.FormatUint(h.epoch, 10)
	cm.Data[keySnapshot] = h.snap
	cm.Data[keyJournalStart] = strconv.FormatUint(h.start, 10)
	delete(cm.Data, keyChunks)
	delete(cm.Data, keySnapBytes)
	delete(cm.Data, keySnapCRC)
	if h.snap != "" {
		cm.Data[keyChunks] = strconv.Itoa(h.chunks)
		cm.Data[keySnapBytes] = strconv.Itoa(h.size)
		cm.Data[keySnapCRC] = fmt.Sprintf("%08x", h.crc)
	}
}

// fenced returns the error of a write this store lost to cur's owner.
func (s *Store) fenced(cur *corev1.ConfigMap) error {
	if cur == nil {
		return fmt.Errorf("%w: the head %s was deleted", ErrFenced, s.opts.Name)
	}
	return fmt.Errorf("%w: the head %s now belongs to %q (epoch %s), not to this master (%q, epoch %d)",
		ErrFenced, s.opts.Name, cur.Data[keyOwner], cur.Data[keyEpoch], s.token, s.h.epoch)
}

// reread reads the head after a write of it failed with a conflict. It
// returns the head when this store still owns it, and an error wrapping
// ErrFenced when another does.
func (s *Store) reread(ctx context.Context) (*corev1.ConfigMap, error) {
	cur, err := s.cm.Get(ctx, s.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, s.fenced(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("read the head after a conflict: %w", err)
	}
	if cur.Data[keyOwner] != s.token {
		return nil, s.fenced(cur)
	}
	return cur, nil
}

// check returns ErrClosed once the store is closed. s.mu is held.
func (s *Store) check() error {
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// Close makes later calls fail with store.ErrClosed. It leaves the state
// as it is, owned by this store until another opens it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Owner returns the token this store wrote into the head.
func (s *Store) Owner() string { return s.token }
