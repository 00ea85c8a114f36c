"""prove_inflight's main() with the engine's CLI and the load faked: check mode plans and adds nothing; a run
adds the route (its file there while the requests are in flight), judges the answers, and removes the route and
its backend; numbers that cannot work are refused before the engine is asked anything."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_inflight as mod

from .conftest import assert_documented_as_specified

# a Synology's Traefik: its websecure (:443 in its container) published on 8443 (DSM's nginx holds 443)
TRAEFIK = [{"State": {"Running": True}, "Config": {"Cmd": ["--configFile=/etc/traefik/traefik.yml"]},
            "NetworkSettings": {"Networks": {"edge": {"IPAddress": "172.18.0.2"}, "host": {}},
                                "Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8443"}],
                                          "80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}}}]
STATIC = "entryPoints:\n  web:\n    address: ':80'\n  websecure:\n    address: ':443'\n"


@pytest.fixture
def engine(tmp_path, commands):
    commands.answers[("docker", "inspect", "traefik")] = (0, json.dumps(TRAEFIK), "")
    commands.answers[("docker", "inspect", "-f")] = (0, "172.18.0.9\n", "")
    commands.answers[("docker", "exec", "traefik", "sh")] = (0, "/etc/traefik/traefik.yml\n", "")
    commands.answers[("docker", "exec", "traefik", "cat", "/etc/traefik/traefik.yml")] = (0, STATIC, "")
    return commands


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_plans_the_route_and_adds_nothing(run_main, engine, tmp_path):
    res = run_main(mod, check=True, amount=5, dynamic_dir=str(tmp_path))
    assert res["rows"][0]["status"] == "planned" and not res["changed"]
    assert res["plan"]["network"] == "edge" and res["plan"]["requests"] == 15
    assert res["rows"][0]["measured"].startswith("would add route %s and send 15 requests" % res["plan"]["route"])
    assert engine.ran("docker", "run") == [] and list(tmp_path.iterdir()) == []
    # the url derived from Traefik's config and its published port, not a default port
    assert res["rows"][0]["target"] == "traefik (https://127.0.0.1:8443)" and res["plan"]["port"] == 8443


@pytest.mark.parametrize("url, words", [
    ("https://127.0.0.1:443", "https://127.0.0.1:443 does not reach Traefik: nothing of Traefik's listens on port 443"),
    ("https://127.0.0.1:8080", None), ("https://172.18.0.2:443", None)])
def test_a_url_given_must_reach_one_of_traefik_s_entrypoints(run_main, engine, tmp_path, url, words):
    """DSM's nginx on 443: a url there is refused before anything is added; one that reaches Traefik is taken."""
    res = run_main(mod, check=True, amount=5, dynamic_dir=str(tmp_path), url=url)
    if words:
        assert res["rows"][0]["status"] == "refused" and res["rows"][0]["reasons"][0].startswith(words), res
        assert "websecure (443 in its container) published on 8443" in res["rows"][0]["reasons"][0]
        assert engine.ran("docker", "run") == []
    else:
        assert res["rows"][0]["status"] == "planned", res


def test_without_an_entrypoint_to_derive_the_url_from_it_is_refused(run_main, engine, tmp_path):
    res = run_main(mod, check=True, amount=5, dynamic_dir=str(tmp_path), entrypoint="https")
    assert res["rows"][0]["status"] == "refused"
    assert res["rows"][0]["reasons"] == ["Traefik has no entrypoint https (its entrypoints: web (:80), websecure (:443))"
                                         ": give the url"]


def test_a_run_routes_the_load_judges_it_and_removes_the_route(run_main, engine, tmp_path, monkeypatch):
    in_flight = []

    def at_once(n, request, timeout):
        in_flight.extend(p.name for p in tmp_path.iterdir())
        return {"200": 5, "429": 10}
    # Traefik marks the route's answers with the route's name (the route's headers middleware)
    monkeypatch.setattr(mod.prove_net, "http_head", lambda addr, port, tls, hostname, *a: (
        200, {"x-homelab-edge-prove": hostname.split(".")[0]}))
    monkeypatch.setattr(mod.prove_net, "at_once", at_once)
    res = run_main(mod, amount=5, dynamic_dir=str(tmp_path))
    route = res["plan"]["route"]
    assert res["rows"][0]["status"] == "proved" and res["rows"][0]["measured"] == "5 answered 200, 10 answered 429"
    assert in_flight == [route + ".yml"] and list(tmp_path.iterdir()) == [] and res["left_behind"] == []
    assert engine.ran("docker", "rm", "-f", "-v", route)


def test_another_server_answering_200_is_never_taken_for_the_route(run_main, engine, tmp_path, monkeypatch):
    """An answer without the route's mark (DSM's nginx answering 200 to any host name) is not the route's: no load
    is sent, the check fails saying so, and the route is removed."""
    sent = []
    monkeypatch.setattr(mod.prove_net, "http_head", lambda *a: (200, {"server": "nginx"}))
    monkeypatch.setattr(mod.prove_net, "at_once", lambda *a: sent.append(a) or {"200": 15})
    clock = {"monotonic": staticmethod(iter(range(0, 1000, 5)).__next__), "sleep": staticmethod(lambda s: None)}
    monkeypatch.setattr(mod, "time", type("T", (), clock))
    res = run_main(mod, amount=5, dynamic_dir=str(tmp_path), timeout=20)
    assert res["rows"][0]["status"] == "failed" and sent == [] and list(tmp_path.iterdir()) == []
    assert "no answer with its mark at https://127.0.0.1:8443" in res["rows"][0]["reasons"][0], res


def test_numbers_that_cannot_work_are_refused_before_the_engine_is_asked(run_main, engine):
    res = run_main(mod, amount=1995, extra=10)
    assert res["rows"][0]["status"] == "refused" and "the amount" in res["rows"][0]["reasons"][0]
    assert engine.calls == []
