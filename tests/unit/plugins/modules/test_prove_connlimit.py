"""prove_connlimit's main() with the connections faked (prove_net.hold, as a port behind a connlimit of 20
answers): check mode opens none; a run proves a limited port and skips one nothing listens on; numbers past the
bounds are refused with nothing sent."""
import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_connlimit as mod

from .conftest import assert_documented_as_specified

LIMIT = 20
CLOSED = 8443


@pytest.fixture
def held(monkeypatch):
    """The calls to hold: (port, n). Port 443 is limited to LIMIT; CLOSED refuses every connection."""
    calls = []

    def hold(host, port, n, timeout, hold_s):
        calls.append((port, n))
        if port == CLOSED:
            return {"first": "reset", "established": 0, "reset": n, "timeout": 0, "other": 0}
        est = min(n, LIMIT)
        return {"first": "established", "established": est, "reset": n - est, "timeout": 0, "other": 0}
    monkeypatch.setattr(mod.prove_net, "hold", hold)
    return calls


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_plans_each_port_and_opens_nothing(run_main, held):
    res = run_main(mod, check=True, host="203.0.113.10", ports=[443, CLOSED], limit=LIMIT)
    assert [r["status"] for r in res["ports"]] == ["planned", "planned"] and held == []
    assert res["rows"][0]["measured"] == "would open 30 connections (bound 13 s)"


def test_a_limited_port_is_proved_and_a_closed_one_skipped(run_main, held):
    res = run_main(mod, host="203.0.113.10", ports=[443, CLOSED], limit=LIMIT)
    assert [r["status"] for r in res["ports"]] == ["proved", "skipped"]
    assert res["rows"][0]["measured"] == "20 established, 10 reset, 0 unanswered"
    assert "port 8443 is not reachable from here: refused" in res["ports"][1]["reasons"][0]
    assert held == [(443, 1), (443, 30), (CLOSED, 1)]  # a skipped port gets one connection, no load


def test_numbers_past_the_bounds_are_refused_with_nothing_sent(run_main, held):
    res = run_main(mod, host="203.0.113.10", ports=[443], limit=LIMIT, hold=31)
    assert res["failed"] and res["msg"].startswith("refused, nothing was sent: the hold time is 31") and held == []
