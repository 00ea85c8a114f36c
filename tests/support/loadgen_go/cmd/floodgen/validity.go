package main

// The pure parts of the many-source flood generator: its sources, bounds,
// the per-second timeline and the validity rule. No system calls here, so
// each is tested on its own (floodgen_test.go).

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"homelab-edge/loadgen/core"
)

// Bounds on a run (a flood from the lab's own namespaces, never more).
const (
	MaxSources   = 4096  // distinct source addresses
	MaxPlanned   = 60000 // connections in one run
	MaxHoldS     = 120.0 // seconds one connection may stay open
	WaitSlackS   = 1.0   // the wait for the last connections gives up this long after their deadline
	ExitSlackS   = 2.0   // the process is gone this long after that
	MaxOtherText = 10    // distinct texts of failures classed other that the output keeps
)

// What a valid run needs: the numbers of tests/support/floodgen.py (the
// judge; it takes them from tlsgen.py, the TLS generator's, which this one
// shares them with: a start late by 10 ms at p99 is a generator falling
// behind, and over 70 % of its cores it timed its own CPU).
const (
	MaxP99LatenessS = 0.010
	MaxCPUShare     = 0.70
)

// Sources are the addresses the connections come from: `n` consecutive ones
// from `base` (loopback or private only, one family). Connection i comes from
// Sources[i % n], so each gets the same share.
func Sources(base string, n int) ([]net.IP, error) {
	ip := net.ParseIP(base)
	if ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
		return nil, fmt.Errorf("-source-base %q: a loopback or private address only", base)
	}
	if n < 1 || n > MaxSources {
		return nil, fmt.Errorf("-sources %d: 1 to %d", n, MaxSources)
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	out := make([]net.IP, 0, n)
	cur := append(net.IP(nil), ip...)
	for i := 0; i < n; i++ {
		if !(cur.IsLoopback() || cur.IsPrivate()) {
			return nil, fmt.Errorf("-sources %d from %s runs out of the private range at %s", n, base, cur)
		}
		out = append(out, append(net.IP(nil), cur...))
		for j := len(cur) - 1; j >= 0; j-- { // the next address
			cur[j]++
			if cur[j] != 0 {
				break
			}
		}
	}
	return out, nil
}

// waitLimitNs is when the wait for connections still open gives up (they are
// then unfinished): every one is past its deadline by WaitSlackS.
func waitLimitNs(seconds, deadline float64) int64 {
	return core.StopNs(seconds) + int64((deadline+WaitSlackS)*1e9)
}

// exitLimitNs is when the process is gone whatever happens.
func exitLimitNs(seconds, deadline float64) int64 {
	return int64((seconds*core.Overrun + deadline + ExitSlackS) * 1e9)
}

// The per-second series the run counts; sEnded only for the timeline's open count.
const (
	sStarted = iota
	sConnected
	sRefused
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
	S         int `json:"s"`
	Started   int `json:"started"`
	Connected int `json:"connected"`
	Refused   int `json:"refused"` // reset or refused at connect: a firewall's answer
	OK2xx     int `json:"ok_2xx"`
	R429      int `json:"r429"`
	OtherCode int `json:"other_code"`
	Failed    int `json:"failed"` // every other failure
	Open      int `json:"open"`
}

func timeline(counts [][nSeries]int, n int) []Second {
	n = min(n, len(counts))
	out := make([]Second, 0, n)
	open := 0
	for s := 0; s < n; s++ {
		c := counts[s]
		open += c[sStarted] - c[sEnded]
		out = append(out, Second{S: s, Started: c[sStarted], Connected: c[sConnected], Refused: c[sRefused],
			OK2xx: c[sOK2xx], R429: c[sR429], OtherCode: c[sOtherCode], Failed: c[sFailed], Open: open})
	}
	return out
}

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
	Sources, SourcesUsed                      int
}

// validity says why a run is not a measurement of the target (empty: it is):
// each rule one way the generator could have set the figures - it held
// connections back at its own bound, could not open them (file, port or
// source-address limits), started them late, ran out of CPU, left them open
// past their deadline, stopped at its hard bound, or did not come from every
// source it was asked to.
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
	if v.SourcesUsed != min(v.Sources, v.Started) {
		why = append(why, fmt.Sprintf("connections left from %d of %d source addresses", v.SourcesUsed, v.Sources))
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
