#!/usr/bin/env python3
"""Monitoring-like probes, like seed 001's: every INTERVAL seconds, one HTTPS
request per target, each in its own thread (a slow answer never delays the
next round), for SECONDS seconds. One JSON line per probe:
{"t": epoch, "target": NAME, "code": 200 | null, "error": null | "timeout" | "refused" | "reset" | ...,
 "seconds": 0.04}

  probe_loop.py ADDRESS PORT SECONDS INTERVAL NAME=HOSTNAME[/PATH]... [NAME=tcp:PORT]...

NAME=tcp:PORT probes a service beside Traefik, not behind it: a new TCP
connection to ADDRESS:PORT and the first line the service says (sshd's
banner); its line has "ok": true when that line came, and no code.
"""
import http.client
import json
import socket
import ssl
import sys
import threading
import time


def kind(e):
    """A failed probe's error, as its line names it."""
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ConnectionResetError):
        return "reset"
    return type(e).__name__


def write(out, lock, line):
    with lock:
        out.write(json.dumps(line) + "\n")
        out.flush()


def probe(address, port, name, hostname, path, out, lock):
    t0 = time.time()
    code = error = None
    try:
        ctx = ssl._create_unverified_context()
        sock = socket.create_connection((address, port), timeout=5)
        conn = http.client.HTTPSConnection(hostname, port, context=ctx, timeout=5)
        conn.sock = ctx.wrap_socket(sock, server_hostname=hostname)
        conn.request("GET", path, headers={"Connection": "close"})
        code = conn.getresponse().status
        conn.close()
    except Exception as e:  # deliberate: a failed probe is a null code and the error's kind
        error = kind(e)
    write(out, lock, {"t": round(t0, 3), "target": name, "code": code, "error": error,
                      "seconds": round(time.time() - t0, 3)})


def banner(address, port, name, out, lock):
    t0 = time.time()
    ok, error = False, None
    try:
        with socket.create_connection((address, port), timeout=5) as sock:
            ok = sock.recv(256).startswith(b"SSH-")
            error = None if ok else "no-banner"
    except Exception as e:  # deliberate: a failed probe is ok false and the error's kind
        error = kind(e)
    write(out, lock, {"t": round(t0, 3), "target": name, "code": None, "ok": ok, "error": error,
                      "seconds": round(time.time() - t0, 3)})


def main(address, port, seconds, interval, targets):
    lock = threading.Lock()
    end = time.time() + seconds
    threads = []
    while time.time() < end:
        tick = time.time()
        for spec in targets:
            name, hostname = spec.split("=", 1)
            if hostname.startswith("tcp:"):
                t = threading.Thread(target=banner, args=(address, int(hostname[4:]), name, sys.stdout, lock))
                t.start()
                threads.append(t)
                continue
            hostname, slash, path = hostname.partition("/")
            t = threading.Thread(target=probe, args=(address, port, name, hostname, "/" + path, sys.stdout, lock))
            t.start()
            threads.append(t)
        time.sleep(max(0.0, interval - (time.time() - tick)))
    for t in threads:
        t.join(10)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:])
