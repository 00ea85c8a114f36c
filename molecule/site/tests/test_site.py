"""Tag runs: --tags vps touches only the VPS, --tags nas only the NAS."""
import os
import re
import subprocess

import docker
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VPS = testinfra.get_host("docker://lab-vps")
MIDDLEWARE = "/tmp/homelab-edge-lab/traefik/config/dynamic/inflight-limit.yml"
BLOCK = "homelab.edge.ufw_connlimit"


def site(*args):
    out = subprocess.run(["ansible-playbook", "-i", "inventories/lab/hosts.yml", "site.yml"] + list(args),
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    return dict((m.group(1), (int(m.group(2)), int(m.group(3))))
                for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)", out.stdout, re.M))


def vps_block_present():
    return BLOCK in VPS.file("/etc/ufw/before.rules").content_string


def break_both():
    """Undo one fix on the VPS and one on the NAS."""
    VPS.check_output("sed -i '/homelab.edge.ufw_connlimit/,/END homelab.edge.ufw_connlimit/d' /etc/ufw/before.rules")
    if os.path.exists(MIDDLEWARE):
        os.remove(MIDDLEWARE)
    assert not vps_block_present() and not os.path.exists(MIDDLEWARE)


def test_tags_vps_touches_only_the_vps():
    break_both()
    recap = site("--tags", "vps")
    assert recap["lab-vps"][1] > 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-nas"][1] == 0  # at most facts were read there
    assert vps_block_present()
    assert not os.path.exists(MIDDLEWARE)


def test_tags_nas_touches_only_the_nas():
    break_both()
    recap = site("--tags", "nas")
    assert recap["lab-nas"][1] > 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-vps"][1] == 0
    assert os.path.exists(MIDDLEWARE)
    assert not vps_block_present()
    site("--tags", "vps")  # leave the lab converged


def test_role_tag_selects_one_role():
    recap = site("--tags", "traefik_inflight")
    assert recap["lab-nas"][0] > 0 and recap["lab-nas"][1] == 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-vps"][1] == 0


def test_check_diff_over_the_whole_site_changes_nothing():
    before = VPS.file("/etc/ufw/before.rules").content_string
    recap = site("--check", "--diff")
    assert set(recap) == {"lab-k3d", "lab-vps", "lab-nas"}
    assert all(changed == 0 for ok, changed in recap.values())
    assert VPS.file("/etc/ufw/before.rules").content_string == before


def test_everything_fixed_in_the_status_report():
    out = subprocess.run(["ansible-playbook", "-i", "inventories/lab/hosts.yml", "playbooks/status.yml"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    table = out.stdout.split("Print the table")[1]
    assert "NOT FIXED" not in table
    for what in ("k3d-lab-serverlb", "connlimit 100/IP", "lab-traefik middleware", "lab-traefik health",
                 "lab-traefik drain"):
        assert what in table
    assert docker.from_env().containers.get("lab-traefik").labels["autoheal"] == "true"
