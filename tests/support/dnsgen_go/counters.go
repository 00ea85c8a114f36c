package main

// The kernel's drop counters, read from /proc/net/..., which is this
// process's own network namespace: the one its queries leave from. They count
// the whole namespace (the target's drops too, when it shares it).

import (
	"errors"
	"io/fs"
	"os"
)

type counters struct {
	udp          map[string]int64 // nil: not read
	insertFailed *int64           // nil: no conntrack stat here (or not read)
	errors       []string
}

func readCounters() counters {
	var c counters
	if text, err := os.ReadFile("/proc/net/snmp"); err != nil {
		c.errors = append(c.errors, err.Error())
	} else if c.udp, err = parseSnmp(string(text), "Udp"); err != nil {
		c.errors = append(c.errors, err.Error())
	}
	text, err := os.ReadFile("/proc/net/stat/nf_conntrack")
	if errors.Is(err, fs.ErrNotExist) {
		return c // no conntrack module: nothing can fail to insert
	}
	if err != nil {
		c.errors = append(c.errors, err.Error())
		return c
	}
	if n, err := parseConntrackColumn(string(text), "insert_failed"); err != nil {
		c.errors = append(c.errors, err.Error())
	} else {
		c.insertFailed = &n
	}
	return c
}

// countersInto sets the output's counters and their deltas over the run; a
// counter not read at either end has no delta (null), never a zero.
func countersInto(out *Output, before, after counters) {
	out.UDPBefore, out.UDPAfter = before.udp, after.udp
	out.Errors = append(before.errors, after.errors...)
	delta := func(name string) *int64 {
		b, okb := before.udp[name]
		a, oka := after.udp[name]
		if !okb || !oka {
			return nil
		}
		d := a - b
		return &d
	}
	out.SndbufErrors, out.RcvbufErrors, out.InErrors = delta("SndbufErrors"), delta("RcvbufErrors"), delta("InErrors")
	if before.insertFailed != nil && after.insertFailed != nil {
		d := *after.insertFailed - *before.insertFailed
		out.InsertFailed = &d
	}
}
