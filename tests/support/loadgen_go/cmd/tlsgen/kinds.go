package main

// How a connection failed: its stage (connect, handshake, response) and the
// kind of error, and which errors are the generator's own (it could not open
// a socket or find a source port) rather than the target's.

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Stages, and the kinds each one counts (any other is "other").
const (
	stageConnect = iota
	stageHandshake
	stageResponse
	nStages
)

var stageNames = [nStages]string{"connect", "handshake", "response"}

var stageKinds = [nStages][]string{
	{"refused", "timeout", "other"},
	{"reset", "timeout", "eof", "other"},
	{"reset", "timeout", "eof", "other"},
}

// kindOf is the kind of a failure at `stage`: one of stageKinds[stage].
func kindOf(stage int, err error) string {
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
	for _, allowed := range stageKinds[stage] {
		if k == allowed {
			return k
		}
	}
	return "other"
}

// localErrnos are the errors that say the generator, not the target, failed:
// no file descriptor, no source port, no kernel memory for the socket.
var localErrnos = map[syscall.Errno]string{syscall.EMFILE: "EMFILE", syscall.ENFILE: "ENFILE",
	syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.EADDRINUSE: "EADDRINUSE", syscall.ENOBUFS: "ENOBUFS",
	syscall.ENOMEM: "ENOMEM"}

// localErrno names a connect error that is the generator's own ("" if it is not).
func localErrno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return localErrnos[e]
	}
	return ""
}
