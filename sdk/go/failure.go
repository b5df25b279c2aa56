package operon

import (
	"errors"
	"fmt"
)

// TerminalError marks err as terminal: retrying cannot help (the spec is
// invalid), so the host records a warning event and does not reconcile the
// object again until it changes. Any other error returned by Reconcile is
// transient: the host retries with per-object exponential backoff
// ([Request.Attempt] counts the failures in a row). It returns nil for a
// nil err, and the result unwraps to err.
//
// The name follows controller-runtime's reconcile.TerminalError.
func TerminalError(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

// Terminalf is TerminalError(fmt.Errorf(format, args...)).
func Terminalf(format string, args ...any) error {
	return &terminalError{fmt.Errorf(format, args...)}
}

// IsTerminal reports whether err (or an error it wraps) is terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}

type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// WithStatus attaches the parent's status to a failure: the host writes
// it (only when it differs, as an outcome's) before it records the event
// and backs off, so the parent says why while the host waits — as
// `r.Status().Update` in a controller-runtime error path does. err keeps
// its kind (transient, or terminal when it wraps [TerminalError]); status
// must marshal to a JSON object. It returns nil for a nil err.
//
//	return nil, operon.WithStatus(operon.Terminalf("spec.image must not be empty"), status)
func WithStatus(err error, status any) error {
	if err == nil {
		return nil
	}
	return &statusError{err: err, status: status}
}

// FailureStatus returns the status attached to err (or an error it wraps)
// by [WithStatus].
func FailureStatus(err error) (status any, ok bool) {
	var s *statusError
	if errors.As(err, &s) {
		return s.status, true
	}
	return nil, false
}

type statusError struct {
	err    error
	status any
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }
