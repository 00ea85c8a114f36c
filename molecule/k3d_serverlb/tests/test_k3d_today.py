"""k3d on today's engines: a load balancer whose container caps open files at
1024 (k3d cluster create --runtime-ulimit nofile=1024:1024: a hard limit;
stock Docker 29 with containerd 2 gives soft 1024, hard 524288, no cap) still gets the whole DNS fix, with
worker_connections fitted under the cap, and says so; and the commands the
module, check, diagnose and the keeper run inside the load balancer work on
a BusyBox userland, as in k3d's real Alpine-based image.

The load balancers are judged from the outside (lb_check, crossplane and
/proc), not with the module's own parser."""
import json
import os
import subprocess
import sys
import tempfile
import time

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"),
                os.path.join(ROOT, "plugins"), os.path.dirname(__file__)]
import adhoc  # noqa: E402
import k3d  # noqa: E402
import keeper_library  # noqa: E402
from module_utils.k3d_serverlb import fix as k3d_fix  # noqa: E402
from module_utils.k3d_serverlb import capacity as k3d_capacity  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import lb_check  # noqa: E402
import test_k3d_serverlb as base  # noqa: E402  (the shared load and hung-DNS probes)

CAPPED, CAPPED_BASE = "molcap", 30400
BUSYBOX, BUSYBOX_BASE = "molbb", 30500
CAP = 1024


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


# the lab's DNS ports, as molecule.yml declares them
LAB = dict(k3d_fix.DEFAULTS, udp_ports=k3d.UDP_PROFILES)


def capped_want():
    return k3d_capacity.capped_want(dict(LAB), CAP)[0]


@pytest.fixture(scope="module")
def capped(client):
    k3d.create(CAPPED, CAPPED_BASE, extra=["--runtime-ulimit", "nofile=%d:%d" % (CAP, CAP)])
    yield k3d.wait_serving(client, CAPPED)
    k3d.delete(CAPPED)


@pytest.fixture(scope="module")
def busybox(client):
    k3d.create(BUSYBOX, BUSYBOX_BASE, lb_image=k3d.BUSYBOX_LB)
    c = k3d.wait_serving(client, BUSYBOX)
    assert c.exec_run(["readlink", "/bin/sh"]).output.decode().strip() == "/bin/busybox"
    assert c.exec_run(["sh", "-c", "command -v bash"]).exit_code != 0
    yield c
    k3d.delete(BUSYBOX)


def exceed_warnings(container, since):
    return [ln for ln in container.logs(since=int(since)).decode("utf-8", "replace").splitlines()
            if "exceed open file resource limit" in ln]


def test_capped_load_balancer_gets_the_dns_fix_and_says_fixed_with_a_cap(client, capped):
    t0 = time.time()
    res = adhoc.run_module("k3d_serverlb", {"clusters": [CAPPED], "udp_ports": k3d.UDP_PROFILES})
    assert not res.get("failed"), res.get("msg")
    entry = res["load_balancers"][0]
    assert res["changed"] and entry["state"] == "capped"
    assert entry["state_text"] == "fixed with a cap (1024 open files)"
    assert any("--runtime-ulimit nofile=16384:16384" in w for w in res.get("warnings", [])), res.get("warnings")
    c = client.containers.get(k3d.lb_name(CAPPED))
    assert lb_check.shortfalls(c, capped_want()) == []  # proxy_responses 1, 5 s, budget, rlimit 1024
    s = lb_check.nginx_conf.summary(lb_check.read(c, k3d_container.NGINX_CONF))
    assert s["worker_connections"] <= CAP and s["worker_rlimit_nofile"] == CAP
    assert all(u["proxy_responses"] == "1" and u["limit_conn"] == s["worker_connections"] * 50 // 200
               for u in s["udp"].values())
    assert exceed_warnings(c, t0) == []
    again = adhoc.run_module("k3d_serverlb", {"clusters": [CAPPED], "udp_ports": k3d.UDP_PROFILES})
    assert not again["changed"] and again["load_balancers"][0]["state"] == "capped"
    strict = adhoc.run_module("k3d_serverlb", {"clusters": [CAPPED], "require_full_fix": True, "udp_ports": k3d.UDP_PROFILES})
    assert strict.get("failed") and "require_full_fix" in strict["msg"]


def test_capped_load_balancer_holds_the_seeds_load_and_a_hung_dns_server(client, capped):
    c = client.containers.get(k3d.lb_name(CAPPED))
    dns, https, alerts = base.under_load(c, CAPPED_BASE, rate=300, count=9000)
    adhoc.record("k3d_serverlb", "capped_1024_seed_load", alerts=alerts, dns_sent=dns["sent"],
                 dns_answered=dns["answered"], https_ok=https["ok"], https_failed=https["failed"])
    assert dns["sent"] == 9000 and dns["answered"] == 9000 and alerts == 0
    assert https["ok"] > 0 and https["failed"] == 0
    hung = base.hung_dns(client, CAPPED, CAPPED_BASE, rate=1500, seconds=20)
    adhoc.record("k3d_serverlb", "capped_1024_hung_dns", **hung)
    assert hung["tcp_ok"] > 0 and hung["tcp_failed"] == 0 and hung["alerts"] == 0


def test_without_the_capped_path_the_capped_load_balancer_keeps_the_600_s_hold(client, capped):
    """The net removed (the whole fix or nothing, as before): on a fresh
    capped load balancer the render cannot take and everything is rolled back."""
    c = client.containers.get(k3d.lb_name(CAPPED))
    # k3d's own template again (k3d cluster edit would recreate the load balancer without the ulimit)
    stock = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", k3d.ENV["K3D_IMAGE_LOADBALANCER"],
                            k3d_container.TEMPLATE_PATH], capture_output=True, text=True, check=True).stdout
    k3d_container.replace_file(c, k3d_container.TEMPLATE_PATH, stock)
    k3d_container.render(c, 30)
    time.sleep(2)
    original = k3d_capacity.capped_want
    k3d_capacity.capped_want = lambda want, hard: (want, None)
    try:
        with pytest.raises(k3d_container.ApplyError, match="open-file limit 1024"):
            k3d_fix.apply(c, dict(LAB), render_timeout=10)
    finally:
        k3d_capacity.capped_want = original
    udp = lb_check.nginx_conf.summary(lb_check.read(c, k3d_container.NGINX_CONF))["udp"]
    assert udp and all(u["proxy_timeout"] == "600" and u["proxy_responses"] is None for u in udp.values())
    assert k3d_fix.handle(c, c.name, True, dict(LAB))["state"] == "capped"  # and with it: fixed again


def test_status_and_diagnose_say_fixed_with_a_cap(capped):
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("all:\n  children:\n    k3d_hosts:\n      hosts:\n        k3d-host:\n"
                "          ansible_connection: local\n          ansible_python_interpreter: %s\n"
                "          k3d_serverlb_clusters: [%s]\n"
                "          k3d_serverlb_udp_ports: {53: dns, 1053: dns}\n" % (sys.executable, CAPPED))
    try:
        status = subprocess.run(["ansible-playbook", "-i", f.name, os.path.join(ROOT, "playbooks", "status.yml")],
                                capture_output=True, text=True, check=False, timeout=300)
        out = os.path.join(tempfile.mkdtemp(), "diagnose.json")
        diag = subprocess.run(["ansible-playbook", "-i", f.name, os.path.join(ROOT, "playbooks", "diagnose.yml"),
                               "-e", "diagnose_output=%s" % out], capture_output=True, text=True, check=False,
                              timeout=300)
    finally:
        os.unlink(f.name)
    assert status.returncode == 0, status.stdout[-2000:]
    assert any("k3d-molcap-serverlb" in ln and "fixed with a cap (1024 open files)" in ln
               for ln in status.stdout.splitlines()), status.stdout[-2000:]
    assert diag.returncode == 0, diag.stdout[-2000:]
    with open(out) as f:
        findings = json.load(f)["findings"]
    capped_findings = [x for x in findings if x["about"] == k3d.lb_name(CAPPED) and "with a cap" in x["finding"]]
    assert capped_findings and "--runtime-ulimit nofile=16384:16384" in capped_findings[0]["fix"], findings


def test_busybox_userland_apply_check_and_signals(client, busybox):
    res = adhoc.run_module("k3d_serverlb", {"clusters": [BUSYBOX], "udp_ports": k3d.UDP_PROFILES})
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["load_balancers"][0]["state"] == "fixed"
    c = client.containers.get(k3d.lb_name(BUSYBOX))
    assert lb_check.shortfalls(c, dict(LAB)) == []
    check = adhoc.run_module("k3d_serverlb", {"clusters": [BUSYBOX], "udp_ports": k3d.UDP_PROFILES}, check=True)
    assert not check["changed"] and check["load_balancers"][0]["state"] == "fixed"
    info = adhoc.run_module("k3d_serverlb_info", {"clusters": [BUSYBOX], "udp_ports": k3d.UDP_PROFILES})
    entry = info["load_balancers"][0]
    assert entry["state"] == "fixed" and entry["drift"] == [] and entry["open_files"]
    dns, https, alerts = base.under_load(c, BUSYBOX_BASE, rate=300, count=3000)
    assert dns["answered"] == 3000 and alerts == 0 and https["failed"] == 0


def test_busybox_userland_keeper_fixes_a_recreated_load_balancer(client, busybox):
    cfg_path = os.path.join(tempfile.mkdtemp(), "keeper-molbb.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(LAB, clusters=[BUSYBOX], names=[], render_timeout=30), f)
    lib = os.path.dirname(cfg_path)
    keeper = keeper_library.install(lib)
    subprocess.run([sys.executable, keeper, "--config", cfg_path, "--daemon"], check=True, capture_output=True)
    try:
        k3d.port_add(BUSYBOX, "127.0.0.1:%d:853/udp@loadbalancer" % (BUSYBOX_BASE + 85), lb_image=k3d.BUSYBOX_LB)
        deadline, fixed = time.time() + 60, False
        while time.time() < deadline and not fixed:
            try:
                c = client.containers.get(k3d.lb_name(BUSYBOX))
                fixed = c.exec_run(["readlink", "/bin/sh"]).output.decode().strip() == "/bin/busybox" and \
                    not lb_check.shortfalls(c, dict(LAB))
            except (docker.errors.NotFound, docker.errors.APIError, AssertionError, ValueError, KeyError):
                pass
            time.sleep(1)
        assert fixed, "the keeper did not fix the recreated BusyBox load balancer"
    finally:
        subprocess.run([sys.executable, keeper, "--config", cfg_path, "--stop"], check=False, capture_output=True)
