#!/usr/bin/env python3
"""N HTTPS requests at once from this container's address: every connection
is made first, then all requests go out together (a barrier), so N requests
are in flight at the same moment.

  https_flood.py ADDRESS PORT PATH N [HOSTNAME]  ->  {"200": .., "429": .., "<Error>": ..}

HOSTNAME (default ADDRESS) is the Host header and the TLS server name.
With FLOOD_STARTED=PATH in the environment, PATH is written when the requests
go out (a test waits for it, not for a guessed time).
Bounded: 30 s per request, 60 s per thread join.
"""
import http.client
import json
import os
import socket
import ssl
import sys
import threading


class Connection(http.client.HTTPSConnection):
    """HTTPS to ADDRESS with the Host header and SNI of HOSTNAME."""

    def __init__(self, address, port, hostname, **kw):
        http.client.HTTPSConnection.__init__(self, hostname, port, **kw)
        self.address = address

    def connect(self):
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def main(address, port, path, n, hostname=None):
    ctx = ssl._create_unverified_context()
    start = threading.Barrier(n)
    counts, lock = {}, threading.Lock()

    def one():
        c = Connection(address, port, hostname or address, context=ctx, timeout=30)
        try:
            c.connect()
            connected = None
        except Exception as e:  # deliberate: a refused or reset connection is counted by its kind
            connected = type(e).__name__
        try:
            if start.wait(30) == 0 and os.environ.get("FLOOD_STARTED"):  # every thread comes here, connected or not
                open(os.environ["FLOOD_STARTED"], "w").close()
        except threading.BrokenBarrierError:
            pass
        if connected is None:
            try:
                c.request("GET", path)
                code = str(c.getresponse().status)
            except Exception as e:  # deliberate: every failure is counted by its kind
                code = type(e).__name__
        else:
            code = connected
        with lock:
            counts[code] = counts.get(code, 0) + 1

    threads = [threading.Thread(target=one) for dummy in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
