package operon

import (
	"context"
	"fmt"
)

// Converter converts the parent kind between its versions: the same
// component serves its CRD's conversion webhook, as controller-runtime's
// Manager serves one for its API types. A reconciler that implements it
// exports `convert` when operon.toml's world is
// `reconciler-with-conversion` or `reconciler-with-admission-and-conversion`
// (and the Reconciler is granted conversion).
//
// Convert answers every object at desiredAPIVersion (`group/version`), in
// order, keeping each one's kind, name, namespace and uid; an object
// already at that version is returned as it is. An error refuses the whole
// request (the API server shows its message). Calls read nothing (the
// context's host sees no objects) and must be pure.
type Converter interface {
	Convert(ctx context.Context, objects []Object, desiredAPIVersion string) ([]Object, error)
}

// RunConvert is the code path of the `convert` export: JSON texts in,
// JSON texts out, or the message of a refusal.
func RunConvert(host Host, c Converter, objects []string, desiredAPIVersion string) ([]string, *string) {
	refuse := func(format string, args ...any) ([]string, *string) {
		message := fmt.Sprintf(format, args...)
		return nil, &message
	}
	in := make([]Object, len(objects))
	for i, text := range objects {
		o, err := ParseObject([]byte(text))
		if err != nil {
			return refuse("object %d is not a JSON object: %v", i, err)
		}
		in[i] = o
	}
	out, err := c.Convert(WithHost(context.Background(), host), in, desiredAPIVersion)
	if err != nil {
		return refuse("%s", err.Error())
	}
	texts := make([]string, len(out))
	for i, o := range out {
		text, err := marshal(o)
		if err != nil {
			return refuse("cannot serialize converted object %d: %v", i, err)
		}
		texts[i] = string(text)
	}
	return texts, nil
}
