package cloudblob_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/ckpt/ckpttest"
	_ "github.com/roverml/rover/internal/ckpt/cloudblob"
)

func TestSchemes(t *testing.T) {
	for _, scheme := range []string{"s3", "gs", "azblob", "file", "mem"} {
		if !blob.DefaultURLMux().ValidBucketScheme(scheme) {
			t.Errorf("no driver registered for %s://", scheme)
		}
	}
}

// isolateAWS points the AWS SDK's default chain at test credentials only:
// no shared config of the machine, no instance metadata.
func isolateAWS(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "rover-test",
		"AWS_SECRET_ACCESS_KEY":       "rover-test-secret",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_REGION":                  "",
		"AWS_DEFAULT_REGION":          "",
		"AWS_ENDPOINT_URL":            "",
		"AWS_ENDPOINT_URL_S3":         "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
}

// TestS3 runs the storage suite against an S3 server over HTTP (gofakes3),
// with buckets opened by URL as the agent and the master open them, under a
// key prefix given as the URL's path.
func TestS3(t *testing.T) {
	isolateAWS(t)
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	n := 0
	ckpttest.Run(t, func(t *testing.T) ckpttest.Store {
		ctx := context.Background()
		n++
		bucket := fmt.Sprintf("ckpt-%d", n)
		if err := backend.CreateBucket(bucket); err != nil {
			t.Fatal(err)
		}
		query := "endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true"
		b, err := ckpt.OpenBucket(ctx, "s3://"+bucket+"/jobs/run1?"+query)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		raw, err := blob.OpenBucket(ctx, "s3://"+bucket+"?prefix=jobs/run1/&"+query)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return ckpttest.Store{Bucket: b, Raw: raw}
	})
}

// TestGCSAndAzure has no emulator to run the suite against: it checks that
// gs:// and azblob:// URLs open and that their drivers send requests to
// the service (here, a server refusing them all), and that its refusal
// comes back as a storage error naming the URL.
func TestGCSAndAzure(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		http.Error(w, "access denied", http.StatusForbidden) // not retried
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name string
		env  map[string]string
		url  string
	}{
		{"gs", map[string]string{"STORAGE_EMULATOR_HOST": host}, "gs://rover-gcs/run1"},
		{"azblob", map[string]string{
			"AZURE_STORAGE_ACCOUNT":           "rovertest",
			"AZURE_STORAGE_KEY":               "bm90LWEta2V5", // base64 of "not-a-key"
			"AZURE_STORAGE_SAS_TOKEN":         "",
			"AZURE_STORAGE_CONNECTION_STRING": "",
		}, "azblob://rover-azure/run1?protocol=http&domain=" + host},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			ctx := context.Background()
			b, err := ckpt.OpenBucket(ctx, tt.url)
			if err != nil {
				t.Fatalf("OpenBucket(%q): %v", tt.url, err)
			}
			defer b.Close()
			mu.Lock()
			paths = nil
			mu.Unlock()
			_, err = ckpt.PersistRank(ctx, b, 1, 0, ckpttest.File(t, 1, 0, 64))
			if !errors.Is(err, ckpt.ErrStorage) || !strings.Contains(err.Error(), tt.url) {
				t.Errorf("PersistRank against a refusing server = %v, want ErrStorage naming %q", err, tt.url)
			}
			mu.Lock()
			defer mu.Unlock()
			bucket := strings.TrimPrefix(tt.url[:strings.LastIndex(tt.url, "/")], tt.name+"://")
			if len(paths) == 0 || !strings.Contains(strings.Join(paths, " "), bucket) {
				t.Errorf("the server got requests for %v, want at least one for bucket %q", paths, bucket)
			}
		})
	}
}
