package main

// The paced sender and its replies, on one thread: sockets of a pool opened
// before the clock starts, non-blocking sends, and one epoll set that
// collects the answers.
//
// Each query goes out with its own sendto(2) on its own socket. sendmmsg(2)
// would batch several datagrams into one system call, but only on one socket,
// so all of a batch would share one source port: one 5-tuple, one nginx
// session, which is the very thing this generator must not do (recvmmsg(2)
// likewise reads one socket, and each socket here holds one reply at most).
// A query is one system call; the pool keeps everything else (socket, bind,
// epoll_ctl) out of the timed loop.
//
// What a query costs the generator is mostly its wake-ups: on this kind of
// machine (a virtual machine) one sleep and wake costs 20-28 us of the
// sleeper's CPU (measured, issue 65), more than the sendto and the read
// together. So the loop wakes only to send: while sending it sleeps with
// nanosleep(2), not on the epoll set, and a reply waits in its socket, stamped
// by the kernel on arrival (SO_TIMESTAMPNS), until the next wake reads it
// (an epoll_pwait2 that does not sleep). Each answer's latency is its
// kernel arrival time, so reading it later changes no figure. -tick sets the
// least time between wake-ups while sending: queries that fall due within it
// go out together at its end, late by up to the tick (their lateness says
// so). After the last send, the loop waits on the epoll set for the replies
// still out, as it always did.

import (
	"math"
	"syscall"
	"time"
	"unsafe"

	"homelab-edge/loadgen/core"
)

// epoll_pwait2(2) (Linux 5.11) sleeps to the nanosecond; epoll_wait(2) only
// to the millisecond, which alone would be the 1 ms lateness the validity
// rule allows. Its number is 441 on every architecture (the unified table),
// and Go's syscall package does not name it.
const sysEpollPwait2 = 441

// Query states.
const (
	qNotSent uint8 = iota
	qInFlight
	qAnswered
	qWrong // a reply that is not an answer (an error code, no record)
	qTimedOut
	qSendError
)

// ring is a FIFO of free sockets: the socket freed longest ago goes out
// first, so a source port comes back as late as the pool allows: after
// pool/rate seconds at least (4,096 at 40,000 q/s: 0.1 s). A socket is free
// once its query was answered or timed out; a proxy's session for that port
// may outlive the timeout (nginx's proxy_timeout), and its next query then
// joins that session: a larger -pool or -timeout keeps that from happening.
type ring struct {
	buf     []int32
	head, n int
}

func newRing(size int) *ring { return &ring{buf: make([]int32, size)} }

func (r *ring) push(v int32) {
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

func (r *ring) pop() (int32, bool) {
	if r.n == 0 {
		return -1, false
	}
	v := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v, true
}

// Config is one run's plan.
type Config struct {
	Target  [4]byte
	Ports   []int
	Rate    float64
	Seconds float64
	Timeout float64
	Pool    int
	Name    string
	FIFO    int     // SCHED_FIFO priority for the sender; 0: as started
	Tick    float64 // the least time between wake-ups while sending (s); 0: each query when due
}

// Run holds the pool and what every query did. Per query it keeps ~30 bytes
// (a 40,000 q/s run of 10 s: 12 MB), allocated before the clock starts.
type Run struct {
	cfg    Config
	fds    []int
	onSock []int32  // the query in flight on each socket; -1: free
	ids    []uint16 // the ID of each socket's latest query (see nextID)
	free   *ring
	epfd   int
	addrs  []syscall.SockaddrInet4
	pkt    []byte

	sendAt   []int64 // ns after the start, read before the send
	sockOf   []int32
	state    []uint8
	lateness []int64
	latency  []int64

	inFlight, answered, wrong, stale, stray, sendErrors int
	errnos                                              map[string]int
	stoppedAtBound                                      bool
	lastSendNs, endNs                                   int64
	waitCall                                            string

	wakes, kernelStamped, lateReplies int
	offsetNs                          int64 // the run's clock minus CLOCK_REALTIME, read at every wake
	buf, oob                          []byte
	iov                               syscall.Iovec
	msg                               syscall.Msghdr
}

// newRun allocates a run's bookkeeping: everything but the sockets.
func newRun(cfg Config) *Run {
	planned := core.PlannedCount(cfg.Rate, cfg.Seconds)
	r := &Run{cfg: cfg, free: newRing(cfg.Pool), pkt: queryPacket(cfg.Name), errnos: map[string]int{},
		sendAt: make([]int64, planned), sockOf: make([]int32, planned), state: make([]uint8, planned),
		lateness: make([]int64, 0, planned), latency: make([]int64, 0, planned), waitCall: "epoll_pwait2",
		onSock: make([]int32, 0, cfg.Pool), ids: make([]uint16, 0, cfg.Pool),
		buf: make([]byte, 1500), oob: make([]byte, 64)}
	r.msg.Iov, r.msg.Iovlen = &r.iov, 1
	for _, p := range cfg.Ports {
		r.addrs = append(r.addrs, syscall.SockaddrInet4{Port: p, Addr: cfg.Target})
	}
	return r
}

// addSocket puts socket fd in the pool, free.
func (r *Run) addSocket(fd int) {
	r.fds = append(r.fds, fd)
	r.onSock = append(r.onSock, -1)
	r.ids = append(r.ids, 0)
	r.free.push(int32(len(r.fds) - 1))
}

// openPool opens and binds every socket and registers it with epoll, before
// the clock starts: each its own ephemeral source port.
func openPool(cfg Config) (*Run, error) {
	r := newRun(cfg)
	var err error
	if r.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Pool; i++ {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		if err = syscall.Bind(fd, &syscall.SockaddrInet4{}); err != nil { // port 0: the kernel picks one
			return nil, err
		}
		// each datagram stamped on arrival: a reply read at the next wake keeps its own time
		if err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1); err != nil {
			return nil, err
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)} // Fd carries the pool index
		if err = syscall.EpollCtl(r.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return nil, err
		}
		r.addSocket(fd)
	}
	return r, nil
}

// loop runs the plan: sends each query when due (or at the end of the tick
// it falls in) until all are sent or the hard bound, then waits for the
// replies still out, `timeout` at most each. Nothing in it blocks longer than
// the next due query (or tick) while sending, or the next reply deadline
// after.
func (r *Run) loop() {
	planned := len(r.state)
	start := time.Now()
	now := func() int64 {
		tn := time.Now()
		t := int64(tn.Sub(start))
		r.offsetNs = t - tn.UnixNano()
		return t
	}
	limit := core.StopNs(r.cfg.Seconds)
	timeout := int64(r.cfg.Timeout * 1e9)
	tick := int64(r.cfg.Tick * 1e9)
	next, oldest := 0, 0
	sending := planned > 0
	events := make([]syscall.EpollEvent, 512)
	for {
		r.wakes++
		woke := now()
		for sending { // every query that is due, the clock read before each (a catch-up burst too)
			t := now()
			if t >= limit {
				sending, r.stoppedAtBound = false, true
				break
			}
			due := core.DueNs(next, r.cfg.Rate)
			if due > t {
				break
			}
			r.send(next, t, due)
			next++
			sending = next < planned
		}
		r.harvest(events)
		t := now()
		oldest = r.expire(oldest, next, t, timeout)
		if (!sending && r.inFlight == 0) || t >= limit+timeout {
			break
		}
		if sending { // replies wait in their sockets, stamped by the kernel: only a due query wakes the sender
			wake := max(min(core.DueNs(next, r.cfg.Rate), limit), woke+tick)
			sleepNs(wake - t)
			continue
		}
		wait := int64(100e6)
		if oldest < next { // the oldest query still out: its deadline
			wait = min(wait, r.sendAt[oldest]+timeout-t)
		}
		n := r.wait(events, max(wait, 0))
		for _, ev := range events[:n] {
			r.receive(ev.Fd, now)
		}
	}
	r.endNs = now()
	r.expire(oldest, next, math.MaxInt64-timeout, timeout) // out at the hard bound: unanswered, at the timeout
}

// sleepNs sleeps ns (nanosleep(2), raw: the Go scheduler stays out, as in
// wait); a signal ends it early and the loop reads the clock again.
func sleepNs(ns int64) {
	if ns <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(ns)
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// harvest reads every reply that came since the last wake, without sleeping.
func (r *Run) harvest(events []syscall.EpollEvent) {
	for {
		n := r.wait(events, 0)
		for _, ev := range events[:n] {
			r.receive(ev.Fd, nil)
		}
		if n < len(events) {
			return
		}
	}
}

// send sends query q (due at `due`, the clock read `t`) from the free socket
// freed longest ago. No free socket is a send error, never a wait: waiting
// would move the query off its schedule and hide that the pool ran dry.
func (r *Run) send(q int, t, due int64) {
	r.lateness = append(r.lateness, t-due)
	r.lastSendNs = t
	k, ok := r.free.pop()
	if !ok {
		r.sendError(q, "pool_exhausted")
		return
	}
	setID(r.pkt, r.nextID(k))
	if err := syscall.Sendto(r.fds[k], r.pkt, 0, &r.addrs[q%len(r.addrs)]); err != nil {
		r.free.push(k)
		r.sendError(q, errnoName(err))
		return
	}
	r.sent(q, k, t)
}

// nextID is the ID of the next query from pool socket k: one more than its
// last one. A source port is used again once its query was answered or timed
// out, and a late reply to that earlier query may still come; with IDs per
// socket, that reply carries another ID than the query now in flight (unless
// 65,536 queries went out from that socket in between), so it cannot pass
// for its answer. (An ID from the query's number would repeat on a socket
// whenever two of its queries' numbers differ by a multiple of 65,536.)
func (r *Run) nextID(k int32) uint16 {
	r.ids[k]++
	return r.ids[k]
}

// sent records query q in flight on socket k since t.
func (r *Run) sent(q int, k int32, t int64) {
	r.sendAt[q], r.sockOf[q], r.onSock[k], r.state[q] = t, k, int32(q), qInFlight
	r.inFlight++
}

func (r *Run) sendError(q int, why string) {
	r.state[q] = qSendError
	r.unanswered(q, r.lastSendNs)
	r.sendErrors++
	r.errnos[why]++
}

// receive reads one datagram from pool socket k: one read per event, as the
// epoll set is level-triggered (a second datagram waiting makes the next wait
// return at once) and reading on to EAGAIN would cost a second system call
// per answer. The reply's time is the kernel's arrival stamp; `now` (or the
// last wake's clock, when nil) only where a datagram carries none. False:
// nothing was there.
func (r *Run) receive(k int32, now func() int64) bool {
	n, stamp, ok := r.recv(k)
	if !ok {
		return false
	}
	t := stamp
	if t < 0 {
		if now != nil {
			t = now()
		} else {
			t = r.lastSendNs
		}
	} else {
		r.kernelStamped++
	}
	r.reply(k, r.buf[:n], t)
	return true
}

// recv is one recvmsg(2) on pool socket k, not waiting: the datagram's length
// and its arrival in the run's clock (-1: no stamp came with it).
func (r *Run) recv(k int32) (int, int64, bool) {
	if r.fds[k] < 0 {
		return 0, -1, false
	}
	r.iov.Base = &r.buf[0]
	r.iov.SetLen(len(r.buf))
	r.msg.Control = &r.oob[0]
	r.msg.SetControllen(len(r.oob))
	n, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(r.fds[k]), uintptr(unsafe.Pointer(&r.msg)),
		syscall.MSG_DONTWAIT)
	if e != 0 {
		return 0, -1, false
	}
	return int(n), r.stamp(), true
}

// stamp is the SCM_TIMESTAMPNS of the last recvmsg, in the run's clock (-1: none).
func (r *Run) stamp() int64 {
	if int(r.msg.Controllen) < syscall.CmsgSpace(int(unsafe.Sizeof(syscall.Timespec{}))) {
		return -1
	}
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&r.oob[0]))
	if h.Level != syscall.SOL_SOCKET || h.Type != syscall.SCM_TIMESTAMPNS {
		return -1
	}
	ts := (*syscall.Timespec)(unsafe.Pointer(&r.oob[syscall.CmsgLen(0)]))
	return ts.Nano() + r.offsetNs
}

// reply takes a datagram that came on pool socket k at t. Only a reply with
// the ID of the socket's query in flight is that query's (an answer, or a
// wrong reply); any other is stale (the reply to a query that already timed
// out on it) and frees nothing. A stale reply while another query is in
// flight on the socket is stray as well: a reply to an earlier query from
// the same source port, which must not count as the new query's answer.
//
// A reply read late (at the wake after it came) is judged by its arrival: one
// that came after its query's deadline is no answer, the query timed out.
func (r *Run) reply(k int32, reply []byte, t int64) {
	q := r.onSock[k]
	id, ok := replyID(reply)
	if q < 0 || !ok || id != r.ids[k] {
		r.stale++
		if q >= 0 {
			r.stray++
		}
		return
	}
	if t > r.sendAt[q]+int64(r.cfg.Timeout*1e9) {
		r.stale++
		r.lateReplies++
		r.state[q] = qTimedOut
		r.unanswered(int(q), r.sendAt[q])
		r.release(k)
		return
	}
	if answered(reply, id) {
		r.state[q] = qAnswered
		r.answered++
		r.latency = append(r.latency, t-core.DueNs(int(q), r.cfg.Rate))
	} else {
		r.state[q] = qWrong
		r.wrong++
		r.unanswered(int(q), r.sendAt[q])
	}
	r.release(k)
}

// unanswered records a query that got no answer (timed out, a reply that is
// none, never sent) at its timeout: its latency, from its scheduled time, is
// when it was given up. Latency is from the schedule, not from the send, so a
// sender that fell behind cannot hide the wait (coordinated omission), and
// the queries the target left unanswered weigh in the percentiles rather than
// drop out of them.
func (r *Run) unanswered(q int, sentNs int64) {
	r.latency = append(r.latency, sentNs+int64(r.cfg.Timeout*1e9)-core.DueNs(q, r.cfg.Rate))
}

func (r *Run) release(k int32) {
	r.onSock[k] = -1
	r.free.push(k)
	r.inFlight--
}

// expire times out the queries in flight whose deadline has passed, oldest
// first (deadlines are in send order), and returns the first still out.
func (r *Run) expire(oldest, next int, t, timeout int64) int {
	for ; oldest < next; oldest++ {
		if r.state[oldest] != qInFlight {
			continue
		}
		if r.sendAt[oldest]+timeout > t {
			break
		}
		// its reply may wait in the socket, unread since the last wake: read
		// it first (judged by its arrival), a few datagrams at most
		k := r.sockOf[oldest]
		for i := 0; i < 4 && r.state[oldest] == qInFlight && r.receive(k, nil); i++ {
		}
		if r.state[oldest] != qInFlight {
			continue
		}
		r.state[oldest] = qTimedOut
		r.unanswered(oldest, r.sendAt[oldest])
		r.release(r.sockOf[oldest])
	}
	return oldest
}

// wait sleeps until a reply comes or waitNs has passed; the number of events.
func (r *Run) wait(events []syscall.EpollEvent, waitNs int64) int {
	if r.waitCall == "epoll_pwait2" {
		// A raw call keeps the Go scheduler out: it does not hand this
		// thread's P to another thread while it sleeps, so the sender never
		// waits for one when it wakes. Go's preemption signal every 10 ms
		// only ends a sleep early (EINTR).
		ts := syscall.NsecToTimespec(waitNs)
		n, _, e := syscall.RawSyscall6(sysEpollPwait2, uintptr(r.epfd), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if e == 0 {
			return int(n)
		}
		if e != syscall.ENOSYS {
			return 0 // EINTR: the loop reads the clock again
		}
		r.waitCall = "epoll_wait" // an older kernel: millisecond sleeps, and lateness will show it
	}
	n, err := syscall.EpollWait(r.epfd, events, int((waitNs+999999)/1000000))
	if err != nil {
		return 0
	}
	return n
}

// errnoNames are the send errors' symbolic names, as the kernel's headers
// spell them, for the counts in the output (made once: a run whose every send
// fails must not allocate per send).
var errnoNames = map[syscall.Errno]string{syscall.EAGAIN: "EAGAIN", syscall.ENOBUFS: "ENOBUFS",
	syscall.EINVAL: "EINVAL", syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENETUNREACH: "ENETUNREACH",
	syscall.EHOSTUNREACH: "EHOSTUNREACH", syscall.ECONNREFUSED: "ECONNREFUSED", syscall.EMSGSIZE: "EMSGSIZE",
	syscall.ENOMEM: "ENOMEM", syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL"}

func errnoName(err error) string {
	if e, ok := err.(syscall.Errno); ok {
		if name, ok := errnoNames[e]; ok {
			return name
		}
	}
	return err.Error()
}
