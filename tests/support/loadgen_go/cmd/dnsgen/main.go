// dnsgen: a compiled DNS load generator that says when it was the bottleneck.
//
//	dnsgen -target HOST -ports P1,P2 -rate R -seconds S -timeout T [-pool N] [-tick S] [-fifo PRIO] [-name QNAME] [-json]
//
// Query i is due at start + i/rate and goes out from a socket of its own (a
// fresh source port: a new nginx session), alternating over the ports. It
// records how late each query went out and how long after its scheduled time
// each answer came (a query not answered counts at its timeout), its
// own CPU time and the kernel's UDP and conntrack drop counters before and
// after, and says whether the run is a measurement of the target or of
// itself (tests/support/dnsgen.py judges the same figures the same way).
//
// Targets are only loopback or private (lab container) addresses. Sending
// stops at seconds x 1.1 + 0.5 s whatever happens; replies are awaited
// `timeout` more; the process is gone soon after.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"homelab-edge/loadgen/core"
)

// build is the hash of the sources the binary was built from (lab/lab.sh
// sets it), so a result names the generator that made it.
var build = "dev"

// Output is the one JSON object a run prints.
type Output struct {
	core.Head
	Ports          []int          `json:"ports"`
	Rate           float64        `json:"rate"`
	Seconds        float64        `json:"seconds"`
	Timeout        float64        `json:"timeout"`
	Pool           int            `json:"pool"`
	TickS          float64        `json:"tick_s"` // the least time between the sender's wake-ups while sending
	Planned        int            `json:"planned"`
	Sent           int            `json:"sent"` // queries tried, send errors included (as dnsgen.run counts)
	SendErrors     int            `json:"send_errors"`
	SendErrno      map[string]int `json:"send_errno"`
	Answered       int            `json:"answered"`
	Unanswered     int            `json:"unanswered"`    // out, and no answer within the timeout
	WrongReplies   int            `json:"wrong_replies"` // of those: a reply that was no answer
	StaleReplies   int            `json:"stale_replies"` // replies that answer no query in flight on their socket (late ones)
	StrayReplies   int            `json:"stray_replies"` // of those: the socket had another query in flight (a reused port)
	StoppedAtBound bool           `json:"stopped_at_bound"`
	SendS          float64        `json:"send_s"`
	WallS          float64        `json:"wall_s"`
	core.Lateness
	LatencyFrom string   `json:"latency_from"`
	LatencyP50S *float64 `json:"latency_p50_s"`
	LatencyP99S *float64 `json:"latency_p99_s"`
	LatencyMaxS *float64 `json:"latency_max_s"`
	core.CPU
	SetupS   float64 `json:"setup_s"` // opening the pool, before the clock starts
	WaitCall string  `json:"wait_call"`
	Wakes    int     `json:"wakes"`    // the loop's wake-ups: what most of its CPU is spent on
	ReplyAt  string  `json:"reply_at"` // where a reply's time comes from
	// replies stamped by the kernel on arrival (SO_TIMESTAMPNS), and answers that came after their query's
	// timeout (read at a later wake: the query counts as timed out, the reply as stale)
	KernelStamped int    `json:"kernel_stamped"`
	LateReplies   int    `json:"late_replies"`
	Sched         string `json:"sched"` // the sending thread's scheduling policy
	core.Kernel
	core.Judgement
}

func main() {
	cfg, asJSON, err := parseFlags(os.Args[1:])
	if err != nil {
		core.Fail("dnsgen", err, 2)
	}
	// The process is gone by the hard bound plus the reply timeout, whatever
	// the loop does (it checks the bound itself; this is the belt to it).
	core.ExitAfter("dnsgen", int64((float64(core.StopNs(cfg.Seconds))/1e9+cfg.Timeout+1)*1e9))
	out, err := run(cfg)
	if err != nil {
		core.Fail("dnsgen", err, 1)
	}
	if asJSON {
		core.PrintJSON(out)
		return
	}
	fmt.Printf("planned %d sent %d answered %d send errors %d lateness p99 %s s latency p99 %s s cpu %.3f s / %.3f s\nvalid %v %s\n",
		out.Planned, out.Sent, out.Answered, out.SendErrors, core.FmtPtr(out.LatenessP99S), core.FmtPtr(out.LatencyP99S),
		out.UserS+out.SystemS, out.WallS, out.Valid, out.InvalidBecause)
}

func parseFlags(args []string) (Config, bool, error) {
	fs := flag.NewFlagSet("dnsgen", flag.ContinueOnError)
	target := fs.String("target", "127.0.0.1", "IPv4 address: loopback or private (a lab container) only")
	ports := fs.String("ports", "53", "UDP ports, comma-separated; queries alternate over them")
	rate := fs.Float64("rate", 100, "queries per second")
	seconds := fs.Float64("seconds", 1, "planned sending time")
	timeout := fs.Float64("timeout", 2, "seconds each query waits for its answer")
	pool := fs.Int("pool", 4096, "sockets (source ports) opened before the clock starts")
	tick := fs.Float64("tick", 0, "the least seconds between the sender's wake-ups while sending (0: each query when due); queries due within a tick go out at its end")
	fifo := fs.Int("fifo", 0, "run the sender under SCHED_FIFO at this priority (0: as started)")
	name := fs.String("name", "auth.core.home.lab", "the name asked (type A)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return Config{}, false, err
	}
	cfg := Config{Rate: *rate, Seconds: *seconds, Timeout: *timeout, Pool: *pool, Name: *name, FIFO: *fifo, Tick: *tick}
	ip, err := core.LabTarget(*target, true)
	if err != nil {
		return cfg, false, err
	}
	copy(cfg.Target[:], ip)
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			return cfg, false, fmt.Errorf("-ports: %q is not a port", p)
		}
		cfg.Ports = append(cfg.Ports, n)
	}
	if cfg.Rate <= 0 || cfg.Seconds <= 0 || cfg.Timeout < 0 || cfg.Pool < 1 || cfg.FIFO < 0 || cfg.FIFO > 99 ||
		cfg.Tick < 0 || cfg.Tick > MaxLatenessS {
		return cfg, false, fmt.Errorf("-rate and -seconds must be positive, -timeout not negative, -pool at least 1, -fifo 0 to 99, -tick 0 to %g s", MaxLatenessS)
	}
	return cfg, *asJSON, nil
}

func run(cfg Config) (*Output, error) {
	t0 := time.Now()
	r, err := openPool(cfg)
	if err != nil {
		return nil, fmt.Errorf("opening %d sockets: %v (the open-file limit?)", cfg.Pool, err)
	}
	// Everything is allocated: a collection in the timed loop would be a
	// stall of the generator's own, on the one core it is pinned to.
	debug.SetGCPercent(-1)
	out := &Output{Head: core.Head{Generator: "dnsgen (Go)", Build: build, Go: runtime.Version(),
		Target: net.IP(cfg.Target[:]).String()}, Ports: cfg.Ports, Rate: cfg.Rate, Seconds: cfg.Seconds, Timeout: cfg.Timeout, Pool: cfg.Pool,
		TickS:   cfg.Tick,
		Planned: len(r.state), SendErrno: r.errnos}
	out.Sched = core.SetFIFO(cfg.FIFO)
	before := core.ReadCounters()
	cpu0 := core.Rusage()
	out.SetupS = core.Round6(time.Since(t0).Seconds())
	r.loop()
	cpu1 := core.Rusage()
	after := core.ReadCounters()
	fill(out, r, cpu0, cpu1)
	out.Kernel = core.KernelBetween(before, after)
	out.Judgement = verdict(out)
	return out, nil
}

// fill puts the run's counts and spreads into the output.
func fill(out *Output, r *Run, cpu0, cpu1 [2]float64) {
	for _, s := range r.state {
		if s != qNotSent {
			out.Sent++
		}
	}
	out.SendErrors, out.Answered, out.WrongReplies = r.sendErrors, r.answered, r.wrong
	out.StaleReplies, out.StrayReplies = r.stale, r.stray
	out.Unanswered = out.Sent - out.SendErrors - out.Answered
	out.StoppedAtBound, out.WaitCall = r.stoppedAtBound, r.waitCall
	out.Wakes, out.KernelStamped, out.LateReplies = r.wakes, r.kernelStamped, r.lateReplies
	out.ReplyAt = "the kernel's arrival stamp (SO_TIMESTAMPNS); the clock at reading where a reply carries none"
	out.SendS, out.WallS = core.Round6(float64(r.lastSendNs)/1e9), core.Round6(float64(r.endNs)/1e9)
	lat := core.SpreadOf(r.latency)
	out.Lateness = core.SpreadOf(r.lateness).Lateness()
	out.LatencyFrom = "each query's scheduled time; a query not answered counts at its timeout"
	out.LatencyP50S, out.LatencyP99S, out.LatencyMaxS = lat.P50, lat.P99, lat.Max
	out.CPU = core.CPUBetween(cpu0, cpu1)
}

func verdict(out *Output) core.Judgement {
	why := validity(Verdict{Planned: out.Planned, Sent: out.Sent, SendErrors: out.SendErrors,
		Answered: out.Answered, Unanswered: out.Unanswered, Pool: out.Pool, SendErrno: out.SendErrno,
		Rate: out.Rate, Seconds: out.Seconds, Timeout: out.Timeout, SendS: out.SendS,
		LatenessP99S: out.LatenessP99S, LatenessMaxS: out.LatenessMaxS, UserS: out.UserS, SystemS: out.SystemS,
		WallS: out.WallS, SndbufErrors: out.SndbufErrors, InsertFailed: out.InsertFailed, CounterErrors: out.Errors})
	return core.Judge(why)
}
