// Package core is what the lab's load generators share: the open-loop
// schedule and its hard bound, lateness and latency percentiles, the
// process's CPU time, the kernel's drop counters, real-time scheduling, and
// the parts of the one JSON object each prints, and (conns.go) what the two
// connection generators, cmd/tlsgen and cmd/floodgen, share. Otherwise no
// protocol here: each generator keeps its own.
package core

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// The bound on sending (or starting), as tests/support/probes.py's dns_load
// has it: the planned time x Overrun + SlackS, whatever happens.
const (
	Overrun = 1.10
	SlackS  = 0.5
)

// PlannedCount is how many queries (connections) `rate` per second for
// `seconds` plans.
func PlannedCount(rate, seconds float64) int {
	return int(math.Round(rate * seconds))
}

// DueNs is when query (connection) i is due, in ns after the start: an
// absolute schedule, so a late one never shifts the ones after it.
func DueNs(i int, rate float64) int64 {
	return int64(float64(i) * 1e9 / rate)
}

// StopNs is when sending (starting) stops, in ns after the start.
func StopNs(seconds float64) int64 {
	return int64((seconds*Overrun + SlackS) * 1e9)
}

// ExitAfter makes the process exit (code 3) `ns` after now, whatever its
// loop does: the loop bounds itself, and this is the belt to it.
func ExitAfter(name string, ns int64) {
	time.AfterFunc(time.Duration(ns), func() {
		fmt.Fprintln(os.Stderr, name+": past its hard bound; exiting")
		os.Exit(3)
	})
}

// Fail says why on stderr, the generator's name first, and exits with code.
func Fail(name string, err error, code int) {
	fmt.Fprintln(os.Stderr, name+":", err)
	os.Exit(code)
}

// PrintJSON prints the run's one JSON object.
func PrintJSON(out any) {
	json.NewEncoder(os.Stdout).Encode(out)
}

// LabTarget parses -target: a loopback or private (lab container) address
// only; with ipv4, an IPv4 one only. The refusal names the flag as given.
func LabTarget(s string, ipv4 bool) (net.IP, error) {
	ip := net.ParseIP(s)
	if ipv4 {
		ip = ip.To4()
	}
	if ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
		if ipv4 {
			return nil, fmt.Errorf("-target %q: an IPv4 loopback or private address only", s)
		}
		return nil, fmt.Errorf("-target %q: a loopback or private IP address only", s)
	}
	return ip, nil
}

// Rusage is this process's user and system CPU seconds so far.
func Rusage() [2]float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return [2]float64{float64(ru.Utime.Nano()) / 1e9, float64(ru.Stime.Nano()) / 1e9}
}

// Round6 rounds seconds to the microsecond.
func Round6(s float64) float64 { return float64(int64(s*1e6+0.5)) / 1e6 }

// Judge is a verdict from the reasons a run is invalid (none: valid).
func Judge(why []string) Judgement {
	return Judgement{Valid: len(why) == 0, InvalidBecause: strings.Join(why, "; ")}
}
