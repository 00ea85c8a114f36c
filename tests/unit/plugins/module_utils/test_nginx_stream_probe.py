"""The checks' connections, against small servers on the loopback: an
upstream that takes a PROXY header (or not) and answers HTTP, and a listener
that expects a header itself (as `listen ... proxy_protocol` does)."""
import socket
import threading

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_probe as probe


class Server(object):
    """A loopback server: each connection's first bytes are kept; it answers `answer(first bytes)`."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.seen = []
        self.answer = answer
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, dummy = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and b"\x16\x03" not in data:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                self.seen.append(data)
                reply = self.answer(data)
                if reply:
                    conn.sendall(reply)

    def close(self):
        self.sock.close()


def proxy_aware(data):
    """Traefik trusting the VPS: a PROXY header, then the request; TLS is not spoken here."""
    if b"\x16\x03" in data:
        return None  # a ClientHello: this server speaks no TLS, it closes
    if data.startswith(b"PROXY TCP4 198.51.100.7 "):
        return b"HTTP/1.1 308 Permanent Redirect\r\n\r\n"
    return b"HTTP/1.1 400 Bad Request\r\n\r\n"


def unaware(data):
    """A server that reads the header as a broken request."""
    if b"\x16\x03" in data:
        return None
    return b"HTTP/1.1 400 Bad Request\r\n\r\n" if data.startswith(b"PROXY") else b"HTTP/1.1 200 OK\r\n\r\n"


@pytest.fixture
def server():
    made = []

    def make(answer):
        made.append(Server(answer))
        return made[-1]
    yield make
    for s in made:
        s.close()


def test_an_upstream_that_takes_the_header_is_asked_tls_first_then_http(server):
    s = server(proxy_aware)
    kind, answer = probe.ask_upstream("127.0.0.1:%d" % s.port, timeout=3)
    assert (kind, answer) == ("http", "HTTP/1.1 308 Permanent Redirect")
    assert s.seen[0].startswith(b"PROXY TCP4 198.51.100.7 127.0.0.1 40000 %d\r\n\x16\x03" % s.port)  # TLS tried first


def test_an_upstream_that_does_not_take_the_header_is_named_as_such(server):
    s = server(unaware)
    kind, answer = probe.ask_upstream("127.0.0.1:%d" % s.port, timeout=3)
    assert kind is None and answer.startswith("it speaks HTTP without a PROXY header (HTTP/1.1 200 OK) but not with one")


def test_a_listener_with_proxy_protocol_gets_a_made_up_clients_header(server):
    s = server(proxy_aware)
    check = {"host": "127.0.0.1", "port": s.port, "proxy_protocol": True, "tls": False, "proxy_ssl": False, "sni": None}
    assert probe.through_listener(check, "http", timeout=3) == (True, "HTTP/1.1 308 Permanent Redirect")
    assert s.seen[-1].startswith(b"PROXY TCP4 198.51.100.7 127.0.0.1 40000 %d\r\nHEAD / HTTP/1.0\r\n" % s.port)
    # without proxy_protocol on the listen, no header: the same server answers 400, a failed check
    plain = dict(check, proxy_protocol=False)
    assert probe.through_listener(plain, "http", timeout=3) == (False, "HTTP/1.1 400 Bad Request")


def test_tls_inside_nginxs_own_tls_is_not_checked():
    check = {"host": "127.0.0.1", "port": 1, "proxy_protocol": False, "tls": True, "proxy_ssl": False, "sni": None}
    ok, why = probe.through_listener(check, "tls")
    assert ok is None and "TLS inside nginx's own TLS" in why


def test_headers_are_tcp4_or_tcp6_with_documentation_addresses():
    assert probe.header_for("203.0.113.10", 443) == b"PROXY TCP4 198.51.100.7 203.0.113.10 40000 443\r\n"
    assert probe.header_for("::1", 443) == b"PROXY TCP6 2001:db8::7 ::1 40000 443\r\n"
    assert probe.header_for("nas.example.net", 443).startswith(b"PROXY TCP4 198.51.100.7 192.0.2.1 ")
