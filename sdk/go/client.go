package operon

import (
	"context"
	"fmt"
	"log/slog"

	"operon.dev/sdk/go/internal/abi"
)

type hostKey struct{}

// WithHost returns ctx carrying host, for the reads and the logger of one
// reconcile. [Run] does this; call it yourself only to run a Reconcile
// method directly.
func WithHost(ctx context.Context, host Host) context.Context {
	return context.WithValue(ctx, hostKey{}, host)
}

func hostFrom(ctx context.Context) (Host, error) {
	host, ok := ctx.Value(hostKey{}).(Host)
	if !ok {
		return nil, fmt.Errorf("operon: no host in the context; call Reconcile through operon.Run or operontest")
	}
	return host, nil
}

// Get returns the object of kind called name from the host's cache, or
// nil when it does not exist. An empty namespace means the parent's (for
// namespaced kinds). The kind must be declared in Manifest.Reads (or be the
// parent's or an owned kind).
//
// Reads never reach the API server; the cache may lag slightly, and the
// host reconciles again when it catches up.
//
// Errors: transient when the host refuses the read (kind not declared or
// not granted: fix the manifest or the grants, the backoff retries
// meanwhile); terminal when the object is not a JSON object.
func Get(ctx context.Context, kind GVK, namespace, name string) (Object, error) {
	host, err := hostFrom(ctx)
	if err != nil {
		return nil, err
	}
	text, found, err := host.Get(ObjectRef{Kind: kind, Namespace: namespace, Name: name})
	if err != nil {
		return nil, fmt.Errorf("cannot get %s %s: %w", KindString(kind), name, err)
	}
	if !found {
		return nil, nil
	}
	o, err := ParseObject([]byte(text))
	if err != nil {
		return nil, Terminalf("%s %s is invalid: %v", kind.Kind, name, err)
	}
	return o, nil
}

// List returns the objects of kind in namespace (empty: the parent's)
// whose labels match labelSelector, in Kubernetes syntax (`app=web,tier!=db`,
// `env in (a,b)`, `!legacy`; empty: all).
//
// Errors as for [Get]; a malformed selector is refused by the host.
func List(ctx context.Context, kind GVK, namespace, labelSelector string) ([]Object, error) {
	host, err := hostFrom(ctx)
	if err != nil {
		return nil, err
	}
	texts, err := host.List(kind, namespace, labelSelector)
	if err != nil {
		return nil, fmt.Errorf("cannot list %s: %w", KindString(kind), err)
	}
	out := make([]Object, 0, len(texts))
	for _, text := range texts {
		o, err := ParseObject([]byte(text))
		if err != nil {
			return nil, Terminalf("a listed %s is invalid: %v", kind.Kind, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// ObjectRef names one object for [Host.Get].
type ObjectRef = abi.ObjectRef

// Logger returns a logger that writes through the host's logger, which
// tags every line with the controller and the parent. Attributes become
// the line's structured fields.
func Logger(ctx context.Context) *slog.Logger {
	host, err := hostFrom(ctx)
	if err != nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&hostHandler{host: host})
}

type hostHandler struct {
	host  Host
	attrs [][2]string
	group string
}

func (h *hostHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *hostHandler) Handle(_ context.Context, r slog.Record) error {
	fields := append([][2]string(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, h.field(a))
		return true
	})
	level := LevelInfo
	switch {
	case r.Level >= slog.LevelError:
		level = LevelError
	case r.Level >= slog.LevelWarn:
		level = LevelWarn
	case r.Level >= slog.LevelInfo:
		level = LevelInfo
	default:
		level = LevelDebug
	}
	h.host.Log(level, r.Message, fields)
	return nil
}

func (h *hostHandler) field(a slog.Attr) [2]string {
	key := a.Key
	if h.group != "" {
		key = h.group + "." + key
	}
	return [2]string{key, a.Value.String()}
}

func (h *hostHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([][2]string(nil), h.attrs...)
	for _, a := range attrs {
		n.attrs = append(n.attrs, h.field(a))
	}
	return &n
}

func (h *hostHandler) WithGroup(name string) slog.Handler {
	n := *h
	if n.group != "" {
		name = n.group + "." + name
	}
	n.group = name
	return &n
}
