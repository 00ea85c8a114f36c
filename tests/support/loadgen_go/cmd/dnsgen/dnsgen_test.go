package main

import (
	"testing"

	"homelab-edge/loadgen/coretest"
)

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

var f = coretest.F

func n(v int64) *int64 { return &v }

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
	coretest.EachRuleAlone(t, good, validity, map[string]coretest.Rule[Verdict]{
		"send errors":       {Change: func(v *Verdict) { v.SendErrors = 1 }, Says: "send errors"},
		"p99 lateness 2 ms": {Change: func(v *Verdict) { v.LatenessP99S = f(0.002) }, Says: "lateness"},
		"p99 lateness 1 ms": {Change: func(v *Verdict) { v.LatenessP99S = f(0.001) }, Says: "lateness"},
		"no lateness":       {Change: func(v *Verdict) { v.LatenessP99S = nil }, Says: "lateness"},
		"CPU 80 %":          {Change: func(v *Verdict) { v.UserS, v.SystemS = 1, 3 }, Says: "CPU"},
		"no sending time":   {Change: func(v *Verdict) { v.SendS, v.Sent, v.Planned, v.Rate, v.Seconds = 0, 1, 1, 1, 1 }, Says: "CPU"},
		// 3.6 s of CPU is 51 % of the wall time with a 2 s reply tail, but 72 % of the sending
		"CPU 72 % of sending": {Change: func(v *Verdict) { v.UserS, v.SystemS = 1, 2.6 }, Says: "CPU"},
		"worst lateness 25 s": {Change: func(v *Verdict) { v.LatenessMaxS = f(25) }, Says: "worst lateness"},
		"no worst lateness":   {Change: func(v *Verdict) { v.LatenessMaxS = nil }, Says: "worst lateness"},
		"a burst of 80":       {Change: func(v *Verdict) { v.Rate, v.LatenessMaxS = 16000, f(0.005) }, Says: "burst"},
		"sent too fast":       {Change: func(v *Verdict) { v.SendS, v.UserS, v.SystemS = 0.3, 0.01, 0.1 }, Says: "faster than"},
		"sending overran":     {Change: func(v *Verdict) { v.SendS = 5.6 }, Says: "sending took"},
		"a pool too small": {Change: func(v *Verdict) {
			v.SendErrors, v.SendErrno, v.Unanswered, v.Pool = 5, map[string]int{"pool_exhausted": 5}, 10, 10
		}, Says: "send errors"},
		"SndbufErrors 1":      {Change: func(v *Verdict) { v.SndbufErrors = n(1) }, Says: "UdpSndbufErrors"},
		"SndbufErrors unread": {Change: func(v *Verdict) { v.SndbufErrors = nil }, Says: "UdpSndbufErrors"},
		"insert_failed 1":     {Change: func(v *Verdict) { v.InsertFailed = n(1) }, Says: "insert_failed"},
		"counter not read":    {Change: func(v *Verdict) { v.CounterErrors = []string{"no Udp"} }, Says: "not read"},
		"sent < planned":      {Change: func(v *Verdict) { v.Sent = 999 }, Says: "sent 999 of 1000"},
	})
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

func TestAReplyToAnEarlierQueryOnTheSameSourcePortIsNoAnswer(t *testing.T) {
	// one socket, used again: query 1 times out, query 65537 (the same ID
	// were IDs the query's number) goes out from the same source port, and
	// query 1's late answer comes
	r := newRun(Config{Rate: 1000, Seconds: 66, Timeout: 1, Pool: 1, Ports: []int{53}, Name: "a.lab"})
	r.addSocket(-1)
	send := func(q int) uint16 {
		k, ok := r.free.pop()
		if !ok || k != 0 {
			t.Fatalf("no free socket for query %d", q)
		}
		id := r.nextID(k)
		r.sent(q, k, int64(q)*1e6) // when due
		return id
	}
	reply := func(id uint16) []byte {
		p := queryPacket("a.lab")
		setID(p, id)
		return append([]byte{p[0], p[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, p[12:]...)
	}
	first := send(1)
	r.expire(0, 2, int64(2e9), int64(1e9))
	if r.state[1] != qTimedOut || r.onSock[0] != -1 {
		t.Fatalf("query 1 did not time out: %v", r.state[1])
	}
	second := send(65537)
	if first == second {
		t.Fatalf("two queries from one source port share the ID %d", first)
	}
	r.reply(0, reply(first), int64(65.6e9))
	if r.answered != 0 || r.state[65537] != qInFlight || r.stray != 1 || r.stale != 1 {
		t.Errorf("a late answer to query 1 counted for query 65537: answered %d state %d stray %d stale %d",
			r.answered, r.state[65537], r.stray, r.stale)
	}
	r.reply(0, reply(second), int64(65.7e9))
	if r.answered != 1 || r.state[65537] != qAnswered || r.stray != 1 || r.onSock[0] != -1 {
		t.Errorf("query 65537's own answer: answered %d state %d stray %d", r.answered, r.state[65537], r.stray)
	}
	r.reply(0, reply(second), int64(65.8e9)) // a duplicate, no query in flight: stale, not stray
	if r.answered != 1 || r.stray != 1 || r.stale != 2 {
		t.Errorf("a reply to a free socket: answered %d stray %d stale %d", r.answered, r.stray, r.stale)
	}
}

func TestAnAnswerThatCameAfterItsTimeoutIsNoAnswer(t *testing.T) {
	// replies wait in their sockets until the next wake (issue 65): one read
	// then is judged by its kernel arrival stamp, not by when it was read
	r := newRun(Config{Rate: 1000, Seconds: 1, Timeout: 1, Pool: 2, Ports: []int{53}, Name: "a.lab"})
	r.addSocket(-1)
	r.addSocket(-1)
	answer := func(id uint16) []byte {
		p := queryPacket("a.lab")
		setID(p, id)
		return append([]byte{p[0], p[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, p[12:]...)
	}
	k0, _ := r.free.pop()
	id0 := r.nextID(k0)
	r.sent(0, k0, 0)
	k1, _ := r.free.pop()
	id1 := r.nextID(k1)
	r.sent(1, k1, int64(1e6))
	r.reply(k0, answer(id0), int64(1e9)+1) // 1 ns after query 0's deadline
	if r.answered != 0 || r.state[0] != qTimedOut || r.lateReplies != 1 || r.onSock[k0] != -1 || r.inFlight != 1 {
		t.Errorf("an answer after the timeout: answered %d state %d late %d", r.answered, r.state[0], r.lateReplies)
	}
	r.reply(k1, answer(id1), int64(1e9)+int64(1e6)) // at query 1's deadline: in time
	if r.answered != 1 || r.state[1] != qAnswered || r.inFlight != 0 {
		t.Errorf("an answer at the deadline: answered %d state %d", r.answered, r.state[1])
	}
	if len(r.latency) != 2 || r.latency[0] != int64(1e9) || r.latency[1] != int64(1e9) {
		t.Errorf("latency from the schedule, the late one at its timeout: %v", r.latency)
	}
}
