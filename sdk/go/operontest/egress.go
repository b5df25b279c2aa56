package operontest

// Outbound HTTP in native tests: a Cluster answers operon.HTTP from
// recorded exchanges, with the one replay rule of every Operon runner
// (operon_contract::egress::Replay, `operon test`, the other SDKs).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	operon "operon.dev/sdk/go"
)

// Exchange is one recorded call and what came of it, as a fixture's
// `egress:` holds it: the request and either a Response or an Error.
type Exchange struct {
	Request  operon.HTTPRequest
	Response *operon.HTTPResponse
	Error    *operon.HTTPError
}

// Respond is an exchange that answers request with status, body and
// headers.
func Respond(request operon.HTTPRequest, status int, body string, headers ...[2]string) Exchange {
	return Exchange{Request: request, Response: &operon.HTTPResponse{Status: status, Headers: headers, Body: []byte(body)}}
}

// Fail is an exchange that answers request with an error of kind
// (operon.HTTPTimeout, ...).
func Fail(request operon.HTTPRequest, kind, message string) Exchange {
	return Exchange{Request: request, Error: &operon.HTTPError{Kind: kind, Message: message}}
}

type recorded struct {
	exchange Exchange
	used     bool
}

// AddExchange records calls the cluster answers when the reconciler calls
// out ([operon.HTTP]). Each call takes the first exchange not yet used
// whose request has the same method (without case), the same URL, the
// same body (none is empty) and the same credential; headers and timeout
// are not compared. A call no exchange answers gets a not-recorded error
// and is remembered: [Reconcile] then fails with [*Unrecorded], whatever
// the reconciler made of the error. Exchanges left unused are fine.
func (c *Cluster) AddExchange(exchanges ...Exchange) {
	for _, e := range exchanges {
		c.exchanges = append(c.exchanges, &recorded{exchange: e})
	}
}

// Missed returns the calls of the last [Reconcile] (or since the cluster
// was made) that no exchange answered, in order.
func (c *Cluster) Missed() []operon.HTTPRequest {
	return append([]operon.HTTPRequest(nil), c.missed...)
}

// Fetch implements operon.Egress: the replay of the recorded exchanges.
func (c *Cluster) Fetch(raw operon.RawHTTPRequest) (operon.RawHTTPResponse, *operon.RawHTTPError) {
	asked := operon.HTTPRequest(raw)
	for _, r := range c.exchanges {
		if r.used || !SameCall(r.exchange.Request, asked) {
			continue
		}
		r.used = true
		switch {
		case r.exchange.Error != nil:
			return operon.RawHTTPResponse{}, &operon.RawHTTPError{Kind: r.exchange.Error.Kind, Message: r.exchange.Error.Message}
		case r.exchange.Response != nil:
			response := *r.exchange.Response
			response.Body = append([]byte(nil), response.Body...)
			return operon.RawHTTPResponse(response), nil
		default:
			return operon.RawHTTPResponse{}, &operon.RawHTTPError{Kind: operon.HTTPNotRecorded, Message: "the recorded exchange has neither response nor error"}
		}
	}
	c.missed = append(c.missed, asked)
	holds := " (it holds no calls)"
	if len(c.exchanges) > 0 {
		calls := make([]string, len(c.exchanges))
		for i, r := range c.exchanges {
			calls[i] = Describe(r.exchange.Request)
		}
		holds = " (it holds: " + strings.Join(calls, "; ") + ")"
	}
	return operon.RawHTTPResponse{}, &operon.RawHTTPError{Kind: operon.HTTPNotRecorded, Message: Describe(asked) + " is not in the recording" + holds}
}

// SameCall reports whether a recorded request answers asked: the same
// method (without case), URL, body (none is empty) and credential.
func SameCall(recorded, asked operon.HTTPRequest) bool {
	return strings.EqualFold(recorded.Method, asked.Method) && recorded.URL == asked.URL &&
		bytes.Equal(recorded.Body, asked.Body) && recorded.Credential == asked.Credential
}

// Describe is a call in one line, as runners name it:
// `POST https://a.example/x (7 bytes of body) with credential "api"`.
func Describe(request operon.HTTPRequest) string {
	out := strings.ToUpper(request.Method) + " " + request.URL
	if request.Body != nil {
		out += fmt.Sprintf(" (%d bytes of body)", len(request.Body))
	}
	if request.Credential != "" {
		out += fmt.Sprintf(" with credential %q", request.Credential)
	}
	return out
}

// Unrecorded is the error of [Reconcile] when the reconciler made calls
// the cluster's exchanges do not hold: the fixture fails, as `operon
// test` fails it, whatever the reconciler made of the not-recorded errors.
type Unrecorded struct {
	Calls []operon.HTTPRequest
}

func (u *Unrecorded) Error() string {
	calls := make([]string, len(u.Calls))
	for i, c := range u.Calls {
		calls[i] = Describe(c)
	}
	return "the guest made calls the fixture's `egress` does not hold: " + strings.Join(calls, "; ")
}

// ParseEgress reads a fixture's `egress:` list written as JSON (a `.json`
// fixture's key, or YAML converted), in the shared fixture format:
//
//	[{"request": {"method": "GET", "url": "https://dns.example/api/zones/a.", "credential": "pdns"},
//	  "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": "{}"}},
//	 {"request": {"method": "DELETE", "url": "https://dns.example/api/zones/b."},
//	  "error": {"timeout": "no answer in 10s"}}]
//
// Headers are a map (sorted by name here); a body is text, or
// `{"base64": ...}` when it is not UTF-8; `timeoutMs` is read and not
// compared. An error has one key: denied, invalid, timeout, unreachable,
// tooLarge, budget or notRecorded.
func ParseEgress(text []byte) ([]Exchange, error) {
	var list []json.RawMessage
	if err := strictJSON(text, &list); err != nil {
		return nil, fmt.Errorf("egress: %v", err)
	}
	out := make([]Exchange, 0, len(list))
	for i, item := range list {
		e, err := parseExchange(item)
		if err != nil {
			return nil, fmt.Errorf("egress[%d]: %v", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// MustParseEgress is ParseEgress for tests: it panics on a malformed list.
func MustParseEgress(text string) []Exchange {
	exchanges, err := ParseEgress([]byte(text))
	if err != nil {
		panic(fmt.Sprintf("operontest: %v", err))
	}
	return exchanges
}

func strictJSON(text []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("unexpected text after the JSON value")
	}
	return nil
}

func parseExchange(text []byte) (Exchange, error) {
	var file struct {
		Request *struct {
			Method     string            `json:"method"`
			URL        string            `json:"url"`
			Headers    map[string]string `json:"headers"`
			Body       json.RawMessage   `json:"body"`
			Credential *string           `json:"credential"`
			TimeoutMs  *uint32           `json:"timeoutMs"`
		} `json:"request"`
		Response *struct {
			Status  int               `json:"status"`
			Headers map[string]string `json:"headers"`
			Body    json.RawMessage   `json:"body"`
		} `json:"response"`
		Error map[string]string `json:"error"`
	}
	if err := strictJSON(text, &file); err != nil {
		return Exchange{}, err
	}
	if file.Request == nil {
		return Exchange{}, fmt.Errorf("no request")
	}
	var e Exchange
	r := file.Request
	e.Request = operon.HTTPRequest{Method: r.Method, URL: r.URL, Headers: headerList(r.Headers)}
	if r.Credential != nil {
		e.Request.Credential = *r.Credential
	}
	if r.TimeoutMs != nil {
		e.Request.TimeoutMs = *r.TimeoutMs
	}
	if len(r.Body) > 0 && string(r.Body) != "null" {
		body, err := parseBody(r.Body)
		if err != nil {
			return Exchange{}, fmt.Errorf("request.body: %v", err)
		}
		if body == nil {
			body = []byte{}
		}
		e.Request.Body = body
	}
	if file.Response != nil {
		body, err := parseBody(file.Response.Body)
		if err != nil {
			return Exchange{}, fmt.Errorf("response.body: %v", err)
		}
		e.Response = &operon.HTTPResponse{Status: file.Response.Status, Headers: headerList(file.Response.Headers), Body: body}
	}
	if file.Error != nil {
		if len(file.Error) != 1 {
			return Exchange{}, fmt.Errorf("error: one key expected (denied, invalid, timeout, unreachable, tooLarge, budget, notRecorded)")
		}
		for kind, message := range file.Error {
			known := false
			for _, k := range []string{operon.HTTPDenied, operon.HTTPInvalid, operon.HTTPTimeout, operon.HTTPUnreachable, operon.HTTPTooLarge, operon.HTTPBudget, operon.HTTPNotRecorded} {
				known = known || k == kind
			}
			if !known {
				return Exchange{}, fmt.Errorf("error: unknown kind %q (denied, invalid, timeout, unreachable, tooLarge, budget, notRecorded)", kind)
			}
			e.Error = &operon.HTTPError{Kind: kind, Message: message}
		}
	}
	return e, nil
}

// parseBody reads a body: text, or {"base64": ...}; absent is empty.
func parseBody(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return []byte(text), nil
	}
	var binary struct {
		Base64 *string `json:"base64"`
	}
	if err := strictJSON(raw, &binary); err != nil || binary.Base64 == nil {
		return nil, fmt.Errorf("text or {base64: ...} expected")
	}
	return base64.StdEncoding.DecodeString(*binary.Base64)
}

func headerList(headers map[string]string) [][2]string {
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([][2]string, 0, len(names))
	for _, name := range names {
		out = append(out, [2]string{name, headers[name]})
	}
	return out
}
