// tlsgen: an open-loop TLS connection generator that says when it was the
// bottleneck (seed 001's flood: new TLS connections at a fixed rate, each
// holding a slow request).
//
//	tlsgen -target HOST -port 443 -sni site.nas.lab -path /slower -rate R -seconds S -timeout T [-max-open N] [-json] [-timeline]
//
// Connection i is due at start + i/rate, whatever the target does: each is a
// goroutine of its own (TCP connect, TLS handshake with the SNI given and no
// verification, `GET PATH`, the response read to EOF) under one deadline,
// `timeout` after its start. It records how late each start was, what each
// connection got (status codes, failures by stage and kind), how long the
// handshakes and the answers took, how many were open at once, its own CPU
// time, and says whether the run is a measurement of the target or of itself
// (tests/support/tlsgen.py judges the same figures the same way).
//
// Targets are only loopback or private (lab container) addresses. Starting
// stops at seconds x 1.1 + 0.5 s whatever happens; every connection ends by
// its deadline; the process prints its one JSON object and is gone by
// seconds x 1.1 + timeout + 2 s.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"homelab-edge/loadgen/core"
)

// build is the hash of the sources the binary was built from (lab/lab.sh
// sets it), so a result names the generator that made it.
var build = "dev"

// Output is the one JSON object a run prints.
type Output struct {
	core.Head
	Port           int                       `json:"port"`
	SNI            string                    `json:"sni"`
	Path           string                    `json:"path"`
	Rate           float64                   `json:"rate"`
	Seconds        float64                   `json:"seconds"`
	Timeout        float64                   `json:"timeout"`
	MaxOpen        int                       `json:"max_open"`
	Planned        int                       `json:"planned"`
	Started        int                       `json:"started"`
	SkippedAtBound int                       `json:"skipped_at_bound"` // due while max_open were open: not started
	StoppedAtBound bool                      `json:"stopped_at_bound"` // the hard bound came before the plan's end
	Connected      int                       `json:"connected"`        // TCP connected
	Handshakes     int                       `json:"handshakes"`       // TLS handshakes done
	Answered       int                       `json:"answered"`         // a status line read: ok_2xx + r429 + other_code
	OK2xx          int                       `json:"ok_2xx"`
	R429           int                       `json:"r429"`
	OtherCode      int                       `json:"other_code"`
	Codes          map[string]int            `json:"codes"`     // every status read, by code
	Completed      int                       `json:"completed"` // the response read to EOF
	Failed         int                       `json:"failed"`    // of failures: started = completed + failed + unfinished
	Failures       map[string]map[string]int `json:"failures"`  // by stage (connect, handshake, response) and kind
	OtherErrors    map[string]int            `json:"other_errors"`
	LocalErrors    int                       `json:"local_errors"` // connect failures that were the generator's own
	LocalErrno     map[string]int            `json:"local_errno"`
	Unfinished     int                       `json:"unfinished"` // still open when the wait gave up
	PeakOpen       int                       `json:"peak_open"`
	StartS         float64                   `json:"start_s"` // the last start (or skip), after the clock started
	WallS          float64                   `json:"wall_s"`
	core.Lateness
	HandshakeP50S *float64 `json:"handshake_p50_s"` // TCP connected to handshake done
	HandshakeP99S *float64 `json:"handshake_p99_s"`
	HandshakeMaxS *float64 `json:"handshake_max_s"`
	AnswerP50S    *float64 `json:"answer_p50_s"` // start to the response's EOF (completed ones)
	AnswerP99S    *float64 `json:"answer_p99_s"`
	AnswerMaxS    *float64 `json:"answer_max_s"`
	core.CPU
	CPUs   int    `json:"cpus"`   // the cores it may run on (its affinity)
	NoFile uint64 `json:"nofile"` // RLIMIT_NOFILE, raised to its hard limit
	core.Judgement
	Timeline []Second `json:"timeline,omitempty"` // with -timeline: one entry per second
}

func main() {
	cfg, asJSON, withTimeline, err := parseFlags(os.Args[1:])
	if err != nil {
		core.Fail("tlsgen", err, 2)
	}
	// The process is gone by its hard bound, whatever the loop does (it
	// bounds its own wait; this is the belt to it).
	core.ExitAfter("tlsgen", exitLimitNs(cfg.Seconds, cfg.Timeout))
	out := run(cfg, withTimeline)
	if asJSON {
		core.PrintJSON(out)
		return
	}
	fmt.Printf("planned %d started %d skipped %d connected %d handshakes %d 2xx %d 429 %d other %d completed %d "+
		"failed %d peak open %d\nlateness p99 %s s handshake p99 %s s answer p99 %s s cpu %.3f s / %.3f s\nvalid %v %s\n",
		out.Planned, out.Started, out.SkippedAtBound, out.Connected, out.Handshakes, out.OK2xx, out.R429, out.OtherCode,
		out.Completed, out.Failed, out.PeakOpen, core.FmtPtr(out.LatenessP99S), core.FmtPtr(out.HandshakeP99S),
		core.FmtPtr(out.AnswerP99S), out.UserS+out.SystemS, out.WallS, out.Valid, out.InvalidBecause)
}

func parseFlags(args []string) (Config, bool, bool, error) {
	fs := flag.NewFlagSet("tlsgen", flag.ContinueOnError)
	target := fs.String("target", "127.0.0.1", "IP address: loopback or private (a lab container) only")
	port := fs.Int("port", 443, "TCP port")
	sni := fs.String("sni", "site.nas.lab", "server name sent in the handshake and the Host header")
	path := fs.String("path", "/", "the path requested")
	rate := fs.Float64("rate", 10, "new connections per second")
	seconds := fs.Float64("seconds", 1, "planned starting time")
	timeout := fs.Float64("timeout", 5, "seconds each connection may take, from its start")
	maxOpen := fs.Int("max-open", 20000,
		"connections open at once at most; one due beyond is skipped (the run is invalid)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	withTimeline := fs.Bool("timeline", false, "add a per-second timeline to the output")
	if err := fs.Parse(args); err != nil {
		return Config{}, false, false, err
	}
	cfg := Config{Port: *port, SNI: *sni, Path: *path, Rate: *rate, Seconds: *seconds, Timeout: *timeout,
		MaxOpen: *maxOpen}
	ip, err := core.LabTarget(*target, false)
	if err != nil {
		return cfg, false, false, err
	}
	cfg.Target = ip
	if cfg.Port < 1 || cfg.Port > 65535 {
		return cfg, false, false, fmt.Errorf("-port %d is not a port", cfg.Port)
	}
	if cfg.SNI == "" || strings.ContainsAny(cfg.SNI, " \t\r\n/") || !strings.HasPrefix(cfg.Path, "/") ||
		strings.ContainsAny(cfg.Path, " \t\r\n") {
		return cfg, false, false, fmt.Errorf("-sni must be a host name and -path start with / (no spaces)")
	}
	if cfg.Rate <= 0 || cfg.Seconds <= 0 || cfg.Timeout <= 0 || cfg.MaxOpen < 1 {
		return cfg, false, false, fmt.Errorf("-rate, -seconds and -timeout must be positive, -max-open at least 1")
	}
	return cfg, *asJSON, *withTimeline, nil
}

func run(cfg Config, withTimeline bool) *Output {
	nofile := core.RaiseNoFile()
	r := newRun(cfg)
	out := &Output{Head: core.Head{Generator: "tlsgen (Go)", Build: build, Go: runtime.Version(),
		Target: cfg.Target.String()}, Port: cfg.Port, SNI: cfg.SNI, Path: cfg.Path, Rate: cfg.Rate, Seconds: cfg.Seconds, Timeout: cfg.Timeout,
		MaxOpen: cfg.MaxOpen, Planned: core.PlannedCount(cfg.Rate, cfg.Seconds), CPUs: runtime.NumCPU(), NoFile: nofile}
	cpu0 := core.Rusage()
	r.loop()
	cpu1 := core.Rusage()
	r.Mu.Lock() // frozen: no connection counts any more
	defer r.Mu.Unlock()
	fill(out, r, cpu0, cpu1)
	if withTimeline {
		out.Timeline = timeline(r.PerSecond, core.SecondsIn(r.EndNs))
	}
	out.Judgement = verdict(out)
	return out
}

// fill puts the run's counts and spreads into the output.
func fill(out *Output, r *Run, cpu0, cpu1 [2]float64) {
	out.Started, out.SkippedAtBound, out.StoppedAtBound = r.Started, r.Skipped, r.StoppedAtBound
	out.Connected, out.Handshakes, out.Completed = r.connected, r.shakes, r.completed
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
	for _, n := range r.LocalErrno {
		out.LocalErrors += n
	}
	out.Unfinished, out.PeakOpen = r.Open, r.PeakOpen
	out.StartS, out.WallS = core.Round6(float64(r.LastStartNs)/1e9), core.Round6(float64(r.EndNs)/1e9)
	hs, ans := core.SpreadOf(r.handshake), core.SpreadOf(r.answer)
	out.Lateness = core.SpreadOf(r.Lateness).Lateness()
	out.HandshakeP50S, out.HandshakeP99S, out.HandshakeMaxS = hs.P50, hs.P99, hs.Max
	out.AnswerP50S, out.AnswerP99S, out.AnswerMaxS = ans.P50, ans.P99, ans.Max
	out.CPU = core.CPUBetween(cpu0, cpu1)
}

func verdict(out *Output) core.Judgement {
	why := validity(Verdict{Planned: out.Planned, Started: out.Started, SkippedAtBound: out.SkippedAtBound,
		MaxOpen: out.MaxOpen, StoppedAtBound: out.StoppedAtBound, LocalErrors: out.LocalErrors,
		LocalErrno: out.LocalErrno, Unfinished: out.Unfinished, LatenessP99S: out.LatenessP99S, UserS: out.UserS,
		SystemS: out.SystemS, WallS: out.WallS, CPUs: out.CPUs})
	return core.Judge(why)
}
