package main

// The pure parts of the TLS generator: the per-second timeline and the
// validity rule (the schedule, percentiles, bounds, status lines and the
// rules it shares with floodgen are core's). No system calls here, so each
// is tested on its own (tlsgen_test.go).

import (
	"homelab-edge/loadgen/core"
)

// waitLimitNs is when the wait for connections still open gives up (they are
// then unfinished): every one is past its deadline (-timeout after its start)
// by core.ConnWaitSlackS.
func waitLimitNs(seconds, timeout float64) int64 { return core.ConnWaitLimitNs(seconds, timeout) }

// exitLimitNs is when the process is gone whatever happens.
func exitLimitNs(seconds, timeout float64) int64 { return core.ConnExitLimitNs(seconds, timeout) }

// The per-second series the run counts; sEnded is only for the timeline's
// open count.
const (
	sStarted    = core.SeriesStarted
	sConnected  = core.SeriesConnected
	sHandshakes = core.SeriesOwn
	sOK2xx      = core.SeriesOK2xx
	sR429       = core.SeriesR429
	sOtherCode  = core.SeriesOtherCode
	sFailed     = core.SeriesFailed
	sEnded      = core.SeriesEnded
	nSeries     = core.NSeries
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

// Verdict is what the validity rule looks at: the connection generators'.
type Verdict = core.ConnVerdict

// validity says why a run is not a measurement of the target (empty: it
// is): the connection generators' rules (core.ConnValidity), every one a way
// the generator, not the target, could have set the figures.
func validity(v Verdict) []string { return core.ConnValidity(v) }
