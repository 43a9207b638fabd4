package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/roverml/rover/internal/userfile"
	"sigs.k8s.io/yaml"
)

// APIVersion is the apiVersion of an ElasticJob object, as in DLRover.
// RoverAPIVersion, Rover's own Kubernetes API (api/elastic/v1alpha1), is
// accepted too: the same spec under either.
const (
	APIVersion      = "elastic.iml.github.io/v1alpha1"
	RoverAPIVersion = "elastic.rover.dev/v1alpha1"
)

// ParseFile reads and parses a job spec file. A bare spec takes its name
// from the file's base name without extension.
func ParseFile(name string) (*JobSpec, error) {
	data, err := userfile.Read(name)
	if err != nil {
		return nil, fmt.Errorf("read job spec: %w", err)
	}
	spec, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("job spec %s: %w", name, err)
	}
	if spec.Name == "" {
		spec.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	return spec, nil
}

// Parse parses a job spec in YAML (or JSON): an ElasticJob object
// (apiVersion, kind, metadata, spec) or a bare spec (the fields under
// spec). It returns a validated JobSpec, or an error listing every problem
// (errors.Join), each naming its field path. It does not check what a
// platform can run: see JobSpec.Check.
func Parse(data []byte) (*JobSpec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the job spec is empty; write an ElasticJob (see docs/job-spec.md)")
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("the job spec is not valid YAML: %s", strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
	}
	var top any
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("the job spec is not valid YAML: %v", err)
	}
	m, ok := top.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the job spec is %s; want a mapping: an ElasticJob (apiVersion, kind, metadata, spec) or a bare spec (replicaSpecs, ...)", describe(top))
	}
	_, hasKind := m["kind"]
	_, hasAPI := m["apiVersion"]
	_, hasSpec := m["spec"]
	if hasKind || hasAPI || hasSpec {
		return parseObject(js, m)
	}
	var ws wireSpec
	if err := decode(js, m, &ws, ""); err != nil {
		return nil, err
	}
	return build(wireMeta{}, ws, "")
}

func parseObject(js []byte, m map[string]any) (*JobSpec, error) {
	var obj wireObject
	if err := decode(js, m, &obj, ""); err != nil {
		return nil, err
	}
	var errs []error
	if obj.Kind != "ElasticJob" {
		errs = append(errs, fmt.Errorf("kind: %q is not supported; use kind: ElasticJob", obj.Kind))
	}
	if obj.APIVersion != APIVersion && obj.APIVersion != RoverAPIVersion {
		errs = append(errs, fmt.Errorf("apiVersion: %q is not supported; use apiVersion: %s (or DLRover's %s)", obj.APIVersion, RoverAPIVersion, APIVersion))
	}
	if obj.Metadata.Name == "" {
		errs = append(errs, errors.New("metadata.name: missing; give the job a name"))
	} else if err := checkName(obj.Metadata.Name); err != nil {
		errs = append(errs, fmt.Errorf("metadata.name: %w", err))
	}
	if _, ok := m["spec"]; !ok {
		errs = append(errs, errors.New("spec: missing; an ElasticJob needs a spec with replicaSpecs"))
	}
	spec, err := build(obj.Metadata, obj.Spec, "spec.")
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return spec, nil
}

// decode checks the shape of m against out's type, then decodes js into
// out strictly.
func decode(js []byte, m map[string]any, out any, path string) error {
	if errs := checkShape(reflect.TypeOf(out).Elem(), m, path); len(errs) > 0 {
		return errors.Join(errs...)
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(out); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: want %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("the job spec cannot be read: %v", err)
	}
	return nil
}

// checkName applies Kubernetes' rule for object names (DNS-1123 subdomain,
// kept to 63 characters as pod names are derived from it).
func checkName(name string) error {
	ok := len(name) <= 63
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && !(c == '-' && i > 0 && i < len(name)-1) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%q is not a valid job name; use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}
