package ckpt

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// errInjected is the failure a faultyDriver injects.
var errInjected = errors.New("injected failure: no space left on device")

// faultyDriver is a gocloud.dev driver over another bucket that lets the
// first budget mutations (object writes and deletes) through and fails
// every later one, as a process that crashed after budget operations would
// leave the bucket. With torn set, the first failed write also leaves the
// first half of its object behind, as a store without atomic writes might.
// The other knobs make reads fail, or writes lie.
type faultyDriver struct {
	inner     *blob.Bucket
	mu        sync.Mutex
	budget    int // mutations still allowed; < 0: unlimited
	torn      bool
	failReads bool   // every read fails (an outage)
	failRead  string // reads of this key fail
	lie       bool   // writes succeed but keep only half the object
	dead      bool   // the budget ran out
	ops       int    // mutations attempted
	latest    []byte // content of the last successful write of LatestKey
	tornKey   string // the key the crash tore, in torn mode
	tornData  []byte // what that write meant to store
}

func newFaulty(inner *blob.Bucket, budget int) (*faultyDriver, *Bucket) {
	d := &faultyDriver{inner: inner, budget: budget}
	return d, NewBucket(blob.NewBucket(d), "faulty://bucket")
}

// allow consumes one mutation. ok false means the process "crashed"; first
// is set on the operation that crashed it.
func (d *faultyDriver) allow() (ok, first bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ops++
	switch {
	case d.budget < 0:
		return true, false
	case d.dead:
		return false, false
	case d.budget == 0:
		d.dead = true
		return false, true
	}
	d.budget--
	return true, false
}

func (d *faultyDriver) ErrorCode(err error) gcerrors.ErrorCode {
	if errors.Is(err, errInjected) {
		return gcerrors.Unknown
	}
	return gcerrors.Code(err)
}
func (d *faultyDriver) As(any) bool             { return false }
func (d *faultyDriver) ErrorAs(error, any) bool { return false }
func (d *faultyDriver) Close() error            { return nil }

func (d *faultyDriver) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if d.failReads {
		return nil, errInjected
	}
	a, err := d.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{Size: a.Size, ModTime: a.ModTime, ContentType: a.ContentType}, nil
}

func (d *faultyDriver) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if d.failReads {
		return nil, errInjected
	}
	token := opts.PageToken
	if token == nil {
		token = blob.FirstPageToken
	}
	size := opts.PageSize
	if size <= 0 {
		size = 1000
	}
	objs, next, err := d.inner.ListPage(ctx, token, size, &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, IsDir: o.IsDir})
	}
	return page, nil
}

func (d *faultyDriver) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	if d.failReads || key == d.failRead {
		return nil, errInjected
	}
	r, err := d.inner.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return &faultyReader{r: r}, nil
}

type faultyReader struct{ r *blob.Reader }

func (r *faultyReader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *faultyReader) Close() error               { return r.r.Close() }
func (r *faultyReader) As(any) bool                { return false }
func (r *faultyReader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{Size: r.r.Size(), ModTime: r.r.ModTime(), ContentType: r.r.ContentType()}
}

func (d *faultyDriver) NewTypedWriter(ctx context.Context, key, _ string, _ *driver.WriterOptions) (driver.Writer, error) {
	return &faultyWriter{ctx: ctx, d: d, key: key}, nil
}

type faultyWriter struct {
	ctx context.Context
	d   *faultyDriver
	key string
	buf bytes.Buffer
}

func (w *faultyWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *faultyWriter) Close() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	ok, first := w.d.allow()
	if !ok {
		if first && w.d.torn && w.buf.Len() > 1 {
			_ = w.d.inner.WriteAll(context.Background(), w.key, w.buf.Bytes()[:w.buf.Len()/2], nil)
			w.d.tornKey, w.d.tornData = w.key, bytes.Clone(w.buf.Bytes())
		}
		return errInjected
	}
	data := w.buf.Bytes()
	if w.d.lie {
		data = data[:len(data)/2]
	}
	if err := w.d.inner.WriteAll(w.ctx, w.key, data, nil); err != nil {
		return err
	}
	if w.key == LatestKey {
		w.d.mu.Lock()
		w.d.latest = bytes.Clone(w.buf.Bytes())
		w.d.mu.Unlock()
	}
	return nil
}

func (d *faultyDriver) Copy(context.Context, string, string, *driver.CopyOptions) error {
	return errors.New("faultyDriver: Copy not supported")
}

func (d *faultyDriver) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if ok, _ := d.allow(); !ok {
		return errInjected
	}
	return d.inner.Delete(ctx, key)
}

func (d *faultyDriver) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.New("faultyDriver: SignedURL not supported")
}
