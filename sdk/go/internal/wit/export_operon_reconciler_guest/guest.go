//go:build wasip1

package export_operon_reconciler_guest

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"operon.dev/sdk/go/internal/abi"
	host "operon.dev/sdk/go/internal/wit/operon_reconciler_host"
	types "operon.dev/sdk/go/internal/wit/operon_reconciler_types"
)

const notExported = "operon: no reconciler was exported; call operon.Export(yourReconciler) in an init function of the main package"

// Manifest is the `manifest` export.
func Manifest() types.ReconcilerManifest {
	if abi.Exports.Manifest == nil {
		panic(notExported)
	}
	m := abi.Exports.Manifest()
	out := types.ReconcilerManifest{
		Name:      m.Name,
		For:       gvkOut(m.For),
		Owns:      gvksOut(m.Owns),
		Reads:     gvksOut(m.Reads),
		Updates:   []types.OwnedUpdate{},
		Finalizer: witTypes.None[string](),
	}
	for _, w := range m.Watches {
		var mapping types.Mapping
		switch w.Mapping.Kind {
		case abi.MappingLabel:
			mapping = types.MakeMappingLabel(w.Mapping.Name)
		case abi.MappingAnnotation:
			mapping = types.MakeMappingAnnotation(w.Mapping.Name)
		case abi.MappingReference:
			mapping = types.MakeMappingReference(w.Mapping.Name)
		case abi.MappingSelector:
			mapping = types.MakeMappingSelector(w.Mapping.Name)
		default:
			mapping = types.MakeMappingAllInNamespace()
		}
		out.Watches = append(out.Watches, types.Watch{Kind: gvkOut(w.Kind), Mapping: mapping})
	}
	for _, u := range m.Updates {
		out.Updates = append(out.Updates, types.OwnedUpdate{Kind: gvkOut(u.Kind), Strategy: types.UpdateStrategy(u.Strategy)})
	}
	if m.Finalizer != "" {
		out.Finalizer = witTypes.Some(m.Finalizer)
	}
	return out
}

// Reconcile is the `reconcile` export.
func Reconcile(request types.Request) witTypes.Result[types.Outcome, types.Failure] {
	if abi.Exports.Reconcile == nil {
		panic(notExported)
	}
	in := abi.Request{
		Object:     request.Object,
		Related:    request.Related,
		Finalizing: request.Finalizing,
		Attempt:    request.Attempt,
		Now:        request.Now,
	}
	for _, c := range request.Children {
		children := abi.Children{Kind: GVKIn(c.Kind), Objects: make([]abi.Child, len(c.Objects))}
		for i, o := range c.Objects {
			children.Objects[i] = abi.Child{
				Object:    o.Object,
				Readiness: abi.Readiness{Status: abi.ReadinessStatus(o.Readiness.Status), Message: o.Readiness.Message},
			}
		}
		in.Children = append(in.Children, children)
	}
	outcome, failure := abi.Exports.Reconcile(Host, in)
	if failure != nil {
		detail := types.FailureDetail{Message: failure.Message, Status: optionPtr(failure.Status)}
		if failure.Terminal {
			return witTypes.Err[types.Outcome](types.MakeFailureTerminal(detail))
		}
		return witTypes.Err[types.Outcome](types.MakeFailureTransient(detail))
	}
	out := types.Outcome{
		Desired:        outcome.Desired,
		Status:         optionPtr(outcome.Status),
		RequeueAfterMs: witTypes.None[uint64](),
		RequeueAt:      optionPtr(outcome.RequeueAt),
		Finalized:      outcome.Finalized,
		NeedsFinalizer: outcome.NeedsFinalizer,
		ParentMetadata: witTypes.None[types.ParentMetadata](),
	}
	if outcome.RequeueAfterMs != nil {
		out.RequeueAfterMs = witTypes.Some(*outcome.RequeueAfterMs)
	}
	if m := outcome.ParentMetadata; m != nil {
		out.ParentMetadata = witTypes.Some(types.ParentMetadata{Labels: pairs(m.Labels), Annotations: pairs(m.Annotations)})
	}
	for _, e := range outcome.Events {
		out.Events = append(out.Events, types.Event{Warning: e.Warning, Reason: e.Reason, Message: e.Message})
	}
	return witTypes.Ok[types.Outcome, types.Failure](out)
}

// Host is the `host` import as an abi.Host.
var Host abi.Host = witHost{}

type witHost struct{}

func (witHost) Log(level abi.Level, message string, fields [][2]string) {
	host.Log(uint8(level), message, pairs(fields))
}

func pairs(fields [][2]string) []witTypes.Tuple2[string, string] {
	out := make([]witTypes.Tuple2[string, string], len(fields))
	for i, f := range fields {
		out[i] = witTypes.Tuple2[string, string]{F0: f[0], F1: f[1]}
	}
	return out
}

func optionPtr(s *string) witTypes.Option[string] {
	if s == nil {
		return witTypes.None[string]()
	}
	return witTypes.Some(*s)
}

func (witHost) Get(ref abi.ObjectRef) (string, bool, error) {
	r := types.ObjectRef{Kind: gvkOut(ref.Kind), Namespace: option(ref.Namespace), Name: ref.Name}
	result := host.Get(r)
	if result.IsErr() {
		return "", false, hostError(result.Err())
	}
	found := result.Ok()
	if found.IsNone() {
		return "", false, nil
	}
	return found.Some(), true, nil
}

func (witHost) List(kind abi.GVK, namespace, labelSelector string) ([]string, error) {
	result := host.List(gvkOut(kind), option(namespace), option(labelSelector))
	if result.IsErr() {
		return nil, hostError(result.Err())
	}
	return result.Ok(), nil
}

type hostError string

func (e hostError) Error() string { return string(e) }

func option(s string) witTypes.Option[string] {
	if s == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(s)
}

func gvkOut(g abi.GVK) types.Gvk {
	return types.Gvk{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// GVKIn converts a generated gvk.
func GVKIn(g types.Gvk) abi.GVK {
	return abi.GVK{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

func gvksOut(gs []abi.GVK) []types.Gvk {
	out := make([]types.Gvk, len(gs))
	for i, g := range gs {
		out[i] = gvkOut(g)
	}
	return out
}
