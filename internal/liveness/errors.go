package liveness

import "errors"

// ErrInvalidConfig is wrapped by [Config.Validate] for every field that is out
// of range; the wrapping message names the field and the accepted range.
var ErrInvalidConfig = errors.New("invalid node table config")
