package operontest

import (
	"encoding/json"
	"os"
	"testing"
)

// The selector gives every shared case (contract/selectors/cases.json) the
// host's verdict: what each selector matches, and what it refuses.
func TestTheSelectorShouldAgreeWithEverySharedCase(t *testing.T) {
	text, err := os.ReadFile("../../../contract/selectors/cases.json")
	if err != nil {
		t.Fatalf("the shared cases are in contract/selectors/cases.json: %v", err)
	}
	var cases struct {
		Selectors []struct {
			Selector string              `json:"selector"`
			Matches  []map[string]string `json:"matches"`
			Misses   []map[string]string `json:"misses"`
		} `json:"selectors"`
		Refused []struct {
			Selector string `json:"selector"`
			Why      string `json:"why"`
		} `json:"refused"`
	}
	if err := json.Unmarshal(text, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases.Selectors) < 20 || len(cases.Refused) < 20 {
		t.Fatalf("too few shared cases: %d selectors, %d refused", len(cases.Selectors), len(cases.Refused))
	}
	for _, c := range cases.Selectors {
		selector, err := ParseSelector(c.Selector)
		if err != nil {
			t.Errorf("%q should parse: %v", c.Selector, err)
			continue
		}
		for _, labels := range c.Matches {
			if !selector.Matches(labels) {
				t.Errorf("%q should match %v", c.Selector, labels)
			}
		}
		for _, labels := range c.Misses {
			if selector.Matches(labels) {
				t.Errorf("%q should not match %v", c.Selector, labels)
			}
		}
	}
	for _, c := range cases.Refused {
		if _, err := ParseSelector(c.Selector); err == nil {
			t.Errorf("%q should be refused (%s)", c.Selector, c.Why)
		}
	}
}
