"""Traffic probes for the lab: fresh-socket DNS load, HTTPS and TCP checks.

Targets are only loopback or the lab's own containers. Every loop is
bounded by a count and a wall-clock limit and stops by itself.
"""

import io
import json
import os
import random
import resource
import selectors
import shlex
import socket
import ssl
import struct
import subprocess
import tarfile
import threading
import time

QNAME = "auth.core.home.lab"


def _open_file_room():
    """Raise this process's soft open-file limit to its hard limit (a CI
    shell often starts at 1024) and return how many sockets dns_load may
    hold open at once: the limit less room for everything else."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    return max(64, min(soft, 65536) - 512)


MAX_PENDING = _open_file_room()
SEND_OVERRUN = 1.10  # dns_load stops sending at the planned time x this (+ SEND_SLACK_S)
SEND_SLACK_S = 0.5
REPLY_TIMEOUT_S = 2.0  # dns_load's default wait for each reply
PROBE_INTERVAL_S = 0.5  # Prober's default: a round of probes, then this long before the next


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


def dns_load(host, ports, rate, count, timeout=REPLY_TIMEOUT_S, limit_s=None, stop=None):
    """Send `count` queries at `rate`/s, each from a fresh UDP socket (a new
    source port, so a new nginx session), alternating over `ports`, on an
    absolute schedule: query i is due at start + i/rate, the clock read
    before every burst. Stops sending at limit_s (default: the planned time
    x SEND_OVERRUN + 0.5 s), or when `stop` is set; then waits `timeout` for
    replies.

    Returns dict(planned, sent, answered, failed, send_errors, send_s,
    seconds, lateness_p50_s, lateness_p99_s, lateness_max_s): `sent` counts
    every send tried, `send_errors` those the kernel refused; lateness is how
    long after its due time each query went out. Sending stops at the bound
    even inside a catch-up burst. tests/support/dnsgen.py runs it pinned and
    says when it fell short of the plan."""
    ports = list(ports)
    sel = selectors.DefaultSelector()
    pending = {}  # sock -> (qid, deadline), in the order sent
    sent = answered = failed = errors = 0
    late = []  # seconds each send went out after its due time
    start = last_send = time.monotonic()
    stop_sending = start + (limit_s if limit_s else SEND_OVERRUN * count / float(rate) + SEND_SLACK_S)
    while True:
        now = time.monotonic()
        if stop is not None and stop.is_set():
            stop_sending = now
        if sent < count and now < stop_sending:
            due = min(count, int((now - start) * rate) + 1)
            while sent < due and len(pending) < MAX_PENDING:
                t_send = time.monotonic()
                if t_send >= stop_sending:  # the bound holds inside a catch-up burst too
                    break
                late.append(max(0.0, t_send - (start + sent / float(rate))))
                qid = random.randint(0, 65535)
                s = None
                try:
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    s.setblocking(False)
                    s.sendto(dns_query_packet(qid), (host, ports[sent % len(ports)]))
                    sel.register(s, selectors.EVENT_READ)
                    pending[s] = (qid, time.monotonic() + timeout)
                except OSError:  # nothing is registered yet: pending[s] is the try's last step
                    errors += 1
                    failed += 1
                    if s is not None:
                        s.close()
                sent += 1
                last_send = time.monotonic()
        elif not pending or now > stop_sending + timeout + 1:
            break
        for key, dummy in sel.select(min(1.0 / rate, 0.05) if sent < count else 0.05):
            s = key.fileobj
            qid = pending.pop(s)[0]
            sel.unregister(s)
            try:
                ok = dns_answered(s.recv(512), qid)
            except OSError:
                ok = False
            s.close()
            if ok:
                answered += 1
            else:
                failed += 1
        now = time.monotonic()
        while pending:  # deadlines are in the order sent: expire from the oldest
            s = next(iter(pending))
            if pending[s][1] > now:
                break
            pending.pop(s)
            sel.unregister(s)
            s.close()
            failed += 1
    for s in list(pending):
        sel.unregister(s)
        s.close()
        failed += 1
    late.sort()

    def pct(q):
        return round(late[min(len(late) - 1, int(q * len(late)))], 4) if late else None
    return {"planned": count, "sent": sent, "answered": answered, "failed": failed, "send_errors": errors,
            "send_s": round(last_send - start, 2), "seconds": round(time.monotonic() - start, 2),
            "lateness_p50_s": pct(0.50), "lateness_p99_s": pct(0.99), "lateness_max_s": round(late[-1], 4) if late else None}


def https_status(container, address, name="site", port=443):
    """HTTP status of https://<name>.nas.lab/ asked from inside `container`
    (curl, resolved to `address`); None when nothing answered."""
    out = subprocess.run(["docker", "exec", container, "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10",
                          "--resolve", "%s.nas.lab:%d:%s" % (name, port, address),
                          "https://%s.nas.lab:%d/" % (name, port)], capture_output=True, text=True, check=False)
    return int(out.stdout) if out.stdout.isdigit() and int(out.stdout) else None


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

    def __init__(self, targets, interval=PROBE_INTERVAL_S, max_probes=400):
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


class OpenLoopProber(threading.Thread):
    """Probe HTTPS endpoints on a fixed schedule whatever the answers take:
    every `interval` seconds one probe of each target starts in a thread of
    its own (open loop: a slow answer does not delay the next probe), at
    most `max_rounds` rounds and `max_running` probes at once (a round that
    finds them all busy counts its probes as failed, "busy"). stop() waits
    for the running ones (each bounded by its timeout)."""

    def __init__(self, targets, interval=0.25, max_rounds=1200, max_running=64, timeout=3.0):
        super(OpenLoopProber, self).__init__(daemon=True)
        self.targets, self.interval, self.max_rounds = targets, interval, max_rounds
        self.max_running, self.timeout = max_running, timeout
        self.stop_event, self.lock, self.running = threading.Event(), threading.Lock(), []
        self.planned = self.ok = self.failed = self.busy = 0

    def _one(self, host, port):
        good = https_ok(host, port, timeout=self.timeout)
        with self.lock:
            if good:
                self.ok += 1
            else:
                self.failed += 1

    def run(self):
        t0 = time.monotonic()
        for i in range(self.max_rounds):
            if self.stop_event.wait(max(0.0, t0 + i * self.interval - time.monotonic())):
                return
            self.running = [t for t in self.running if t.is_alive()]
            for host, port in self.targets:
                self.planned += 1
                if len(self.running) >= self.max_running:
                    with self.lock:
                        self.failed += 1
                        self.busy += 1
                    continue
                t = threading.Thread(target=self._one, args=(host, port), daemon=True)
                t.start()
                self.running.append(t)

    def stop(self):
        self.stop_event.set()
        self.join(10)
        for t in list(self.running):
            t.join(self.timeout + 1)
        with self.lock:
            return {"planned": self.planned, "ok": self.ok, "failed": self.failed, "busy": self.busy}


def count_in_logs(container, text, since):
    """Lines of a container's log since `since` (epoch s) that contain `text`."""
    raw = container.logs(since=int(since)).decode("utf-8", "replace")
    return sum(1 for line in raw.splitlines() if text in line)


NOT_ENOUGH = "worker_connections are not enough"


def dns_load_until_out_of_connections(lb_container, host, ports, rate=100, limit_s=120):
    """Fresh-socket DNS at `rate` until the load balancer logs that it ran out of connections, bounded by
    `limit_s`: a loaded machine's generator sends late, not fewer. The seconds it took; RuntimeError when it
    did not run out."""
    t0, stop, load = time.time(), threading.Event(), {}
    loader = threading.Thread(target=lambda: load.update(dns_load(
        host, ports, rate=rate, count=rate * limit_s, limit_s=limit_s, stop=stop)), daemon=True)
    loader.start()
    try:
        while not count_in_logs(lb_container, NOT_ENOUGH, t0):
            if not loader.is_alive():
                raise RuntimeError("%s did not run out of connections in %d s: %s" % (lb_container.name, limit_s, load))
            time.sleep(0.5)
        return round(time.time() - t0, 1)
    finally:
        stop.set()
        loader.join(30)


PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")


def put_program(container, name):
    """Copy tests/support/programs/<name> into the container's /usr/local/bin."""
    path = os.path.join(PROGRAMS, name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=name)
    container.put_archive("/usr/local/bin", buf.getvalue())
    return "/usr/local/bin/" + name


class ContainerFlood(object):
    """Run one of the flood programs in a client container (its own source
    address) in the background; started() waits (bounded) until it is under
    way (the program says so: its connections made, its requests sent),
    result() for its JSON counts."""

    def __init__(self, container, program, args):
        self.container = container
        self.out = "/tmp/%s-%d.json" % (program.split(".")[0], int(time.time() * 1000))
        path = put_program(container, program)
        cmd = "FLOOD_STARTED=%s.started python3 %s %s > %s.tmp 2>&1 & echo $! > %s.pid; wait; mv %s.tmp %s" % (
            self.out, path, " ".join(shlex.quote(str(a)) for a in args), self.out, self.out, self.out, self.out)
        container.exec_run(["sh", "-c", cmd], detach=True)

    def stop(self):
        """End the program now (its connections close); result() then has nothing to wait for."""
        self.container.exec_run(["sh", "-c", "kill $(cat %s.pid) 2>/dev/null" % self.out])

    def started(self, timeout=60):
        """Until the flood is under way (however long a loaded machine takes to get there), bounded."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.container.exec_run(["test", "-e", self.out + ".started"])[0] == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError("flood in %s not under way in %ss" % (self.container.name, timeout))

    def result(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            rc, out = self.container.exec_run(["cat", self.out])
            if rc == 0 and out.strip():
                return json.loads(out)
            time.sleep(1)
        raise RuntimeError("flood in %s gave no result in %ss" % (self.container.name, timeout))


def tcp_flood(container, host, port, n=500, hold=8):
    return ContainerFlood(container, "tcp_flood.py", [host, port, n, hold])


def https_flood(container, address, path="/slower", n=500, port=443, hostname=None):
    return ContainerFlood(container, "https_flood.py", [address, port, path, n] + ([hostname] if hostname else []))


def dns_under_load(lb_container, host, dns_ports, tcp_targets, rate, count):
    """Fresh-socket DNS at `rate` through `dns_ports` while the TCP targets
    (HTTPS and the API) of the same load balancer are probed. Returns (dns,
    tcp, alerts): alerts are the 'not enough' lines the load balancer logged."""
    t0 = time.time()
    prober = Prober(tcp_targets)
    prober.start()
    dns = dns_load(host, dns_ports, rate=rate, count=count)
    tcp = prober.stop()
    return dns, tcp, count_in_logs(lb_container, NOT_ENOUGH, t0)
