#!/usr/bin/env python3
"""N HTTPS requests at once from this container's address: every connection
is made first, then all requests go out together (a barrier), so N requests
are in flight at the same moment.

  https_flood.py HOST PATH N [PORT]  ->  {"200": .., "429": .., "<Error>": ..}

Bounded: 30 s per request, 60 s per thread join.
"""
import http.client
import json
import ssl
import sys
import threading


def main(host, path, n, port=443):
    ctx = ssl._create_unverified_context()
    start = threading.Barrier(n)
    counts, lock = {}, threading.Lock()

    def one():
        try:
            c = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
            c.connect()
            start.wait(30)
            c.request("GET", path)
            code = str(c.getresponse().status)
        except Exception as e:  # deliberate: every failure is counted by its kind
            code = type(e).__name__
        with lock:
            counts[code] = counts.get(code, 0) + 1

    threads = [threading.Thread(target=one) for dummy in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 443)
