// Package cloudblob links the gocloud.dev blob drivers for cloud object
// stores into the program that imports it, so that [ckpt.OpenBucket] opens
// s3:// (Amazon S3 and S3-compatible stores), gs:// (Google Cloud Storage)
// and azblob:// (Azure Blob Storage) URLs. It has no API: import it for its
// side effects, from a main package.
//
// The drivers are kept out of package ckpt because together they add about
// 475 packages to a build (see docs/benchmarks.md); a package that only
// needs files or memory, and its tests, do not pay for them. Credentials
// come from each SDK's standard chain (environment variables, shared config
// files, workload identity); docs/flash-checkpoint.md lists them.
package cloudblob

import (
	_ "gocloud.dev/blob/azureblob" // azblob:// URLs
	_ "gocloud.dev/blob/gcsblob"   // gs:// URLs
	_ "gocloud.dev/blob/s3blob"    // s3:// URLs
)
