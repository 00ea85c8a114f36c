"""Tests of what only the checkout has - the demo (demo/), the test helpers
(tests/support/), Molecule's files - beside tests/unit (`tests/run.sh unit`
runs both). Not shipped (galaxy.yml build_ignore): tests/unit runs from the
tarball alone."""
import os
import socket
import sys
import threading

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import slowdns  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
__import__("conftest")  # tests/unit's: the collection importable as ansible_collections.homelab.edge


def _bound(kind):
    """A port on 127.0.0.1 bound by a socket of `kind` that is never read nor listening, for the generators' tests."""
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def dead():
    """A UDP port bound and never read: queries to it go unanswered."""
    yield from _bound(socket.SOCK_DGRAM)


@pytest.fixture
def closed():
    """A TCP port bound and not listening: every connect to it is refused."""
    yield from _bound(socket.SOCK_STREAM)


@pytest.fixture
def responder():
    """A DNS server on 127.0.0.1 for the generators' tests (test_dnsgen*.py):
    answers every query with one A record; records the source ports."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    sources, done = [], threading.Event()

    def serve():
        while not done.is_set():
            try:
                data, peer = sock.recvfrom(512)
            except socket.timeout:
                continue
            sources.append(peer[1])
            reply = slowdns.answer(data)  # one A record for the query (the slow responder's, without its delay)
            if reply is not None:
                sock.sendto(reply, peer)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield sock.getsockname()[1], sources
    done.set()
    t.join(2)
    sock.close()
