package core

// What the connection generators (cmd/tlsgen and cmd/floodgen) count, and
// their paced starter: one goroutine starts connection i when it is due
// (start + i/rate) and never waits for one; each connection runs in a
// goroutine of its own under its deadline. A slow or dead target holds
// connections open, never the schedule: the only brake is -max-open, and a
// connection due while that many are open is skipped and counted (the run is
// then invalid: the generator was the bottleneck).
//
// Every count is kept under one mutex: a few thousand events a second are
// nothing to it, and the output is one consistent snapshot even when some
// connection outlived its deadline (then it is unfinished, and what it does
// after the snapshot is not counted).

import (
	"strconv"
	"sync"
	"time"
)

// The per-second series both count, by index (SeriesEnded only for the
// timeline's open count). SeriesOwn is each generator's own: tlsgen's
// handshakes, floodgen's refusals at connect.
const (
	SeriesStarted = iota
	SeriesConnected
	SeriesOwn
	SeriesOK2xx
	SeriesR429
	SeriesOtherCode
	SeriesFailed
	SeriesEnded
	NSeries
)

// StageConnect is the first stage of every connection (its failures may be
// the generator's own: LocalErrno).
const StageConnect = 0

// ConnTally is what every connection of a run did, as both generators count
// it (each keeps what only it counts in its own Run, under the same Mu).
type ConnTally struct {
	Start time.Time
	WG    sync.WaitGroup

	Mu                 sync.Mutex
	Frozen             bool // the snapshot is taken: nothing more is counted
	Lateness           []int64
	Open, PeakOpen     int
	Started, Skipped   int
	StoppedAtBound     bool
	LastStartNs, EndNs int64
	PerSecond          [][NSeries]int
	Failures           []map[string]int // by stage, then kind
	Codes              map[string]int
	LocalErrno         map[string]int
	OtherErrors        map[string]int
	OK2xx, R429, Other int

	stageNames []string
	maxOther   int
}

// Init makes t an empty tally for `planned` connections over `seconds`
// timeline entries, failures by the stages and kinds given (every kind
// counted from 0), keeping the first maxOther distinct texts of "other"
// failures.
func (t *ConnTally) Init(planned, seconds int, stageNames []string, stageKinds [][]string, maxOther int) {
	t.Lateness, t.PerSecond = make([]int64, 0, planned), make([][NSeries]int, seconds)
	t.Codes, t.LocalErrno, t.OtherErrors = map[string]int{}, map[string]int{}, map[string]int{}
	t.Failures, t.stageNames, t.maxOther = make([]map[string]int, len(stageKinds)), stageNames, maxOther
	for s := range t.Failures {
		t.Failures[s] = map[string]int{}
		for _, k := range stageKinds[s] {
			t.Failures[s][k] = 0
		}
	}
}

// Now is the time since the start, in ns.
func (t *ConnTally) Now() int64 { return int64(time.Since(t.Start)) }

// Tick counts one event of series s at ns (after the start), under Mu.
func (t *ConnTally) Tick(s int, ns int64) {
	i := min(int(ns/1e9), len(t.PerSecond)-1)
	t.PerSecond[max(i, 0)][s]++
}

// Loop runs the plan: starts each of `planned` connections when due (conn(i,
// t0) in a goroutine of its own, which calls WG.Done and Ended when it ends)
// until all are started or the hard bound, then waits for the open ones
// (each ends by its deadline) until ConnWaitLimitNs at most.
func (t *ConnTally) Loop(planned int, rate, seconds, deadline float64, maxOpen int, conn func(i int, t0 int64)) {
	t.Start = time.Now()
	limit := StopNs(seconds)
	for i := 0; i < planned; i++ {
		due := DueNs(i, rate)
		if wait := due - t.Now(); wait > 0 {
			time.Sleep(time.Duration(wait))
		}
		now := t.Now()
		if now >= limit {
			t.Mu.Lock()
			t.StoppedAtBound = true
			t.Mu.Unlock()
			break
		}
		t.Mu.Lock()
		t.Lateness = append(t.Lateness, now-due)
		t.LastStartNs = now
		if t.Open >= maxOpen {
			t.Skipped++
			t.Mu.Unlock()
			continue
		}
		t.Started++
		t.Open++
		t.PeakOpen = max(t.PeakOpen, t.Open)
		t.Tick(SeriesStarted, now)
		t.Mu.Unlock()
		t.WG.Add(1)
		go conn(i, now)
	}
	done := make(chan struct{})
	go func() { t.WG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(ConnWaitLimitNs(seconds, deadline) - t.Now())):
	}
	t.Mu.Lock()
	t.Frozen = true
	t.EndNs = t.Now()
	t.Mu.Unlock()
}

// Event counts series s now (s < 0: no series), and runs `also` (more
// counting) under the lock; nothing once the snapshot is taken.
func (t *ConnTally) Event(s int, also func()) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	if t.Frozen {
		return
	}
	if s >= 0 {
		t.Tick(s, t.Now())
	}
	also()
}

// Answered counts a status line read, by its code.
func (t *ConnTally) Answered(code int) {
	series, count := SeriesOtherCode, &t.Other
	switch {
	case code/100 == 2:
		series, count = SeriesOK2xx, &t.OK2xx
	case code == 429:
		series, count = SeriesR429, &t.R429
	}
	t.Event(series, func() {
		*count++
		t.Codes[strconv.Itoa(code)]++
	})
}

// Fail counts a failure at `stage` of kind k in series s; a connect failure
// that is the generator's own is counted by its errno too.
func (t *ConnTally) Fail(stage, s int, k string, err error) {
	local := ""
	if stage == StageConnect {
		local = LocalErrno(err)
	}
	t.Event(s, func() {
		t.Failures[stage][k]++
		if local != "" {
			t.LocalErrno[local]++
		}
		t.noteOther(stage, k, ErrText(err))
	})
}

// FailText counts a failure that is no error (its text given).
func (t *ConnTally) FailText(stage int, k, text string) {
	t.Event(SeriesFailed, func() {
		t.Failures[stage][k]++
		t.noteOther(stage, k, text)
	})
}

// noteOther keeps the text of a failure classed other (the first maxOther
// distinct ones), under the lock.
func (t *ConnTally) noteOther(stage int, k, text string) {
	key := t.stageNames[stage] + ": " + text
	if _, seen := t.OtherErrors[key]; k == "other" && (seen || len(t.OtherErrors) < t.maxOther) {
		t.OtherErrors[key]++
	}
}

// Ended counts a connection's end (it is no longer open).
func (t *ConnTally) Ended() {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	if t.Frozen {
		return
	}
	t.Open--
	t.Tick(SeriesEnded, t.Now())
}
