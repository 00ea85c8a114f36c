package main

// The DNS generator's validity rule (the schedule, percentiles and kernel
// counters are core's). No system calls here, so it is tested on its own
// (dnsgen_test.go).

import (
	"fmt"
	"strings"

	"homelab-edge/loadgen/core"
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
		why = append(why, fmt.Sprintf("99th percentile lateness %s s (not under %g s)", core.FmtPtr(v.LatenessP99S), MaxP99LatenessS))
	}
	switch {
	case v.LatenessMaxS == nil || *v.LatenessMaxS >= MaxLatenessS:
		why = append(why, fmt.Sprintf("worst lateness %s s (not under %g s)", core.FmtPtr(v.LatenessMaxS), MaxLatenessS))
	case *v.LatenessMaxS*v.Rate > MaxBurst:
		why = append(why, fmt.Sprintf("a stall of %s s held back %d queries sent as one burst (over %d)",
			core.FmtPtr(v.LatenessMaxS), int(*v.LatenessMaxS*v.Rate), MaxBurst))
	}
	if v.SendS <= 0 || v.UserS+v.SystemS >= MaxCPUShare*v.SendS {
		why = append(why, fmt.Sprintf("generator CPU %.3f s over %.3f s of sending (not under %d %% of a core)",
			v.UserS+v.SystemS, v.SendS, int(MaxCPUShare*100)))
	}
	if v.SendS > core.Overrun*v.Seconds {
		why = append(why, fmt.Sprintf("sending took %g s for %g s planned", v.SendS, v.Seconds))
	}
	if v.Rate > 0 && v.Sent > 1 && v.SendS < float64(v.Sent-1)/v.Rate-1e-6 {
		why = append(why, fmt.Sprintf("%d queries sent in %g s: faster than %g q/s allows", v.Sent, v.SendS, v.Rate))
	}
	if v.SndbufErrors == nil || *v.SndbufErrors != 0 {
		why = append(why, fmt.Sprintf("UdpSndbufErrors rose by %s", core.FmtInt(v.SndbufErrors)))
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
