package main

// The pure parts of the TLS generator: its bounds, the per-second timeline,
// the validity rule and status lines (the schedule and percentiles are
// core's). No system calls here, so each is tested on its own (tlsgen_test.go).

import (
	"fmt"
	"strconv"
	"strings"

	"homelab-edge/loadgen/core"
)

// Starting stops at core.StopNs (the planned time x core.Overrun +
// core.SlackS, as dnsgen's and probes.dns_load's sending). Every connection
// ends by its own deadline (-timeout after its start); the wait for the last
// ones gives up WaitSlackS after that, and the process is gone by ExitSlackS
// after it.
const (
	WaitSlackS = 1.0
	ExitSlackS = 2.0 // from seconds x core.Overrun + timeout (the brief's bound)
)

// What a valid run needs (tests/support/tlsgen.py holds the same numbers and
// is the judge; this copy lets the binary say it too).
const (
	// Starts run from goroutines and Go's timers (about a millisecond's
	// grain when idle); 10 ms late at p99 is a generator falling behind its
	// schedule, not the grain. A start stays in its second of the timeline.
	MaxP99LatenessS = 0.010
	// Of the cores the generator may run on, over the run: above it the
	// handshakes it times are (partly) waiting for its own CPU.
	MaxCPUShare = 0.70
)

// waitLimitNs is when the wait for connections still open gives up (they are
// then unfinished): every one is past its deadline by WaitSlackS.
func waitLimitNs(seconds, timeout float64) int64 {
	return core.StopNs(seconds) + int64((timeout+WaitSlackS)*1e9)
}

// exitLimitNs is when the process is gone whatever happens.
func exitLimitNs(seconds, timeout float64) int64 {
	return int64((seconds*core.Overrun + timeout + ExitSlackS) * 1e9)
}

// The per-second series the run counts; sEnded is only for the timeline's
// open count.
const (
	sStarted = iota
	sConnected
	sHandshakes
	sOK2xx
	sR429
	sOtherCode
	sFailed
	sEnded
	nSeries
)

// Second is one entry of the timeline: what happened in second S after the
// start, and the connections open at its end.
type Second struct {
	S          int `json:"s"`
	Started    int `json:"started"`
	Connected  int `json:"connected"`
	Handshakes int `json:"handshakes"`
	OK2xx      int `json:"ok_2xx"`
	R429       int `json:"r429"`
	OtherCode  int `json:"other_code"`
	Failed     int `json:"failed"`
	Open       int `json:"open"`
}

// timeline turns per-second counts into entries for seconds 0 .. n-1 (n at
// most len(counts)); open is everything started by the end of a second less
// everything ended by then.
func timeline(counts [][nSeries]int, n int) []Second {
	n = min(n, len(counts))
	out := make([]Second, 0, n)
	open := 0
	for s := 0; s < n; s++ {
		c := counts[s]
		open += c[sStarted] - c[sEnded]
		out = append(out, Second{S: s, Started: c[sStarted], Connected: c[sConnected], Handshakes: c[sHandshakes],
			OK2xx: c[sOK2xx], R429: c[sR429], OtherCode: c[sOtherCode], Failed: c[sFailed], Open: open})
	}
	return out
}

// secondsIn is how many timeline entries a run of endNs covers (its last
// second may be partial); one at least.
func secondsIn(endNs int64) int {
	return max(1, int((endNs+999_999_999)/1e9))
}

// Verdict is what the validity rule looks at.
type Verdict struct {
	Planned, Started, SkippedAtBound, MaxOpen int
	StoppedAtBound                            bool
	LocalErrors                               int
	LocalErrno                                map[string]int
	Unfinished                                int
	LatenessP99S                              *float64
	UserS, SystemS, WallS                     float64
	CPUs                                      int
}

// validity says why a run is not a measurement of the target (empty: it
// is). Every rule is one way the generator, not the target, could have set
// the figures: it held connections back at its own bound, could not open
// them (its file or port limits), started them late, ran out of CPU, left
// them open past their deadline, or stopped starting at its hard bound.
func validity(v Verdict) []string {
	var why []string
	if v.SkippedAtBound > 0 {
		why = append(why, fmt.Sprintf("%d connections skipped at the generator's bound (-max-open %d)",
			v.SkippedAtBound, v.MaxOpen))
	}
	if v.LocalErrors > 0 {
		why = append(why, fmt.Sprintf("%d connections the generator could not open (%s)", v.LocalErrors,
			core.CountsText(v.LocalErrno)))
	}
	if v.LatenessP99S == nil || *v.LatenessP99S >= MaxP99LatenessS {
		why = append(why, fmt.Sprintf("99th percentile lateness %s s (not under %g s)", core.FmtPtr(v.LatenessP99S),
			MaxP99LatenessS))
	}
	if v.WallS <= 0 || v.CPUs < 1 || v.UserS+v.SystemS >= MaxCPUShare*float64(v.CPUs)*v.WallS {
		why = append(why, fmt.Sprintf("generator CPU %.3f s over %.3f s (not under %d %% of %d cores)",
			v.UserS+v.SystemS, v.WallS, int(MaxCPUShare*100), v.CPUs))
	}
	if v.Unfinished > 0 {
		why = append(why, fmt.Sprintf("%d connections still open past their deadline", v.Unfinished))
	}
	if v.StoppedAtBound || v.Started+v.SkippedAtBound != v.Planned {
		why = append(why, fmt.Sprintf("reached %d of %d planned (stopped at the hard bound)",
			v.Started+v.SkippedAtBound, v.Planned))
	}
	return why
}

// statusCode is the code of an HTTP/1.x status line ("HTTP/1.1 200 OK").
func statusCode(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || len(f[1]) != 3 {
		return 0, false
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 {
		return 0, false
	}
	return code, true
}
