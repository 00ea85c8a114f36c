package main

import (
	"encoding/binary"
	"strings"
)

// queryPacket is one DNS query for `name` (type A, recursion desired), as
// probes.dns_query_packet builds it; the generator rewrites its ID per query.
func queryPacket(name string) []byte {
	p := []byte{0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.Trim(name, "."), ".") {
		p = append(p, byte(len(label)))
		p = append(p, label...)
	}
	return append(p, 0, 0, 1, 0, 1)
}

func setID(p []byte, id uint16) { binary.BigEndian.PutUint16(p, id) }

// answered is probes.dns_answered: the query's ID, a response, RCODE 0 and at
// least one answer record. Anything else is a reply, not an answer.
func answered(reply []byte, id uint16) bool {
	if len(reply) < 12 {
		return false
	}
	flags := binary.BigEndian.Uint16(reply[2:])
	return binary.BigEndian.Uint16(reply) == id && flags&0x8000 != 0 && flags&0x000F == 0 &&
		binary.BigEndian.Uint16(reply[6:]) > 0
}

// replyID is the ID a reply carries (0 when too short to carry one).
func replyID(reply []byte) (uint16, bool) {
	if len(reply) < 2 {
		return 0, false
	}
	return binary.BigEndian.Uint16(reply), true
}
