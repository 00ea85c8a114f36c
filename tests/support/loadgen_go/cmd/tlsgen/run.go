package main

// The paced starter and its connections: one goroutine starts connection i
// when it is due (start + i/rate) and never waits for one; each connection
// runs in a goroutine of its own (dial, TLS handshake, one request, the
// response to EOF) under one deadline, `timeout` after its start. A slow or
// dead target holds connections open, never the schedule: the only brake is
// -max-open, and a connection due while that many are open is skipped and
// counted (the run is then invalid: the generator was the bottleneck).
//
// Every count is kept under one mutex: a few thousand events a second are
// nothing to it, and the output is one consistent snapshot even when some
// connection outlived its deadline (then it is unfinished, and what it does
// after the snapshot is not counted).

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"homelab-edge/loadgen/core"
)

// MaxOtherErrors is how many distinct texts of failures classed "other" the
// output keeps (what they were is the first question about them).
const MaxOtherErrors = 10

// Config is one run's plan.
type Config struct {
	Target  net.IP
	Port    int
	SNI     string
	Path    string
	Rate    float64
	Seconds float64
	Timeout float64
	MaxOpen int
}

// Run holds what every connection did.
type Run struct {
	cfg     Config
	addr    string
	request []byte
	tlsConf *tls.Config
	start   time.Time
	timeout int64 // ns
	wg      sync.WaitGroup

	mu                 sync.Mutex
	frozen             bool // the snapshot is taken: nothing more is counted
	lateness           []int64
	handshake, answer  []int64
	open, peakOpen     int
	started, skipped   int
	stoppedAtBound     bool
	lastStartNs, endNs int64
	perSecond          [][nSeries]int
	failures           [nStages]map[string]int
	codes              map[string]int
	localErrno         map[string]int
	otherErrors        map[string]int
	connected, shakes  int
	ok2xx, r429, other int
	completed          int
}

func newRun(cfg Config) *Run {
	planned := core.PlannedCount(cfg.Rate, cfg.Seconds)
	r := &Run{cfg: cfg, addr: net.JoinHostPort(cfg.Target.String(), strconv.Itoa(cfg.Port)),
		request: []byte("GET " + cfg.Path + " HTTP/1.1\r\nHost: " + cfg.SNI + "\r\nConnection: close\r\n\r\n"),
		// No session cache: every connection is a full handshake, as a
		// flood of new clients makes. The lab's certificates are its own:
		// nothing to verify them by.
		tlsConf: &tls.Config{ServerName: cfg.SNI, InsecureSkipVerify: true},
		timeout: int64(cfg.Timeout * 1e9), lateness: make([]int64, 0, planned),
		handshake: make([]int64, 0, planned), answer: make([]int64, 0, planned),
		perSecond: make([][nSeries]int, core.SecondsIn(exitLimitNs(cfg.Seconds, cfg.Timeout))+1),
		codes:     map[string]int{}, localErrno: map[string]int{}, otherErrors: map[string]int{}}
	for s := range r.failures {
		r.failures[s] = map[string]int{}
		for _, k := range stageKinds[s] {
			r.failures[s][k] = 0
		}
	}
	return r
}

func (r *Run) now() int64 { return int64(time.Since(r.start)) }

// tick counts one event of series s at t (ns after the start), under r.mu.
func (r *Run) tick(s int, t int64) {
	i := min(int(t/1e9), len(r.perSecond)-1)
	r.perSecond[max(i, 0)][s]++
}

// loop runs the plan: starts each connection when due until all are started
// or the hard bound, then waits for the open ones (each ends by its deadline)
// until waitLimitNs at most.
func (r *Run) loop() {
	planned := core.PlannedCount(r.cfg.Rate, r.cfg.Seconds)
	r.start = time.Now()
	limit := core.StopNs(r.cfg.Seconds)
	for i := 0; i < planned; i++ {
		due := core.DueNs(i, r.cfg.Rate)
		if wait := due - r.now(); wait > 0 {
			time.Sleep(time.Duration(wait))
		}
		t := r.now()
		if t >= limit {
			r.mu.Lock()
			r.stoppedAtBound = true
			r.mu.Unlock()
			break
		}
		r.mu.Lock()
		r.lateness = append(r.lateness, t-due)
		r.lastStartNs = t
		if r.open >= r.cfg.MaxOpen {
			r.skipped++
			r.mu.Unlock()
			continue
		}
		r.started++
		r.open++
		r.peakOpen = max(r.peakOpen, r.open)
		r.tick(sStarted, t)
		r.mu.Unlock()
		r.wg.Add(1)
		go r.conn(t)
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(waitLimitNs(r.cfg.Seconds, r.cfg.Timeout) - r.now())):
	}
	r.mu.Lock()
	r.frozen = true
	r.endNs = r.now()
	r.mu.Unlock()
}

// conn is one connection, started at t0 (ns after the start).
func (r *Run) conn(t0 int64) {
	defer r.wg.Done()
	deadline := r.start.Add(time.Duration(t0 + r.timeout))
	defer r.ended()
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		r.fail(stageConnect, err)
		return
	}
	defer c.Close()
	r.event(sConnected, func() { r.connected++ })
	c.SetDeadline(deadline)
	tc := tls.Client(c, r.tlsConf)
	h0 := r.now()
	if err := tc.Handshake(); err != nil {
		r.fail(stageHandshake, err)
		return
	}
	h := r.now() - h0
	r.event(sHandshakes, func() { r.shakes++; r.handshake = append(r.handshake, h) })
	if _, err := tc.Write(r.request); err != nil {
		r.fail(stageResponse, err)
		return
	}
	br := bufio.NewReaderSize(tc, 1024) // a status line longer than this is no answer
	line, err := br.ReadSlice('\n')
	if err != nil {
		r.fail(stageResponse, err)
		return
	}
	code, ok := core.StatusCode(string(line))
	if !ok {
		r.failText(stageResponse, "other", "no HTTP/1.x status line: "+strconv.Quote(string(line[:min(len(line), 60)])))
		return
	}
	r.answered(code)
	if _, err := io.Copy(io.Discard, br); err != nil {
		r.fail(stageResponse, err)
		return
	}
	a := r.now() - t0
	r.mu.Lock()
	if !r.frozen {
		r.completed++
		r.answer = append(r.answer, a)
	}
	r.mu.Unlock()
}

// event counts series s now, and runs `also` (more counting) under the lock.
func (r *Run) event(s int, also func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		return
	}
	r.tick(s, r.now())
	also()
}

// answered counts a status line read, by its code.
func (r *Run) answered(code int) {
	series, count := sOtherCode, &r.other
	switch {
	case code/100 == 2:
		series, count = sOK2xx, &r.ok2xx
	case code == 429:
		series, count = sR429, &r.r429
	}
	r.event(series, func() {
		*count++
		r.codes[strconv.Itoa(code)]++
	})
}

func (r *Run) fail(stage int, err error) {
	k := kindOf(stage, err)
	local := ""
	if stage == stageConnect {
		local = core.LocalErrno(err)
	}
	r.event(sFailed, func() {
		r.failures[stage][k]++
		if local != "" {
			r.localErrno[local]++
		}
		r.noteOther(stage, k, core.ErrText(err))
	})
}

func (r *Run) failText(stage int, k, text string) {
	r.event(sFailed, func() {
		r.failures[stage][k]++
		r.noteOther(stage, k, text)
	})
}

// noteOther keeps the text of a failure classed other (the first
// MaxOtherErrors distinct ones), under the lock.
func (r *Run) noteOther(stage int, k, text string) {
	key := stageNames[stage] + ": " + text
	if _, seen := r.otherErrors[key]; k == "other" && (seen || len(r.otherErrors) < MaxOtherErrors) {
		r.otherErrors[key]++
	}
}

func (r *Run) ended() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		return
	}
	r.open--
	r.tick(sEnded, r.now())
}
