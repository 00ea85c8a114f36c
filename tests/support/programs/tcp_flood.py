#!/usr/bin/env python3
"""Open N TCP connections at once to HOST:PORT from this container's address,
hold them HOLD seconds, then count what happened to each.

  tcp_flood.py HOST PORT N HOLD   ->  {"established": .., "reset": .., "pending": .., "alive_after_hold": ..}

With FLOOD_STARTED=PATH in the environment, PATH is written when the
connections are made (a test waits for it, not for a guessed time).
Bounded: connects for at most 10 s, then holds, then exits.
"""
import errno
import json
import os
import selectors
import socket
import sys
import time


def main(host, port, n, hold):
    sel = selectors.DefaultSelector()
    for dummy in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, port))
        sel.register(s, selectors.EVENT_WRITE)
    state = {}
    deadline = time.time() + 10
    while len(state) < n and time.time() < deadline:
        for key, dummy in sel.select(0.5):
            s = key.fileobj
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            state[s] = ("established" if err == 0 else
                        "reset" if err == errno.ECONNREFUSED else errno.errorcode.get(err, str(err)))
            sel.unregister(s)
    if os.environ.get("FLOOD_STARTED"):
        open(os.environ["FLOOD_STARTED"], "w").close()
    time.sleep(hold)
    alive = 0
    for s, st in state.items():
        if st == "established":
            try:
                s.send(b"GET / HTTP/1.0\r\n\r\n")
                alive += 1
            except OSError:
                pass
    counts = {"established": 0, "reset": 0}
    for st in state.values():
        counts[st] = counts.get(st, 0) + 1
    counts["pending"] = n - len(state)
    counts["alive_after_hold"] = alive
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
