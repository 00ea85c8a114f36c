"""Bad input and faults: a clear error, and the target left as it was."""
import os
import socket
import sys

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import adhoc  # noqa: E402
import k3dlab  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
import k3d_serverlb as lb  # noqa: E402

FAULT, FAULT_BASE = "molf", 34000


@pytest.fixture(scope="module")
def client():
    c = docker.from_env()
    k3dlab.down(c, FAULT)
    yield c
    k3dlab.down(c, FAULT)


def files(container):
    return lb.read_file(container, lb.TEMPLATE_PATH), lb.read_file(container, lb.VALUES_PATH)


@pytest.mark.parametrize("args, words", [
    ({"udp_share": 95}, "udp_share must be a percentage"),
    ({"udp_timeout": 0}, "udp_timeout must be between"),
    ({"worker_connections": 10}, "worker_connections must be between"),
    ({"timeout": 0}, "timeout must be at least"),
])
def test_invalid_options_fail_clearly(args, words):
    res = adhoc.run_module("k3d_serverlb", args)
    assert res.get("failed") and words in res["msg"]


def test_no_docker_engine_fails_clearly():
    res = adhoc.run_module("k3d_serverlb", {"docker_host": "unix:///run/homelab-edge-no-such.sock"})
    assert res.get("failed") and "cannot reach the Docker engine" in res["msg"]


def test_stopped_load_balancer(client):
    k3dlab.up(client, FAULT, FAULT_BASE)
    lbc = client.containers.get("k3d-%s-serverlb" % FAULT)
    before = files(lbc)
    lbc.stop(timeout=2)
    try:
        named = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]})
        assert named.get("failed") and "not running" in named["msg"]
        found = adhoc.run_module("k3d_serverlb", {"cluster": [FAULT]})
        assert not found.get("failed")
        assert found["load_balancers"][0]["msg"] == "skipped: container is exited"
    finally:
        lbc.start()
        k3dlab.wait_ready(lbc)
    assert files(lbc) == before


def test_rejected_render_is_rolled_back_and_others_still_fixed(client):
    """nginx rejects the render (upstream host gone): template and values come
    back as they were, nginx keeps serving its last good config, and the
    healthy load balancer of the other cluster is still handled."""
    k3dlab.up(client, FAULT, FAULT_BASE)
    lbc = client.containers.get("k3d-%s-serverlb" % FAULT)
    before = files(lbc)
    client.containers.get("k3d-%s-server-0" % FAULT).remove(force=True)
    res = adhoc.run_module("k3d_serverlb", {"cluster": [FAULT, "mol"], "timeout": 20})
    assert res.get("failed")
    assert res["failed_load_balancers"] == [lbc.name]
    msg = res["msg"]
    assert "confd rejected the render" in msg and "rolled back" in msg and "host not found" in msg
    others = [r for r in res["load_balancers"] if r["name"] != lbc.name]
    assert others and not any(r["failed"] for r in others)
    assert files(lbc) == before
    lbc.reload()
    assert lbc.status == "running"
    # nginx still listens with its last good config
    with socket.create_connection(("127.0.0.1", FAULT_BASE + 443), timeout=3):
        pass


def test_unexpected_template_shape_changes_nothing(client):
    k3dlab.up(client, FAULT, FAULT_BASE)
    lbc = client.containers.get("k3d-%s-serverlb" % FAULT)
    broken = lb.read_file(lbc, lb.TEMPLATE_PATH).replace("proxy_timeout {{", "proxy_read_timeout {{")
    lb.replace_file(lbc, lb.TEMPLATE_PATH, broken, 0o644)
    before = files(lbc)
    res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]})
    assert res.get("failed") and "expected exactly one" in res["msg"]
    assert files(lbc) == before


def test_check_mode_reports_and_touches_nothing(client):
    k3dlab.down(client, FAULT)
    k3dlab.up(client, FAULT, FAULT_BASE)
    lbc = client.containers.get("k3d-%s-serverlb" % FAULT)
    before = files(lbc)
    res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]}, check=True)
    assert res["changed"] and res["load_balancers"][0]["msg"].startswith("would patch")
    assert files(lbc) == before
    assert not lb.live_is_fixed(lb.parse_live(lb.nginx_t(lbc)), dict(
        udp_timeout=5, worker_connections=4096, worker_rlimit_nofile=16384, udp_share=50, budget_log_level="info"))


def test_confd_watch_sees_consecutive_changes(client):
    """Replacing values.yaml by rename keeps confd's watch alive: a second and
    a third change right after each other are both rendered (the seed's
    truncate-then-write lost the write that followed)."""
    k3dlab.up(client, FAULT, FAULT_BASE)
    lbc = client.containers.get("k3d-%s-serverlb" % FAULT)
    for connections in (4096, 8192, 2048):
        res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name], "worker_connections": connections, "timeout": 20})
        assert not res.get("failed"), res.get("msg")
        facts = lb.parse_live(lb.nginx_t(lbc))
        assert facts["worker_connections"] == connections
        assert all(s["limit_conn"] == connections // 4 for s in facts["udp_servers"])
    rc, out = lbc.exec_run(["pgrep", "-f", "confd -watch"])
    assert rc == 0, "confd's watch process died"
