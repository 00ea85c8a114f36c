"""Verify the VPS connlimit with a real flood and real faults."""
import os
import subprocess
import sys
import time

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import adhoc  # noqa: E402
import probes  # noqa: E402
import ufw_connlimit as uc  # noqa: E402

VPS = testinfra.get_host("docker://vps-lab")
CLIENT2 = testinfra.get_host("docker://vps-client2")


def run_module(args, check=False):
    return adhoc.run_module("ufw_connlimit", args, target="vps-lab", connection="community.docker.docker", check=check)


def run_local(args):
    """The module on this Docker host, against copies of the rules files in a
    temporary directory with ufw not enabled there: nothing is loaded."""
    return adhoc.run_module("ufw_connlimit", args)


def live_ports(family):
    return uc.nft_connlimit_ports(VPS.check_output("nft list ruleset 2>/dev/null"), family)


def firewall_state():
    """Everything a fault must leave alone: both files and the live rules."""
    return (VPS.file("/etc/ufw/before.rules").content_string,
            VPS.file("/etc/ufw/before6.rules").content_string,
            VPS.check_output("iptables -S"), VPS.check_output("ip6tables -S"))


def test_rules_are_live_for_ipv4_and_ipv6():
    assert live_ports(4) == {80, 443}
    assert live_ports(6) == {80, 443}
    assert VPS.check_output("ufw status").startswith("Status: active")


def test_flood_of_500_from_one_address_is_held_at_100():
    vps_ip = VPS.interface("eth0").addresses[0]
    flood = probes.tcp_flood(docker.from_env().containers.get("vps-client1"), vps_ip, 443, n=500, hold=8)
    time.sleep(4)
    # meanwhile a second client address is served
    second = CLIENT2.run("curl -s -m 5 http://%s:443/" % vps_ip)
    established_on_server = int(VPS.check_output(
        "ss -Htn state established '( sport = :443 )' | wc -l"))
    counts = flood.result()
    adhoc.record("vps_connlimit", "flood", second_client=second.stdout.strip(), server_established=established_on_server, **counts)
    assert 90 <= counts["established"] <= 100
    assert counts["reset"] >= 400
    assert counts["established"] + counts["reset"] == 500
    assert established_on_server <= 100
    assert second.rc == 0 and second.stdout.strip() == "vps backend ok"


def test_rules_survive_ufw_reload():
    assert "Firewall reloaded" in VPS.check_output("ufw reload")
    assert live_ports(4) == {80, 443} and live_ports(6) == {80, 443}


def test_rules_survive_a_container_restart():
    subprocess.run(["docker", "restart", "-t", "2", "vps-lab"], check=True, capture_output=True)
    for _i in range(20):
        if VPS.run("pgrep -x nginx").rc == 0:
            break
        time.sleep(0.5)
    assert live_ports(4) == {80, 443} and live_ports(6) == {80, 443}


@pytest.mark.parametrize("args, words", [
    ({"limit": 0}, "limit must be a positive"),
    ({"ports": [70000]}, "outside 1-65535"),
    ({"ports": [0, 443]}, "outside 1-65535"),
])
def test_bad_input_fails_and_changes_nothing(args, words):
    before = firewall_state()
    res = run_module(args)
    assert res.get("failed") and words in res["msg"]
    assert firewall_state() == before


@pytest.mark.parametrize("mangle, words", [
    ("sed -i 's/^COMMIT$/#COMMIT/' /etc/ufw/before.rules", "no COMMIT"),
    ("sed -i 's/^\\*filter$/*nat/' /etc/ufw/before.rules", "no *filter"),
    ("echo '-A ufw-before-input -p tcp --dport 8443 -m connlimit --connlimit-above 5 -j REJECT' >> /etc/ufw/before.rules",
     "after the *filter COMMIT"),
    # a line iptables-restore rejects: the new file fails --test
    ("sed -i 's/^COMMIT$/-A ufw-before-input -m no-such-match -j ACCEPT\\nCOMMIT/' /etc/ufw/before.rules",
     "fails iptables-restore --test"),
])
def test_broken_rules_file_fails_and_firewall_is_untouched(mangle, words):
    saved = VPS.file("/etc/ufw/before.rules").content_string
    try:
        VPS.check_output(mangle)
        before = firewall_state()
        res = run_module({"ports": [443], "limit": 50})
        assert res.get("failed") and words in res["msg"]
        assert "nothing was written" in res["msg"] or "old file is kept" in res["msg"]
        assert firewall_state() == before
    finally:
        VPS.check_output("cat > /etc/ufw/before.rules <<'EOF'\n%sEOF" % saved)
    assert live_ports(4) == {80, 443}


def test_backup_keeps_the_previous_file():
    before = VPS.file("/etc/ufw/before.rules").content_string
    try:
        res = run_module({"ports": [80, 443], "limit": 60, "backup": True})
        assert res["changed"] and not res.get("failed")
        backup = [f["backup"] for f in res["files"] if f["path"] == "/etc/ufw/before.rules"][0]
        assert backup and VPS.file(backup).content_string == before
        assert "--connlimit-above 60 " in VPS.file("/etc/ufw/before.rules").content_string
    finally:
        run_module({"ports": [80, 443], "limit": 100})
    assert VPS.file("/etc/ufw/before.rules").content_string == before


def test_check_mode_and_diff_report_without_writing():
    before = firewall_state()
    res = run_module({"ports": [443], "limit": 20}, check=True)
    assert res["changed"] and not res.get("failed")
    assert firewall_state() == before


def test_absent_removes_the_block_and_the_live_rules():
    before = VPS.file("/etc/ufw/before.rules").content_string
    try:
        res = run_module({"state": "absent"})
        assert res["changed"] and res["reloaded"]
        assert uc.BEGIN not in VPS.file("/etc/ufw/before.rules").content_string
        assert live_ports(4) == set()
    finally:
        res = run_module({"ports": [80, 443], "limit": 100})
    assert not res.get("failed")
    assert VPS.file("/etc/ufw/before.rules").content_string == before
    assert live_ports(4) == {80, 443}


@pytest.fixture()
def published(tmp_path):
    for name in ("before.rules", "before6.rules"):
        (tmp_path / name).write_text(VPS.file("/etc/ufw/" + name).content_string)
    subprocess.run(["docker", "rm", "-f", "vps-published"], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--name", "vps-published", "-p", "127.0.0.1:18443:80",
                    "homelab-edge/client:lab"], check=True, capture_output=True)
    yield tmp_path
    subprocess.run(["docker", "rm", "-f", "vps-published"], capture_output=True, check=False)


def test_docker_published_port_fails_with_an_explanation(published):
    before = (published / "before.rules").read_text()
    res = run_local({"ports": [18443], "rules_dir": str(published)})
    assert res.get("failed")
    assert "published by Docker" in res["msg"] and "vps-published" in res["msg"] and "DOCKER-USER" in res["msg"]
    assert (published / "before.rules").read_text() == before


def test_docker_published_port_is_limited_in_docker_user(published):
    res = run_local({"ports": [18443], "limit": 30, "rules_dir": str(published), "docker_published": "docker_user"})
    assert res["changed"] and not res.get("failed"), res
    text = (published / "before.rules").read_text()
    assert ("-A DOCKER-USER -p tcp -m conntrack --ctstate NEW --ctorigdstport 18443 -m connlimit "
            "--connlimit-above 30 --connlimit-mask 32 -j REJECT --reject-with tcp-reset") in text
    assert "-A ufw-before-input -p tcp --dport 18443" not in text
