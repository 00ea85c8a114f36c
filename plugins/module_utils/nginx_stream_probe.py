# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connections that go where clients go, for nginx_proxy_protocol's checks:
to an upstream with a PROXY header (does it accept one, and does it speak
TLS or plain HTTP?) and through one of nginx's listeners (with a PROXY
header of a made-up client when the listener itself expects one). No
Ansible here; each connection is bounded by its timeout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import ssl

from .nginx_stream_plan import proxy_header

TLS, HTTP = "tls", "http"
PROBE_NAME = "homelab-edge-probe"


def _tls(raw, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx.wrap_socket(raw, server_hostname=sni or PROBE_NAME)


def _http(sock):
    sock.sendall(b"HEAD / HTTP/1.0\r\nHost: " + PROBE_NAME.encode("ascii") + b"\r\n\r\n")
    head = sock.recv(64).decode("latin-1")
    status = head.split("\r\n")[0]
    # a server that does not expect PROXY protocol reads its header as a broken request: 400
    ok = head.startswith("HTTP/") and status.split()[1:2] != ["400"]
    return ok, status or "no answer"


def talk(host, port, inner, header=None, outer_tls=False, sni=None, timeout=5.0):
    """(ok, answer) of one connection: the PROXY header first when given,
    then a TLS handshake with the listener itself (`outer_tls`: `listen
    ... ssl`), then `inner`: a TLS handshake or an HTTP request."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            if header:
                raw.sendall(header)
            sock = _tls(raw, sni) if outer_tls else raw
            if inner == TLS:
                s = _tls(sock, sni)
                return True, "TLS %s" % s.version()
            return _http(sock)
    except (OSError, ssl.SSLError, socket.timeout, ValueError) as e:
        return False, "%s: %s" % (type(e).__name__, e)


def split_address(address):
    """(host, port) of 'host:port' or '[v6]:port'."""
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def header_for(host, port):
    """A PROXY header of a made-up client (documentation addresses) to host:port."""
    try:
        socket.inet_pton(socket.AF_INET6, host)
        return proxy_header(server=host, server_port=port)
    except (OSError, ValueError):
        pass
    try:
        socket.inet_aton(host)
        return proxy_header(server=host, server_port=port)
    except (OSError, ValueError):
        return proxy_header(server="192.0.2.1", server_port=port)


def ask_upstream(address, sni=None, timeout=5.0):
    """What an upstream speaks once it gets a PROXY header: (TLS or HTTP, answer),
    or (None, why): TLS is tried first, plain HTTP after it. When it answers
    neither with the header, the same without it says why."""
    host, port = split_address(address)
    header = header_for(host, port)
    answers = []
    for inner in (TLS, HTTP):
        ok, answer = talk(host, port, inner, header=header, sni=sni, timeout=timeout)
        if ok:
            return inner, answer
        answers.append("%s: %s" % (inner.upper() if inner == TLS else "HTTP", answer))
    for inner in (TLS, HTTP):
        ok, answer = talk(host, port, inner, sni=sni, timeout=timeout)
        if ok:
            spoken = inner.upper() if inner == TLS else "HTTP"
            return None, ("it speaks %s without a PROXY header (%s) but not with one (%s): it does not accept "
                          "PROXY protocol from this host yet" % (spoken, answer, "; ".join(answers)))
    return None, "it answers neither TLS nor HTTP, with or without a PROXY header (%s)" % "; ".join(answers)


def through_listener(check, kind, timeout=5.0):
    """(ok, answer) of a client's connection through one of nginx's listeners
    (a check of nginx_stream_plan.Plan.checks()), speaking `kind` (what the
    upstream answered) to what is behind it; ok is None where no check can
    be made (TLS inside nginx's own TLS)."""
    header = header_for(check["host"], check["port"]) if check["proxy_protocol"] else None
    inner = HTTP if check["proxy_ssl"] else kind
    if check["tls"] and inner == TLS:
        return None, "TLS inside nginx's own TLS (listen ... ssl, to an upstream that speaks TLS itself)"
    return talk(check["host"], check["port"], inner, header=header, outer_tls=check["tls"], sni=check["sni"],
                timeout=timeout)
