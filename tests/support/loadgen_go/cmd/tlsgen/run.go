package main

// The paced starter and its connections (core.ConnTally's Loop: one
// goroutine starts connection i when it is due, start + i/rate, and never
// waits for one); each connection runs in a goroutine of its own (dial, TLS
// handshake, one request, the response to EOF) under one deadline, `timeout`
// after its start. A slow or dead target holds connections open, never the
// schedule: the only brake is -max-open, and a connection due while that many
// are open is skipped and counted (the run is then invalid: the generator was
// the bottleneck).
//
// Every count is kept under one mutex (the tally's Mu): the output is one
// consistent snapshot even when some connection outlived its deadline (then
// it is unfinished, and what it does after the snapshot is not counted).

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strconv"
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

// Run holds what every connection did: the connection generators' tally and
// what only this one counts (under the tally's Mu).
type Run struct {
	core.ConnTally
	cfg     Config
	addr    string
	request []byte
	tlsConf *tls.Config
	timeout int64 // ns

	handshake, answer []int64
	connected, shakes int
	completed         int
}

func newRun(cfg Config) *Run {
	planned := core.PlannedCount(cfg.Rate, cfg.Seconds)
	r := &Run{cfg: cfg, addr: net.JoinHostPort(cfg.Target.String(), strconv.Itoa(cfg.Port)),
		request: []byte("GET " + cfg.Path + " HTTP/1.1\r\nHost: " + cfg.SNI + "\r\nConnection: close\r\n\r\n"),
		// No session cache: every connection is a full handshake, as a
		// flood of new clients makes. The lab's certificates are its own:
		// nothing to verify them by.
		tlsConf: &tls.Config{ServerName: cfg.SNI, InsecureSkipVerify: true},
		timeout: int64(cfg.Timeout * 1e9), handshake: make([]int64, 0, planned), answer: make([]int64, 0, planned)}
	r.Init(planned, core.SecondsIn(exitLimitNs(cfg.Seconds, cfg.Timeout))+1, stageNames[:], stageKinds[:],
		MaxOtherErrors)
	return r
}

// loop runs the plan (core.ConnTally.Loop).
func (r *Run) loop() {
	r.Loop(core.PlannedCount(r.cfg.Rate, r.cfg.Seconds), r.cfg.Rate, r.cfg.Seconds, r.cfg.Timeout, r.cfg.MaxOpen,
		func(_ int, t0 int64) { r.conn(t0) })
}

// conn is one connection, started at t0 (ns after the start).
func (r *Run) conn(t0 int64) {
	defer r.WG.Done()
	deadline := r.Start.Add(time.Duration(t0 + r.timeout))
	defer r.Ended()
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		r.fail(stageConnect, err)
		return
	}
	defer c.Close()
	r.Event(sConnected, func() { r.connected++ })
	c.SetDeadline(deadline)
	tc := tls.Client(c, r.tlsConf)
	h0 := r.Now()
	if err := tc.Handshake(); err != nil {
		r.fail(stageHandshake, err)
		return
	}
	h := r.Now() - h0
	r.Event(sHandshakes, func() { r.shakes++; r.handshake = append(r.handshake, h) })
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
		r.FailText(stageResponse, "other", "no HTTP/1.x status line: "+strconv.Quote(string(line[:min(len(line), 60)])))
		return
	}
	r.Answered(code)
	if _, err := io.Copy(io.Discard, br); err != nil {
		r.fail(stageResponse, err)
		return
	}
	a := r.Now() - t0
	r.Event(-1, func() { r.completed++; r.answer = append(r.answer, a) })
}

// fail counts a failure at `stage` (every one in the failed series).
func (r *Run) fail(stage int, err error) { r.Fail(stage, sFailed, kindOf(stage, err), err) }
