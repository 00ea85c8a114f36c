"""host_signals' main() on this machine's /proc with the engine's CLI faked: an unhealthy Traefik that autoheal
restarted three times in the window is named, with the loop's cause, and the module only reads."""
import json

from ansible_collections.homelab.edge.plugins.modules import host_signals as mod

from .conftest import assert_documented_as_specified

BAD = {"Start": "2026-12-01T08:00:00.0Z", "ExitCode": 1, "Output": "Bad healthcheck status: 404 Not Found"}
DOCS = [{"Id": "t1", "Name": "/traefik", "State": {"Running": True, "Pid": 4242,
                                                   "Health": {"Status": "unhealthy", "FailingStreak": 3, "Log": [BAD]}},
         "Config": {"Healthcheck": {"Test": ["CMD", "traefik", "healthcheck", "--ping"]}}},
        {"Id": "a1", "Name": "/autoheal", "State": {"Running": True, "Pid": 4343},
         "Config": {"Env": ["AUTOHEAL_CONTAINER_LABEL=all"]}}]
RESTARTS = "".join("01-12-2026 08:0%d:01 Container /traefik (t1) found to be unhealthy - Restarting container now "
                   "with 10s timeout\n" % n for n in range(3))


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_an_unhealthy_traefik_in_a_restart_loop_is_named_with_its_cause(run_main, monkeypatch, commands):
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    commands.answers[("docker", "ps", "-q")] = (0, "t1\na1\n", "")
    commands.answers[("docker", "inspect")] = lambda argv: (0, json.dumps(
        [d for d in DOCS if d["Id"] in argv[2:] or d["Name"][1:] in argv[2:]]), "")
    commands.answers[("docker", "logs", "--since", "300s", "autoheal")] = (0, RESTARTS, "")
    res = run_main(mod, containers=["traefik"], autoheal="autoheal", sample_seconds=0)
    assert not res["changed"] and [u["name"] for u in res["unhealthy"]] == ["traefik"]
    assert res["containers"]["traefik"]["running"] and res["autoheal"]["restarts"] == 3
    loop = res["autoheal"]["loops"][0]
    assert (loop["name"], loop["restarts"]) == ("traefik", 3) and "TLS entrypoint" in loop["cause"]
    assert set(c[0] for c in commands.calls) <= {"docker", "nsenter", "ss"}
    assert set(c[1] for c in commands.calls if c[0] == "docker") == {"ps", "inspect", "logs"}
