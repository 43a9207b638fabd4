package ckpt_test

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/ckpttest"
)

// TestStorage runs the storage suite against the drivers package ckpt
// links; package cloudblob runs it against S3.
func TestStorage(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		ckpttest.Run(t, func(t *testing.T) ckpttest.Store {
			raw := memblob.OpenBucket(nil)
			b := ckpt.NewBucket(raw, "mem://")
			t.Cleanup(func() { b.Close() })
			return ckpttest.Store{Bucket: b, Raw: raw}
		})
	})
	t.Run("file", func(t *testing.T) {
		ckpttest.Run(t, func(t *testing.T) ckpttest.Store {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "ckpt")
			b, err := ckpt.OpenBucket(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			u := url.URL{Scheme: "file", Path: dir, RawQuery: "metadata=skip&no_tmp_dir=true"}
			raw, err := blob.OpenBucket(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { raw.Close() })
			return ckpttest.Store{Bucket: b, Raw: raw}
		})
	})
}
