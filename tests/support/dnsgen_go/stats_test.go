package main

import (
	"strings"
	"testing"
)

func TestPercentileUsesTheIndexRuleOfTheWholeHarness(t *testing.T) {
	v := []int64{}
	for i := int64(1); i <= 100; i++ {
		v = append(v, i)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.5, 51}, {0.99, 100}, {1.0, 100}, {0, 1}} {
		if got, ok := percentile(v, c.q); !ok || got != c.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if _, ok := percentile(nil, 0.5); ok {
		t.Error("no values must give no percentile")
	}
	if got, _ := percentile([]int64{7}, 0.99); got != 7 {
		t.Errorf("one value: %v", got)
	}
}

func TestSpreadSortsAndGivesSeconds(t *testing.T) {
	s := spread([]int64{3000, 1000, 2000000, 2000})
	if *s.P50 != 0.000003 || *s.P99 != 0.002 || *s.Max != 0.002 {
		t.Errorf("spread: %v %v %v", *s.P50, *s.P99, *s.Max)
	}
	if e := spread(nil); e.P50 != nil || e.P99 != nil || e.Max != nil {
		t.Error("an empty spread must be nil (null), not zero")
	}
}

func TestTheScheduleIsAbsolute(t *testing.T) {
	if plannedCount(200, 1) != 200 || plannedCount(333.4, 3) != 1000 || plannedCount(40000, 5) != 200000 {
		t.Error("planned count")
	}
	if dueNs(0, 1000) != 0 || dueNs(1, 1000) != 1e6 || dueNs(1000, 1000) != 1e9 || dueNs(3, 3) != 1e9 {
		t.Error("query i is due at i/rate")
	}
	for i := 1; i < 100000; i++ { // never out of order, whatever the rate's rounding
		if dueNs(i, 40000) < dueNs(i-1, 40000) {
			t.Fatalf("due(%d) before due(%d)", i, i-1)
		}
	}
	if sendLimitNs(5) != 6e9 || sendLimitNs(1) != 1.6e9 {
		t.Errorf("the hard bound is seconds x 1.1 + 0.5 s: %v", sendLimitNs(5))
	}
}

func TestTheFreeRingHandsOutTheSocketFreedLongestAgo(t *testing.T) {
	r := newRing(3)
	for i := int32(0); i < 3; i++ {
		r.push(i)
	}
	a, _ := r.pop()
	b, _ := r.pop()
	r.push(a)
	c, _ := r.pop()
	d, _ := r.pop()
	if a != 0 || b != 1 || c != 2 || d != 0 {
		t.Errorf("order %v %v %v %v", a, b, c, d)
	}
	r.pop()
	if _, ok := r.pop(); ok {
		t.Error("an empty ring must say so")
	}
}

func f(v float64) *float64 { return &v }
func n(v int64) *int64     { return &v }

func good() Verdict {
	return Verdict{Planned: 1000, Sent: 1000, Answered: 1000, Pool: 4096, Rate: 200, Seconds: 5, Timeout: 2,
		SendS: 4.995, LatenessP99S: f(0.0002), LatenessMaxS: f(0.0009), UserS: 0.5, SystemS: 1.5, WallS: 7,
		SndbufErrors: n(0), InsertFailed: n(0)}
}

func TestValidity(t *testing.T) {
	if why := validity(good()); len(why) != 0 {
		t.Fatalf("a good run is invalid: %v", why)
	}
	noConntrack := good()
	noConntrack.InsertFailed = nil
	if why := validity(noConntrack); len(why) != 0 {
		t.Errorf("no conntrack here is no insert failure: %v", why)
	}
	// the target left queries unanswered, holding every socket for the timeout: its failure, not the generator's
	dried := good()
	dried.Rate, dried.Seconds, dried.SendS, dried.Planned, dried.Sent = 16000, 5, 4.99995, 80000, 80000
	dried.Pool, dried.Timeout, dried.LatenessMaxS = 4096, 2, f(0.0009)
	dried.SendErrors, dried.SendErrno, dried.Unanswered, dried.Answered = 20000, map[string]int{"pool_exhausted": 20000}, 30000, 30000
	dried.UserS, dried.SystemS = 1, 2
	if why := validity(dried); len(why) != 0 {
		t.Errorf("a pool dried by the target's unanswered queries is no generator failure: %v", why)
	}
	for name, c := range map[string]struct {
		change func(*Verdict)
		says   string
	}{
		"send errors":       {func(v *Verdict) { v.SendErrors = 1 }, "send errors"},
		"p99 lateness 2 ms": {func(v *Verdict) { v.LatenessP99S = f(0.002) }, "lateness"},
		"p99 lateness 1 ms": {func(v *Verdict) { v.LatenessP99S = f(0.001) }, "lateness"},
		"no lateness":       {func(v *Verdict) { v.LatenessP99S = nil }, "lateness"},
		"CPU 80 %":          {func(v *Verdict) { v.UserS, v.SystemS = 1, 3 }, "CPU"},
		"no sending time":   {func(v *Verdict) { v.SendS, v.Sent, v.Planned, v.Rate, v.Seconds = 0, 1, 1, 1, 1 }, "CPU"},
		// 3.6 s of CPU is 51 % of the wall time with a 2 s reply tail, but 72 % of the sending
		"CPU 72 % of sending": {func(v *Verdict) { v.UserS, v.SystemS = 1, 2.6 }, "CPU"},
		"worst lateness 25 s": {func(v *Verdict) { v.LatenessMaxS = f(25) }, "worst lateness"},
		"no worst lateness":   {func(v *Verdict) { v.LatenessMaxS = nil }, "worst lateness"},
		"a burst of 80":       {func(v *Verdict) { v.Rate, v.LatenessMaxS = 16000, f(0.005) }, "burst"},
		"sent too fast":       {func(v *Verdict) { v.SendS, v.UserS, v.SystemS = 0.3, 0.01, 0.1 }, "faster than"},
		"sending overran":     {func(v *Verdict) { v.SendS = 5.6 }, "sending took"},
		"a pool too small": {func(v *Verdict) {
			v.SendErrors, v.SendErrno, v.Unanswered, v.Pool = 5, map[string]int{"pool_exhausted": 5}, 10, 10
		}, "send errors"},
		"SndbufErrors 1":      {func(v *Verdict) { v.SndbufErrors = n(1) }, "UdpSndbufErrors"},
		"SndbufErrors unread": {func(v *Verdict) { v.SndbufErrors = nil }, "UdpSndbufErrors"},
		"insert_failed 1":     {func(v *Verdict) { v.InsertFailed = n(1) }, "insert_failed"},
		"counter not read":    {func(v *Verdict) { v.CounterErrors = []string{"no Udp"} }, "not read"},
		"sent < planned":      {func(v *Verdict) { v.Sent = 999 }, "sent 999 of 1000"},
	} {
		v := good()
		c.change(&v)
		why := validity(v)
		if len(why) != 1 || !strings.Contains(why[0], c.says) {
			t.Errorf("%s: %v", name, why)
		}
	}
}

const snmp = `Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 12345
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1503805 214 291 2253965 290 7 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`

func TestParseSnmp(t *testing.T) {
	u, err := parseSnmp(snmp, "Udp")
	if err != nil || u["SndbufErrors"] != 7 || u["RcvbufErrors"] != 290 || u["InErrors"] != 291 || len(u) != 9 {
		t.Errorf("Udp: %v %v", u, err)
	}
	if _, err := parseSnmp("Ip: Forwarding\nIp: 1\n", "Udp"); err == nil {
		t.Error("no Udp lines must be an error")
	}
	if _, err := parseSnmp("Udp: InErrors SndbufErrors\nUdp: 1\n", "Udp"); err == nil {
		t.Error("names and values that do not pair must be an error")
	}
}

const conntrack = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
00000000  00000000 00000000 00000000 000000ce 00000000 00000000 00000000 00000000 0000000a 00000000 00000000 0000019a  00000000 00000000 00000000 00000000
00000000  00000000 00000000 00000000 00000049 00000000 00000000 00000000 00000000 00000001 00000000 00000000 00000090  00000000 00000000 00000000 00000000
`

func TestParseConntrackSumsTheColumnOverCPUs(t *testing.T) {
	got, err := parseConntrackColumn(conntrack, "insert_failed")
	if err != nil || got != 11 {
		t.Errorf("insert_failed: %v %v", got, err)
	}
	if got, _ := parseConntrackColumn(conntrack, "invalid"); got != 0xce+0x49 {
		t.Errorf("invalid: %v", got)
	}
	if _, err := parseConntrackColumn("entries found\n", "insert_failed"); err == nil {
		t.Error("no such column must be an error")
	}
	if _, err := parseConntrackColumn("insert_failed\nzz\n", "insert_failed"); err == nil {
		t.Error("a value that is not hexadecimal must be an error")
	}
}

func TestDNSPackets(t *testing.T) {
	p := queryPacket("auth.core.home.lab")
	setID(p, 0xbeef)
	want := "\xbe\xef\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04auth\x04core\x04home\x03lab\x00\x00\x01\x00\x01"
	if string(p) != want {
		t.Errorf("query %q", p)
	}
	reply := append([]byte{0xbe, 0xef, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, p[12:]...)
	if !answered(reply, 0xbeef) || answered(reply, 0xbeee) {
		t.Error("an answer with its ID is answered; another ID is not")
	}
	nx := append([]byte{0xbe, 0xef, 0x81, 0x83, 0, 1, 0, 0, 0, 0, 0, 0}, p[12:]...)
	if answered(nx, 0xbeef) || answered(p, 0xbeef) || answered([]byte{0xbe}, 0xbeef) {
		t.Error("NXDOMAIN, the query itself and a runt are no answers")
	}
}

func TestFlagsRefuseAPublicTarget(t *testing.T) {
	if _, _, err := parseFlags([]string{"-target", "8.8.8.8"}); err == nil {
		t.Error("a public address must be refused")
	}
	c, _, err := parseFlags([]string{"-target", "172.18.0.3", "-ports", "53,5353", "-rate", "10"})
	if err != nil || len(c.Ports) != 2 || c.Ports[1] != 5353 || c.Target != [4]byte{172, 18, 0, 3} {
		t.Errorf("%v %v", c, err)
	}
}
