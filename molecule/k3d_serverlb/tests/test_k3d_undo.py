"""The undo (k3d_serverlb_state: absent), last of the scenario: the role
stops and removes the keeper, then puts each load balancer back to k3d's own
template and limits. Judged from the outside: the template against the one in
k3d's load-balancer image, nginx.conf with crossplane (lb_check), the keeper
by its process and files."""
import glob
import os
import subprocess
import sys
import tempfile

import docker
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab"), os.path.join(ROOT, "plugins"),
                os.path.dirname(__file__)]
import k3d  # noqa: E402
from module_utils.k3d_serverlb import container as k3d_container  # noqa: E402
import lb_check  # noqa: E402
import test_k3d_serverlb as base  # noqa: E402

CLUSTERS = ("mol", "mol2")
PLAY = """- hosts: k3d-host
  gather_facts: true
  become: false
  roles:
    - role: homelab.edge.k3d_serverlb
"""


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def run_role(state, tmp):
    inv, play = os.path.join(tmp, "inv.yml"), os.path.join(tmp, "play.yml")
    with open(inv, "w") as f:
        f.write("all:\n  hosts:\n    k3d-host:\n      ansible_connection: local\n"
                "      ansible_python_interpreter: %s\n      k3d_serverlb_clusters: [%s]\n"
                "      k3d_serverlb_keeper_config: %s\n      k3d_serverlb_state: %s\n"
                "      k3d_serverlb_udp_ports: {53: dns, 1053: dns}\n"
                % (sys.executable, ", ".join(CLUSTERS), base.KEEPER_CONFIG, state))
    with open(play, "w") as f:
        f.write(PLAY)
    out = subprocess.run(["ansible-playbook", "-i", inv, play], capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return out.stdout


def stock_template():
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", k3d.ENV["K3D_IMAGE_LOADBALANCER"],
                           k3d_container.TEMPLATE_PATH], capture_output=True, text=True, check=True).stdout


def assert_k3ds_own(client, cluster):
    c = base.load_balancer(client, cluster)
    assert lb_check.read(c, k3d_container.TEMPLATE_PATH) == stock_template()
    live = lb_check.nginx_conf.summary(lb_check.read(c, k3d_container.NGINX_CONF))
    assert live["udp"] and all(u["proxy_responses"] is None and u["proxy_timeout"] == "600" and u["limit_conn"] is None
                               for u in live["udp"].values()), live
    assert live["worker_rlimit_nofile"] is None and live["worker_connections"] == base.values_connections(c)


def test_absent_stops_the_keeper_and_gives_k3d_its_own_load_balancers_back(client):
    assert base.keeper_pid() and os.path.exists(base.INSTALLED_KEEPER)
    with tempfile.TemporaryDirectory() as tmp:
        out = run_role("absent", tmp)
        assert "(fix removed): k3d-mol-serverlb" in out and "(fix removed): k3d-mol2-serverlb" in out, out[-3000:]
        for cluster in CLUSTERS:
            assert_k3ds_own(client, cluster)
        assert not base.keeper_pid()
        assert not os.path.exists(base.KEEPER_CONFIG)
        # the keeper's files go with the last keeper configuration on the host (another scenario's may remain)
        others = glob.glob(os.path.join(os.path.dirname(base.KEEPER_CONFIG), "k3d-serverlb*.json"))
        assert os.path.exists(base.INSTALLED_KEEPER) == bool(others), others
        # idempotent: nothing left to undo
        again = run_role("absent", tmp)
        assert "changed=0" in again.split("PLAY RECAP")[1], again[-2000:]


def test_after_the_undo_a_recreated_load_balancer_stays_k3ds_own(client):
    """The keeper is gone, not only stopped for now: k3d recreates mol2's load balancer and nothing patches it."""
    old = base.load_balancer(client, "mol2").id
    k3d.port_add("mol2", "127.0.0.1:%d:855/udp@loadbalancer" % (base.BASE + 287))
    k3d.wait_serving(client, "mol2")
    assert base.load_balancer(client, "mol2").id != old
    assert base.wait_fixed(client, "mol2", seconds=15) is None
    assert_k3ds_own(client, "mol2")


def test_prove_refuses_a_load_balancer_k3d_left_unfixed(client):
    """After the undo: DNS load would start the outage, so homelab.edge.prove refuses to send it and fails."""
    import test_k3d_prove
    rc, out, report = test_k3d_prove.prove(clusters=CLUSTERS)
    assert rc != 0
    rows = dict((r["target"], r) for r in report["rows"])
    for cluster in CLUSTERS:
        row = rows[k3d.lb_name(cluster)]
        assert row["status"] == "refused" and "is not fixed" in row["reasons"][0], row
        assert "Apply the fix first (homelab.edge.site --tags k3d)" in row["reasons"][0]
    assert "0 failed, 2 refused, 0 proved" in out, out[-3000:]


def test_present_again_after_the_undo(client):
    with tempfile.TemporaryDirectory() as tmp:
        run_role("present", tmp)
    for cluster in CLUSTERS:
        assert base.wait_fixed(client, cluster, seconds=30) is not None
    assert base.keeper_pid()
