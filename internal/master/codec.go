package master

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is the Connect JSON codec of the master's handlers. Connect's
// own discards what it does not know, so a misspelt field vanished and an
// unknown enum name ("SHARD_MODE_BOGUS") became the zero value, which
// for a shard mode means LEASED. Here both are errors that name them.
// (gRPC clients send binary protobuf, unaffected: an unknown enum number
// there is refused by the validators.)
type strictJSON struct{}

func (strictJSON) Name() string { return "json" }

func (strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("encode %T: not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("decode into %T: not a protobuf message", m)
	}
	if len(b) == 0 {
		return errors.New("the request body is empty: send a JSON object ({} for no fields)")
	}
	return protojson.Unmarshal(b, pm)
}
