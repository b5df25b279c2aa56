package operontest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	operon "operon.dev/sdk/go"
)

// ruleCase answers every reconcile with the outcome of one shared case
// (contract/rules/cases), under its manifest.
type ruleCase struct {
	manifest operon.Manifest
	desired  []operon.Object
	events   []operon.Event
}

func (c ruleCase) Manifest() operon.Manifest { return c.manifest }

func (c ruleCase) Reconcile(context.Context, *operon.Request) (*operon.Outcome, error) {
	out := operon.NewOutcome()
	for _, d := range c.desired {
		out.Apply(d)
	}
	out.Events = c.events
	return out, nil
}

func TestTheRunnerShouldGiveEverySharedRuleCaseTheHostsVerdict(t *testing.T) {
	paths, _ := filepath.Glob("../../../contract/rules/cases/*.json")
	if len(paths) < 10 {
		t.Fatalf("the shared cases are in contract/rules/cases: found %v", paths)
	}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Manifest struct {
				Name string       `json:"name"`
				Owns []operon.GVK `json:"owns"`
			} `json:"manifest"`
			Request struct {
				Object   operon.Object   `json:"object"`
				Children []operon.Object `json:"children"`
				Related  []operon.Object `json:"related"`
				Cluster  []operon.Object `json:"cluster"`
			} `json:"request"`
			Outcome struct {
				Desired []operon.Object `json:"desired"`
				Events  []operon.Event  `json:"events"`
			} `json:"outcome"`
			Pad *struct {
				Desired int `json:"desired"`
				Bytes   int `json:"bytes"`
			} `json:"pad"`
			Refused *string `json:"refused"`
		}
		if err := json.Unmarshal(text, &c); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if c.Pad != nil {
			data, _ := c.Outcome.Desired[c.Pad.Desired]["data"].(map[string]any)
			data["pad"] = strings.Repeat("x", c.Pad.Bytes)
		}
		r := ruleCase{
			manifest: operon.Manifest{Name: c.Manifest.Name, For: operon.Kind("rules.operon.dev/v1", "Case"), Owns: c.Manifest.Owns},
			desired:  c.Outcome.Desired,
			events:   c.Outcome.Events,
		}
		cluster := NewCluster()
		for _, o := range append(c.Request.Cluster, c.Request.Related...) {
			cluster.Add(o)
		}
		req := Request(c.Request.Object)
		for _, child := range c.Request.Children {
			req.Child(child)
		}
		_, err = Reconcile(r, cluster, req)
		var refusal *Refused
		switch {
		case c.Refused == nil && err != nil:
			t.Errorf("%s: the host writes this outcome, the runner said: %v", filepath.Base(path), err)
		case c.Refused != nil && !errors.As(err, &refusal):
			t.Errorf("%s: the host refuses this outcome (%s), the runner said: %v", filepath.Base(path), *c.Refused, err)
		case c.Refused != nil && refusal.Message != *c.Refused:
			t.Errorf("%s:\n  host:   %s\n  runner: %s", filepath.Base(path), *c.Refused, refusal.Message)
		}
	}
}
