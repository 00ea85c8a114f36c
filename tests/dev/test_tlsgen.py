"""The compiled TLS connection generator (tests/support/loadgen_go/cmd/tlsgen, tlsgen.py):
connections started on schedule whatever the target does, what each got
counted by stage, and a run the generator itself shaped is invalid
(tlsgen.validity). Loopback only, each run 2 s or less at 50 connections/s
at most; the binary is built from the checkout's sources into a temp dir."""
import http.server
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import loadgen  # noqa: E402
import tlsgen  # noqa: E402

GO_ENV = dict(os.environ, GOFLAGS="-mod=mod", GOWORK="off", CGO_ENABLED="0")
SNI = "site.nas.lab"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache dir whose bin/tlsgen is the build of these sources (as `lab/lab.sh tlsgen` makes it), set as
    HOMELAB_EDGE_CACHE for the module; the binary's path."""
    if not shutil.which("go"):
        pytest.skip("go is not on PATH: the generator cannot be built (lab/lab.sh env puts it there)")
    cache = tmp_path_factory.mktemp("cache")
    h = tlsgen.sources_hash()
    out = cache / "bin" / ("tlsgen-" + h)
    subprocess.run(loadgen.build_command("tlsgen", out, h), cwd=tlsgen.GO_DIR, env=GO_ENV, check=True, timeout=300)
    (cache / "bin" / "tlsgen").symlink_to(out.name)
    mp = pytest.MonkeyPatch()
    mp.setenv("HOMELAB_EDGE_CACHE", str(cache))
    yield tlsgen.binary()
    mp.undo()


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("cert")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-subj", "/CN=" + SNI, "-days", "1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    return str(d / "cert.pem"), str(d / "key.pem")


class Handler(http.server.BaseHTTPRequestHandler):
    """200 on /fast, 200 after 0.5 s on /slow, 429 on /limited, 404 elsewhere."""
    protocol_version = "HTTP/1.1"
    hosts = []

    def do_GET(self):
        self.hosts.append(self.headers.get("Host"))
        if self.path == "/slow":
            time.sleep(0.5)
        code = {"/fast": 200, "/slow": 200, "/limited": 429}.get(self.path, 404)
        body = b"ok\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class TLSServer(http.server.ThreadingHTTPServer):
    """Each connection's handshake in its own thread (a slow client holds no other)."""
    request_queue_size = 256
    daemon_threads = True
    context = None

    def finish_request(self, request, client_address):
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        super().finish_request(request, client_address)


@pytest.fixture(scope="module")
def https(cert):
    """A loopback HTTPS server (Handler); its port."""
    server = TLSServer(("127.0.0.1", 0), Handler)
    server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.context.load_cert_chain(*cert)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    t.join(5)


@pytest.fixture
def mute():
    """A TCP server that accepts and never speaks: handshakes wait for nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    sock.settimeout(0.2)
    held, done = [], threading.Event()

    def hold():
        while not done.is_set():
            try:
                held.append(sock.accept()[0])
            except socket.timeout:
                continue
    t = threading.Thread(target=hold, daemon=True)
    t.start()
    yield sock.getsockname()[1]
    done.set()
    t.join(2)
    for c in held:
        c.close()
    sock.close()


def test_a_paced_run_is_valid_every_connection_answered_and_timed(built, https):
    Handler.hosts.clear()
    r = tlsgen.run("127.0.0.1", https, SNI, "/fast", rate=50, seconds=2, timeout=2, timeline=True)
    assert r["planned"] == r["started"] == r["connected"] == r["handshakes"] == 100, r
    assert r["answered"] == r["ok_2xx"] == r["completed"] == 100 and r["codes"] == {"200": 100}, r
    assert r["failed"] == r["r429"] == r["other_code"] == r["skipped_at_bound"] == r["unfinished"] == 0, r
    assert r["valid"] and r["invalid_because"] == "", r["invalid_because"]
    assert 0 < r["handshake_p50_s"] <= r["handshake_p99_s"] <= r["handshake_max_s"] < 2, r
    assert r["handshake_p50_s"] < r["answer_p50_s"] <= r["answer_p99_s"] <= r["answer_max_s"] < 2, r
    assert 0 <= r["lateness_p50_s"] <= r["lateness_p99_s"] <= r["lateness_max_s"], r
    assert 1.9 <= r["start_s"] < 2.0 and r["wall_s"] < 2.0 * 1.1 + 2 + 2 and r["peak_open"] >= 1, r
    assert r["build"] == tlsgen.build() == tlsgen.sources_hash() and r["generator"] == "tlsgen (Go)", r
    assert set(Handler.hosts) == {SNI} and len(Handler.hosts) == 100
    keys = {"s", "started", "connected", "handshakes", "ok_2xx", "r429", "other_code", "failed", "open"}
    tl = r["timeline"]
    assert [e["s"] for e in tl] == list(range(len(tl))) and all(set(e) == keys for e in tl), tl
    assert [e["started"] for e in tl[:2]] == [50, 50] and sum(e["ok_2xx"] for e in tl) == 100, tl
    assert tl[-1]["open"] == 0 and all(e["open"] >= 0 for e in tl), tl


def test_answers_are_counted_by_status(built, https):
    r = tlsgen.run("127.0.0.1", https, SNI, "/limited", rate=50, seconds=1, timeout=2)
    assert r["r429"] == r["answered"] == r["completed"] == 50 and r["ok_2xx"] == r["other_code"] == 0, r
    assert r["codes"] == {"429": 50} and r["valid"], r
    assert "timeline" not in r  # only when asked
    r = tlsgen.run("127.0.0.1", https, SNI, "/nowhere", rate=20, seconds=0.5, timeout=2)
    assert r["other_code"] == 10 and r["codes"] == {"404": 10} and r["valid"], r


def test_a_server_that_never_speaks_times_handshakes_out_and_the_run_stays_valid(built, mute):
    t0 = time.monotonic()
    r = tlsgen.run("127.0.0.1", mute, SNI, "/fast", rate=20, seconds=1, timeout=1, timeline=True)
    took = time.monotonic() - t0
    assert r["started"] == r["connected"] == 20 and r["handshakes"] == r["answered"] == 0, r
    assert r["failures"]["handshake"] == {"reset": 0, "timeout": 20, "eof": 0, "other": 0}, r
    assert r["failed"] == 20 and r["unfinished"] == 0 and r["handshake_p50_s"] is None, r
    assert r["valid"], r["invalid_because"]  # the server was slow, not the generator
    assert r["wall_s"] < 1 * 1.1 + 1 + 2 and took < 1 * 1.1 + 1 + 2 + 1, (r["wall_s"], took)
    assert sum(e["failed"] for e in r["timeline"]) == 20 and max(e["open"] for e in r["timeline"]) > 0


def test_an_answer_slower_than_the_timeout_is_a_response_timeout(built, https):
    r = tlsgen.run("127.0.0.1", https, SNI, "/slow", rate=10, seconds=0.5, timeout=0.3)
    assert r["handshakes"] == 5 and r["answered"] == r["completed"] == 0, r
    assert r["failures"]["response"] == {"reset": 0, "timeout": 5, "eof": 0, "other": 0} and r["valid"], r


@pytest.fixture(params=["reset", "banner"])
def odd(request):
    """A TCP server that resets each connection after the ClientHello, or greets it with an SSH banner."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    held, done = [], threading.Event()

    def serve():
        while not done.is_set():
            try:
                c = sock.accept()[0]
            except socket.timeout:
                continue
            if request.param == "reset":
                c.recv(16)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
            else:
                c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                held.append(c)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield request.param, sock.getsockname()[1]
    done.set()
    t.join(2)
    for c in held:
        c.close()
    sock.close()


def test_handshake_failures_are_counted_by_kind_with_the_others_named(built, odd):
    mode, port = odd
    r = tlsgen.run("127.0.0.1", port, SNI, "/fast", rate=10, seconds=0.5, timeout=1)
    kind = {"reset": "reset", "banner": "other"}[mode]
    assert r["failures"]["handshake"][kind] == r["failed"] == 5 and r["handshakes"] == 0 and r["valid"], r
    if mode == "banner":
        assert r["other_errors"] == {"handshake: tls: first record does not look like a TLS handshake": 5}, r


def test_a_closed_port_is_connect_refused(built, closed):
    r = tlsgen.run("127.0.0.1", closed, SNI, "/fast", rate=20, seconds=0.5, timeout=1)
    assert r["failures"]["connect"] == {"refused": 10, "timeout": 0, "other": 0} and r["connected"] == 0, r
    assert r["local_errors"] == 0 and r["valid"], r


def test_a_public_target_is_refused_before_anything_is_sent(built):
    t0 = time.monotonic()
    p = subprocess.run([built, "-json", "-target", "8.8.8.8", "-rate", "1", "-seconds", "1"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p
    assert "loopback or private" in p.stderr and time.monotonic() - t0 < 1, p
    for other in ("example.org", "100.64.0.1", "2001:4860:4860::8888", "0.0.0.0"):
        with pytest.raises(RuntimeError, match="exited 2: .*loopback or private"):
            tlsgen.run(other, 443, SNI, "/", rate=1, seconds=0.1, timeout=1)


def test_connections_held_back_at_max_open_make_the_run_invalid(built, https):
    r = tlsgen.run("127.0.0.1", https, SNI, "/slow", rate=50, seconds=1, timeout=2, max_open=5)
    assert r["skipped_at_bound"] > 0 and r["started"] + r["skipped_at_bound"] == 50 and r["peak_open"] == 5, r
    assert r["completed"] == r["started"], r
    assert not r["valid"] and "skipped at the generator's bound (-max-open 5)" in r["invalid_because"], r


def test_a_container_gets_the_binary_once(built, https, tmp_path, monkeypatch):
    """docker, faked: cp copies into a directory, exec runs from it; the second run copies nothing; a new container
    of the same name (another id: the lab re-created) gets it again."""
    box, log, ident = tmp_path / "box", tmp_path / "docker.log", tmp_path / "id"
    box.mkdir()
    ident.write_text("first\n")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "docker").write_text('#!/bin/sh\necho "$@" >> %s\ncase $1 in\n  inspect) cat %s ;;\n'
                                 '  cp) cp "$2" %s/tlsgen ;;\n'
                                 '  exec) shift 2; b=$1; shift; exec %s/$(basename $b) "$@" ;;\nesac\n'
                                 % (log, ident, box, box))
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (fake, os.environ["PATH"]))
    monkeypatch.setattr(tlsgen, "_copied", {})
    for n in range(3):
        if n == 2:
            ident.write_text("second\n")
        r = tlsgen.run("127.0.0.1", https, SNI, "/fast", rate=10, seconds=0.5, timeout=1, container="lab-lan-client")
        assert r["ok_2xx"] == 5 and r["valid"], r
    calls = [c for c in log.read_text().splitlines() if not c.startswith("inspect")]
    assert [c.split()[0] for c in calls] == ["cp", "exec", "exec", "cp", "exec"], calls
    assert calls[0].endswith("lab-lan-client:/tmp/tlsgen") and calls[1].startswith("exec lab-lan-client /tmp/tlsgen ")


def good_output(**change):
    """A valid run's output as the binary prints it, with `change` applied."""
    out = {"planned": 1000, "started": 1000, "skipped_at_bound": 0, "stopped_at_bound": False, "max_open": 20000,
           "local_errors": 0, "local_errno": {}, "unfinished": 0, "lateness_p50_s": 0.0002,
           "lateness_p99_s": 0.002, "lateness_max_s": 0.004, "user_s": 0.5, "system_s": 1.0, "wall_s": 5.0,
           "cpus": 2, "valid": True, "invalid_because": ""}
    out.update(change)
    return out


def test_a_good_output_is_valid():
    assert tlsgen.validity(good_output()) == (True, "")


@pytest.mark.parametrize("change, says", [
    ({"skipped_at_bound": 3, "started": 997}, "3 connections skipped at the generator's bound (-max-open 20000)"),
    ({"local_errors": 2, "local_errno": {"EMFILE": 2}}, "2 connections the generator could not open (EMFILE 2)"),
    ({"lateness_p99_s": 0.01}, "99th percentile lateness 0.01 s"),  # under 10 ms, not at it
    ({"lateness_p99_s": None}, "99th percentile lateness None"),
    ({"user_s": 3.0, "system_s": 4.0}, "generator CPU 7.000 s over 5.000 s (not under 70 % of 2 cores)"),
    ({"wall_s": 0}, "generator CPU"),
    ({"unfinished": 1}, "1 connections still open past their deadline"),
    ({"started": 900, "stopped_at_bound": True}, "reached 900 of 1000 planned (stopped at the hard bound)"),
    ({"valid": False, "invalid_because": "a rule only the binary has"}, "the generator's own verdict"),
])
def test_each_rule_alone_makes_a_run_invalid(change, says):
    valid, why = tlsgen.validity(good_output(**change))
    assert not valid and says in why and ";" not in why, why
