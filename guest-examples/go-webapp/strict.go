package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// strict reads decoded JSON (numbers as json.Number) into typed values and
// keeps the first error, worded as serde words it in the Rust example:
// "missing field `image`", "invalid type: string \"x\", expected i32",
// "invalid value: integer `70000`, expected i32"... encoding/json would
// accept a missing field and word the rest differently, and the fixtures
// (shared by every language) pin the Rust wording.
type strict struct{ err error }

func (r *strict) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *strict) invalidType(v any, expected string) {
	r.fail("invalid type: %s, expected %s", unexpected(v), expected)
}

// object reads a map; expected names it (`struct WebAppSpec`).
func (r *strict) object(v any, expected string) map[string]any {
	if r.err != nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		r.invalidType(v, expected)
	}
	return m
}

// required returns the field key of m, failing when it is missing.
func (r *strict) required(m map[string]any, key string) (any, bool) {
	if r.err != nil || m == nil {
		return nil, false
	}
	v, ok := m[key]
	if !ok {
		r.fail("missing field `%s`", key)
	}
	return v, ok
}

func (r *strict) str(v any) string {
	if r.err != nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.invalidType(v, "a string")
	}
	return s
}

// optStr reads an Option<String>: absent and null are nil.
func (r *strict) optStr(v any) *string {
	if v == nil || r.err != nil {
		return nil
	}
	s := r.str(v)
	return &s
}

func (r *strict) seq(v any) []any {
	if r.err != nil {
		return nil
	}
	s, ok := v.([]any)
	if !ok {
		r.invalidType(v, "a sequence")
	}
	return s
}

func (r *strict) integer(v any, expected string, min, max int64) int64 {
	if r.err != nil {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok || isFloat(n) {
		r.invalidType(v, expected)
		return 0
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || i < min || i > max {
		r.fail("invalid value: integer `%s`, expected %s", n, expected)
		return 0
	}
	return i
}

func (r *strict) i32(v any) int32 {
	return int32(r.integer(v, "i32", math.MinInt32, math.MaxInt32))
}

func (r *strict) i64(v any) int64 { return r.integer(v, "i64", math.MinInt64, math.MaxInt64) }

// optI32 reads an Option<i32>: absent and null are nil.
func (r *strict) optI32(v any) *int32 {
	if v == nil || r.err != nil {
		return nil
	}
	n := r.i32(v)
	return &n
}

func (r *strict) optI64(v any) *int64 {
	if v == nil || r.err != nil {
		return nil
	}
	n := r.i64(v)
	return &n
}

func isFloat(n json.Number) bool { return strings.ContainsAny(string(n), ".eE") }

// unexpected describes a JSON value as serde's Unexpected does.
func unexpected(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean `%t`", v)
	case json.Number:
		if isFloat(v) {
			f, _ := strconv.ParseFloat(string(v), 64)
			text := strconv.FormatFloat(f, 'f', -1, 64)
			if !strings.Contains(text, ".") {
				text += ".0"
			}
			return fmt.Sprintf("floating point `%s`", text)
		}
		return fmt.Sprintf("integer `%s`", v)
	case string:
		return "string " + strconv.Quote(v)
	case []any:
		return "sequence"
	default:
		return "map"
	}
}
