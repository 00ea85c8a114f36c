"""Verify the k3d load balancer fix on the lab, with real traffic.

Runs after converge: the lab cluster "mol" has the fix; a control load
balancer from the same stock image shows the failure the fix prevents.
"""
import os
import sys
import threading
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import adhoc  # noqa: E402
import k3dlab  # noqa: E402
import probes  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
import k3d_serverlb as lb  # noqa: E402

CLUSTER, BASE = "mol", 30000
CONTROL_BASE = 32000
HOST = "127.0.0.1"
WANT = dict(udp_timeout=5, worker_connections=4096, worker_rlimit_nofile=16384, udp_share=50, budget_log_level="info")


def p(base, port):
    return base + port


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


@pytest.fixture()
def lb_container(client):
    return client.containers.get("k3d-%s-serverlb" % CLUSTER)


def live(container):
    return lb.parse_live(lb.nginx_t(container))


def test_live_config_has_the_fix(host, lb_container):
    facts = live(lb_container)
    assert facts["worker_connections"] == 4096
    assert facts["worker_rlimit_nofile"] == 16384
    assert sorted(s["port"] for s in facts["udp_servers"]) == ["1053", "53"]
    for s in facts["udp_servers"]:
        assert s["proxy_responses"] == "1"
        assert lb.timeout_seconds(s["proxy_timeout"]) == 5
        assert s["limit_conn"] == 1024
    for s in facts["tcp_servers"]:
        assert s["proxy_responses"] is None
        assert s["proxy_timeout"] == "600"
        assert s["limit_conn"] is None
    # the worker really got the open-file limit (the container's soft limit is 1024)
    assert lb.open_file_limit(lb_container) == 16384


def test_before_the_fix_stock_defaults_fail(client):
    """k3d's defaults, 100 q/s for 20 s: alerts, failed lookups, failed HTTPS."""
    ctl = k3dlab.create_lb(client, CLUSTER, CONTROL_BASE, labels=False, name="k3d-%s-control" % CLUSTER)
    try:
        k3dlab.wait_ready(ctl)
        dns, https, alerts = probes.dns_under_load(ctl, HOST, CONTROL_BASE, rate=100, count=2000)
    finally:
        ctl.remove(force=True)
    adhoc.record("k3d_serverlb", "before", alerts=alerts, dns_sent=dns["sent"], dns_answered=dns["answered"],
                 https_ok=https["ok"], https_failed=https["failed"])
    assert alerts > 0
    assert dns["failed"] > 0
    assert https["failed"] > 0


def test_after_the_fix_9000_queries_at_300_per_second(lb_container):
    dns, https, alerts = probes.dns_under_load(lb_container, HOST, BASE, rate=300, count=9000)
    adhoc.record("k3d_serverlb", "after", alerts=alerts, dns_sent=dns["sent"], dns_answered=dns["answered"],
                 dns_seconds=dns["seconds"], https_ok=https["ok"], https_failed=https["failed"])
    assert dns["sent"] == 9000
    assert dns["answered"] == 9000
    assert alerts == 0
    assert https["ok"] > 0 and https["failed"] == 0


def _dnsmasq(client, signal):
    server = client.containers.get("k3d-%s-server-0" % CLUSTER)
    rc, out = server.exec_run(["pkill", "-%s" % signal, "-x", "dnsmasq"])
    assert rc == 0, out


def test_fault_dns_server_frozen_tcp_keeps_working(client, lb_container):
    """DNS server frozen 60 s under 300 q/s: HTTPS and 6443 through the same
    load balancer succeed every time, no alerts; DNS back within 15 s."""
    t0 = time.time()
    stop = threading.Event()
    load = {}
    loader = threading.Thread(target=lambda: load.update(probes.dns_load(
        HOST, [p(BASE, 53), p(BASE, 1053)], rate=300, count=300 * 60, stop=stop)), daemon=True)
    _dnsmasq(client, "STOP")
    try:
        loader.start()
        prober = probes.Prober([(HOST, p(BASE, 443)), (HOST, p(BASE, 6443))])
        prober.start()
        time.sleep(60)
        https = prober.stop()
    finally:
        _dnsmasq(client, "CONT")
    resumed = time.time()
    recovered = None
    while time.time() - resumed < 30:
        r = probes.dns_load(HOST, [p(BASE, 53)], rate=10, count=1, timeout=1)
        if r["answered"]:
            recovered = round(time.time() - resumed, 1)
            break
    stop.set()
    loader.join(30)
    alerts = probes.count_in_logs(lb_container, probes.NOT_ENOUGH, t0)
    adhoc.record("k3d_serverlb", "fault", alerts=alerts, dns_sent=load.get("sent"), dns_answered=load.get("answered"),
                 https_ok=https["ok"], https_failed=https["failed"], dns_recovered_s=recovered)
    assert https["ok"] > 0 and https["failed"] == 0
    assert alerts == 0
    assert recovered is not None and recovered <= 15


def test_keeper_restores_the_fix_after_recreate(client):
    """k3d recreates the load balancer from its image: the fix is back in 30 s."""
    new = k3dlab.recreate_lb(client, CLUSTER, BASE)
    t0 = time.time()
    fixed_after = None
    while time.time() - t0 < 30:
        try:
            if lb.live_is_fixed(live(new), WANT):
                fixed_after = round(time.time() - t0, 1)
                break
        except lb.ApplyError:
            pass  # nginx not up yet
        time.sleep(1)
    adhoc.record("k3d_serverlb", "recreate", fixed_after_s=fixed_after)
    assert fixed_after is not None
    leftovers = [c.name for c in client.containers.list(all=True) if lb.is_renamed_leftover(c.name)]
    assert leftovers == []
