"""prove_autoheal's main() with the engine's CLI, the url and the clock faked: check mode wedges nothing; a
Traefik that autoheal restarts is proved with its outage timed; one that is not restarted in time is resumed
(SIGCONT) and failed; a timeout past the bound is refused before anything is read."""
import json
import types

import pytest

from ansible_collections.homelab.edge.plugins.modules import prove_autoheal as mod

from .conftest import assert_documented_as_specified
from .test_prove_modules import AUTOHEAL, traefik


@pytest.fixture
def host(commands, monkeypatch):
    """Traefik healthy under autoheal; autoheal restarts it (a new StartedAt) 2 s after the wedge, unless told
    not to."""
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(mod, "time", types.SimpleNamespace(monotonic=lambda: clock.now,
                                                           sleep=lambda s: setattr(clock, "now", clock.now + s)))
    monkeypatch.setattr(mod.prove_net, "http_status", lambda *a: 404)  # any answer counts
    commands.heals = True

    def inspect_traefik(argv):
        doc = traefik()
        if commands.ran("docker", "kill", "-s", "STOP") and commands.heals and clock.now >= 2:
            doc["State"]["StartedAt"] = "t1"
        return 0, json.dumps([doc]), ""
    commands.answers[("docker", "inspect", "traefik")] = inspect_traefik
    commands.answers[("docker", "inspect", "autoheal")] = (0, json.dumps([AUTOHEAL]), "")
    return commands


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_check_mode_reads_and_wedges_nothing(run_main, host):
    res = run_main(mod, check=True)
    assert res["rows"][0]["status"] == "planned" and "would wedge traefik (SIGSTOP)" in res["rows"][0]["measured"]
    assert host.ran("docker", "kill") == []


def test_a_restarted_traefik_is_proved_and_its_outage_timed(run_main, host):
    res = run_main(mod, timeout=10)
    assert res["rows"][0]["status"] == "proved" and res["outage_s"] == res["healthy_s"] == 2.0
    assert host.ran("docker", "kill", "-s", "CONT") == [] and not res["resumed"]


def test_a_traefik_not_restarted_in_time_is_resumed_and_failed(run_main, host):
    host.heals = False
    res = run_main(mod, timeout=3)
    assert res["rows"][0]["status"] == "failed" and res["resumed"] and res["outage_s"] is None
    assert res["rows"][0]["reasons"] == ["not healed within 3 s; Traefik resumed (SIGCONT)"]
    assert host.ran("docker", "kill", "-s", "CONT", "traefik")


def test_a_timeout_past_the_bound_is_refused_before_anything_is_read(run_main, host):
    res = run_main(mod, timeout=601)
    assert res["rows"][0]["status"] == "refused" and host.calls == []
