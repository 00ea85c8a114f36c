"""Verify the NAS edge against a real Traefik: per-IP inFlightReq, ping,
the wedge and autoheal's contract with the Docker API."""
import json
import os
import subprocess
import sys
import tempfile
import time

import docker
import pytest
import testinfra
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import adhoc  # noqa: E402
import probes  # noqa: E402

LAB = "/tmp/homelab-edge-molecule-nas"
STATIC = LAB + "/traefik/config/traefik.yml"
CLIENT2 = testinfra.get_host("docker://nas-client2")
TRAEFIK = "nas-traefik"


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def wait_health(client, name, status, seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        c = client.containers.get(name)
        if c.attrs["State"].get("Health", {}).get("Status") == status:
            return round(time.time() - t0, 1)
        time.sleep(0.5)
    return None


def ping():
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "3",
                          "http://127.0.0.1:28080/ping"], capture_output=True, text=True, check=False)
    return out.stdout


def play(extra, check=False):
    """Run the traefik_inflight role with extra vars against the lab."""
    inv = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("- hosts: nas-host\n  gather_facts: false\n  roles: [homelab.edge.traefik_inflight]\n")
    cmd = ["ansible-playbook", "-i", inv, f.name, "-e", json.dumps(extra)] + (["--check"] if check else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    os.unlink(f.name)
    return out


def test_static_config_has_directory_provider_middleware_and_ping():
    static = yaml.safe_load(open(STATIC))
    assert static["providers"]["file"] == {"directory": "/etc/traefik/dynamic", "watch": True}
    assert static["entryPoints"]["websecure"]["http"]["middlewares"] == ["inflight-limit@file"]
    assert "middlewares" not in static["entryPoints"]["web"].get("http", {})
    assert static["ping"] == {}
    dyn = yaml.safe_load(open(LAB + "/traefik/config/dynamic/inflight-limit.yml"))
    assert dyn == {"http": {"middlewares": {"inflight-limit": {"inFlightReq": {
        "amount": 400, "sourceCriterion": {"ipStrategy": {"depth": 0}}}}}}}


def test_flood_from_one_address_gets_429_while_another_address_is_served(client):
    flood = probes.https_flood(client.containers.get("nas-client1"), TRAEFIK, "/slower", 500)
    time.sleep(3)  # connections made, requests in flight for 6 s
    backend = CLIENT2.run("curl -s -m 3 http://nas-web:8080/status").stdout
    second = [CLIENT2.run("curl -sk -o /dev/null -w '%%{http_code}' -m 10 https://%s/slow" % TRAEFIK).stdout
              for _i in range(3)]
    pings = [ping() for _i in range(3)]
    counts = flood.result()
    active = int(backend.split("Active connections:")[1].split()[0])
    adhoc.record("nas", "flood", backend_active=active, second_client=",".join(second), ping=",".join(pings), **counts)
    assert counts.get("200", 0) <= 400
    assert counts.get("429", 0) >= 100
    assert counts.get("200", 0) + counts.get("429", 0) == 500
    assert active <= 400 + 1  # the status request itself
    assert second == ["200"] * 3
    assert pings == ["200"] * 3


def test_dynamic_change_is_live_and_does_not_restart(client):
    started = client.containers.get(TRAEFIK).attrs["State"]["StartedAt"]
    out = play({"traefik_inflight_amount": 5})
    assert out.returncode == 0, out.stdout[-2000:]
    time.sleep(3)  # the file provider's watch
    counts = probes.https_flood(client.containers.get("nas-client1"), TRAEFIK, "/slow", 20).result()
    assert client.containers.get(TRAEFIK).attrs["State"]["StartedAt"] == started
    out = play({})
    assert out.returncode == 0
    adhoc.record("nas", "amount5", **counts)
    assert counts.get("200") == 5 and counts.get("429") == 15


def test_static_change_restarts_traefik(client):
    started = client.containers.get(TRAEFIK).attrs["State"]["StartedAt"]
    out = play({"traefik_inflight_entrypoints": ["websecure", "web"]})
    assert out.returncode == 0, out.stdout[-2000:]
    assert client.containers.get(TRAEFIK).attrs["State"]["StartedAt"] != started
    assert yaml.safe_load(open(STATIC))["entryPoints"]["web"]["http"]["middlewares"] == ["inflight-limit@file"]


@pytest.mark.parametrize("extra, words", [
    ({"traefik_inflight_entrypoints": ["nosuch"]}, "entrypoint(s) nosuch not defined"),
    ({"traefik_inflight_amount": 0}, "traefik_inflight_amount must be >= 1"),
    ({"traefik_inflight_source": "cookie"}, "traefik_inflight_source"),
])
def test_bad_input_fails_clearly_and_changes_nothing(extra, words):
    before = open(STATIC).read()
    out = play(extra)
    assert out.returncode != 0 and words in " ".join((out.stdout + out.stderr).split())  # folded lines
    assert open(STATIC).read() == before


def test_wedged_traefik_turns_unhealthy_and_is_what_autoheal_finds(client):
    assert wait_health(client, TRAEFIK, "healthy", 30) is not None
    # a decoy: unhealthy but not labelled; autoheal must not touch it
    client.containers.run("homelab-edge/client:lab", ["sleep", "infinity"], name="nas-decoy", detach=True,
                          healthcheck={"test": ["CMD", "false"], "interval": 1000000000, "retries": 1})
    try:
        client.containers.get(TRAEFIK).kill(signal="SIGSTOP")
        # interval 2 s x retries 3, plus the 2 s timeout of the last probe
        became = wait_health(client, TRAEFIK, "unhealthy", 2 * 3 + 2 + 10)
        assert wait_health(client, "nas-decoy", "unhealthy", 10) is not None
        # the query autoheal makes (AUTOHEAL_CONTAINER_LABEL=autoheal)
        found = [c.name for c in client.containers.list(filters={"health": "unhealthy", "label": "autoheal=true"})]
    finally:
        client.containers.get(TRAEFIK).kill(signal="SIGCONT")
        client.containers.get("nas-decoy").remove(force=True)
    healthy_again = wait_health(client, TRAEFIK, "healthy", 20)
    adhoc.record("nas", "wedge", unhealthy_after_s=became, autoheal_query=",".join(found), healthy_again_s=healthy_again)
    assert became is not None and became <= 2 * 3 + 2 + 10
    assert found == [TRAEFIK]
    assert healthy_again is not None


def test_autoheal_project_passes_compose_config():
    out = subprocess.run(["docker", "compose", "-f", LAB + "/autoheal/compose.yml", "config", "--format", "json"],
                         capture_output=True, text=True, check=True)
    cfg = json.loads(out.stdout)
    env = cfg["services"]["autoheal"]["environment"]
    assert env["AUTOHEAL_CONTAINER_LABEL"] == "autoheal"
    assert env["AUTOHEAL_INTERVAL"] == "30" and env["AUTOHEAL_START_PERIOD"] == "60"
    assert cfg["services"]["autoheal"]["image"] == "willfarrell/autoheal:1.2.0"
    # behind the socket proxy, autoheal has no socket of its own
    assert env["DOCKER_SOCK"] == "tcp://socket-proxy:2375"
    assert not cfg["services"]["autoheal"].get("volumes")
    proxy = cfg["services"]["socket-proxy"]
    assert proxy["environment"]["POST"] == "0" and proxy["environment"]["ALLOW_RESTARTS"] == "1"
    assert proxy["volumes"][0]["read_only"] is True


def test_traefik_container_contract(client):
    c = client.containers.get(TRAEFIK)
    assert c.labels.get("autoheal") == "true"
    assert c.attrs["Config"]["Healthcheck"]["Test"][:3] == ["CMD", "traefik", "healthcheck"]
    # the drain sysctls reach Traefik's own namespace through compose
    assert c.attrs["HostConfig"]["Sysctls"] == {"net.ipv4.tcp_abort_on_overflow": "1", "net.ipv4.tcp_fin_timeout": "15"}


def test_loki_rules_file():
    rules = yaml.safe_load(open(LAB + "/loki-rules.yml"))
    rule = rules["groups"][0]["rules"][0]
    assert rule["alert"] == "TraefikClientErrors"
    assert '{job="traefik-access"} | json | DownstreamStatus >= 400' in rule["expr"]
