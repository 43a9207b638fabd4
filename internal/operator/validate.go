package operator

import (
	"errors"
	"fmt"
	"strings"

	v1alpha1 "github.com/roverml/rover/api/elastic/v1alpha1"
	"github.com/roverml/rover/internal/jobplan"
	"github.com/roverml/rover/internal/kubenames"
	"k8s.io/apimachinery/pkg/util/validation"
)

// validate returns every problem of job that the CRD's schema cannot
// express, each naming its field, or nil, and the notes of its plan (what
// Kubernetes does with the spec that a user may not expect): the checks of
// rover submit --dry-run (jobplan.Check: the spec as rover submit reads it,
// the launcher line against replicas, maxRestarts, nodeUnit and the like,
// the envs, the launcher flags the platform gives), the names the job's
// objects take from its name, and the master's budget annotation. The
// admission webhook refuses a job with them; start marks one that got past
// it (no webhook installed) Failed/InvalidSpec.
func validate(job *v1alpha1.ElasticJob) (notes []string, err error) {
	var errs []error
	doc, err := job.JobSpecDocument()
	if err == nil {
		var plan *jobplan.Plan
		if plan, err = jobplan.Check(doc, jobplan.Kubernetes); err == nil {
			notes = plan.Notes
		}
	}
	if err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsDNS1035Label(kubenames.MasterService(job.Name)); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("metadata.name: the master's Service would be named %q, which is not a valid Service name (%s): use a job name of at most %d characters that starts with a letter and has no dots",
			kubenames.MasterService(job.Name), strings.Join(msgs, "; "), validation.DNS1035LabelMaxLength-len(kubenames.MasterService(""))))
	}
	if _, err := masterBudget(job); err != nil {
		errs = append(errs, err)
	}
	return notes, errors.Join(errs...)
}
