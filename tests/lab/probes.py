"""Traffic probes for the lab: fresh-socket DNS load, HTTPS and TCP checks.

Targets are only loopback or the lab's own containers. Every loop is
bounded by a count and a wall-clock limit and stops by itself.
"""

import base64
import json
import random
import selectors
import socket
import ssl
import struct
import threading
import time

QNAME = "auth.core.home.lab"


def dns_query_packet(qid, name=QNAME):
    return (struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
            + b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
            + b"\0" + struct.pack(">HH", 1, 1))


def dns_answered(reply, qid):
    """Same ID, a response, RCODE 0 and at least one answer record."""
    if len(reply) < 12:
        return False
    rid, flags, ancount = struct.unpack(">HHxxH", reply[:8])
    return rid == qid and flags & 0x8000 and flags & 0x000F == 0 and ancount > 0


def dns_load(host, ports, rate, count, timeout=2.0, limit_s=None, stop=None):
    """Send `count` queries at `rate`/s, each from a fresh UDP socket (a new
    source port, so a new nginx session), alternating over `ports`.

    Returns dict(sent, answered, failed, seconds). Bounded: stops at `count`
    queries or after limit_s (default count/rate + timeout + 10) seconds.
    """
    ports = list(ports)
    sel = selectors.DefaultSelector()
    pending = {}  # sock -> (qid, deadline)
    sent = answered = failed = 0
    start = time.monotonic()
    hard_stop = start + (limit_s if limit_s else count / float(rate) + timeout + 10)
    interval = 1.0 / rate
    next_send = start
    while True:
        now = time.monotonic()
        if now >= hard_stop or (stop is not None and stop.is_set()):
            break
        while sent < count and now >= next_send:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setblocking(False)
            qid = random.randint(0, 65535)
            try:
                s.sendto(dns_query_packet(qid), (host, ports[sent % len(ports)]))
                sel.register(s, selectors.EVENT_READ)
                pending[s] = (qid, now + timeout)
            except OSError:
                s.close()
                failed += 1
            sent += 1
            next_send += interval
        if sent >= count and not pending:
            break
        wait = max(0.0, min(next_send - now if sent < count else 0.05, 0.05))
        for key, dummy in sel.select(wait):
            s = key.fileobj
            qid = pending.pop(s)[0]
            sel.unregister(s)
            try:
                reply = s.recv(512)
                ok = dns_answered(reply, qid)
            except OSError:
                ok = False
            s.close()
            if ok:
                answered += 1
            else:
                failed += 1
        now = time.monotonic()
        for s in [sock for sock, (qid, dl) in pending.items() if dl <= now]:
            pending.pop(s)
            sel.unregister(s)
            s.close()
            failed += 1
    for s in list(pending):
        sel.unregister(s)
        s.close()
        failed += 1
    return {"sent": sent, "answered": answered, "failed": failed,
            "seconds": round(time.monotonic() - start, 2)}


def dns_max_sequential(host, port, seconds, timeout=1.0):
    """Fresh-socket queries back to back for `seconds`: the rate one client
    can hold. Returns dict(sent, answered, rate)."""
    sent = answered = 0
    end = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        qid = random.randint(0, 65535)
        try:
            s.sendto(dns_query_packet(qid), (host, port))
            if dns_answered(s.recv(512), qid):
                answered += 1
        except OSError:
            pass
        finally:
            s.close()
        sent += 1
    took = time.monotonic() - start
    return {"sent": sent, "answered": answered, "rate": round(answered / took, 1)}


def https_ok(host, port, timeout=3.0, expect=(200, 401)):
    """One TLS connection and GET /; True when the status is expected."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
                head = s.recv(64).decode("latin-1")
        return head.startswith("HTTP/1.1 ") and int(head.split()[1]) in expect
    except (OSError, ValueError, IndexError):
        return False


class Prober(threading.Thread):
    """Probe HTTPS endpoints every `interval` seconds in the background,
    at most `max_probes` rounds; counts successes and failures."""

    def __init__(self, targets, interval=0.5, max_probes=400):
        super(Prober, self).__init__(daemon=True)
        self.targets = targets  # [(host, port)]
        self.interval = interval
        self.max_probes = max_probes
        self.stop_event = threading.Event()
        self.ok = 0
        self.failed = 0

    def run(self):
        for dummy in range(self.max_probes):
            if self.stop_event.is_set():
                return
            for host, port in self.targets:
                if https_ok(host, port):
                    self.ok += 1
                else:
                    self.failed += 1
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        self.join(10)
        return {"ok": self.ok, "failed": self.failed}


def count_in_logs(container, text, since):
    """Lines of a container's log since `since` (epoch s) that contain `text`."""
    raw = container.logs(since=int(since)).decode("utf-8", "replace")
    return sum(1 for line in raw.splitlines() if text in line)


NOT_ENOUGH = "worker_connections are not enough"


# Scripts that run inside a lab client container (its own source address).
TCP_FLOOD = r"""
import errno, json, selectors, socket, sys, time
host, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
for i in range(n):
    s = socket.socket(); s.setblocking(False)
    s.connect_ex((host, port)); sel.register(s, selectors.EVENT_WRITE)
state = {}
deadline = time.time() + 10
while len(state) < n and time.time() < deadline:
    for key, ev in sel.select(0.5):
        s = key.fileobj
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        state[s] = "established" if err == 0 else ("reset" if err == errno.ECONNREFUSED else errno.errorcode.get(err, str(err)))
        sel.unregister(s)
time.sleep(hold)
alive = 0
for s, st in state.items():
    if st == "established":
        try:
            s.send(b"GET / HTTP/1.0\r\n\r\n"); alive += 1
        except OSError:
            pass
counts = {"established": 0, "reset": 0}
for st in state.values():
    counts[st] = counts.get(st, 0) + 1
counts["pending"] = n - len(state)
counts["alive_after_hold"] = alive
print(json.dumps(counts))
"""

HTTPS_FLOOD = r"""
import http.client, json, ssl, sys, threading
host, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl._create_unverified_context()
start = threading.Barrier(n)
counts, lock = {}, threading.Lock()
def one():
    try:
        c = http.client.HTTPSConnection(host, 443, context=ctx, timeout=30)
        c.connect()
        start.wait(30)
        c.request("GET", path)
        code = str(c.getresponse().status)
    except Exception as e:
        code = type(e).__name__
    with lock:
        counts[code] = counts.get(code, 0) + 1
threads = [threading.Thread(target=one) for _ in range(n)]
[t.start() for t in threads]
[t.join(60) for t in threads]
print(json.dumps(counts))
"""


class ContainerFlood(object):
    """Run a flood script in a client container in the background; result()
    waits (bounded) for its JSON counts."""

    def __init__(self, container, script, args):
        self.container = container
        self.out = "/tmp/flood-%d.json" % int(time.time() * 1000)
        code = base64.b64encode(script.encode()).decode()
        cmd = ("echo %s | base64 -d > /tmp/flood.py && python3 /tmp/flood.py %s > %s.tmp 2>&1; mv %s.tmp %s"
               % (code, " ".join(str(a) for a in args), self.out, self.out, self.out))
        container.exec_run(["sh", "-c", cmd], detach=True)

    def result(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            rc, out = self.container.exec_run(["cat", self.out])
            if rc == 0 and out.strip():
                return json.loads(out)
            time.sleep(1)
        raise RuntimeError("flood in %s gave no result in %ss" % (self.container.name, timeout))


def tcp_flood(container, host, port, n=500, hold=8):
    return ContainerFlood(container, TCP_FLOOD, [host, port, n, hold])


def https_flood(container, host, path="/slower", n=500):
    return ContainerFlood(container, HTTPS_FLOOD, [host, path, n])


def dns_under_load(lb_container, host, base, rate, count):
    """Fresh-socket DNS at `rate` through base+53 and base+1053 while HTTPS
    (base+443) and the API (base+6443) of the same load balancer are probed.
    Returns (dns, https, alerts): alerts are the 'not enough' lines the load
    balancer logged meanwhile."""
    t0 = time.time()
    prober = Prober([(host, base + 443), (host, base + 6443)])
    prober.start()
    dns = dns_load(host, [base + 53, base + 1053], rate=rate, count=count)
    https = prober.stop()
    return dns, https, count_in_logs(lb_container, NOT_ENOUGH, t0)
