package core

import (
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
		if got, ok := Percentile(v, c.q); !ok || got != c.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if _, ok := Percentile(nil, 0.5); ok {
		t.Error("no values must give no percentile")
	}
	if got, _ := Percentile([]int64{7}, 0.99); got != 7 {
		t.Errorf("one value: %v", got)
	}
}

func TestSpreadSortsAndGivesSeconds(t *testing.T) {
	s := SpreadOf([]int64{3000, 1000, 2000000, 2000})
	if *s.P50 != 0.000003 || *s.P99 != 0.002 || *s.Max != 0.002 {
		t.Errorf("spread: %v %v %v", *s.P50, *s.P99, *s.Max)
	}
	if e := SpreadOf(nil); e.P50 != nil || e.P99 != nil || e.Max != nil {
		t.Error("an empty spread must be nil (null), not zero")
	}
}

func TestTheScheduleIsAbsolute(t *testing.T) {
	if PlannedCount(200, 1) != 200 || PlannedCount(333.4, 3) != 1000 || PlannedCount(40000, 5) != 200000 {
		t.Error("planned count")
	}
	if DueNs(0, 1000) != 0 || DueNs(1, 1000) != 1e6 || DueNs(1000, 1000) != 1e9 || DueNs(3, 3) != 1e9 {
		t.Error("query i is due at i/rate")
	}
	for i := 1; i < 100000; i++ { // never out of order, whatever the rate's rounding
		if DueNs(i, 40000) < DueNs(i-1, 40000) {
			t.Fatalf("due(%d) before due(%d)", i, i-1)
		}
	}
	if StopNs(5) != 6e9 || StopNs(1) != 1.6e9 {
		t.Errorf("the hard bound is seconds x 1.1 + 0.5 s: %v", StopNs(5))
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
	u, err := ParseSnmp(snmp, "Udp")
	if err != nil || u["SndbufErrors"] != 7 || u["RcvbufErrors"] != 290 || u["InErrors"] != 291 || len(u) != 9 {
		t.Errorf("Udp: %v %v", u, err)
	}
	if _, err := ParseSnmp("Ip: Forwarding\nIp: 1\n", "Udp"); err == nil {
		t.Error("no Udp lines must be an error")
	}
	if _, err := ParseSnmp("Udp: InErrors SndbufErrors\nUdp: 1\n", "Udp"); err == nil {
		t.Error("names and values that do not pair must be an error")
	}
}

const conntrack = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
00000000  00000000 00000000 00000000 000000ce 00000000 00000000 00000000 00000000 0000000a 00000000 00000000 0000019a  00000000 00000000 00000000 00000000
00000000  00000000 00000000 00000000 00000049 00000000 00000000 00000000 00000000 00000001 00000000 00000000 00000090  00000000 00000000 00000000 00000000
`

func TestParseConntrackSumsTheColumnOverCPUs(t *testing.T) {
	got, err := ParseConntrackColumn(conntrack, "insert_failed")
	if err != nil || got != 11 {
		t.Errorf("insert_failed: %v %v", got, err)
	}
	if got, _ := ParseConntrackColumn(conntrack, "invalid"); got != 0xce+0x49 {
		t.Errorf("invalid: %v", got)
	}
	if _, err := ParseConntrackColumn("entries found\n", "insert_failed"); err == nil {
		t.Error("no such column must be an error")
	}
	if _, err := ParseConntrackColumn("insert_failed\nzz\n", "insert_failed"); err == nil {
		t.Error("a value that is not hexadecimal must be an error")
	}
}

func TestCountsTextIsInNameOrder(t *testing.T) {
	if got := CountsText(map[string]int{"EMFILE": 2, "EADDRNOTAVAIL": 1}); got != "EADDRNOTAVAIL 1, EMFILE 2" {
		t.Errorf("%q", got)
	}
	if CountsText(nil) != "" {
		t.Error("no counts: no text")
	}
}

func TestLabTargets(t *testing.T) {
	for _, target := range []string{"8.8.8.8", "example.org", "100.64.0.1", "2001:4860:4860::8888", "0.0.0.0", ""} {
		if _, err := LabTarget(target, false); err == nil {
			t.Errorf("%q must be refused", target)
		}
	}
	for _, target := range []string{"127.0.0.1", "10.1.2.3", "172.18.0.3", "192.168.1.9", "::1", "fd00::5"} {
		if _, err := LabTarget(target, false); err != nil {
			t.Errorf("%q: %v", target, err)
		}
	}
	if _, err := LabTarget("::1", true); err == nil {
		t.Error("an IPv6 address must be refused where IPv4 only is asked")
	}
}

func TestCPUAndJudgement(t *testing.T) {
	if c := CPUBetween([2]float64{1, 2}, [2]float64{1.5, 2.25}); c.UserS != 0.5 || c.SystemS != 0.25 {
		t.Errorf("%+v", c)
	}
	if j := Judge(nil); !j.Valid || j.InvalidBecause != "" {
		t.Errorf("%+v", j)
	}
	if j := Judge([]string{"a", "b"}); j.Valid || j.InvalidBecause != "a; b" {
		t.Errorf("%+v", j)
	}
}
