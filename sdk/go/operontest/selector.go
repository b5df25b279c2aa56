package operontest

import (
	"fmt"
	"regexp"
	"strings"
)

// Selector is a parsed label selector: requirements joined by commas, all
// of which must hold. The empty selector matches everything. It reads
// selectors as Kubernetes does and as the host does; the shared cases in
// contract/selectors/cases.json hold it to the host's verdicts.
type Selector []requirement

type requirement struct {
	key    string
	op     string // exists, !exists, in, notin
	values []string
}

const (
	selectorSpace   = " \t\r\n"
	selectorSymbols = "!=(),<>"
)

var (
	labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// ParseSelector parses Kubernetes label selector syntax: `a=b`, `a==b`,
// `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, joined by commas. Keys
// and values follow the Kubernetes label rules.
func ParseSelector(text string) (Selector, error) {
	tokens, err := selectorTokens(text)
	if err == nil {
		p := &selectorParser{tokens: tokens}
		var s Selector
		if s, err = p.selector(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("invalid label selector %q: %w", text, err)
}

// selectorTokens splits text into words and the symbols ! != = == ( ) ,;
// < and > are refused.
func selectorTokens(text string) ([]string, error) {
	var tokens []string
	for at := 0; at < len(text); {
		c := text[at]
		switch {
		case strings.IndexByte(selectorSpace, c) >= 0:
			at++
		case c == '<' || c == '>':
			return nil, fmt.Errorf("the %c operator is not supported (use in, notin, = or !=)", c)
		case strings.HasPrefix(text[at:], "!=") || strings.HasPrefix(text[at:], "=="):
			tokens = append(tokens, text[at:at+2])
			at += 2
		case strings.IndexByte(selectorSymbols, c) >= 0:
			tokens = append(tokens, text[at:at+1])
			at++
		default:
			end := at
			for end < len(text) && strings.IndexByte(selectorSpace+selectorSymbols, text[end]) < 0 {
				end++
			}
			tokens = append(tokens, text[at:end])
			at = end
		}
	}
	return tokens, nil
}

func isWord(token string) bool {
	return token != "" && strings.IndexByte(selectorSymbols, token[0]) < 0
}

func shown(token string) string {
	if token == "" {
		return "the end"
	}
	return fmt.Sprintf("%q", token)
}

func checkKey(key string) error {
	name := key
	if slash := strings.LastIndexByte(key, '/'); slash >= 0 {
		prefix := key[:slash]
		name = key[slash+1:]
		ok := len(prefix) <= 253
		for _, label := range strings.Split(prefix, ".") {
			ok = ok && dnsLabel.MatchString(label)
		}
		if !ok {
			return fmt.Errorf("invalid label key %q: the prefix must be a lowercase DNS subdomain", key)
		}
	}
	if !labelName.MatchString(name) {
		return fmt.Errorf("invalid label key %q: the name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", key)
	}
	return nil
}

func checkValue(value string) error {
	if value != "" && !labelName.MatchString(value) {
		return fmt.Errorf("invalid label value %q: at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", value)
	}
	return nil
}

type selectorParser struct {
	tokens []string
	at     int
}

// peek is the next token, "" at the end.
func (p *selectorParser) peek() string {
	if p.at < len(p.tokens) {
		return p.tokens[p.at]
	}
	return ""
}

func (p *selectorParser) next() string {
	t := p.peek()
	p.at++
	return t
}

func (p *selectorParser) selector() (Selector, error) {
	var s Selector
	if p.peek() == "" {
		return s, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		s = append(s, r)
		switch t := p.next(); {
		case t == "":
			return s, nil
		case t != ",":
			return nil, fmt.Errorf("expected ',' or the end after a requirement, found %s", shown(t))
		case !isWord(p.peek()) && p.peek() != "!":
			return nil, fmt.Errorf("expected a requirement after ','")
		}
	}
}

func (p *selectorParser) requirement() (requirement, error) {
	if p.peek() == "!" {
		p.at++
		key, err := p.key()
		return requirement{key: key, op: "!exists"}, err
	}
	key, err := p.key()
	if err != nil {
		return requirement{}, err
	}
	t := p.peek()
	if t == "" || t == "," {
		return requirement{key: key, op: "exists"}, nil
	}
	p.at++
	switch t {
	case "=", "==", "!=":
		op := "in"
		if t == "!=" {
			op = "notin"
		}
		value, err := p.value()
		return requirement{key: key, op: op, values: []string{value}}, err
	case "in", "notin":
		values, err := p.set()
		return requirement{key: key, op: t, values: values}, err
	}
	return requirement{}, fmt.Errorf("expected an operator (=, ==, !=, in, notin) after %q, found %s", key, shown(t))
}

func (p *selectorParser) key() (string, error) {
	t := p.next()
	if !isWord(t) {
		return "", fmt.Errorf("expected a label key, found %s", shown(t))
	}
	return t, checkKey(t)
}

// value is the value after = or !=: empty when nothing follows.
func (p *selectorParser) value() (string, error) {
	t := p.peek()
	if t == "" || t == "," {
		return "", nil
	}
	if !isWord(t) {
		return "", fmt.Errorf("expected a label value, found %s", shown(t))
	}
	p.at++
	return t, checkValue(t)
}

// set reads (a,b); an empty place in the list is the empty value.
func (p *selectorParser) set() ([]string, error) {
	if p.next() != "(" {
		return nil, fmt.Errorf("expected '(' after in or notin")
	}
	var values []string
	current, have := "", false
	for {
		switch t := p.next(); {
		case isWord(t) && !have:
			if err := checkValue(t); err != nil {
				return nil, err
			}
			current, have = t, true
		case t == ",":
			values = append(values, current)
			current, have = "", false
		case t == ")":
			return append(values, current), nil
		case t == "":
			return nil, fmt.Errorf("unclosed parenthesis")
		default:
			return nil, fmt.Errorf("expected a value, ',' or ')' in a set, found %s", shown(t))
		}
	}
}

// Matches reports whether labels satisfy every requirement: != and notin
// match labels without the key.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.key]
		in := false
		for _, want := range r.values {
			in = in || (ok && v == want)
		}
		switch r.op {
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		case "in":
			if !in {
				return false
			}
		case "notin":
			if in {
				return false
			}
		}
	}
	return true
}
