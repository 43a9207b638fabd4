package v1alpha1

import (
	"encoding/json"
	"fmt"
)

// JobSpecDocument returns the job as the JSON document that Rover's job
// spec parser (internal/jobspec) reads: apiVersion, kind, the metadata a
// user writes (name, namespace, labels, annotations) and the spec, without
// the status, the server's metadata and the nulls of Go's zero values
// (a template's creationTimestamp) with the objects they leave empty.
func (j *ElasticJob) JobSpecDocument() ([]byte, error) {
	meta := map[string]any{"name": j.Name}
	if j.Namespace != "" {
		meta["namespace"] = j.Namespace
	}
	if len(j.Labels) > 0 {
		meta["labels"] = j.Labels
	}
	if len(j.Annotations) > 0 {
		meta["annotations"] = j.Annotations
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": GroupVersion.String(),
		"kind":       ElasticJobKind,
		"metadata":   meta,
		"spec":       j.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("encode ElasticJob %q: %w", j.Name, err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("encode ElasticJob %q: %w", j.Name, err)
	}
	return json.Marshal(dropNulls(doc))
}

// dropNulls removes the null members of every object in v, and the objects
// left empty by that (a template's metadata of only creationTimestamp).
func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if m, ok := e.(map[string]any); e == nil || ok && len(m) > 0 && len(dropNulls(m).(map[string]any)) == 0 {
				delete(v, k)
				continue
			}
			v[k] = dropNulls(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropNulls(e)
		}
	}
	return v
}
