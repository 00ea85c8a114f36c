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
    commands.heals = True

    def status(*a):  # any answer counts; none while Traefik is wedged, until it is restarted (or the wedge ended)
        iptables = ("nsenter", "-t", "4242", "-n", "iptables", "-w")
        wedged = commands.ran("docker", "kill", "-s", "STOP") or commands.ran(*(iptables + ("-I",)))
        ended = commands.ran("docker", "kill", "-s", "CONT") or commands.ran(*(iptables + ("-D",)))
        return "timeout" if wedged and not ended and not (commands.heals and clock.now >= 2) and \
            not commands.other_server else 404
    commands.other_server = False
    monkeypatch.setattr(mod.prove_net, "http_status", status)
    commands.answers[("docker", "exec", "traefik", "sh")] = (0, "/etc/traefik/traefik.yml\n", "")
    commands.answers[("docker", "exec", "traefik", "cat", "/etc/traefik/traefik.yml")] = (
        0, "entryPoints:\n  websecure:\n    address: ':443'\n    http:\n      tls: {}\n", "")

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


def test_the_url_is_derived_from_traefik_s_config_and_its_published_port(run_main, host):
    res = run_main(mod, check=True)
    assert res["rows"][0]["target"] == "traefik (https://127.0.0.1:443)", res


def test_an_answer_while_traefik_is_still_wedged_is_another_server_and_ends_the_wedge(run_main, host):
    """Another server holds the url's port (DSM's nginx): it answers while Traefik is stopped and not restarted.
    That is never taken for Traefik serving again: the check fails at once and Traefik is resumed."""
    host.other_server, host.heals = True, False
    res = run_main(mod, timeout=10)
    assert res["rows"][0]["status"] == "failed" and res["resumed"], res
    assert "answered while traefik was wedged and not restarted: that is another server" in res["rows"][0]["reasons"][0]
    assert host.ran("docker", "kill", "-s", "CONT", "traefik") and mod.time.monotonic() < 1


def test_a_timeout_past_the_bound_is_refused_before_anything_is_read(run_main, host):
    res = run_main(mod, timeout=601)
    assert res["rows"][0]["status"] == "refused" and host.calls == []


def published(doc, network_mode="default"):
    doc = dict(doc, NetworkSettings={"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "9443"}],
                                               "8080/tcp": None}},
               HostConfig={"NetworkMode": network_mode})
    doc["State"] = dict(doc["State"], Pid=4242)
    return doc


@pytest.fixture
def entrypoint_host(host):
    """The same host, Traefik publishing its :443 on 9443; the entrypoint wedge's rule is what autoheal's
    restart ends (a new StartedAt after 2 s, as the SIGSTOP one)."""
    clock_doc = host.answers[("docker", "inspect", "traefik")]

    def inspect_traefik(argv):
        rc, out, err = clock_doc(argv)
        doc = published(json.loads(out)[0])
        if host.ran("nsenter", "-t", "4242", "-n", "iptables", "-w", "-I") and host.heals and \
                mod.time.monotonic() >= 2:
            doc["State"]["StartedAt"] = "t1"
        return 0, json.dumps([doc]), ""
    host.answers[("docker", "inspect", "traefik")] = inspect_traefik
    return host


def test_the_entrypoint_wedge_drops_the_published_port_inside_traefik_s_namespace(run_main, entrypoint_host):
    res = run_main(mod, url="https://127.0.0.1:9443", wedge="entrypoint", check=True)
    assert "TCP to its port 443 dropped in its namespace" in res["rows"][0]["measured"]
    assert entrypoint_host.ran("nsenter") == []
    res = run_main(mod, url="https://127.0.0.1:9443", wedge="entrypoint", timeout=10)
    assert res["rows"][0]["status"] == "proved" and res["outage_s"] == 2.0
    assert entrypoint_host.ran("nsenter")[0] == ["nsenter", "-t", "4242", "-n", "iptables", "-w", "-I", "INPUT", "-p",
                                                 "tcp", "--dport", "443", "-m", "comment", "--comment",
                                                 "homelab-edge-prove", "-j", "DROP"]
    assert entrypoint_host.ran("docker", "kill") == []


def test_an_entrypoint_wedge_not_healed_in_time_has_its_rule_removed(run_main, entrypoint_host):
    entrypoint_host.heals = False
    res = run_main(mod, url="https://127.0.0.1:9443", wedge="entrypoint", timeout=3)
    assert res["rows"][0]["reasons"] == ["not healed within 3 s; the wedge's rule removed"] and res["resumed"]
    assert entrypoint_host.ran("nsenter", "-t", "4242", "-n", "iptables", "-w", "-D")


@pytest.mark.parametrize("url, network_mode, missing, words", [
    ("https://127.0.0.1:443", "host", (), "would be a rule in the host's own firewall"),
    ("https://127.0.0.1:9443", "default", ("nsenter",), "needs nsenter on this host"),
    ("https://127.0.0.1:443", "default", (), "does not reach Traefik: nothing of Traefik's listens on port 443"),
])
def test_an_entrypoint_wedge_that_cannot_be_made_safely_is_refused(
        run_main, entrypoint_host, url, network_mode, missing, words):
    inspect_traefik = entrypoint_host.answers[("docker", "inspect", "traefik")]

    def with_mode(argv):
        doc = json.loads(inspect_traefik(argv)[1])[0]
        doc["HostConfig"]["NetworkMode"] = network_mode
        return 0, json.dumps([doc]), ""
    entrypoint_host.answers[("docker", "inspect", "traefik")] = with_mode
    entrypoint_host.missing.update(missing)
    res = run_main(mod, url=url, wedge="entrypoint")
    assert res["rows"][0]["status"] == "refused" and words in res["rows"][0]["reasons"][0]
    assert entrypoint_host.ran("nsenter") == []
