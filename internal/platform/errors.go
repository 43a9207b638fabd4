package platform

import "errors"

// Errors callers branch on (check with errors.Is); the wrapping message says
// what exactly was wrong.
var (
	// ErrExists: Create was given a node id the platform already holds. The
	// node was created before (for example by a master that then restarted);
	// the caller can treat the create as done.
	ErrExists = errors.New("node already exists")
	// ErrInvalidSpec: a NodeSpec field is missing or out of range
	// ([NodeSpec.Validate]). Retrying the same spec cannot succeed.
	ErrInvalidSpec = errors.New("invalid node spec")
	// ErrUnsupported: the spec asks for something this platform cannot do
	// (see [Capabilities]), such as resources on the local platform.
	ErrUnsupported = errors.New("not supported by this platform")
)
