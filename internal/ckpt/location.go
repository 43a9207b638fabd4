package ckpt

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// MaxLocationLen bounds a checkpoint storage location.
const MaxLocationLen = 1024

// Location is who gave a checkpoint storage location, which decides what
// it may say.
type Location int

const (
	// FromOperator is a location on the master's own command line (`rover
	// master --checkpoint-dir`, or the standalone master of `rover run`):
	// its URL may carry any of the driver's query parameters.
	FromOperator Location = iota
	// FromAgent is a location an agent asked for when it joined. The
	// master opens it with its own credentials, so it may not say where
	// the driver connects or how it signs in: no query parameters (such as
	// s3's endpoint, profile or region), no user information, no host for
	// file URLs. Such settings go on the master's command line or in its
	// environment.
	FromAgent
)

// CheckLocation checks a checkpoint storage location: an absolute
// directory, or a file://, s3://, gs:// or azblob:// URL. A relative path
// is refused: it would name different directories for processes with
// different working directories (the agent makes its flag absolute before
// it sends it). The error says what is wrong and what to do.
func CheckLocation(loc string, from Location) error {
	switch {
	case loc == "":
		return invalidf("checkpoint storage is empty")
	case len(loc) > MaxLocationLen:
		return invalidf("checkpoint storage %.64q... is longer than %d bytes", loc, MaxLocationLen)
	case !utf8.ValidString(loc) || strings.ContainsAny(loc, "\x00\n\r"):
		return invalidf("checkpoint storage %q is not printable UTF-8", loc)
	}
	if !strings.Contains(loc, "://") {
		if !filepath.IsAbs(loc) {
			return invalidf("checkpoint storage %q is a relative path: give an absolute directory", loc)
		}
		return nil
	}
	u, err := url.Parse(loc)
	if err != nil {
		return invalidf("checkpoint storage URL %q: %v", loc, err)
	}
	if u.Scheme != "file" && !cloudSchemes[u.Scheme] {
		return invalidf("checkpoint storage URL %q: scheme %q is not one of file, s3, gs, azblob", loc, u.Scheme)
	}
	if u.Scheme == "file" && (u.Host != "" || !filepath.IsAbs(u.Path)) {
		return invalidf("checkpoint storage URL %q: a file URL names an absolute path on this machine (file:///dir)", loc)
	}
	if from == FromAgent {
		var what []string
		if u.User != nil {
			what = append(what, "user information")
		}
		if u.RawQuery != "" || u.ForceQuery {
			what = append(what, "query parameters")
		}
		if u.Fragment != "" {
			what = append(what, "a fragment")
		}
		if len(what) > 0 {
			return invalidf("checkpoint storage URL %q from an agent has %s: an agent may name a bucket and a prefix only; "+
				"endpoints, regions and credentials are the master's to set (`rover master --checkpoint-dir URL`, or its environment)",
				loc, strings.Join(what, " and "))
		}
	}
	return nil
}

// SameLocation reports whether two locations name the same storage: file
// URLs and paths compare by their cleaned path.
func SameLocation(a, b string) bool {
	return normalLocation(a) == normalLocation(b)
}

func normalLocation(loc string) string {
	if !strings.Contains(loc, "://") {
		return filepath.Clean(loc)
	}
	if u, err := url.Parse(loc); err == nil && u.Scheme == "file" && u.RawQuery == "" {
		return filepath.Clean(u.Path)
	}
	return strings.TrimSuffix(loc, "/")
}

// AbsLocation makes a path absolute against the working directory; URLs
// are returned as they are.
func AbsLocation(loc string) (string, error) {
	if loc == "" || strings.Contains(loc, "://") {
		return loc, nil
	}
	abs, err := filepath.Abs(loc)
	if err != nil {
		return "", fmt.Errorf("checkpoint directory %q: %w", loc, err)
	}
	return abs, nil
}
