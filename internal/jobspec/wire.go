package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The wire types mirror the YAML (as JSON) field for field. Fields marked
// "Rover" are Rover's additions to DLRover's ElasticJob.

type wireObject struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   wireMeta `json:"metadata"`
	Spec       wireSpec `json:"spec"`
}

type wireMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type wireSpec struct {
	DistributionStrategy string                  `json:"distributionStrategy"`
	OptimizeMode         string                  `json:"optimizeMode"`
	ReplicaSpecs         map[string]*wireReplica `json:"replicaSpecs"`
	Envs                 map[string]envValue     `json:"envs"`
	Suspend              bool                    `json:"suspend"`
	ResourceLimits       map[string]scalar       `json:"resourceLimits"`
	MaxRestarts          *int                    `json:"maxRestarts"`    // Rover
	NodeUnit             *int                    `json:"nodeUnit"`       // Rover
	PendingTimeout       *scalar                 `json:"pendingTimeout"` // Rover
}

type wireReplica struct {
	Replicas       *int         `json:"replicas"`
	MinReplicas    *int         `json:"minReplicas"`  // Rover
	MaxReplicas    *int         `json:"maxReplicas"`  // Rover
	NprocPerNode   *int         `json:"nprocPerNode"` // Rover
	RestartCount   *int         `json:"restartCount"`
	AutoScale      bool         `json:"autoScale"`
	RestartTimeout *int         `json:"restartTimeout"`
	Priority       *scalar      `json:"priority"`
	CriticalNodes  *scalar      `json:"criticalNodes"`
	Template       wireTemplate `json:"template"`
	RestartPolicy  string       `json:"restartPolicy"`  // Kubeflow's, as DLRover accepts it
	BatchScheduler string       `json:"BatchScheduler"` // DLRover's; "default" only
}

type wireTemplate struct {
	Metadata wireMeta    `json:"metadata"`
	Spec     wirePodSpec `json:"spec"`
}

// wirePodSpec is a Kubernetes pod spec: every field of one is accepted
// (and checked against Kubernetes' types), the containers with the fields
// the job spec reads in its own terms.
type wirePodSpec struct {
	corev1.PodSpec `json:",inline"`
	Containers     []wireContainer `json:"containers"`
}

type wireContainer struct {
	corev1.Container `json:",inline"`
	Env              []wireEnv     `json:"env"`
	Resources        wireResources `json:"resources"`
}

type wireEnv struct {
	Name      string               `json:"name"`
	Value     string               `json:"value"`
	ValueFrom *corev1.EnvVarSource `json:"valueFrom"`
}

type wireResources struct {
	Limits   map[string]scalar      `json:"limits"`
	Requests map[string]scalar      `json:"requests"`
	Claims   []corev1.ResourceClaim `json:"claims"`
}

// scalar is a YAML scalar read as text: "2", 2 and 0.5 all work where a
// quantity, duration or priority is expected.
type scalar string

func (s *scalar) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		*s = scalar(v)
	case float64:
		*s = scalar(strings.TrimSpace(string(b)))
	case bool:
		*s = scalar(strconv.FormatBool(v))
	default:
		return errors.New("want a string or a number")
	}
	return nil
}

// envValue is one entry of spec.envs: a value, or DLRover's {name, value}.
type envValue struct{ Value string }

func (e *envValue) UnmarshalJSON(b []byte) error {
	var s scalar
	if err := s.UnmarshalJSON(b); err == nil {
		e.Value = string(s)
		return nil
	}
	var w wireEnv
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return errors.New("want a value, or {name: NAME, value: VALUE}")
	}
	e.Value = w.Value
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// checkShape walks the decoded JSON v against the Go type t and reports
// every unknown field and every value of the wrong kind, each with its
// field path, so that all are reported at once (encoding/json stops at the
// first). Types with their own UnmarshalJSON are checked by decoding.
func checkShape(t reflect.Type, v any, path string) []error {
	if v == nil {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		b, _ := json.Marshal(v)
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b); err != nil {
			return []error{fmt.Errorf("%s: %v", path, err)}
		}
		return nil
	}
	bad := func(want string) []error {
		return []error{fmt.Errorf("%s: want %s, got %s", path, want, describe(v))}
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return bad("a mapping of fields")
		}
		fields := map[string]reflect.StructField{}
		names := structFields(t, fields)
		var errs []error
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: unknown field; %s accepts %s", join(path, k), orTop(path), strings.Join(names, ", ")))
				continue
			}
			errs = append(errs, checkShape(f.Type, m[k], join(path, k))...)
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return bad("a mapping")
		}
		var errs []error
		for _, k := range sortedKeys(m) {
			errs = append(errs, checkShape(t.Elem(), m[k], join(path, k))...)
		}
		return errs
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return bad("a list")
		}
		var errs []error
		for i, e := range s {
			errs = append(errs, checkShape(t.Elem(), e, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case reflect.String:
		if _, ok := v.(string); !ok {
			return bad("a string (quote it)")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad("true or false")
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) || f > 1<<31 || f < -(1<<31) {
			return bad("a whole number")
		}
	}
	return nil
}

// structFields adds t's JSON fields to fields, those of embedded structs
// (json:",inline") after t's own, which shadow them, and returns their
// names in order.
func structFields(t reflect.Type, fields map[string]reflect.StructField) []string {
	var names []string
	var inline []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			inline = append(inline, f.Type)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if _, shadowed := fields[name]; !shadowed {
			fields[name] = f
			names = append(names, name)
		}
	}
	for _, it := range inline {
		names = append(names, structFields(it, fields)...)
	}
	return names
}

func describe(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(v)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// join appends a field name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	if strings.ContainsAny(name, ".[] ") || name == "" {
		return path + "[" + strconv.Quote(name) + "]"
	}
	return path + "." + name
}

func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}
