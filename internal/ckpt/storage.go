package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs
	_ "gocloud.dev/blob/memblob"  // mem:// URLs, for tests
	"gocloud.dev/gcerrors"
)

// Bucket is where checkpoints are persisted: a gocloud.dev bucket and the
// URL it was opened from, which errors name.
type Bucket struct {
	url string
	b   *blob.Bucket
	// files: b is a fileblob bucket; write streams each object into its
	// temporary file, to fsync it before the rename.
	files bool
	// dir is the local directory of a file:// bucket ("" otherwise): fileblob
	// leaves empty directories behind when it deletes objects.
	dir string
}

// isFileblob reports whether b is a fileblob bucket: the only driver whose
// bucket converts to an os.FileInfo (its directory's).
func isFileblob(b *blob.Bucket) bool {
	var fi os.FileInfo
	return b.As(&fi)
}

// OpenBucket opens the bucket at rawURL: a plain path or "file:///path"
// (a local or network file system), "mem://" (an in-memory bucket, for
// tests), or a cloud object store: "s3://bucket/prefix" (Amazon S3 and
// S3-compatible stores), "gs://bucket/prefix" (Google Cloud Storage) or
// "azblob://container/prefix" (Azure Blob Storage). The path of a URL other
// than a file URL is a key prefix ("s3://b/run1" keeps the checkpoints
// under "run1/"), as is gocloud.dev's "prefix" query parameter; setting
// both is an error. Other query parameters go to the driver (see
// docs/flash-checkpoint.md).
//
// Package ckpt links only the file and mem drivers; a program that wants
// the cloud ones imports [github.com/roverml/rover/internal/ckpt/cloudblob]
// (cmd/rover does). They are kept out of this package, and of its tests,
// because together they add about 475 packages to a build. For a scheme
// with no driver linked, the error lists the schemes that are.
//
// What fileblob (v0.47.0) does, read from its source: a writer creates a
// temporary file and renames it to the object's path on Close, so an
// object appears whole or not at all; a cancelled context makes Close
// delete the temporary instead. It does not fsync; [PersistRank] and
// [WriteManifestAndLatest] fsync the file before the rename and the
// directory after it. By default the temporary file is in os.TempDir, and
// the rename fails ("invalid cross-device link") when that is another mount
// than the checkpoint directory, the usual case in a container; and every
// object gets an ".attrs" sidecar file. So for file URLs these query
// parameters default on unless the URL sets them: no_tmp_dir (temporary
// files next to their object; one that a crash leaves behind is removed
// when [Keep] deletes its step), metadata=skip (no sidecars) and
// create_dir.
func OpenBucket(ctx context.Context, rawURL string) (*Bucket, error) {
	u, err := bucketURL(rawURL)
	if err != nil {
		return nil, err
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		if cloudSchemes[u.Scheme] && !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
			err = fmt.Errorf("%w (this program is built without the cloud storage drivers: "+
				"import github.com/roverml/rover/internal/ckpt/cloudblob, as cmd/rover does)", err)
		}
		return nil, &storageError{op: "open", url: rawURL, err: err}
	}
	bk := &Bucket{url: rawURL, b: b, files: isFileblob(b)}
	if u.Scheme == "file" {
		bk.dir = u.Path
	}
	return bk, nil
}

// cloudSchemes are the schemes package cloudblob links drivers for.
var cloudSchemes = map[string]bool{"s3": true, "gs": true, "azblob": true}

// bucketURL turns OpenBucket's argument into the URL for gocloud.dev: a
// plain path becomes a file URL, a file URL gets its default parameters,
// and the path of any other URL becomes its prefix parameter.
func bucketURL(rawURL string) (*url.URL, error) {
	open := rawURL
	if !strings.Contains(rawURL, "://") {
		abs, err := filepath.Abs(rawURL)
		if err != nil {
			return nil, invalidf("checkpoint storage %q: %v", rawURL, err)
		}
		open = (&url.URL{Scheme: "file", Path: abs}).String()
	}
	u, err := url.Parse(open)
	if err != nil {
		return nil, invalidf("checkpoint storage URL %q: %v", rawURL, err)
	}
	q := u.Query()
	switch prefix := strings.Trim(u.Path, "/"); {
	case u.Scheme == "file":
		for k, v := range map[string]string{"no_tmp_dir": "true", "metadata": "skip", "create_dir": "true"} {
			if !q.Has(k) {
				q.Set(k, v)
			}
		}
	case prefix == "":
		u.Path, u.RawPath = "", ""
	case q.Has("prefix"):
		return nil, invalidf("checkpoint storage URL %q has both a path and a prefix parameter: use one", rawURL)
	default:
		q.Set("prefix", prefix+"/")
		u.Path, u.RawPath = "", ""
	}
	u.RawQuery = q.Encode()
	return u, nil
}

// NewBucket wraps an open gocloud.dev bucket; url is only for messages.
func NewBucket(b *blob.Bucket, url string) *Bucket {
	return &Bucket{url: url, b: b, files: isFileblob(b)}
}

// URL is the URL the bucket was opened from.
func (b *Bucket) URL() string { return b.url }

// Close closes the underlying bucket.
func (b *Bucket) Close() error { return b.b.Close() }

func (b *Bucket) fail(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	}
	return &storageError{op: op, url: b.url, key: key, err: err}
}

// notFound reports whether err says that an object is missing.
func notFound(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// write stores data at key. Every gocloud.dev driver makes the object
// appear whole or not at all when the writer closes (an S3 PUT or multipart
// completion, a GCS or Azure upload commit, fileblob's rename); for
// fileblob, write also fsyncs the file before the rename and its directory
// after, so that the object survives a machine crash too.
//
// Other drivers get the whole object in one Upload call rather than a
// stream of writes: the drivers that can (s3blob, azureblob) then send it
// from memory, and azureblob's streaming writer (v0.47.0) panics in Close
// when the service refuses the upload (the upload goroutine sets the pipe
// reader that Close then closes to nil), which would take the agent down
// with a transient storage error.
func (b *Bucket) write(ctx context.Context, key string, data []byte) error {
	opts := &blob.WriterOptions{ContentType: "application/octet-stream"}
	if !b.files {
		if err := b.b.Upload(ctx, key, bytes.NewReader(data), opts); err != nil {
			return b.fail("write", key, err)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var file *os.File
	opts.BeforeWrite = func(as func(any) bool) error { as(&file); return nil }
	w, err := b.b.NewWriter(ctx, key, opts)
	if err != nil {
		return b.fail("write", key, err)
	}
	_, err = w.Write(data)
	if err == nil && file != nil {
		err = file.Sync()
	}
	if err != nil {
		cancel() // abort: the object is not created
		w.Close()
		return b.fail("write", key, err)
	}
	if err := w.Close(); err != nil {
		return b.fail("write", key, err)
	}
	if file != nil {
		if err := syncDir(filepath.Dir(file.Name())); err != nil {
			return b.fail("sync directory of", key, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (b *Bucket) read(ctx context.Context, key string) ([]byte, error) {
	data, err := b.b.ReadAll(ctx, key)
	if err != nil {
		return nil, b.fail("read", key, err)
	}
	return data, nil
}

// checksum streams the object at key and returns its size and CRC32C.
func (b *Bucket) checksum(ctx context.Context, key string) (int64, uint32, error) {
	r, err := b.b.NewReader(ctx, key, nil)
	if err != nil {
		return 0, 0, b.fail("read", key, err)
	}
	defer r.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, 0, b.fail("read", key, err)
	}
	return n, h.Sum32(), nil
}

func (b *Bucket) size(ctx context.Context, key string) (int64, error) {
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return 0, b.fail("stat", key, err)
	}
	return a.Size, nil
}

// listSteps returns the steps that have a directory, in increasing order.
func (b *Bucket) listSteps(ctx context.Context) ([]int64, error) {
	var steps []int64
	it := b.b.List(&blob.ListOptions{Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, b.fail("list", "", err)
		}
		if step, ok := parseStepDir(obj.Key); ok && obj.IsDir {
			steps = append(steps, step)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// deleteStep deletes step's manifest, then everything else in its
// directory, so that a step half deleted is never taken for committed.
func (b *Bucket) deleteStep(ctx context.Context, step int64) error {
	if err := b.b.Delete(ctx, ManifestPath(step)); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return b.fail("delete", ManifestPath(step), err)
	}
	it := b.b.List(&blob.ListOptions{Prefix: StepDir(step)})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			b.removeEmptyStepDir(step)
			return nil
		}
		if err != nil {
			return b.fail("list", StepDir(step), err)
		}
		if err := b.b.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return b.fail("delete", obj.Key, err)
		}
	}
}

// removeEmptyStepDir removes a deleted step's directory of a file bucket;
// a directory that is not empty (a write racing the delete) stays.
func (b *Bucket) removeEmptyStepDir(step int64) {
	if b.dir != "" {
		_ = os.Remove(filepath.Join(b.dir, strings.TrimSuffix(StepDir(step), "/")))
	}
}

// PersistRank writes rank's file for step (payload: a safetensors file, as
// [Encode] or an arena slot holds it), reads it back and checks that size
// and CRC32C match what was written, and returns its FileInfo for the
// master's [Commit]. The read-back costs a second transfer of the payload:
// it catches storage that acknowledges writes it did not keep.
//
// The payload's header is decoded first (not its tensors' bytes): a payload
// that is not a valid safetensors file, or whose rover.step / rover.rank
// metadata name another step or rank, is refused with ErrCorrupt rather
// than persisted. Write failures wrap ErrStorage and name the URL, the key
// and the cause; the caller (the agent) retries and reports, training goes
// on. Writing the same step and rank again replaces the file.
//
// When payload is an arena snapshot's Data, the writer may overwrite it
// meanwhile: call [Arena.Check] after PersistRank, and report the file
// durable only if the snapshot was intact (else persist the newer one).
func PersistRank(ctx context.Context, b *Bucket, step int64, rank int, payload []byte) (FileInfo, error) {
	if step < 0 || rank < 0 {
		return FileInfo{}, invalidf("step %d, rank %d: want both >= 0", step, rank)
	}
	_, meta, err := Decode(payload)
	if err != nil {
		return FileInfo{}, fmt.Errorf("refusing to persist rank %d of step %d: %w", rank, step, err)
	}
	if err := checkMeta(meta, step, rank); err != nil {
		return FileInfo{}, fmt.Errorf("refusing to persist rank %d of step %d: %w", rank, step, err)
	}
	info := FileInfo{Rank: rank, Path: RankPath(step, rank), Size: int64(len(payload)), CRC32C: CRC32C(payload)}
	if err := b.write(ctx, info.Path, payload); err != nil {
		return FileInfo{}, err
	}
	size, sum, err := b.checksum(ctx, info.Path)
	if err != nil {
		return FileInfo{}, err
	}
	if size != info.Size || sum != info.CRC32C {
		return FileInfo{}, b.fail("verify", info.Path, corruptf("read back %d bytes with CRC32C %08x, wrote %d bytes with CRC32C %08x", size, sum, info.Size, info.CRC32C))
	}
	return info, nil
}

// checkMeta checks the rover.step and rover.rank metadata, where present.
// rank < 0 skips the rank check.
func checkMeta(meta map[string]string, step int64, rank int) error {
	if s, ok := meta[MetaStep]; ok && s != strconv.FormatInt(step, 10) {
		return corruptf("file metadata %s=%q, want %d", MetaStep, s, step)
	}
	if r, ok := meta[MetaRank]; ok && rank >= 0 && r != strconv.Itoa(rank) {
		return corruptf("file metadata %s=%q, want %d", MetaRank, r, rank)
	}
	return nil
}

// LoadRank reads rank's file of the checkpoint m describes, checks its size
// and CRC32C against the manifest and decodes it. In Replicated mode a rank
// without a file of its own gets the lowest rank's. Any mismatch is
// ErrCorrupt: the caller should take another checkpoint ([LoadLatest]
// again, or an older step).
func LoadRank(ctx context.Context, b *Bucket, m Manifest, rank int) ([]Tensor, map[string]string, error) {
	f, ok := m.File(rank)
	if !ok {
		return nil, nil, invalidf("rank %d has no file in the manifest of step %d (world size %d)", rank, m.Step, m.WorldSize)
	}
	data, err := b.read(ctx, f.Path)
	if notFound(err) {
		return nil, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return nil, nil, err
	}
	if sum := CRC32C(data); int64(len(data)) != f.Size || sum != f.CRC32C {
		return nil, nil, corruptf("%s %s: %d bytes with CRC32C %08x, the manifest says %d bytes with %08x", b.url, f.Path, len(data), sum, f.Size, f.CRC32C)
	}
	tensors, meta, err := Decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", b.url, f.Path, err)
	}
	if err := checkMeta(meta, m.Step, f.Rank); err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", b.url, f.Path, err)
	}
	return tensors, meta, nil
}
