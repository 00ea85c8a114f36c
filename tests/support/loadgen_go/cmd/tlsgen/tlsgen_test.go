package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"homelab-edge/loadgen/core"
	"homelab-edge/loadgen/coretest"
)

func TestTheWaitAndTheExitAreBounded(t *testing.T) {
	// each connection ends by its deadline: the wait gives up a second after
	// the last one's, and the exit bound (seconds x 1.1 + timeout + 2 s) is later still
	if waitLimitNs(10, 5) != 17.5e9 || exitLimitNs(10, 5) != 18e9 || waitLimitNs(1, 1) >= exitLimitNs(1, 1) {
		t.Errorf("wait %v exit %v", waitLimitNs(10, 5), exitLimitNs(10, 5))
	}
}

func TestTheTimelineCountsOpenAtTheEndOfEachSecond(t *testing.T) {
	counts := make([][nSeries]int, 5)
	counts[0][sStarted], counts[0][sConnected], counts[0][sEnded] = 10, 9, 2
	counts[1][sStarted], counts[1][sOK2xx], counts[1][sR429], counts[1][sEnded] = 10, 5, 1, 8
	counts[2][sFailed], counts[2][sOtherCode], counts[2][sEnded] = 3, 1, 10
	tl := timeline(counts, 3)
	if len(tl) != 3 || tl[0].Open != 8 || tl[1].Open != 10 || tl[2].Open != 0 {
		t.Fatalf("open: %+v", tl)
	}
	if tl[0].S != 0 || tl[2].S != 2 || tl[0].Connected != 9 || tl[1].OK2xx != 5 || tl[1].R429 != 1 ||
		tl[2].Failed != 3 || tl[2].OtherCode != 1 || tl[1].Started != 10 {
		t.Errorf("entries: %+v", tl)
	}
	if len(timeline(counts, 99)) != 5 {
		t.Error("never more entries than seconds counted")
	}
	if core.SecondsIn(0) != 1 || core.SecondsIn(1e9) != 1 || core.SecondsIn(1e9+1) != 2 || core.SecondsIn(2.3e9) != 3 {
		t.Error("seconds covered")
	}
}

var f = coretest.F

func good() Verdict {
	return Verdict{Planned: 1000, Started: 1000, MaxOpen: 20000, LatenessP99S: f(0.002), UserS: 0.5, SystemS: 1.0,
		WallS: 5, CPUs: 2}
}

func TestValidity(t *testing.T) {
	if why := validity(good()); len(why) != 0 {
		t.Fatalf("a good run is invalid: %v", why)
	}
	coretest.EachRuleAlone(t, good, validity, map[string]coretest.Rule[Verdict]{
		"skipped at max-open": {Change: func(v *Verdict) { v.SkippedAtBound, v.Started = 3, 997 },
			Says: "3 connections skipped at the generator's bound (-max-open 20000)"},
		"EMFILE": {Change: func(v *Verdict) { v.LocalErrors, v.LocalErrno = 2, map[string]int{"EMFILE": 2} },
			Says: "could not open (EMFILE 2)"},
		"p99 lateness 20 ms":  {Change: func(v *Verdict) { v.LatenessP99S = f(0.02) }, Says: "lateness"},
		"p99 lateness 10 ms":  {Change: func(v *Verdict) { v.LatenessP99S = f(0.01) }, Says: "lateness"},
		"no lateness":         {Change: func(v *Verdict) { v.LatenessP99S = nil }, Says: "lateness"},
		"CPU 70 % of 2 cores": {Change: func(v *Verdict) { v.UserS, v.SystemS = 3, 4 }, Says: "not under 70 % of 2 cores"},
		"no wall time":        {Change: func(v *Verdict) { v.WallS = 0 }, Says: "CPU"},
		"no cores":            {Change: func(v *Verdict) { v.CPUs = 0 }, Says: "CPU"},
		"unfinished":          {Change: func(v *Verdict) { v.Unfinished = 1 }, Says: "1 connections still open past their deadline"},
		"stopped at bound":    {Change: func(v *Verdict) { v.Started, v.StoppedAtBound = 900, true }, Says: "reached 900 of 1000 planned"},
		"short of the plan":   {Change: func(v *Verdict) { v.Started = 999 }, Says: "reached 999 of 1000 planned"},
	})
	slow := good() // a target that answers nothing is a figure about the target
	slow.LatenessP99S = f(0.0099)
	if why := validity(slow); len(why) != 0 {
		t.Errorf("9.9 ms is under the bound: %v", why)
	}
}

func TestFailuresAreClassedByStageAndKind(t *testing.T) {
	op := func(op string, err error) error { return &net.OpError{Op: op, Net: "tcp", Err: err} }
	sys := func(call string, e syscall.Errno) error { return op("dial", os.NewSyscallError(call, e)) }
	for _, c := range []struct {
		stage int
		err   error
		want  string
	}{
		{stageConnect, sys("connect", syscall.ECONNREFUSED), "refused"},
		{stageConnect, op("dial", os.ErrDeadlineExceeded), "timeout"},
		{stageConnect, context.DeadlineExceeded, "timeout"},
		{stageConnect, sys("connect", syscall.ECONNRESET), "other"}, // connect has no "reset"
		{stageConnect, sys("socket", syscall.EMFILE), "other"},
		{stageHandshake, op("read", syscall.ECONNRESET), "reset"},
		{stageHandshake, io.EOF, "eof"},
		{stageHandshake, op("read", os.ErrDeadlineExceeded), "timeout"},
		{stageHandshake, errors.New("tls: handshake failure"), "other"},
		{stageHandshake, sys("connect", syscall.ECONNREFUSED), "other"}, // handshake has no "refused"
		{stageResponse, fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), "eof"},
		{stageResponse, op("write", syscall.EPIPE), "reset"},
		{stageResponse, op("read", os.ErrDeadlineExceeded), "timeout"},
	} {
		if got := kindOf(c.stage, c.err); got != c.want {
			t.Errorf("%s %v: %s, want %s", stageNames[c.stage], c.err, got, c.want)
		}
	}
	if core.LocalErrno(sys("socket", syscall.EMFILE)) != "EMFILE" ||
		core.LocalErrno(sys("connect", syscall.EADDRNOTAVAIL)) != "EADDRNOTAVAIL" ||
		core.LocalErrno(sys("connect", syscall.ECONNREFUSED)) != "" || core.LocalErrno(io.EOF) != "" {
		t.Error("the generator's own errors are its file and port limits, not the target's answers")
	}
	if got := core.ErrText(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET,
		Source: &net.TCPAddr{Port: 54321}}); got != "read: connection reset by peer" {
		t.Errorf("errText keeps no addresses: %q", got)
	}
}

func TestStatusLines(t *testing.T) {
	for line, want := range map[string]int{"HTTP/1.1 200 OK\r\n": 200, "HTTP/1.0 429 Too Many Requests\r\n": 429,
		"HTTP/1.1 502\r\n": 502} {
		if got, ok := core.StatusCode(line); !ok || got != want {
			t.Errorf("%q: %v %v", line, got, ok)
		}
	}
	for _, line := range []string{"", "SSH-2.0-OpenSSH\r\n", "HTTP/2 200\r\n", "HTTP/1.1 20 OK\r\n", "HTTP/1.1 abc\r\n"} {
		if _, ok := core.StatusCode(line); ok {
			t.Errorf("%q is no status line", line)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, target := range []string{"8.8.8.8", "example.org", "100.64.0.1", "2001:4860:4860::8888", "0.0.0.0", ""} {
		if _, _, _, err := parseFlags([]string{"-target", target}); err == nil {
			t.Errorf("%q must be refused", target)
		}
	}
	for _, target := range []string{"127.0.0.1", "127.3.2.1", "10.1.2.3", "172.18.0.3", "192.168.1.9", "::1", "fd00::5"} {
		if _, _, _, err := parseFlags([]string{"-target", target}); err != nil {
			t.Errorf("%q: %v", target, err)
		}
	}
	c, asJSON, tl, err := parseFlags([]string{"-target", "172.18.0.3", "-port", "8443", "-sni", "a.lab", "-path",
		"/slower", "-rate", "300", "-seconds", "10", "-timeout", "30", "-max-open", "5", "-json", "-timeline"})
	if err != nil || c.Port != 8443 || c.SNI != "a.lab" || c.Path != "/slower" || c.Rate != 300 || c.MaxOpen != 5 ||
		!asJSON || !tl {
		t.Errorf("%+v %v %v %v", c, asJSON, tl, err)
	}
	if c, _, _, _ := parseFlags(nil); c.MaxOpen != 20000 || c.Port != 443 {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range [][]string{{"-rate", "0"}, {"-timeout", "0"}, {"-max-open", "0"}, {"-port", "0"},
		{"-path", "slow"}, {"-sni", "a\r\nX: y"}, {"-path", "/a b"}} {
		if _, _, _, err := parseFlags(bad); err == nil {
			t.Errorf("%v must be refused", bad)
		}
	}
}
