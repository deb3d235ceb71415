package metrics

import (
	"strconv"
	"testing"
)

func TestStatusLabels(t *testing.T) {
	for _, tc := range []struct {
		code       int
		label, cls string
	}{
		{101, "101", "1xx"},
		{200, "200", "2xx"},
		{201, "201", "2xx"},
		{308, "308", "3xx"},
		{401, "401", "4xx"},
		{422, "422", "4xx"},
		{502, "502", "5xx"},
		{599, "other", "5xx"}, // no such status
		{299, "other", "2xx"},
		{0, "other", "other"},
		{99, "other", "other"},
		{600, "other", "other"},
		{-1, "other", "other"},
	} {
		if got := statusCode(tc.code); got != tc.label {
			t.Errorf("statusCode(%d) = %q, want %q", tc.code, got, tc.label)
		}
		if got := statusClass(tc.code); got != tc.cls {
			t.Errorf("statusClass(%d) = %q, want %q", tc.code, got, tc.cls)
		}
	}
}

func TestCloseCode(t *testing.T) {
	for _, tc := range []struct {
		code int
		want string
	}{
		{1000, "1000"},
		{1006, "1006"},
		{1008, "1008"},
		{1011, "1011"},
		{1015, "1015"},
		{1016, "other"},
		{999, "other"},
		{0, "other"},
		{3000, "3xxx"},
		{3999, "3xxx"},
		{4000, "4xxx"},
		{4001, "4001"},
		{4999, "4xxx"},
		{5000, "other"},
	} {
		if got := closeCode(tc.code); got != tc.want {
			t.Errorf("closeCode(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
}

func TestBounded(t *testing.T) {
	known := set("a", "b")
	for _, tc := range []struct{ in, want string }{
		{"a", "a"},
		{"b", "b"},
		{"", LabelNone},
		{"c", LabelOther},
		{"A", LabelOther},
		{"a ", LabelOther},
	} {
		if got := bounded(known, tc.in); got != tc.want {
			t.Errorf("bounded(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// allowed is every value a label can take, per label.
func allowed() map[string]map[string]bool {
	vals := func(m map[string]string, extra ...string) map[string]bool {
		out := map[string]bool{LabelNone: true, LabelOther: true}
		for v := range m {
			out[v] = true
		}
		for _, v := range extra {
			out[v] = true
		}
		return out
	}
	codes := map[string]bool{LabelOther: true}
	for c := 100; c < 600; c++ {
		if s := statusCode(c); s != LabelOther {
			codes[s] = true
		}
	}
	closes := map[string]bool{LabelOther: true, "3xxx": true, "4xxx": true, "4001": true}
	for c := 1000; c <= 1015; c++ {
		closes[strconv.Itoa(c)] = true
	}
	return map[string]map[string]bool{
		"route":     vals(brokerRouteSet),
		"kind":      vals(brokerKinds),
		"code":      vals(brokerCodes),
		"proxy":     vals(proxyRoutes),
		"status":    codes,
		"class":     {"1xx": true, "2xx": true, "3xx": true, "4xx": true, "5xx": true, LabelOther: true},
		"close":     closes,
		"step":      vals(createStepSet),
		"failstep":  vals(createFailSteps),
		"container": vals(containerSteps),
		"action":    vals(containerActionSet),
	}
}

// The labels are a parser of outside input in the small: whatever a
// client, an inner server or a newer package passes, the value is in the
// label's fixed set.
func FuzzLabels(f *testing.F) {
	f.Add("GET /v1/secrets/{name}", 200, 1000)
	f.Add("GET /v1/secrets/npm-token", 799, 4001)
	f.Add("", -1, 0)
	f.Add("other", 101, 3500)
	f.Add("none", 599, 65535)
	ok := allowed()
	f.Fuzz(func(t *testing.T, s string, status, close int) {
		for label, v := range map[string]string{
			"route":     bounded(brokerRouteSet, s),
			"kind":      bounded(brokerKinds, s),
			"code":      bounded(brokerCodes, s),
			"proxy":     bounded(proxyRoutes, s),
			"status":    statusCode(status),
			"class":     statusClass(status),
			"close":     closeCode(close),
			"step":      bounded(createStepSet, s),
			"failstep":  bounded(createFailSteps, s),
			"container": bounded(containerSteps, s),
			"action":    bounded(containerActionSet, s),
		} {
			if !ok[label][v] {
				t.Errorf("%s label of (%q, %d, %d) = %q, outside its set", label, s, status, close, v)
			}
		}
	})
}
