package core

// The pure parts: percentiles, spreads and the texts the validity rules
// write. No system calls here, so each is tested on its own (core_test.go).

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Percentile of sorted values, by the index rule of the whole harness
// (sorted[min(n-1, int(q*n))]), as probes.dns_load has it, so every
// generator's figures compare.
func Percentile(sorted []int64, q float64) (int64, bool) {
	n := len(sorted)
	if n == 0 {
		return 0, false
	}
	i := int(q * float64(n))
	if i > n-1 {
		i = n - 1
	}
	return sorted[i], true
}

// Spread is p50, p99 and max of a set of durations, in seconds (nil: no values).
type Spread struct {
	P50 *float64
	P99 *float64
	Max *float64
}

// SpreadOf sorts ns (durations in ns) and gives their spread.
func SpreadOf(ns []int64) Spread {
	sort.Slice(ns, func(a, b int) bool { return ns[a] < ns[b] })
	pick := func(q float64) *float64 {
		v, ok := Percentile(ns, q)
		if !ok {
			return nil
		}
		s := math.Round(float64(v)/1e3) / 1e6 // to the microsecond
		return &s
	}
	return Spread{pick(0.50), pick(0.99), pick(1.0)}
}

// Lateness is the spread as the record's lateness keys.
func (s Spread) Lateness() Lateness {
	return Lateness{LatenessP50S: s.P50, LatenessP99S: s.P99, LatenessMaxS: s.Max}
}

// FmtPtr is a figure as the validity texts write it ("none": no figure).
func FmtPtr(p *float64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

// FmtInt is a counter's delta as the validity texts write it.
func FmtInt(p *int64) string {
	if p == nil {
		return "unknown (not read)"
	}
	return strconv.FormatInt(*p, 10)
}

// CountsText is "NAME n, NAME n" in name order.
func CountsText(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ParseSnmp reads one protocol's counters ("Udp") from /proc/net/snmp's text:
// a line of names, then a line of values, both starting with "Udp:".
func ParseSnmp(text, proto string) (map[string]int64, error) {
	var rows [][]string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == proto+":" {
			rows = append(rows, f[1:])
		}
	}
	if len(rows) != 2 || len(rows[0]) != len(rows[1]) {
		return nil, fmt.Errorf("no %s names and values in /proc/net/snmp", proto)
	}
	out := make(map[string]int64, len(rows[0]))
	for i, name := range rows[0] {
		v, err := strconv.ParseInt(rows[1][i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", proto, name, err)
		}
		out[name] = v
	}
	return out, nil
}

// ParseConntrackColumn sums one column of /proc/net/stat/nf_conntrack's text:
// a header of names, then one row per CPU in hexadecimal.
func ParseConntrackColumn(text, column string) (int64, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("no rows in nf_conntrack stat")
	}
	col := -1
	for i, name := range strings.Fields(lines[0]) {
		if name == column {
			col = i
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("no %s column in nf_conntrack stat", column)
	}
	var sum int64
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) <= col {
			return 0, fmt.Errorf("short nf_conntrack stat row: %q", line)
		}
		v, err := strconv.ParseInt(f[col], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %v", column, err)
		}
		sum += v
	}
	return sum, nil
}
