package core

// What the connection generators (cmd/tlsgen and cmd/floodgen) share: the
// bounds on waiting for open connections, how a failed connection is
// classed, the status line, the open-file limit, and the validity rules
// both apply (floodgen adds one of its own: every source used).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Starting stops at StopNs (the planned time x Overrun + SlackS, as dnsgen's
// and probes.dns_load's sending). Every connection ends by its own deadline;
// the wait for the last ones gives up ConnWaitSlackS after that, and the
// process is gone by ConnExitSlackS after it.
const (
	ConnWaitSlackS = 1.0
	ConnExitSlackS = 2.0 // from seconds x Overrun + deadline (the brief's bound)
)

// What a valid connection run needs (tests/support/tlsgen.py holds the same
// numbers and is the judge, for floodgen.py too; this copy lets the binaries
// say it too).
const (
	// Starts run from goroutines and Go's timers (about a millisecond's
	// grain when idle); 10 ms late at p99 is a generator falling behind its
	// schedule, not the grain. A start stays in its second of the timeline.
	ConnMaxP99LatenessS = 0.010
	// Of the cores the generator may run on, over the run: above it the
	// handshakes it times are (partly) waiting for its own CPU.
	ConnMaxCPUShare = 0.70
)

// ConnWaitLimitNs is when the wait for connections still open gives up (they
// are then unfinished): every one is past its deadline by ConnWaitSlackS.
func ConnWaitLimitNs(seconds, deadline float64) int64 {
	return StopNs(seconds) + int64((deadline+ConnWaitSlackS)*1e9)
}

// ConnExitLimitNs is when the process is gone whatever happens.
func ConnExitLimitNs(seconds, deadline float64) int64 {
	return int64((seconds*Overrun + deadline + ConnExitSlackS) * 1e9)
}

// SecondsIn is how many timeline entries a run of endNs covers (its last
// second may be partial); one at least.
func SecondsIn(endNs int64) int {
	return max(1, int((endNs+999_999_999)/1e9))
}

// KindOf is the kind of a connection's failure: one of `allowed` (its
// stage's kinds), "other" for any kind not among them.
func KindOf(allowed []string, err error) string {
	k := "other"
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		k = "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		k = "reset"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		k = "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		k = "eof"
	}
	for _, a := range allowed {
		if k == a {
			return k
		}
	}
	return "other"
}

// localErrnos are the errors that say the generator, not the target, failed:
// no file descriptor, no source port (or address), no kernel memory for the
// socket.
var localErrnos = map[syscall.Errno]string{syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE",
	syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.EADDRINUSE: "EADDRINUSE", syscall.ENOBUFS: "ENOBUFS",
	syscall.ENOMEM: "ENOMEM"}

// LocalErrno names a connect error that is the generator's own ("" if it is not).
func LocalErrno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return localErrnos[e]
	}
	return ""
}

// ErrText is an error's text without its addresses (a source port in every
// text would make each one distinct).
func ErrText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// StatusCode is the code of an HTTP/1.x status line ("HTTP/1.1 200 OK").
func StatusCode(line string) (int, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || len(f[1]) != 3 {
		return 0, false
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 {
		return 0, false
	}
	return code, true
}

// RaiseNoFile sets the soft open-file limit to the hard one (every open
// connection is a descriptor) and returns the limit now in force.
func RaiseNoFile() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	return lim.Cur
}

// ConnVerdict is what the connection generators' validity rules look at.
type ConnVerdict struct {
	Planned, Started, SkippedAtBound, MaxOpen int
	StoppedAtBound                            bool
	LocalErrors                               int
	LocalErrno                                map[string]int
	Unfinished                                int
	LatenessP99S                              *float64
	UserS, SystemS, WallS                     float64
	CPUs                                      int
}

// ConnValidity says why a connection run is not a measurement of the target
// (empty: it is). Every rule is one way the generator, not the target, could
// have set the figures: it held connections back at its own bound, could not
// open them (its file, port or source-address limits), started them late,
// ran out of CPU, left them open past their deadline, or stopped starting at
// its hard bound.
func ConnValidity(v ConnVerdict) []string {
	var why []string
	if v.SkippedAtBound > 0 {
		why = append(why, fmt.Sprintf("%d connections skipped at the generator's bound (-max-open %d)",
			v.SkippedAtBound, v.MaxOpen))
	}
	if v.LocalErrors > 0 {
		why = append(why, fmt.Sprintf("%d connections the generator could not open (%s)", v.LocalErrors,
			CountsText(v.LocalErrno)))
	}
	if v.LatenessP99S == nil || *v.LatenessP99S >= ConnMaxP99LatenessS {
		why = append(why, fmt.Sprintf("99th percentile lateness %s s (not under %g s)", FmtPtr(v.LatenessP99S),
			ConnMaxP99LatenessS))
	}
	if v.WallS <= 0 || v.CPUs < 1 || v.UserS+v.SystemS >= ConnMaxCPUShare*float64(v.CPUs)*v.WallS {
		why = append(why, fmt.Sprintf("generator CPU %.3f s over %.3f s (not under %d %% of %d cores)",
			v.UserS+v.SystemS, v.WallS, int(ConnMaxCPUShare*100), v.CPUs))
	}
	if v.Unfinished > 0 {
		why = append(why, fmt.Sprintf("%d connections still open past their deadline", v.Unfinished))
	}
	if v.StoppedAtBound || v.Started+v.SkippedAtBound != v.Planned {
		why = append(why, fmt.Sprintf("reached %d of %d planned (stopped at the hard bound)",
			v.Started+v.SkippedAtBound, v.Planned))
	}
	return why
}
