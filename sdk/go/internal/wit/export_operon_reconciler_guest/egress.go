//go:build wasip1

package export_operon_reconciler_guest

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"operon.dev/sdk/go/internal/abi"
	egress "operon.dev/sdk/go/internal/wit/operon_reconciler_egress"
)

// Fetch is the `egress` import as an abi.Egress (every world imports it).
func (witHost) Fetch(request abi.HTTPRequest) (abi.HTTPResponse, *abi.HTTPError) {
	r := egress.HttpRequest{
		Method:     request.Method,
		Url:        request.URL,
		Headers:    pairs(request.Headers),
		Body:       witTypes.None[[]uint8](),
		Credential: option(request.Credential),
		TimeoutMs:  witTypes.None[uint32](),
	}
	if request.Body != nil {
		r.Body = witTypes.Some(request.Body)
	}
	if request.TimeoutMs != 0 {
		r.TimeoutMs = witTypes.Some(request.TimeoutMs)
	}
	result := egress.Fetch(r)
	if result.IsErr() {
		e := result.Err()
		kind := "unknown"
		if int(e.Tag()) < len(abi.HTTPErrorKinds) {
			kind = abi.HTTPErrorKinds[e.Tag()]
		}
		return abi.HTTPResponse{}, &abi.HTTPError{Kind: kind, Message: httpErrorMessage(e)}
	}
	ok := result.Ok()
	out := abi.HTTPResponse{Status: int(ok.Status), Headers: make([][2]string, len(ok.Headers)), Body: ok.Body}
	for i, h := range ok.Headers {
		out.Headers[i] = [2]string{h.F0, h.F1}
	}
	return out, nil
}

func httpErrorMessage(e egress.HttpError) string {
	switch e.Tag() {
	case egress.HttpErrorDenied:
		return e.Denied()
	case egress.HttpErrorInvalid:
		return e.Invalid()
	case egress.HttpErrorTimeout:
		return e.Timeout()
	case egress.HttpErrorUnreachable:
		return e.Unreachable()
	case egress.HttpErrorTooLarge:
		return e.TooLarge()
	case egress.HttpErrorBudget:
		return e.Budget()
	case egress.HttpErrorNotRecorded:
		return e.NotRecorded()
	}
	return ""
}
