package main

// The paced starter and its connections, as tlsgen's (one goroutine starts
// connection i when it is due, start + i/rate, and never waits for one; each
// connection a goroutine of its own under one deadline), with two things
// more: connection i comes from source address i % n (bound before connect,
// IP_FREEBIND and IP_BIND_ADDRESS_NO_PORT: the addresses need not be on an
// interface, an AnyIP route makes them local; the source port is picked at
// connect, so each address has the whole port range), and a mode - `hold`
// keeps each connection open idle for -hold seconds (a connection count
// flood), `tls` makes one TLS handshake and one request and reads the answer
// to EOF (seed 001's flood, from many addresses).

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
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
	stageConnect = iota
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

// Run holds what every connection did (every count under one mutex).
type Run struct {
	cfg     Config
	addr    string
	request []byte
	tlsConf *tls.Config
	start   time.Time
	limit   int64 // ns: each connection's deadline after its start
	wg      sync.WaitGroup

	mu                  sync.Mutex
	frozen              bool
	lateness, connectNs []int64
	handshake, answer   []int64
	open, peakOpen      int
	started, skipped    int
	stoppedAtBound      bool
	lastStartNs, endNs  int64
	perSecond           [][nSeries]int
	failures            [nStages]map[string]int
	codes               map[string]int
	localErrno          map[string]int
	otherErrors         map[string]int
	connected, shakes   int
	ok2xx, r429, other  int
	completed, held     int
	sourceStarted       []bool // a connection of this source was started (its bind worked)
	sourceConnected     []bool
}

func newRun(cfg Config) *Run {
	planned := cfg.Planned()
	r := &Run{cfg: cfg, addr: net.JoinHostPort(cfg.Target.String(), strconv.Itoa(cfg.Port)),
		request: []byte("GET " + cfg.Path + " HTTP/1.1\r\nHost: " + cfg.SNI + "\r\nConnection: close\r\n\r\n"),
		// no session cache: every connection is a full handshake, as a flood of new clients makes
		tlsConf: &tls.Config{ServerName: cfg.SNI, InsecureSkipVerify: true},
		limit:   int64(cfg.Deadline() * 1e9), lateness: make([]int64, 0, planned),
		perSecond: make([][nSeries]int, core.SecondsIn(exitLimitNs(cfg.Seconds(), cfg.Deadline()))+1),
		codes:     map[string]int{}, localErrno: map[string]int{}, otherErrors: map[string]int{},
		sourceStarted: make([]bool, len(cfg.Sources)), sourceConnected: make([]bool, len(cfg.Sources))}
	for s := range r.failures {
		r.failures[s] = map[string]int{}
		for _, k := range stageKinds[s] {
			r.failures[s][k] = 0
		}
	}
	return r
}

func (r *Run) now() int64 { return int64(time.Since(r.start)) }

func (r *Run) tick(s int, t int64) {
	i := min(int(t/1e9), len(r.perSecond)-1)
	r.perSecond[max(i, 0)][s]++
}

// loop starts each connection when due until all are started or the hard
// bound, then waits for the open ones (each ends by its deadline).
func (r *Run) loop() {
	planned := r.cfg.Planned()
	r.start = time.Now()
	limit := core.StopNs(r.cfg.Seconds())
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
		go r.conn(i%len(r.cfg.Sources), t)
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(waitLimitNs(r.cfg.Seconds(), r.cfg.Deadline()) - r.now())):
	}
	r.mu.Lock()
	r.frozen = true
	r.endNs = r.now()
	r.mu.Unlock()
}

// conn is one connection from source `src`, started at t0 (ns after the start).
func (r *Run) conn(src int, t0 int64) {
	defer r.wg.Done()
	defer r.ended()
	deadline := r.start.Add(time.Duration(t0 + r.limit))
	connectBy := deadline
	if r.cfg.Mode == "hold" {
		connectBy = r.start.Add(time.Duration(t0 + int64(r.cfg.Timeout*1e9)))
	}
	d := net.Dialer{Deadline: connectBy, LocalAddr: &net.TCPAddr{IP: r.cfg.Sources[src]}, Control: freebind}
	c0 := r.now()
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		r.fail(stageConnect, err)
		if core.LocalErrno(err) == "" {
			r.event(-1, func() { r.sourceStarted[src] = true })
		}
		return
	}
	defer c.Close()
	took := r.now() - c0
	r.event(sConnected, func() {
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
	h0 := r.now()
	if err := tc.Handshake(); err != nil {
		r.fail(stageHandshake, err)
		return
	}
	h := r.now() - h0
	r.event(-1, func() { r.shakes++; r.handshake = append(r.handshake, h) })
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
		r.failText(stageResponse, "other", "no HTTP/1.x status line: "+strconv.Quote(string(line[:min(len(line), 60)])))
		return
	}
	r.answered(code)
	if _, err := io.Copy(io.Discard, br); err != nil {
		r.fail(stageResponse, err)
		return
	}
	a := r.now() - t0
	r.event(-1, func() { r.completed++; r.answer = append(r.answer, a) })
}

// hold keeps an idle connection until its deadline; the other side closing
// it first (EOF, reset) is counted as a hold failure.
func (r *Run) hold(c net.Conn) {
	buf := make([]byte, 1)
	_, err := c.Read(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.event(-1, func() { r.held++ })
		return
	}
	if err == nil {
		err = errors.New("the other side sent data on an idle connection")
	}
	r.fail(stageHold, err)
}

// event counts series s now (s < 0: no series), and runs `also` under the lock.
func (r *Run) event(s int, also func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		return
	}
	if s >= 0 {
		r.tick(s, r.now())
	}
	also()
}

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
	series := sFailed
	if stage == stageConnect && k == "refused" {
		series = sRefused
	}
	r.event(series, func() {
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

func (r *Run) noteOther(stage int, k, text string) {
	key := stageNames[stage] + ": " + text
	if _, seen := r.otherErrors[key]; k == "other" && (seen || len(r.otherErrors) < MaxOtherText) {
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
