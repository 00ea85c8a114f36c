// dnsgen: a compiled DNS load generator that says when it was the bottleneck.
//
//	dnsgen -target HOST -ports P1,P2 -rate R -seconds S -timeout T [-pool N] [-fifo PRIO] [-name QNAME] [-json]
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
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// build is the hash of the sources the binary was built from (lab/lab.sh
// sets it), so a result names the generator that made it.
var build = "dev"

// Output is the one JSON object a run prints.
type Output struct {
	Generator      string           `json:"generator"`
	Build          string           `json:"build"`
	Go             string           `json:"go"`
	Target         string           `json:"target"`
	Ports          []int            `json:"ports"`
	Rate           float64          `json:"rate"`
	Seconds        float64          `json:"seconds"`
	Timeout        float64          `json:"timeout"`
	Pool           int              `json:"pool"`
	Planned        int              `json:"planned"`
	Sent           int              `json:"sent"` // queries tried, send errors included (as dnsgen.run counts)
	SendErrors     int              `json:"send_errors"`
	SendErrno      map[string]int   `json:"send_errno"`
	Answered       int              `json:"answered"`
	Unanswered     int              `json:"unanswered"`    // out, and no answer within the timeout
	WrongReplies   int              `json:"wrong_replies"` // of those: a reply that was no answer
	StaleReplies   int              `json:"stale_replies"` // answers after their query's timeout
	StoppedAtBound bool             `json:"stopped_at_bound"`
	SendS          float64          `json:"send_s"`
	WallS          float64          `json:"wall_s"`
	LatenessP50S   *float64         `json:"lateness_p50_s"`
	LatenessP99S   *float64         `json:"lateness_p99_s"`
	LatenessMaxS   *float64         `json:"lateness_max_s"`
	LatencyFrom    string           `json:"latency_from"`
	LatencyP50S    *float64         `json:"latency_p50_s"`
	LatencyP99S    *float64         `json:"latency_p99_s"`
	LatencyMaxS    *float64         `json:"latency_max_s"`
	UserS          float64          `json:"user_s"`   // over wall_s, this process's threads
	SystemS        float64          `json:"system_s"` // (getrusage RUSAGE_SELF)
	SetupS         float64          `json:"setup_s"`  // opening the pool, before the clock starts
	WaitCall       string           `json:"wait_call"`
	Sched          string           `json:"sched"` // the sending thread's scheduling policy
	UDPBefore      map[string]int64 `json:"udp_before"`
	UDPAfter       map[string]int64 `json:"udp_after"`
	SndbufErrors   *int64           `json:"snd_buf_errors"` // deltas over the run
	RcvbufErrors   *int64           `json:"rcv_buf_errors"`
	InErrors       *int64           `json:"in_errors"`
	InsertFailed   *int64           `json:"insert_failed"` // null: no /proc/net/stat/nf_conntrack here
	Errors         []string         `json:"errors"`        // counters that could not be read
	Valid          bool             `json:"valid"`
	InvalidBecause string           `json:"invalid_because"`
}

func main() {
	cfg, asJSON, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsgen:", err)
		os.Exit(2)
	}
	// The process is gone by the hard bound plus the reply timeout, whatever
	// the loop does (it checks the bound itself; this is the belt to it).
	time.AfterFunc(time.Duration((float64(sendLimitNs(cfg.Seconds))/1e9+cfg.Timeout+1)*1e9), func() {
		fmt.Fprintln(os.Stderr, "dnsgen: past its hard bound; exiting")
		os.Exit(3)
	})
	out, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsgen:", err)
		os.Exit(1)
	}
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(out)
		return
	}
	fmt.Printf("planned %d sent %d answered %d send errors %d lateness p99 %s s latency p99 %s s cpu %.3f s / %.3f s\nvalid %v %s\n",
		out.Planned, out.Sent, out.Answered, out.SendErrors, fmtPtr(out.LatenessP99S), fmtPtr(out.LatencyP99S),
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
	fifo := fs.Int("fifo", 0, "run the sender under SCHED_FIFO at this priority (0: as started)")
	name := fs.String("name", "auth.core.home.lab", "the name asked (type A)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return Config{}, false, err
	}
	cfg := Config{Rate: *rate, Seconds: *seconds, Timeout: *timeout, Pool: *pool, Name: *name, FIFO: *fifo}
	ip := net.ParseIP(*target).To4()
	if ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
		return cfg, false, fmt.Errorf("-target %q: an IPv4 loopback or private address only", *target)
	}
	copy(cfg.Target[:], ip)
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			return cfg, false, fmt.Errorf("-ports: %q is not a port", p)
		}
		cfg.Ports = append(cfg.Ports, n)
	}
	if cfg.Rate <= 0 || cfg.Seconds <= 0 || cfg.Timeout < 0 || cfg.Pool < 1 || cfg.FIFO < 0 || cfg.FIFO > 99 {
		return cfg, false, fmt.Errorf("-rate and -seconds must be positive, -timeout not negative, -pool at least 1, -fifo 0 to 99")
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
	out := &Output{Generator: "dnsgen (Go)", Build: build, Go: runtime.Version(), Target: net.IP(cfg.Target[:]).String(),
		Ports: cfg.Ports, Rate: cfg.Rate, Seconds: cfg.Seconds, Timeout: cfg.Timeout, Pool: cfg.Pool,
		Planned: len(r.state), SendErrno: r.errnos}
	out.Sched = setFIFO(cfg.FIFO)
	before := readCounters()
	cpu0 := rusage()
	out.SetupS = round6(time.Since(t0).Seconds())
	r.loop()
	cpu1 := rusage()
	after := readCounters()
	fill(out, r, cpu0, cpu1)
	countersInto(out, before, after)
	out.Valid, out.InvalidBecause = verdict(out)
	return out, nil
}

// fill puts the run's counts and spreads into the output.
func fill(out *Output, r *Run, cpu0, cpu1 [2]float64) {
	for _, s := range r.state {
		if s != qNotSent {
			out.Sent++
		}
	}
	out.SendErrors, out.Answered, out.WrongReplies, out.StaleReplies = r.sendErrors, r.answered, r.wrong, r.stale
	out.Unanswered = out.Sent - out.SendErrors - out.Answered
	out.StoppedAtBound, out.WaitCall = r.stoppedAtBound, r.waitCall
	out.SendS, out.WallS = round6(float64(r.lastSendNs)/1e9), round6(float64(r.endNs)/1e9)
	late, lat := spread(r.lateness), spread(r.latency)
	out.LatenessP50S, out.LatenessP99S, out.LatenessMaxS = late.P50, late.P99, late.Max
	out.LatencyFrom = "each query's scheduled time; a query not answered counts at its timeout"
	out.LatencyP50S, out.LatencyP99S, out.LatencyMaxS = lat.P50, lat.P99, lat.Max
	out.UserS, out.SystemS = round6(cpu1[0]-cpu0[0]), round6(cpu1[1]-cpu0[1])
}

func verdict(out *Output) (bool, string) {
	why := validity(Verdict{Planned: out.Planned, Sent: out.Sent, SendErrors: out.SendErrors,
		Answered: out.Answered, Unanswered: out.Unanswered, Pool: out.Pool, SendErrno: out.SendErrno,
		Rate: out.Rate, Seconds: out.Seconds, Timeout: out.Timeout, SendS: out.SendS,
		LatenessP99S: out.LatenessP99S, LatenessMaxS: out.LatenessMaxS, UserS: out.UserS, SystemS: out.SystemS,
		WallS: out.WallS, SndbufErrors: out.SndbufErrors, InsertFailed: out.InsertFailed, CounterErrors: out.Errors})
	return len(why) == 0, strings.Join(why, "; ")
}

// rusage is this process's user and system CPU seconds so far.
func rusage() [2]float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return [2]float64{float64(ru.Utime.Nano()) / 1e9, float64(ru.Stime.Nano()) / 1e9}
}

func round6(s float64) float64 { return float64(int64(s*1e6+0.5)) / 1e6 }
