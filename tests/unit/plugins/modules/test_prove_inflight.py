"""prove_inflight's main() with the engine's CLI and the load faked: check mode plans and adds nothing; a run
adds the route (its file there while the requests are in flight), judges the answers, and removes the route and
its backend; numbers that cannot work are refused before the engine is asked anything."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_inflight as mod

from .conftest import assert_documented_as_specified

TRAEFIK = [{"State": {"Running": True}, "NetworkSettings": {"Networks": {"edge": {}, "host": {}}}}]


@pytest.fixture
def engine(tmp_path, commands):
    commands.answers[("docker", "inspect", "traefik")] = (0, json.dumps(TRAEFIK), "")
    commands.answers[("docker", "inspect", "-f")] = (0, "172.18.0.9\n", "")
    return commands


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_plans_the_route_and_adds_nothing(run_main, engine, tmp_path):
    res = run_main(mod, check=True, amount=5, dynamic_dir=str(tmp_path))
    assert res["rows"][0]["status"] == "planned" and not res["changed"]
    assert res["plan"]["network"] == "edge" and res["plan"]["requests"] == 15
    assert res["rows"][0]["measured"].startswith("would add route %s and send 15 requests" % res["plan"]["route"])
    assert engine.ran("docker", "run") == [] and list(tmp_path.iterdir()) == []


def test_a_run_routes_the_load_judges_it_and_removes_the_route(run_main, engine, tmp_path, monkeypatch):
    in_flight = []

    def at_once(n, request, timeout):
        in_flight.extend(p.name for p in tmp_path.iterdir())
        return {"200": 5, "429": 10}
    monkeypatch.setattr(mod.prove_net, "http_status", lambda *a: 200)
    monkeypatch.setattr(mod.prove_net, "at_once", at_once)
    res = run_main(mod, amount=5, dynamic_dir=str(tmp_path))
    route = res["plan"]["route"]
    assert res["rows"][0]["status"] == "proved" and res["rows"][0]["measured"] == "5 answered 200, 10 answered 429"
    assert in_flight == [route + ".yml"] and list(tmp_path.iterdir()) == [] and res["left_behind"] == []
    assert engine.ran("docker", "rm", "-f", "-v", route)


def test_numbers_that_cannot_work_are_refused_before_the_engine_is_asked(run_main, engine):
    res = run_main(mod, amount=1995, extra=10)
    assert res["rows"][0]["status"] == "refused" and "the amount" in res["rows"][0]["reasons"][0]
    assert engine.calls == []
