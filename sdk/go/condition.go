package operon

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Condition is a status condition, shaped like metav1.Condition.
type Condition struct {
	// Type in UpperCamelCase, e.g. `Ready`.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status string `json:"status"`
	// ObservedGeneration is the generation the condition was computed from.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when Status last changed (RFC 3339).
	LastTransitionTime string `json:"lastTransitionTime"`
	// Reason is a short UpperCamelCase reason.
	Reason string `json:"reason"`
	// Message is for humans.
	Message string `json:"message"`
}

// FindCondition returns the condition of type typ, or nil.
func FindCondition(conditions []Condition, typ string) *Condition {
	for i := range conditions {
		if conditions[i].Type == typ {
			return &conditions[i]
		}
	}
	return nil
}

// IsConditionTrue reports whether the condition of type typ is True.
func IsConditionTrue(conditions []Condition, typ string) bool {
	c := FindCondition(conditions, typ)
	return c != nil && c.Status == ConditionTrue
}

// SetCondition returns conditions with c in place of the condition of the
// same type (appended when there is none). While the status stays the same
// the existing LastTransitionTime is kept; otherwise c's is used.
//
// A reconciler must not read the clock (the outcome would change on every
// call and rewrite the status), so c.LastTransitionTime is a time the
// request gives: [Request.Now], as the host wrote it.
func SetCondition(conditions []Condition, c Condition) []Condition {
	out := make([]Condition, 0, len(conditions)+1)
	replaced := false
	for _, existing := range conditions {
		if existing.Type != c.Type {
			out = append(out, existing)
			continue
		}
		if existing.Status == c.Status && existing.LastTransitionTime != "" {
			c.LastTransitionTime = existing.LastTransitionTime
		}
		out = append(out, c)
		replaced = true
	}
	if !replaced {
		out = append(out, c)
	}
	return out
}
