package main

// How a connection failed: its stage (connect, handshake, response) and the
// kind of error (core.KindOf); which errors are the generator's own (it could
// not open a socket or find a source port) rather than the target's is
// core.LocalErrno.

import (
	"homelab-edge/loadgen/core"
)

// Stages, and the kinds each one counts (any other is "other").
const (
	stageConnect = core.StageConnect + iota
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
func kindOf(stage int, err error) string { return core.KindOf(stageKinds[stage], err) }
