# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""homelab.edge.prove: the traffic of the active checks. Every function is
bounded in count and wall-clock time, closes every socket it opened on
every path, and returns counts (what was planned, sent and answered), never
text for a person."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import random
import resource
import select
import socket
import ssl
import struct
import threading
import time

from ansible.module_utils.six.moves.urllib.parse import urlsplit

DNS_PROBE_NAME = "kubernetes.default.svc.cluster.local"


def room_for(sockets):
    """Raise this process's soft open-file limit (up to its hard one) so it can
    hold `sockets` more; False when even the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = sockets + 256
    if soft == resource.RLIM_INFINITY or soft >= want:
        return True
    if hard != resource.RLIM_INFINITY and hard < want:
        return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return True


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def dns_query(qid, name):
    return (struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
            + b"".join(bytes([len(p)]) + p.encode("ascii") for p in name.strip(".").split(".")) + b"\x00"
            + struct.pack(">HH", 1, 1))


def dns_reply_to(reply, qid):
    """A DNS response to query `qid`: any RCODE (NXDOMAIN too: the server answered)."""
    return len(reply) >= 12 and struct.unpack(">H", reply[:2])[0] == qid and bool(reply[2] & 0x80)


def dns_paced(targets, rate, count, name, timeout, limit_s, clock=time.monotonic):
    """Send `count` DNS queries at `rate`/s over `targets` [(host, port)] in
    turn, each from a fresh UDP socket (a fresh source port: a new session in
    a UDP proxy), query i due at start + i/rate. Stops sending at `limit_s`;
    a query unanswered after `timeout` s counts as unanswered."""
    pending, poller = {}, select.poll()
    out = {"planned": count, "sent": 0, "answered": 0, "send_errors": 0, "late_max_s": 0.0}

    def collect(wait_s):
        for fd, dummy in poller.poll(max(0, int(wait_s * 1000))):
            s, qid, dummy = pending.pop(fd)
            poller.unregister(fd)
            try:
                if dns_reply_to(s.recv(4096), qid):
                    out["answered"] += 1
            except OSError:
                pass
            s.close()
        now = clock()
        for fd in [fd for fd, (s, q, at) in pending.items() if now - at > timeout]:
            poller.unregister(fd)
            pending.pop(fd)[0].close()

    start = clock()
    try:
        for i in range(count):
            due = start + i / float(rate)
            while clock() < due:
                collect(due - clock())
            now = clock()
            if now - start > limit_s:
                break
            out["late_max_s"] = max(out["late_max_s"], round(now - due, 3))
            host, port = targets[i % len(targets)]
            s = socket.socket(_family(host), socket.SOCK_DGRAM)
            qid = random.randint(0, 65535)
            try:
                s.sendto(dns_query(qid, name), (host, port))
            except OSError:
                out["send_errors"] += 1
                s.close()
                continue
            out["sent"] += 1
            pending[s.fileno()] = (s, qid, now)
            poller.register(s.fileno(), select.POLLIN)
        end = clock() + timeout
        while pending and clock() < end:
            collect(min(0.2, end - clock()))
    finally:
        for s, dummy, dummy in pending.values():
            s.close()
    out["seconds"] = round(clock() - start, 2)
    return out


def probe(host, port, kind, timeout):
    """One probe of a TCP service: `dns` (a query over TCP), `tls` (a
    completed handshake, any certificate) or `http` (any bytes back to a
    HEAD request). True when it answered within `timeout`."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            if kind == "dns":
                qid = random.randint(0, 65535)
                q = dns_query(qid, DNS_PROBE_NAME)
                raw.sendall(struct.pack(">H", len(q)) + q)
                return dns_reply_to(raw.recv(4096)[2:], qid)
            if kind == "tls":
                with _any_certificate().wrap_socket(raw):
                    return True
            raw.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            return bool(raw.recv(16))
    except (OSError, ValueError):
        return False


def probe_kind(host, port, timeout, service_port=None):
    """The first kind of probe host:port answers now, or None. A service on
    port 53 (service_port: the port behind a published one) speaks DNS."""
    for kind in (("dns",) if (service_port or port) == 53 else ("tls", "http")):
        if probe(host, port, kind, timeout):
            return kind
    return None


class Every(threading.Thread):
    """Call fn() now and every `interval` s until stopped, at most `max_rounds`
    times (a thread beside the load)."""

    def __init__(self, fn, interval, max_rounds):
        super(Every, self).__init__()
        self.daemon = True
        self.fn, self.interval, self.max_rounds = fn, interval, max_rounds
        self.stopped = threading.Event()

    def run(self):
        for dummy in range(self.max_rounds):
            self.fn()
            if self.stopped.wait(self.interval):
                return

    def stop(self, join_s):
        self.stopped.set()
        self.join(join_s)


def probes(targets, interval, timeout, max_rounds):
    """An Every that probes each (host, port, kind) per round; its counts
    are in .counts (probes_ok, probes_failed)."""
    counts = {"probes_ok": 0, "probes_failed": 0}

    def round_():
        for host, port, kind in targets:
            counts["probes_ok" if probe(host, port, kind, timeout) else "probes_failed"] += 1

    thread = Every(round_, interval, max_rounds)
    thread.counts = counts
    return thread


def _outcome(s):
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err == 0:
        return "established"
    if err in (errno.ECONNREFUSED, errno.ECONNRESET):
        return "reset"
    if err == errno.ETIMEDOUT:
        return "timeout"
    return errno.errorcode.get(err, str(err))


# Linux socket options (ip(7)): bind to an address not (yet) on an interface; bind without reserving a port
IP_FREEBIND, IP_BIND_ADDRESS_NO_PORT = 15, 24


def bind_source(s, source):
    """Bind socket `s` to the source address `source` before it connects (the port is picked at connect, shared
    between sources as long as each 4-tuple is unique)."""
    # both options live at SOL_IP, for IPv6 sockets too (the kernel keeps them in the socket's inet part)
    s.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    s.bind((source, 0))


def hold(host, port, n, timeout, hold_s, clock=time.monotonic, sleep=time.sleep, sources=None):
    """Open `n` TCP connections to host:port at once from this host, wait up
    to `timeout` for each to be established or reset, hold the established
    ones idle `hold_s`, count those still open, and close them all. With
    `sources` (addresses this host owns), connection i comes from
    sources[i % len(sources)].
    Returns counts: established, reset, timeout, other (and their errors),
    held (still open after hold_s), first (the first connection's outcome)."""
    socks, outcome = [], {}
    try:
        for i in range(n):
            s = socket.socket(_family(host), socket.SOCK_STREAM)
            s.setblocking(False)
            socks.append(s)
            if sources:
                try:
                    bind_source(s, sources[i % len(sources)])
                except OSError as e:
                    outcome[s] = errno.errorcode.get(e.errno, str(e.errno))
                    continue
            err = s.connect_ex((host, port))
            if err not in (0, errno.EINPROGRESS):
                outcome[s] = errno.errorcode.get(err, str(err))
        end = clock() + timeout
        waiting = [s for s in socks if s not in outcome]
        while waiting and clock() < end:
            dummy, ready, dummy = select.select([], waiting, [], max(0, min(0.5, end - clock())))
            for s in ready:
                outcome[s] = _outcome(s)
            waiting = [s for s in waiting if s not in outcome]
        for s in waiting:
            outcome[s] = "timeout"
        sleep(hold_s)
        held = 0
        for s in socks:
            if outcome[s] != "established":
                continue
            try:
                if s.recv(1, socket.MSG_PEEK):
                    held += 1  # the server spoke first: still open
            except BlockingIOError:
                held += 1
            except OSError:
                pass
        counts = {"connections": n, "held": held, "first": outcome[socks[0]] if socks else None}
        for key in ("established", "reset", "timeout"):
            counts[key] = sum(1 for s in socks if outcome[s] == key)
        others = [outcome[s] for s in socks if outcome[s] not in ("established", "reset", "timeout")]
        counts.update(other=len(others), errors=sorted(set(others)))
        return counts
    finally:
        for s in socks:
            s.close()


def loopback(host):
    """True when `host` is (or resolves only to) a loopback address: a
    connection there never leaves this machine (an SSH tunnel's end, a port
    published on it), so it shows nothing about a remote host's firewall."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    addrs = set(i[4][0].split("%")[0] for i in infos)
    return bool(addrs) and all(a.startswith("127.") or a == "::1" or a.startswith("::ffff:127.") for a in addrs)


def cut(answered_before, answered_now):
    """The specs that answered a new client before and do not now."""
    return [s for s in answered_before if s not in answered_now]


def reaches(host, port, proto, timeout):
    """Whether a NEW client here reaches host:port: "answered" (TCP: the
    connection was established; UDP: a datagram came back), "refused" (a
    reset, or ICMP port unreachable) or "no answer" (nothing within
    `timeout`: dropped, or a UDP service that answers no stray datagram, as
    WireGuard does). One connection or datagram, to the first address `host`
    resolves to (IPv4 or IPv6, as the name gives); nothing else is sent."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    try:
        family, dummy, dummy, dummy, addr = socket.getaddrinfo(host, port, 0, kind)[0]
    except (socket.gaierror, UnicodeError):
        return "no answer"
    if proto == "tcp":  # one connection, told apart as hold() tells them
        first = hold(addr[0], port, 1, timeout, 0)["first"]
        return {"established": "answered", "reset": "refused"}.get(first, "no answer")
    s = socket.socket(family, kind)
    try:
        s.settimeout(timeout)
        s.connect(addr)
        s.send(b"homelab.edge reach\n")
        s.recv(2048)
        return "answered"
    except socket.timeout:
        return "no answer"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "no answer"
    finally:
        s.close()


def endpoint(url):
    """http(s)://HOST[:PORT] as (host, port, tls); ValueError naming what is wrong."""
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError("url must be http(s)://HOST[:PORT], not %s" % url)
    return u.hostname, u.port or (443 if u.scheme == "https" else 80), u.scheme == "https"


def _any_certificate():
    """A TLS client context that takes any certificate: the checks ask what answers, not who it is."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _get(host, port, tls, hostname, path, timeout, read):
    """What read(s) returns on the socket s that sent one GET http(s)://hostname<path> to host:port (any
    certificate; SNI = hostname). What the connection raised, raised."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = _any_certificate().wrap_socket(raw, server_hostname=hostname) if tls else raw
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, hostname)).encode("ascii"))
        got = read(s)
        if tls:
            s.close()
    return got


def _read_head(s, limit):
    """The bytes s sends up to the end of a response's head (the blank line), at most about `limit`."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) < limit:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def http_status(host, port, tls, hostname, path, timeout):
    """The status of one GET http(s)://hostname<path> sent to host:port (any
    certificate; SNI = hostname), or the name of what went wrong."""
    try:
        head = _get(host, port, tls, hostname, path, timeout, lambda s: s.recv(64)).decode("latin-1")
        parts = head.split()
        return int(parts[1]) if len(parts) > 1 and head.startswith("HTTP/") and parts[1].isdigit() else "no HTTP answer"
    except socket.timeout:
        return "timeout"
    except (OSError, ValueError) as e:
        return type(e).__name__


def http_head(host, port, tls, hostname, path, timeout, limit=16384):
    """(status, {lower-cased header: value}) of one GET http(s)://hostname<path> sent to host:port (any
    certificate; SNI = hostname): the response's head only, at most `limit` bytes. (what went wrong, {}) when no
    HTTP answer came."""
    try:
        head = _get(host, port, tls, hostname, path, timeout, lambda s: _read_head(s, limit))
    except socket.timeout:
        return "timeout", {}
    except (OSError, ValueError) as e:
        return type(e).__name__, {}
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if not (lines[0].startswith("HTTP/") and len(parts) > 1 and parts[1].isdigit()):
        return "no HTTP answer", {}
    headers = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    return int(parts[1]), headers


def at_once(n, fn, timeout):
    """fn() in `n` threads released together; {result: count}. Threads left
    after `timeout` + 5 s count as "unfinished"."""
    gate, results, lock = threading.Barrier(n + 1), [], threading.Lock()

    def one():
        try:
            gate.wait(timeout)
        except threading.BrokenBarrierError:
            return
        r = fn()
        with lock:
            results.append(r)

    old = threading.stack_size(256 * 1024)
    try:
        threads = [threading.Thread(target=one) for dummy in range(n)]
        for t in threads:
            t.daemon = True
            t.start()
    finally:
        threading.stack_size(old)
    gate.wait(timeout)
    end = time.monotonic() + timeout + 5
    for t in threads:
        t.join(max(0, end - time.monotonic()))
    counts = {}
    with lock:
        for r in results:
            counts[str(r)] = counts.get(str(r), 0) + 1
        unfinished = n - len(results)
    if unfinished:
        counts["unfinished"] = unfinished
    return counts
