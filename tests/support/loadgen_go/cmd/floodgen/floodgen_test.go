package main

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"homelab-edge/loadgen/core"
	"homelab-edge/loadgen/coretest"
)

func TestSourcesAreConsecutivePrivateAddresses(t *testing.T) {
	s, err := Sources("10.201.0.254", 4)
	if err != nil || len(s) != 4 || s[0].String() != "10.201.0.254" || s[2].String() != "10.201.1.0" ||
		s[3].String() != "10.201.1.1" {
		t.Fatalf("%v %v", s, err)
	}
	if s, err := Sources("fd00::ffff", 2); err != nil || s[1].String() != "fd00::1:0" {
		t.Errorf("IPv6: %v %v", s, err)
	}
	for _, c := range []struct {
		base string
		n    int
		says string
	}{{"8.8.8.8", 1, "private address only"}, {"10.0.0.1", 0, "1 to 4096"}, {"10.0.0.1", 4097, "1 to 4096"},
		{"10.255.255.255", 2, "runs out of the private range"}, {"nope", 1, "private address only"}} {
		if _, err := Sources(c.base, c.n); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s x %d: %v", c.base, c.n, err)
		}
	}
}

func TestFlagsRefuseWhatIsNotALabFlood(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-target", "1.1.1.1"}, "loopback or private"},
		{[]string{"-source-base", "192.0.2.1"}, "private address only"},
		{[]string{"-sources", "300", "-per-source", "201"}, "1 to 60000 connections"},
		{[]string{"-mode", "udp"}, "hold or tls"},
		{[]string{"-hold", "121"}, "-hold 0 to 120"},
		{[]string{"-fifo", "100"}, "-fifo 0 to 99"},
		{[]string{"-target", "::1"}, "not of one family"},
	} {
		if _, _, _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v", c.args, err)
		}
	}
	cfg, _, _, err := parseFlags([]string{"-sources", "300", "-per-source", "50", "-rate", "1000", "-mode", "hold",
		"-hold", "10", "-timeout", "3"})
	if err != nil || cfg.Planned() != 15000 || cfg.Seconds() != 15 || cfg.Deadline() != 13 {
		t.Errorf("%+v %v", cfg, err)
	}
}

func TestTheWaitAndTheExitAreBounded(t *testing.T) {
	if waitLimitNs(10, 5) != 17.5e9 || exitLimitNs(10, 5) != 18e9 || waitLimitNs(1, 1) >= exitLimitNs(1, 1) {
		t.Errorf("wait %v exit %v", waitLimitNs(10, 5), exitLimitNs(10, 5))
	}
}

func TestKinds(t *testing.T) {
	op := func(e error) error { return &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", e)} }
	if kindOf(stageConnect, op(syscall.ECONNREFUSED)) != "refused" || kindOf(stageHold, io.EOF) != "eof" ||
		kindOf(stageHold, op(syscall.ECONNRESET)) != "reset" || kindOf(stageConnect, io.EOF) != "other" {
		t.Error("kinds")
	}
	if core.LocalErrno(op(syscall.EADDRNOTAVAIL)) != "EADDRNOTAVAIL" || core.LocalErrno(errors.New("x")) != "" {
		t.Error("local errors")
	}
}

var f = coretest.F

func good() Verdict {
	return Verdict{ConnVerdict: core.ConnVerdict{Planned: 15000, Started: 15000, MaxOpen: 20000,
		LatenessP99S: f(0.002), UserS: 1, SystemS: 2, WallS: 20, CPUs: 2}, Sources: 300, SourcesUsed: 300}
}

func TestValidity(t *testing.T) {
	if why := validity(good()); len(why) != 0 {
		t.Fatalf("a good run is invalid: %v", why)
	}
	coretest.EachRuleAlone(t, good, validity, map[string]coretest.Rule[Verdict]{
		"skipped at max-open": {Change: func(v *Verdict) { v.SkippedAtBound, v.Started = 3, 14997 },
			Says: "3 connections skipped at the generator's bound (-max-open 20000)"},
		"EADDRNOTAVAIL": {Change: func(v *Verdict) { v.LocalErrors, v.LocalErrno = 2, map[string]int{"EADDRNOTAVAIL": 2} },
			Says: "could not open (EADDRNOTAVAIL 2)"},
		"late":        {Change: func(v *Verdict) { v.LatenessP99S = f(0.01) }, Says: "99th percentile lateness 0.01 s"},
		"no lateness": {Change: func(v *Verdict) { v.LatenessP99S = nil }, Says: "lateness none s"},
		"cpu":         {Change: func(v *Verdict) { v.UserS, v.SystemS = 20, 8 }, Says: "generator CPU 28.000 s over 20.000 s"},
		"unfinished":  {Change: func(v *Verdict) { v.Unfinished = 1 }, Says: "1 connections still open past their deadline"},
		"stopped":     {Change: func(v *Verdict) { v.StoppedAtBound, v.Started = true, 14000 }, Says: "reached 14000 of 15000"},
		"sources":     {Change: func(v *Verdict) { v.SourcesUsed = 299 }, Says: "from 299 of 300 source addresses"},
	})
}

func TestTheTimeline(t *testing.T) {
	counts := make([][nSeries]int, 3)
	counts[0][sStarted], counts[0][sConnected], counts[0][sRefused], counts[0][sEnded] = 10, 6, 4, 4
	counts[1][sEnded] = 6
	tl := timeline(counts, 2)
	if len(tl) != 2 || tl[0].Open != 6 || tl[1].Open != 0 || tl[0].Refused != 4 {
		t.Errorf("%+v", tl)
	}
}

func TestStatusLines(t *testing.T) {
	if c, ok := core.StatusCode("HTTP/1.1 429 Too Many Requests\r\n"); !ok || c != 429 {
		t.Error("429")
	}
	if _, ok := core.StatusCode("SSH-2.0\r\n"); ok {
		t.Error("not HTTP")
	}
}
