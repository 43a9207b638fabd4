package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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
	return parseFile(name, nil)
}

// ParseFileFor reads, parses and checks a job spec file against what a
// platform can honour: ParseFile, then JobSpec.Check, with every problem of
// both reported at once.
func ParseFileFor(name string, c Capabilities) (*JobSpec, error) {
	return parseFile(name, &c)
}

func parseFile(name string, c *Capabilities) (*JobSpec, error) {
	data, err := ReadDocument(name)
	if err != nil {
		return nil, fmt.Errorf("read job spec: %w", err)
	}
	spec, err := parse(data, c)
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
// platform can run: see JobSpec.Check, and ParseFor for both at once.
func Parse(data []byte) (*JobSpec, error) {
	return parse(data, nil)
}

// ParseFor parses a job spec and checks it against what a platform can
// honour, reporting every problem of both at once.
func ParseFor(data []byte, c Capabilities) (*JobSpec, error) {
	return parse(data, &c)
}

// parse parses data and, when c is given, checks what it could read of
// the spec against c even when other parts are wrong.
func parse(data []byte, c *Capabilities) (*JobSpec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the job spec is empty; write an ElasticJob (see docs/job-spec.md)")
	}
	js, err := DocumentToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("the job spec: %w", err)
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
	var spec *JobSpec
	var errs []error
	if hasKind || hasAPI || hasSpec {
		spec, errs = parseObject(js, m)
	} else {
		var ws wireSpec
		errs = decode(js, m, &ws, "")
		if errs == nil || c != nil {
			var err error
			spec, err = build(wireMeta{}, ws, "")
			errs = append(errs, unjoin(err)...)
		}
	}
	if c != nil && spec != nil {
		errs = append(errs, unjoin(spec.Check(*c))...)
	}
	if errs = slices.DeleteFunc(errs, func(e error) bool { return e == nil }); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return spec, nil
}

// parseObject reads an object (apiVersion, kind, metadata, spec). It
// returns what it could build of the spec and every problem.
func parseObject(js []byte, m map[string]any) (*JobSpec, []error) {
	kind, _ := m["kind"].(string)
	if kind == "ScalePlan" {
		// Its fields are a ScalePlan's, not a job's: naming them would
		// only hide what is wrong.
		return nil, []error{errors.New(`kind: ScalePlan is DLRover's request to scale a running job, not a job: submit the ElasticJob (kind: ElasticJob), and apply a ScalePlan to it with kubectl once it runs on Kubernetes (see docs/kubernetes.md)`)}
	}
	var obj wireObject
	errs := decode(js, m, &obj, "")
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
	return spec, append(errs, unjoin(err)...)
}

// decode checks the shape of m against out's type, then decodes js into
// out: strictly when the shape is right, else as far as it goes, so that
// the spec can still be built and its other problems found. It returns
// every problem.
func decode(js []byte, m map[string]any, out any, path string) []error {
	errs := checkShape(reflect.TypeOf(out).Elem(), m, path)
	d := json.NewDecoder(bytes.NewReader(js))
	if len(errs) == 0 {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(out); err != nil && len(errs) == 0 {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return []error{fmt.Errorf("%s: want %s, got a JSON %s", te.Field, te.Type, te.Value)}
		}
		return []error{fmt.Errorf("the job spec cannot be read: %v", err)}
	}
	return errs
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
