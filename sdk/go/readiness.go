package operon

import (
	"encoding/json"
	"fmt"

	"operon.dev/sdk/go/internal/abi"
)

// ReadinessStatus is how far a child is from what its spec asks, as
// kstatus (sigs.k8s.io/cli-utils) defines it. The host computes it.
type ReadinessStatus = abi.ReadinessStatus

// The readiness statuses.
const (
	// ReadinessCurrent: the child is what its spec asks (a Deployment
	// whose replicas are all updated and available, a Job complete).
	ReadinessCurrent = abi.ReadinessCurrent
	// ReadinessInProgress: still on its way (rolling out, scheduling).
	ReadinessInProgress = abi.ReadinessInProgress
	// ReadinessFailed: will not get there without a change (a rollout past
	// its progress deadline, a failed Job).
	ReadinessFailed = abi.ReadinessFailed
	// ReadinessTerminating: being deleted.
	ReadinessTerminating = abi.ReadinessTerminating
	// ReadinessUnknown: the host cannot tell.
	ReadinessUnknown = abi.ReadinessUnknown
)

// Readiness is one child's readiness: its status and why, for people
// (`Available: 1/3`).
type Readiness = abi.Readiness

// readinessNames are kstatus's names, as `operon readiness` prints them.
var readinessNames = [...]string{"Current", "InProgress", "Failed", "Terminating", "Unknown"}

// ReadinessStatusName is kstatus's name of s (`Current`, `InProgress`,
// ...), as `operon readiness` prints it.
func ReadinessStatusName(s ReadinessStatus) string {
	if int(s) < len(readinessNames) {
		return readinessNames[s]
	}
	return fmt.Sprintf("ReadinessStatus(%d)", s)
}

// ParseReadiness reads one verdict of `operon readiness`:
// `{"status": "Current", "message": "..."}`.
func ParseReadiness(text []byte) (Readiness, error) {
	var v struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(text, &v); err != nil {
		return Readiness{}, err
	}
	for i, name := range readinessNames {
		if name == v.Status {
			return Readiness{Status: ReadinessStatus(i), Message: v.Message}, nil
		}
	}
	return Readiness{}, fmt.Errorf("unknown readiness status %q", v.Status)
}

// ChildReadiness is one existing child with its readiness.
type ChildReadiness struct {
	Kind GVK
	// Namespace and Name are the child's.
	Namespace, Name string
	Readiness
}

// ChildrenReadiness returns the readiness of every existing child, in the
// order of Manifest.Owns, then namespace and name.
func (r *Request) ChildrenReadiness() []ChildReadiness {
	var out []ChildReadiness
	for _, group := range r.children {
		for _, c := range group.Objects {
			namespace, name := objectName(c.Object)
			out = append(out, ChildReadiness{Kind: group.Kind, Namespace: namespace, Name: name, Readiness: c.Readiness})
		}
	}
	return out
}

// Readiness returns the readiness of the existing child of kind called
// name; found is false when there is none.
func (r *Request) Readiness(kind GVK, name string) (readiness Readiness, found bool) {
	for _, group := range r.children {
		if group.Kind != kind {
			continue
		}
		for _, c := range group.Objects {
			if _, n := objectName(c.Object); n == name {
				return c.Readiness, true
			}
		}
	}
	return Readiness{}, false
}

// AllChildrenCurrent reports whether every existing child is
// [ReadinessCurrent] (true when there are none: check that the children
// you want exist).
func (r *Request) AllChildrenCurrent() bool {
	for _, group := range r.children {
		for _, c := range group.Objects {
			if c.Readiness.Status != ReadinessCurrent {
				return false
			}
		}
	}
	return true
}

func objectName(text string) (namespace, name string) {
	var head struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal([]byte(text), &head)
	return head.Metadata.Namespace, head.Metadata.Name
}
