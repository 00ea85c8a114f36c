package core

// The kernel's drop counters, read from /proc/net/..., which is this
// process's own network namespace: the one its traffic leaves from. They count
// the whole namespace (the target's drops too, when it shares it).

import (
	"errors"
	"io/fs"
	"os"
)

// Counters is one reading of the counters.
type Counters struct {
	udp          map[string]int64 // nil: not read
	insertFailed *int64           // nil: no conntrack stat here (or not read)
	errors       []string
}

// Kernel is the counters' part of the JSON record.
type Kernel struct {
	UDPBefore    map[string]int64 `json:"udp_before"`
	UDPAfter     map[string]int64 `json:"udp_after"`
	SndbufErrors *int64           `json:"snd_buf_errors"` // deltas over the run
	RcvbufErrors *int64           `json:"rcv_buf_errors"`
	InErrors     *int64           `json:"in_errors"`
	InsertFailed *int64           `json:"insert_failed"` // null: no /proc/net/stat/nf_conntrack here
	Errors       []string         `json:"errors"`        // counters that could not be read
}

// ReadCounters reads the UDP counters and conntrack's insert_failed.
func ReadCounters() Counters {
	var c Counters
	if text, err := os.ReadFile("/proc/net/snmp"); err != nil {
		c.errors = append(c.errors, err.Error())
	} else if c.udp, err = ParseSnmp(string(text), "Udp"); err != nil {
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
	if n, err := ParseConntrackColumn(string(text), "insert_failed"); err != nil {
		c.errors = append(c.errors, err.Error())
	} else {
		c.insertFailed = &n
	}
	return c
}

// KernelBetween is the counters and their deltas over the run; a counter not
// read at either end has no delta (null), never a zero.
func KernelBetween(before, after Counters) Kernel {
	k := Kernel{UDPBefore: before.udp, UDPAfter: after.udp, Errors: append(before.errors, after.errors...)}
	delta := func(name string) *int64 {
		b, okb := before.udp[name]
		a, oka := after.udp[name]
		if !okb || !oka {
			return nil
		}
		d := a - b
		return &d
	}
	k.SndbufErrors, k.RcvbufErrors, k.InErrors = delta("SndbufErrors"), delta("RcvbufErrors"), delta("InErrors")
	if before.insertFailed != nil && after.insertFailed != nil {
		d := *after.insertFailed - *before.insertFailed
		k.InsertFailed = &d
	}
	return k
}
