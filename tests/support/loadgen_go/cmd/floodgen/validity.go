package main

// The pure parts of the many-source flood generator: its sources, bounds,
// the per-second timeline and the validity rule. No system calls here, so
// each is tested on its own (floodgen_test.go).

import (
	"fmt"
	"net"

	"homelab-edge/loadgen/core"
)

// Bounds on a run (a flood from the lab's own namespaces, never more).
const (
	MaxSources   = 4096  // distinct source addresses
	MaxPlanned   = 60000 // connections in one run
	MaxHoldS     = 120.0 // seconds one connection may stay open
	MaxOtherText = 10    // distinct texts of failures classed other that the output keeps
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
// then unfinished): every one is past its deadline by core.ConnWaitSlackS.
func waitLimitNs(seconds, deadline float64) int64 { return core.ConnWaitLimitNs(seconds, deadline) }

// exitLimitNs is when the process is gone whatever happens.
func exitLimitNs(seconds, deadline float64) int64 { return core.ConnExitLimitNs(seconds, deadline) }

// The per-second series the run counts; sEnded only for the timeline's open count.
const (
	sStarted   = core.SeriesStarted
	sConnected = core.SeriesConnected
	sRefused   = core.SeriesOwn
	sOK2xx     = core.SeriesOK2xx
	sR429      = core.SeriesR429
	sOtherCode = core.SeriesOtherCode
	sFailed    = core.SeriesFailed
	sEnded     = core.SeriesEnded
	nSeries    = core.NSeries
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

// Verdict is what the validity rule looks at: the connection generators'
// (core.ConnVerdict) and the sources.
type Verdict struct {
	core.ConnVerdict
	Sources, SourcesUsed int
}

// validity says why a run is not a measurement of the target (empty: it is):
// each rule one way the generator could have set the figures - the
// connection generators' (core.ConnValidity: it held connections back at its
// own bound, could not open them (file, port or source-address limits),
// started them late, ran out of CPU, left them open past their deadline,
// stopped at its hard bound) and its own: it did not come from every source
// it was asked to.
func validity(v Verdict) []string {
	why := core.ConnValidity(v.ConnVerdict)
	if v.SourcesUsed != min(v.Sources, v.Started) {
		why = append(why, fmt.Sprintf("connections left from %d of %d source addresses", v.SourcesUsed, v.Sources))
	}
	return why
}
