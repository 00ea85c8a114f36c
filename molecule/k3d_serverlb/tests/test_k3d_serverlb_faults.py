"""Bad input and faults on a real k3d load balancer: a clear error, and the
target left as it was."""
import os
import socket
import sys

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.join(ROOT, "plugins")]
import adhoc  # noqa: E402
import k3d  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import lb_check  # noqa: E402

FAULT, FAULT_BASE = "molf", 30300


@pytest.fixture(scope="module")
def client():
    c = docker.from_env()
    k3d.delete(FAULT)
    k3d.create(FAULT, FAULT_BASE)
    yield c
    k3d.delete(FAULT)


@pytest.fixture()
def lbc(client):
    return k3d.wait_serving(client, FAULT)


def files(container):
    return lb_check.read(container, k3d_container.TEMPLATE_PATH), lb_check.read(container, k3d_container.VALUES_PATH)


@pytest.mark.parametrize("args, words", [
    ({"udp_share": 95}, "udp_share must be a percentage"),
    ({"udp_timeout": 0}, "udp_timeout must be between"),
    ({"worker_connections": 10}, "worker_connections must be between"),
    ({"render_timeout": 0}, "render_timeout must be at least"),
])
def test_invalid_options_fail_clearly(args, words):
    res = adhoc.run_module("k3d_serverlb", args)
    assert res.get("failed") and words in res["msg"]


def test_no_docker_engine_fails_clearly():
    res = adhoc.run_module("k3d_serverlb", {"docker_host": "unix:///run/homelab-edge-no-such.sock"})
    assert res.get("failed") and "cannot reach the Docker engine" in res["msg"]


def test_check_mode_reports_and_touches_nothing(lbc):
    before = files(lbc)
    res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]}, check=True)
    assert res["changed"] and res["load_balancers"][0]["msg"].startswith("would fix: template not patched")
    assert files(lbc) == before
    assert lb_check.shortfalls(lbc, dict(k3d_fix.DEFAULTS))


def test_stopped_load_balancer(client, lbc):
    before = files(lbc)
    lbc.stop(timeout=2)
    try:
        named = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]})
        assert named.get("failed") and "not running" in named["msg"]
        found = adhoc.run_module("k3d_serverlb", {"clusters": [FAULT]})
        assert not found.get("failed")
        assert found["load_balancers"][0]["msg"] == "skipped: container is exited"
    finally:
        lbc.start()
    lbc = k3d.wait_serving(client, FAULT)
    assert files(lbc) == before


def test_unexpected_template_shape_changes_nothing(lbc):
    good = lb_check.read(lbc, k3d_container.TEMPLATE_PATH)
    k3d_container.replace_file(lbc, k3d_container.TEMPLATE_PATH, good.replace("proxy_timeout {{", "proxy_read_timeout {{"))
    try:
        before = files(lbc)
        res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name]})
        assert res.get("failed") and "expected exactly one 'proxy_timeout" in res["msg"]
        assert files(lbc) == before
    finally:
        k3d_container.replace_file(lbc, k3d_container.TEMPLATE_PATH, good)


def test_rejected_render_is_rolled_back_and_others_still_fixed(client, lbc):
    """nginx rejects the render (the server node is gone: "host not found in
    upstream"): the template comes back as it was, nginx keeps serving its
    last good config, and the other cluster's load balancer is still handled."""
    before = files(lbc)
    client.containers.get(k3d.server_name(FAULT)).remove(force=True)
    res = adhoc.run_module("k3d_serverlb", {"clusters": [FAULT, "mol"], "render_timeout": 20,
                                            "udp_ports": k3d.UDP_PROFILES})
    assert res.get("failed")
    assert res["failed_load_balancers"] == [lbc.name]
    msg = res["msg"]
    assert "confd rejected the render" in msg and "rolled back" in msg and "host not found" in msg
    others = [r for r in res["load_balancers"] if r["name"] != lbc.name]
    assert others and not any(r["failed"] for r in others)
    assert files(lbc) == before
    lbc.reload()
    assert lbc.status == "running"
    with socket.create_connection(k3d.endpoints(FAULT_BASE)["https"], timeout=3):
        pass  # nginx still listens with its last good config


def test_consecutive_changes_are_all_rendered(client):
    """Three changes in a row, each rendered and live (no file event to miss)."""
    k3d.delete(FAULT)
    k3d.create(FAULT, FAULT_BASE)
    lbc = k3d.wait_serving(client, FAULT)
    for connections in (4096, 8192, 2048):
        res = adhoc.run_module("k3d_serverlb", {"names": [lbc.name], "worker_connections": connections})
        assert not res.get("failed"), res.get("msg")
        want = dict(k3d_fix.DEFAULTS, worker_connections=connections)
        assert lb_check.shortfalls(lbc, want) == []
    rc, dummy = lbc.exec_run(["pgrep", "-f", "confd -watch"])
    assert rc == 0, "confd's watch process died"
