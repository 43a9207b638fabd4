package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// EnvValue is one entry of spec.envs. Rover writes a plain value (NAME:
// value; numbers and booleans are read as their text); DLRover writes a
// Kubernetes EnvVar ({name: NAME, value: VALUE} or {name, valueFrom}). Both
// decode, and each encodes back in the form it came in.
//
// Its schema has no type, as none says "a scalar or an object": the API
// server checks the object form's fields and keeps any other value as
// written. Such a value (a list) decodes without error, so that one bad
// object cannot break a client's list of all, and encodes back as written,
// for the operator's job spec check to refuse with its field path.
//
// +kubebuilder:validation:Type=""
// +kubebuilder:pruning:PreserveUnknownFields
type EnvValue struct {
	// Name is the variable's name in DLRover's form, "" in Rover's. The
	// map key is the variable's name either way.
	//
	// +optional
	Name string `json:"name,omitempty"`
	// Value is the variable's value.
	//
	// +optional
	Value string `json:"value,omitempty"`
	// ValueFrom is DLRover's (Kubernetes') source for the value: a field
	// of the pod, a resource, a ConfigMap or Secret key.
	//
	// +optional
	ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`

	// invalid is a value of no accepted form, as written (JSON).
	invalid string `json:"-"`
}

// Valid reports whether e was decoded from an accepted form.
func (e EnvValue) Valid() bool { return e.invalid == "" }

// MarshalJSON writes a JSON string, or DLRover's {name, value, valueFrom}
// when Name or ValueFrom is set.
func (e EnvValue) MarshalJSON() ([]byte, error) {
	if e.invalid != "" {
		return []byte(e.invalid), nil
	}
	if e.Name == "" && e.ValueFrom == nil {
		return json.Marshal(e.Value)
	}
	type object EnvValue
	return json.Marshal(object(e))
}

// UnmarshalJSON reads a string, number or boolean, or an object with name,
// value and valueFrom (other fields are dropped: the API server keeps
// none). Any other value is kept as written and reported by Valid.
func (e *EnvValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fmt.Errorf("decode env value: empty input")
	}
	switch b[0] {
	case '"':
		*e = EnvValue{}
		return json.Unmarshal(b, &e.Value)
	case '{':
		var o struct {
			Name      string               `json:"name"`
			Value     json.RawMessage      `json:"value"`
			ValueFrom *corev1.EnvVarSource `json:"valueFrom"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("decode env value: %w", err)
		}
		*e = EnvValue{Name: o.Name, ValueFrom: o.ValueFrom}
		if len(o.Value) == 0 || string(o.Value) == "null" {
			return nil
		}
		var v EnvValue
		if err := v.UnmarshalJSON(o.Value); err != nil || v.Name != "" || v.ValueFrom != nil || !v.Valid() {
			*e = EnvValue{invalid: string(b)}
			return nil
		}
		e.Value = v.Value
		return nil
	case 'n':
		*e = EnvValue{}
		return nil
	case 't', 'f':
		var v bool
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("decode env value: %w", err)
		}
		*e = EnvValue{Value: strconv.FormatBool(v)}
		return nil
	case '[':
		if !json.Valid(b) {
			return fmt.Errorf("decode env value: invalid JSON")
		}
		*e = EnvValue{invalid: string(b)}
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("decode env value: %w", err)
	}
	*e = EnvValue{Value: n.String()}
	return nil
}
