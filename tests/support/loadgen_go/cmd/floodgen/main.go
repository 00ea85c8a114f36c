// floodgen: an open-loop connection flood from many source addresses, that
// says when it was the bottleneck (issue 63: a flood spread over hundreds of
// addresses passes every per-address limit; the same flood from one address
// is what those limits hold).
//
//	floodgen -target HOST -port 443 -source-base 10.201.0.1 -sources 300 -per-source 50 -rate R
//	         [-mode hold -hold S | -mode tls -sni NAME -path /slower] -timeout T [-max-open N] [-fifo PRIO]
//	         [-json] [-timeline]
//
// Connection i is due at start + i/rate and comes from source address
// base + (i % sources): every source gets -per-source connections. The
// addresses need not be on an interface (IP_FREEBIND): an AnyIP route in the
// generator's namespace (`ip route add local 10.201.0.0/23 dev lo`) makes
// them local, and the target needs a route back. -mode hold opens each
// connection and keeps it idle -hold seconds (a count of connections); -mode
// tls makes a TLS handshake (no verification) and one request, and reads the
// answer to EOF. It records how late each start was, what each connection got
// (connected, refused or reset at connect, status codes, failures by stage and
// kind), how long the connects, handshakes and answers took, how many were
// open at once, from how many sources connections were started and connected,
// its own CPU time, and says whether the run measured the target or itself
// (tests/support/floodgen.py judges the same figures the same way).
//
// Targets and sources are loopback or private addresses only; at most 4096
// sources and 60,000 connections a run, each held 120 s at most. Starting
// stops at the planned time x 1.1 + 0.5 s whatever happens; every connection
// ends by its deadline; the process prints its one JSON object and is gone by
// the planned time x 1.1 + its deadline + 2 s.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"homelab-edge/loadgen/core"
)

var build = "dev"

// Output is the one JSON object a run prints.
type Output struct {
	core.Head
	Port             int                       `json:"port"`
	Mode             string                    `json:"mode"`
	SourceBase       string                    `json:"source_base"`
	Sources          int                       `json:"sources"`
	PerSource        int                       `json:"per_source"`
	SourcesUsed      int                       `json:"sources_used"`      // sources a connection was started from
	SourcesConnected int                       `json:"sources_connected"` // sources with one connection established at least
	SNI              string                    `json:"sni"`
	Path             string                    `json:"path"`
	Rate             float64                   `json:"rate"`
	Seconds          float64                   `json:"seconds"` // planned / rate
	HoldS            float64                   `json:"hold_s"`
	Timeout          float64                   `json:"timeout"`
	MaxOpen          int                       `json:"max_open"`
	Planned          int                       `json:"planned"`
	Started          int                       `json:"started"`
	SkippedAtBound   int                       `json:"skipped_at_bound"`
	StoppedAtBound   bool                      `json:"stopped_at_bound"`
	Connected        int                       `json:"connected"`
	Refused          int                       `json:"refused"` // reset or refused at connect (a firewall's answer)
	Held             int                       `json:"held"`    // hold: still open when the hold ended
	Handshakes       int                       `json:"handshakes"`
	Answered         int                       `json:"answered"`
	OK2xx            int                       `json:"ok_2xx"`
	R429             int                       `json:"r429"`
	OtherCode        int                       `json:"other_code"`
	Codes            map[string]int            `json:"codes"`
	Completed        int                       `json:"completed"`
	Failed           int                       `json:"failed"` // every failure, connect refusals included
	Failures         map[string]map[string]int `json:"failures"`
	OtherErrors      map[string]int            `json:"other_errors"`
	LocalErrors      int                       `json:"local_errors"`
	LocalErrno       map[string]int            `json:"local_errno"`
	Unfinished       int                       `json:"unfinished"`
	PeakOpen         int                       `json:"peak_open"`
	StartS           float64                   `json:"start_s"`
	WallS            float64                   `json:"wall_s"`
	core.Lateness
	ConnectP50S   *float64 `json:"connect_p50_s"` // dial to established (connected ones)
	ConnectP99S   *float64 `json:"connect_p99_s"`
	ConnectMaxS   *float64 `json:"connect_max_s"`
	HandshakeP50S *float64 `json:"handshake_p50_s"`
	HandshakeP99S *float64 `json:"handshake_p99_s"`
	HandshakeMaxS *float64 `json:"handshake_max_s"`
	AnswerP50S    *float64 `json:"answer_p50_s"`
	AnswerP99S    *float64 `json:"answer_p99_s"`
	AnswerMaxS    *float64 `json:"answer_max_s"`
	core.CPU
	CPUs   int    `json:"cpus"`
	NoFile uint64 `json:"nofile"`
	Sched  string `json:"sched"` // the scheduling policy it ran under (-fifo)
	core.Judgement
	Timeline []Second `json:"timeline,omitempty"`
}

func main() {
	cfg, asJSON, withTimeline, err := parseFlags(os.Args[1:])
	if err != nil {
		core.Fail("floodgen", err, 2)
	}
	core.ExitAfter("floodgen", exitLimitNs(cfg.Seconds(), cfg.Deadline()))
	out := run(cfg, withTimeline)
	if asJSON {
		core.PrintJSON(out)
		return
	}
	fmt.Printf("planned %d started %d from %d of %d sources: connected %d (from %d sources) refused %d held %d "+
		"2xx %d 429 %d other %d failed %d peak open %d\nlateness p99 %s s connect p99 %s s cpu %.3f s / %.3f s\n"+
		"valid %v %s\n", out.Planned, out.Started, out.SourcesUsed, out.Sources, out.Connected, out.SourcesConnected,
		out.Refused, out.Held, out.OK2xx, out.R429, out.OtherCode, out.Failed, out.PeakOpen,
		core.FmtPtr(out.LatenessP99S), core.FmtPtr(out.ConnectP99S), out.UserS+out.SystemS, out.WallS, out.Valid,
		out.InvalidBecause)
}

func parseFlags(args []string) (Config, bool, bool, error) {
	fs := flag.NewFlagSet("floodgen", flag.ContinueOnError)
	target := fs.String("target", "127.0.0.1", "IP address: loopback or private (a lab container) only")
	port := fs.Int("port", 443, "TCP port")
	base := fs.String("source-base", "10.201.0.1", "the first source address (loopback or private)")
	sources := fs.Int("sources", 1, "source addresses, consecutive from -source-base")
	perSource := fs.Int("per-source", 1, "connections from each source")
	rate := fs.Float64("rate", 100, "new connections per second")
	mode := fs.String("mode", "hold", "hold (connect, keep idle -hold s) or tls (handshake, one request)")
	holdS := fs.Float64("hold", 5, "hold: seconds each connection stays open")
	timeout := fs.Float64("timeout", 5, "seconds to connect (hold), or the whole connection (tls)")
	sni := fs.String("sni", "site.nas.lab", "tls: server name sent in the handshake and the Host header")
	path := fs.String("path", "/", "tls: the path requested")
	maxOpen := fs.Int("max-open", 20000, "connections open at once at most; one due beyond is skipped (invalid)")
	fifo := fs.Int("fifo", 0, "run under SCHED_FIFO at this priority (0: as started), so a busy machine cannot hold the "+
		"starter off its schedule")
	asJSON := fs.Bool("json", false, "print one JSON object")
	withTimeline := fs.Bool("timeline", false, "add a per-second timeline to the output")
	if err := fs.Parse(args); err != nil {
		return Config{}, false, false, err
	}
	cfg := Config{Port: *port, PerSource: *perSource, Rate: *rate, Mode: *mode, HoldS: *holdS, Timeout: *timeout,
		SNI: *sni, Path: *path, MaxOpen: *maxOpen, FIFO: *fifo}
	ip, err := core.LabTarget(*target, false)
	if err != nil {
		return cfg, false, false, err
	}
	cfg.Target = ip
	if cfg.Sources, err = Sources(*base, *sources); err != nil {
		return cfg, false, false, err
	}
	if (cfg.Sources[0].To4() == nil) != (ip.To4() == nil) {
		return cfg, false, false, fmt.Errorf("-source-base %s and -target %s are not of one family", *base, *target)
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return cfg, false, false, fmt.Errorf("-port %d is not a port", cfg.Port)
	}
	if cfg.Mode != "hold" && cfg.Mode != "tls" {
		return cfg, false, false, fmt.Errorf("-mode %q: hold or tls", cfg.Mode)
	}
	if cfg.SNI == "" || strings.ContainsAny(cfg.SNI, " \t\r\n/") || !strings.HasPrefix(cfg.Path, "/") ||
		strings.ContainsAny(cfg.Path, " \t\r\n") {
		return cfg, false, false, fmt.Errorf("-sni must be a host name and -path start with / (no spaces)")
	}
	if cfg.PerSource < 1 || cfg.Planned() > MaxPlanned {
		return cfg, false, false, fmt.Errorf("-sources x -per-source: 1 to %d connections", MaxPlanned)
	}
	if cfg.Rate <= 0 || cfg.Timeout <= 0 || cfg.HoldS < 0 || cfg.HoldS > MaxHoldS || cfg.MaxOpen < 1 ||
		cfg.FIFO < 0 || cfg.FIFO > 99 {
		return cfg, false, false, fmt.Errorf("-rate and -timeout must be positive, -hold 0 to %g s, -max-open at "+
			"least 1, -fifo 0 to 99", MaxHoldS)
	}
	return cfg, *asJSON, *withTimeline, nil
}

func run(cfg Config, withTimeline bool) *Output {
	nofile := core.RaiseNoFile()
	r := newRun(cfg)
	out := &Output{Head: core.Head{Generator: "floodgen (Go)", Build: build, Go: runtime.Version(),
		Target: cfg.Target.String()}, Port: cfg.Port, Mode: cfg.Mode, SourceBase: cfg.Sources[0].String(),
		Sources: len(cfg.Sources), PerSource: cfg.PerSource, SNI: cfg.SNI, Path: cfg.Path, Rate: cfg.Rate,
		Seconds: core.Round6(cfg.Seconds()), HoldS: cfg.HoldS, Timeout: cfg.Timeout, MaxOpen: cfg.MaxOpen,
		Planned: cfg.Planned(), CPUs: runtime.NumCPU(), NoFile: nofile}
	if cfg.Mode != "hold" {
		out.HoldS = 0
	} else {
		out.SNI, out.Path = "", ""
	}
	out.Sched = core.SetFIFO(cfg.FIFO)
	cpu0 := core.Rusage()
	r.loop()
	cpu1 := core.Rusage()
	r.Mu.Lock()
	defer r.Mu.Unlock()
	fill(out, r, cpu0, cpu1)
	if withTimeline {
		out.Timeline = timeline(r.PerSecond, core.SecondsIn(r.EndNs))
	}
	out.Judgement = core.Judge(validity(Verdict{ConnVerdict: core.ConnVerdict{Planned: out.Planned,
		Started: out.Started, SkippedAtBound: out.SkippedAtBound, MaxOpen: out.MaxOpen,
		StoppedAtBound: out.StoppedAtBound, LocalErrors: out.LocalErrors, LocalErrno: out.LocalErrno,
		Unfinished: out.Unfinished, LatenessP99S: out.LatenessP99S, UserS: out.UserS, SystemS: out.SystemS,
		WallS: out.WallS, CPUs: out.CPUs}, Sources: out.Sources, SourcesUsed: out.SourcesUsed}))
	return out
}

func fill(out *Output, r *Run, cpu0, cpu1 [2]float64) {
	out.Started, out.SkippedAtBound, out.StoppedAtBound = r.Started, r.Skipped, r.StoppedAtBound
	out.Connected, out.Handshakes, out.Completed, out.Held = r.connected, r.shakes, r.completed, r.held
	out.OK2xx, out.R429, out.OtherCode = r.OK2xx, r.R429, r.Other
	out.Answered = r.OK2xx + r.R429 + r.Other
	out.Codes, out.OtherErrors, out.LocalErrno = r.Codes, r.OtherErrors, r.LocalErrno
	out.Failures = map[string]map[string]int{}
	for s, kinds := range r.Failures {
		out.Failures[stageNames[s]] = kinds
		for _, n := range kinds {
			out.Failed += n
		}
	}
	out.Refused = r.Failures[stageConnect]["refused"]
	for _, n := range r.LocalErrno {
		out.LocalErrors += n
	}
	for i := range r.sourceStarted {
		if r.sourceStarted[i] {
			out.SourcesUsed++
		}
		if r.sourceConnected[i] {
			out.SourcesConnected++
		}
	}
	out.Unfinished, out.PeakOpen = r.Open, r.PeakOpen
	out.StartS, out.WallS = core.Round6(float64(r.LastStartNs)/1e9), core.Round6(float64(r.EndNs)/1e9)
	out.Lateness = core.SpreadOf(r.Lateness).Lateness()
	c, h, a := core.SpreadOf(r.connectNs), core.SpreadOf(r.handshake), core.SpreadOf(r.answer)
	out.ConnectP50S, out.ConnectP99S, out.ConnectMaxS = c.P50, c.P99, c.Max
	out.HandshakeP50S, out.HandshakeP99S, out.HandshakeMaxS = h.P50, h.P99, h.Max
	out.AnswerP50S, out.AnswerP99S, out.AnswerMaxS = a.P50, a.P99, a.Max
	out.CPU = core.CPUBetween(cpu0, cpu1)
}
