"""The benchmark's DNS generator (tests/support/dnsgen.py, probes.dns_load):
paced on an absolute schedule, a fresh source port per query, and a run that
fell short of its plan is invalid. Against a tiny DNS responder on loopback
(conftest.py's responder)."""
import os
import socket
import sys
import threading

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import dnsgen  # noqa: E402
import probes  # noqa: E402


def test_a_paced_run_sends_its_plan_on_time_from_fresh_ports(responder):
    port, sources = responder
    r = dnsgen.run("127.0.0.1", [port], rate=200, seconds=1.0, timeout=1.0)
    assert r["planned"] == r["sent"] == r["answered"] == 200 and r["valid"], r
    assert 0.9 <= r["send_s"] <= 1.1
    assert len(set(sources)) > 150  # a new source port (nearly) every query; the kernel may reuse a few


def test_nobody_answering_is_a_valid_run_with_nothing_answered():
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))  # bound, never read: queries go unanswered
    try:
        r = dnsgen.run("127.0.0.1", [dead.getsockname()[1]], rate=100, seconds=0.5, timeout=0.3)
    finally:
        dead.close()
    assert r["sent"] == 50 and r["answered"] == 0 and r["valid"]


@pytest.mark.parametrize("planned, sent, send_s, seconds, errors, late, valid", [
    (1000, 1000, 10.0, 10, 0, 0.002, True),
    (1000, 980, 10.0, 10, 0, 0.002, True),
    (1000, 979, 10.0, 10, 0, 0.002, False),      # fell short of the plan
    (1000, 1000, 11.0, 10, 0, 0.002, True),
    (1000, 1000, 11.2, 10, 0, 0.002, False),     # overran its time
    (1000, 1000, 10.0, 10, 1, 0.002, False),     # a query the kernel refused never left
    (1000, 1000, 10.0, 10, 1000, 0.002, False),  # every send refused: "sent" counts tries, not queries out
    (1000, 1000, 10.0, 10, 0, 0.5, False),       # a stall and a burst: on time overall, not the planned load
    (1000, 1000, 10.0, 10, 0, 0.2, False),       # 1 % late by 0.2 s: under the worst bound, over the p99 one
    (1000, 1000, 10.0, 10, 0, None, False),      # no lateness recorded: nothing shows it kept its schedule
])
def test_validity(planned, sent, send_s, seconds, errors, late, valid):
    worst = None if late is None else max(late, 0.02)
    assert dnsgen.validity(planned, sent, send_s, seconds, errors, late, worst)[0] is valid


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("change, says", [
    ({"lateness_p99_s": NAN}, "lateness_p99_s"),                  # NaN > 0.1 is False: it passed
    ({"lateness_p99_s": -1.0}, "lateness_p99_s"),
    ({"lateness_max_s": INF}, "lateness_max_s"),
    ({"send_s": NAN}, "send_s"),                                  # NaN > 11.0 is False: it passed
    ({"send_s": -3.0}, "send_s"),
    ({"sent": -5}, "sent"),
    ({"send_errors": NAN}, "send_errors"),
    ({"seconds": INF}, "seconds"),
    ({"lateness_max_s": None}, "lateness_max_s"),                 # missing: nothing shows the worst stall
    ({"lateness_max_s": 25.0}, "worst lateness 25.0 s"),          # p99 4 ms, and one stall of 25 s
    ({"lateness_max_s": 0.001}, "under its 99th percentile"),     # a worst under its own p99: made up
    ({"planned": 30000, "sent": 30000, "lateness_max_s": 0.3}, "held back 900 queries"),  # 3,000 q/s, a 0.3 s stall
    ({"sent": 1000, "send_s": 0.3}, "faster than 100.0 q/s allows"),  # 1,000 at 100 q/s in 0.3 s
])
def test_each_figure_and_rule_of_a_python_run(change, says):
    run = dict(planned=1000, sent=1000, send_s=10.0, seconds=10, send_errors=0, lateness_p99_s=0.004,
               lateness_max_s=0.02)
    assert dnsgen.validity(**run) == (True, "")
    run.update(change)
    valid, why = dnsgen.validity(**run)
    assert not valid and says in why, why


def test_a_run_whose_every_send_fails_is_invalid():
    r = dnsgen.run("127.0.0.1", [0], rate=100, seconds=0.5, timeout=0.2)  # port 0: the kernel refuses each send
    assert r["send_errors"] == r["planned"] == 50 and not r["valid"] and "refused" in r["invalid_because"], r


def test_lateness_is_recorded_and_small_when_the_generator_keeps_up(responder):
    port, dummy = responder
    r = probes.dns_load("127.0.0.1", [port], rate=200, count=100, timeout=0.5)
    assert 0 <= r["lateness_p50_s"] <= r["lateness_p99_s"] <= r["lateness_max_s"] < 1.0, r


def test_stop_ends_sending_early():
    stop = threading.Event()
    stop.set()
    r = probes.dns_load("127.0.0.1", [9], rate=100, count=100, timeout=0.1, stop=stop)
    assert r["sent"] == 0
