// Package coretest is what the generators' unit tests share (only tests
// import it: it is in no binary, nor in the sources' hash).
package coretest

import (
	"strings"
	"testing"
)

// Rule is one way a run is invalid: a change to a good run's validity inputs,
// and what the one reason it then gives says.
type Rule[V any] struct {
	Change func(*V)
	Says   string
}

// EachRuleAlone checks every rule on its own: a good run with that change
// alone is invalid for exactly one reason, the one the rule says.
func EachRuleAlone[V any](t *testing.T, good func() V, validity func(V) []string, rules map[string]Rule[V]) {
	t.Helper()
	for name, r := range rules {
		v := good()
		r.Change(&v)
		if why := validity(v); len(why) != 1 || !strings.Contains(why[0], r.Says) {
			t.Errorf("%s: %v", name, why)
		}
	}
}

// F is a figure's pointer, as the validity inputs hold the figures that may
// be missing.
func F(v float64) *float64 { return &v }
