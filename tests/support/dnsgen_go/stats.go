package main

// The pure parts of the generator: the schedule, percentiles, the validity
// rule and the kernel counters' text. No system calls here, so each is
// tested on its own (stats_test.go).

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The bound on sending, as tests/support/probes.py's dns_load has it: the
// planned time x SendOverrun + SendSlackS, whatever happens.
const (
	SendOverrun = 1.10
	SendSlackS  = 0.5
)

// What a valid run needs (tests/support/dnsgen.py holds the same numbers and
// is the judge; this copy lets the binary say it too).
const (
	MaxP99LatenessS = 0.001 // a compiled sender that is 1 ms late at p99 is not pacing
	MaxLatenessS    = 0.010 // nor is one that is 10 ms late once
	MaxBurst        = 64    // queries one stall may hold back to send together (worst lateness x rate)
	MaxCPUShare     = 0.70  // of one core over the sending interval: above it, the sender is near its ceiling
	PoolLatencyS    = 0.050 // a target that holds answers within this (the ladder's p99 bound) ...
	PoolMargin      = 4     // ... and a pool this many times what it needs is ample
)

// plannedCount is how many queries `rate` per second for `seconds` plans.
func plannedCount(rate, seconds float64) int {
	return int(math.Round(rate * seconds))
}

// dueNs is when query i is due, in ns after the start: an absolute schedule,
// so a late query never shifts the ones after it.
func dueNs(i int, rate float64) int64 {
	return int64(float64(i) * 1e9 / rate)
}

// sendLimitNs is when sending stops, in ns after the start.
func sendLimitNs(seconds float64) int64 {
	return int64((seconds*SendOverrun + SendSlackS) * 1e9)
}

// percentile of sorted values, by the index rule probes.dns_load uses
// (sorted[min(n-1, int(q*n))]), so the two generators' figures compare.
func percentile(sorted []int64, q float64) (int64, bool) {
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

func spread(ns []int64) Spread {
	sort.Slice(ns, func(a, b int) bool { return ns[a] < ns[b] })
	pick := func(q float64) *float64 {
		v, ok := percentile(ns, q)
		if !ok {
			return nil
		}
		s := math.Round(float64(v)/1e3) / 1e6 // to the microsecond
		return &s
	}
	return Spread{pick(0.50), pick(0.99), pick(1.0)}
}

// Verdict is what the validity rule looks at.
type Verdict struct {
	Planned, Sent, SendErrors, Answered, Unanswered, Pool int
	SendErrno                                             map[string]int
	Rate, Seconds, Timeout, SendS                         float64
	LatenessP99S, LatenessMaxS                            *float64
	UserS, SystemS, WallS                                 float64
	SndbufErrors                                          *int64 // nil: /proc/net/snmp not read
	InsertFailed                                          *int64 // nil: no conntrack here, nothing can fail to insert
	CounterErrors                                         []string
}

// poolDriedByTarget: every send error is a dry pool, the pool was ample for a
// target that holds, and the target's unanswered queries (each holding its
// socket for the timeout) could dry it. The queries that found no socket are
// then the target's failure, not the generator's (tests/support/dnsgen.py's
// pool_dried_by_the_target).
func poolDriedByTarget(v Verdict) bool {
	if v.SendErrors == 0 || len(v.SendErrno) != 1 || v.SendErrno["pool_exhausted"] != v.SendErrors {
		return false
	}
	ample := float64(v.Pool) >= PoolMargin*v.Rate*PoolLatencyS
	return v.Unanswered > 0 && ample && v.Rate*v.Timeout > float64(v.Pool)
}

// validity says why a run is not a measurement of the system under test
// (empty: it is). Every rule is one way the generator, not the target, could
// have set the figures.
func validity(v Verdict) []string {
	var why []string
	if v.SendErrors > 0 && !poolDriedByTarget(v) {
		why = append(why, fmt.Sprintf("%d send errors", v.SendErrors))
	}
	if v.LatenessP99S == nil || *v.LatenessP99S >= MaxP99LatenessS {
		why = append(why, fmt.Sprintf("99th percentile lateness %s s (not under %g s)", fmtPtr(v.LatenessP99S), MaxP99LatenessS))
	}
	switch {
	case v.LatenessMaxS == nil || *v.LatenessMaxS >= MaxLatenessS:
		why = append(why, fmt.Sprintf("worst lateness %s s (not under %g s)", fmtPtr(v.LatenessMaxS), MaxLatenessS))
	case *v.LatenessMaxS*v.Rate > MaxBurst:
		why = append(why, fmt.Sprintf("a stall of %s s held back %d queries sent as one burst (over %d)",
			fmtPtr(v.LatenessMaxS), int(*v.LatenessMaxS*v.Rate), MaxBurst))
	}
	if v.SendS <= 0 || v.UserS+v.SystemS >= MaxCPUShare*v.SendS {
		why = append(why, fmt.Sprintf("generator CPU %.3f s over %.3f s of sending (not under %d %% of a core)",
			v.UserS+v.SystemS, v.SendS, int(MaxCPUShare*100)))
	}
	if v.SendS > SendOverrun*v.Seconds {
		why = append(why, fmt.Sprintf("sending took %g s for %g s planned", v.SendS, v.Seconds))
	}
	if v.Rate > 0 && v.Sent > 1 && v.SendS < float64(v.Sent-1)/v.Rate-1e-6 {
		why = append(why, fmt.Sprintf("%d queries sent in %g s: faster than %g q/s allows", v.Sent, v.SendS, v.Rate))
	}
	if v.SndbufErrors == nil || *v.SndbufErrors != 0 {
		why = append(why, fmt.Sprintf("UdpSndbufErrors rose by %s", fmtInt(v.SndbufErrors)))
	}
	if v.InsertFailed != nil && *v.InsertFailed != 0 {
		why = append(why, fmt.Sprintf("conntrack insert_failed rose by %d", *v.InsertFailed))
	}
	if len(v.CounterErrors) > 0 { // a counter that exists but was not read could hide a drop
		why = append(why, "kernel counters not read: "+strings.Join(v.CounterErrors, "; "))
	}
	if v.Sent != v.Planned {
		why = append(why, fmt.Sprintf("sent %d of %d planned", v.Sent, v.Planned))
	}
	return why
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

func fmtInt(p *int64) string {
	if p == nil {
		return "unknown (not read)"
	}
	return strconv.FormatInt(*p, 10)
}

// parseSnmp reads one protocol's counters ("Udp") from /proc/net/snmp's text:
// a line of names, then a line of values, both starting with "Udp:".
func parseSnmp(text, proto string) (map[string]int64, error) {
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

// parseConntrackColumn sums one column of /proc/net/stat/nf_conntrack's text:
// a header of names, then one row per CPU in hexadecimal.
func parseConntrackColumn(text, column string) (int64, error) {
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
