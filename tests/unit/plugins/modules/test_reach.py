"""homelab.edge.reach, run in this process against servers on loopback (the
loopback refusal itself is the first case; for the others it is turned off)."""
import contextlib
import socket
import threading

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net
from ansible_collections.homelab.edge.plugins.modules import reach

from .conftest import assert_documented_as_specified


@contextlib.contextmanager
def services():
    """A TCP listener, a UDP echo, a silent UDP socket, and a port nothing listens on (TCP and UDP)."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    echo.bind(("127.0.0.1", 0))
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    gone = socket.socket()
    gone.bind(("127.0.0.1", 0))
    free = gone.getsockname()[1]
    gone.close()
    stop = threading.Event()

    def answer():
        echo.settimeout(0.1)
        while not stop.is_set():
            try:
                data, peer = echo.recvfrom(2048)
                echo.sendto(data, peer)
            except socket.timeout:
                pass
    t = threading.Thread(target=answer)
    t.start()
    try:
        yield {"tcp": tcp.getsockname()[1], "echo": echo.getsockname()[1], "silent": silent.getsockname()[1],
               "free": free}
    finally:
        stop.set()
        t.join(5)
        for s in (tcp, echo, silent):
            s.close()


def test_reaches_tells_answered_refused_and_no_answer():
    # seconds for loopback's answers: the build step runs these beside Molecule at the lowest CPU priority
    with services() as p:
        assert prove_net.reaches("127.0.0.1", p["tcp"], "tcp", 3) == "answered"
        assert prove_net.reaches("127.0.0.1", p["free"], "tcp", 3) == "refused"
        assert prove_net.reaches("127.0.0.1", p["echo"], "udp", 3) == "answered"
        assert prove_net.reaches("127.0.0.1", p["free"], "udp", 3) == "refused"  # ICMP port unreachable
        assert prove_net.reaches("127.0.0.1", p["silent"], "udp", 0.3) == "no answer"  # as WireGuard does


def test_loopback_addresses_and_names():
    assert prove_net.loopback("127.0.0.1") and prove_net.loopback("127.0.1.1") and prove_net.loopback("::1")
    assert prove_net.loopback("localhost")
    assert not prove_net.loopback("192.0.2.10") and not prove_net.loopback("2001:db8::1")
    assert not prove_net.loopback("no-such-host.invalid")


def test_a_loopback_host_is_not_probed_and_says_why(run_main):
    out = run_main(reach, host="127.0.0.1", ports=["80/tcp"])
    assert out["answered"] == [] and out["cut"] == [] and "loopback" in out["not_probed"] and not out["changed"]


def test_cut_lists_what_answered_before_and_not_now(run_main, monkeypatch):
    monkeypatch.setattr(prove_net, "loopback", lambda host: False)
    with services() as p:
        specs = ["%d/tcp" % p["tcp"], "%d/udp" % p["echo"], "%d/udp" % p["silent"], "%d/tcp" % p["free"]]
        before = run_main(reach, host="127.0.0.1", ports=specs, timeout=2)  # the echo thread's answer, on a loaded machine
        assert sorted(before["answered"]) == sorted(specs[:2]) and before["cut"] == [] and before["not_probed"] is None
        assert before["unanswered"] == {specs[2]: "no answer", specs[3]: "refused"}
    # the services gone: both that answered are cut; the silent one and the closed one never counted
    after = run_main(reach, host="127.0.0.1", ports=specs, answered_before=before["answered"], timeout=2)
    assert sorted(after["cut"]) == sorted(specs[:2]) and after["answered"] == []


@pytest.mark.parametrize("args, words", [
    ({"ports": ["http"]}, "ports: 'http' is not a port"),
    ({"ports": ["80/tcp"], "answered_before": ["0/tcp"]}, "answered_before: '0/tcp' is not a port"),
    ({"ports": ["80/tcp"], "timeout": 30}, "timeout must be over 0 and at most 10 seconds"),
])
def test_bad_input_is_refused_and_nothing_probed(run_main, args, words):
    out = run_main(reach, host="192.0.2.10", **args)
    assert out["failed"] and words in out["msg"] and "nothing was probed" in out["msg"]


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(reach, monkeypatch)
