package main

// The paced starter and its connections, tlsgen's (core.ConnTally.Loop: one
// goroutine starts connection i when it is due, start + i/rate, and never
// waits for one; each connection a goroutine of its own under one deadline),
// with two things more: connection i comes from source address i % n (bound
// before connect, IP_FREEBIND and IP_BIND_ADDRESS_NO_PORT: the addresses need
// not be on an interface, an AnyIP route makes them local; the source port is
// picked at connect, so each address has the whole port range), and a mode -
// `hold` keeps each connection open idle for -hold seconds (a connection
// count flood), `tls` makes one TLS handshake and one request and reads the
// answer to EOF (seed 001's flood, from many addresses).

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"homelab-edge/loadgen/core"
)

// Linux socket options (ip(7)), at SOL_IP for IPv6 sockets too.
const (
	ipFreebind          = 15
	ipBindAddressNoPort = 24
)

// Config is one run's plan.
type Config struct {
	Target    net.IP
	Port      int
	Sources   []net.IP
	PerSource int
	Rate      float64
	Mode      string // hold or tls
	HoldS     float64
	Timeout   float64 // connect (hold) or the whole connection (tls)
	SNI, Path string
	MaxOpen   int
	FIFO      int // SCHED_FIFO priority (0: as started)
}

// Seconds is the planned starting time.
func (c Config) Seconds() float64 { return float64(c.Planned()) / c.Rate }

// Planned is every source's connections.
func (c Config) Planned() int { return len(c.Sources) * c.PerSource }

// Deadline is how long one connection may take from its start.
func (c Config) Deadline() float64 {
	if c.Mode == "hold" {
		return c.Timeout + c.HoldS
	}
	return c.Timeout
}

// Stages, and the kinds each counts (any other is "other").
const (
	stageConnect = core.StageConnect + iota
	stageHandshake
	stageResponse
	stageHold
	nStages
)

var stageNames = [nStages]string{"connect", "handshake", "response", "hold"}

var stageKinds = [nStages][]string{
	{"refused", "timeout", "other"},
	{"reset", "timeout", "eof", "other"},
	{"reset", "timeout", "eof", "other"},
	{"reset", "eof", "other"}, // the other side closed it before the hold ended
}

func kindOf(stage int, err error) string { return core.KindOf(stageKinds[stage], err) }

// freebind lets a socket bind to a source address not (yet) on an interface,
// without reserving a port for it.
func freebind(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, ipFreebind, 1); serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, ipBindAddressNoPort, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Run holds what every connection did: the connection generators' tally and
// what only this one counts (under the tally's Mu).
type Run struct {
	core.ConnTally
	cfg     Config
	addr    string
	request []byte
	tlsConf *tls.Config
	limit   int64 // ns: each connection's deadline after its start

	connectNs         []int64
	handshake, answer []int64
	connected, shakes int
	completed, held   int
	sourceStarted     []bool // a connection of this source was started (its bind worked)
	sourceConnected   []bool
}

func newRun(cfg Config) *Run {
	r := &Run{cfg: cfg, addr: net.JoinHostPort(cfg.Target.String(), strconv.Itoa(cfg.Port)),
		request: []byte("GET " + cfg.Path + " HTTP/1.1\r\nHost: " + cfg.SNI + "\r\nConnection: close\r\n\r\n"),
		// no session cache: every connection is a full handshake, as a flood of new clients makes
		tlsConf:       &tls.Config{ServerName: cfg.SNI, InsecureSkipVerify: true},
		limit:         int64(cfg.Deadline() * 1e9),
		sourceStarted: make([]bool, len(cfg.Sources)), sourceConnected: make([]bool, len(cfg.Sources))}
	r.Init(cfg.Planned(), core.SecondsIn(exitLimitNs(cfg.Seconds(), cfg.Deadline()))+1, stageNames[:], stageKinds[:],
		MaxOtherText)
	return r
}

// loop runs the plan (core.ConnTally.Loop): connection i from source i % n.
func (r *Run) loop() {
	r.Loop(r.cfg.Planned(), r.cfg.Rate, r.cfg.Seconds(), r.cfg.Deadline(), r.cfg.MaxOpen,
		func(i int, t0 int64) { r.conn(i%len(r.cfg.Sources), t0) })
}

// conn is one connection from source `src`, started at t0 (ns after the start).
func (r *Run) conn(src int, t0 int64) {
	defer r.WG.Done()
	defer r.Ended()
	deadline := r.Start.Add(time.Duration(t0 + r.limit))
	connectBy := deadline
	if r.cfg.Mode == "hold" {
		connectBy = r.Start.Add(time.Duration(t0 + int64(r.cfg.Timeout*1e9)))
	}
	d := net.Dialer{Deadline: connectBy, LocalAddr: &net.TCPAddr{IP: r.cfg.Sources[src]}, Control: freebind}
	c0 := r.Now()
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		r.fail(stageConnect, err)
		if core.LocalErrno(err) == "" {
			r.Event(-1, func() { r.sourceStarted[src] = true })
		}
		return
	}
	defer c.Close()
	took := r.Now() - c0
	r.Event(sConnected, func() {
		r.connected++
		r.connectNs = append(r.connectNs, took)
		r.sourceStarted[src], r.sourceConnected[src] = true, true
	})
	if r.cfg.Mode == "hold" {
		c.SetDeadline(time.Now().Add(time.Duration(r.cfg.HoldS * 1e9))) // before `deadline`: connected by timeout
		r.hold(c)
		return
	}
	c.SetDeadline(deadline)
	tc := tls.Client(c, r.tlsConf)
	h0 := r.Now()
	if err := tc.Handshake(); err != nil {
		r.fail(stageHandshake, err)
		return
	}
	h := r.Now() - h0
	r.Event(-1, func() { r.shakes++; r.handshake = append(r.handshake, h) })
	if _, err := tc.Write(r.request); err != nil {
		r.fail(stageResponse, err)
		return
	}
	br := bufio.NewReaderSize(tc, 1024)
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

// hold keeps an idle connection until its deadline; the other side closing
// it first (EOF, reset) is counted as a hold failure.
func (r *Run) hold(c net.Conn) {
	buf := make([]byte, 1)
	_, err := c.Read(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.Event(-1, func() { r.held++ })
		return
	}
	if err == nil {
		err = errors.New("the other side sent data on an idle connection")
	}
	r.fail(stageHold, err)
}

// fail counts a failure at `stage`: a refusal at connect in the refused
// series (a firewall's answer), every other in the failed one.
func (r *Run) fail(stage int, err error) {
	k := kindOf(stage, err)
	series := sFailed
	if stage == stageConnect && k == "refused" {
		series = sRefused
	}
	r.Fail(stage, series, k, err)
}
