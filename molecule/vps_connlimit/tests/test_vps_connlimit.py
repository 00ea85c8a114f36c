"""The VPS connlimit on a VPS as its admin runs it (SSH as a sudo user, ufw
beside ufw-docker, its own Docker engine publishing 443), with real floods
and real faults. The firewall is read from outside (the console: docker exec)."""
import os
import subprocess
import sys
import time

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
import probes  # noqa: E402
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

VPS = testinfra.get_host("docker://vps-lab")
CLIENT2 = testinfra.get_host("docker://vps-client2")
INVENTORY = adhoc.molecule_inventory()
LIMITS = {80: 100, 443: 100}


def run_module(args, check=False, diff=False, become=True):
    return adhoc.run_module("ufw_connlimit", dict({"docker_published": "docker_user"}, **args), target="vps-lab",
                            inventory=INVENTORY, check=check, diff=diff, become=become)


def input_ports(family):
    return ufw_connlimit.nft_connlimit_ports(VPS.check_output("nft list ruleset 2>/dev/null"), family)


def docker_path():
    """DOCKER-USER and our chain as the kernel has them (IPv4)."""
    return ufw_connlimit.docker_user_state(VPS.check_output("iptables -S DOCKER-USER"),
                                           VPS.run("iptables -S %s" % ufw_connlimit.DOCKER_CHAIN).stdout)


def firewall_state():
    """Everything a fault must leave alone: every file and the live rules."""
    files = tuple(VPS.run("cat /etc/ufw/%s" % f).stdout for f in
                  ("before.rules", "before6.rules", "after.rules", "after.init", ufw_connlimit.HOOK, "homelab-edge-docker.rules"))
    return files + (VPS.check_output("iptables -S"), VPS.check_output("ip6tables -S"))


def vps_ip():
    return VPS.interface("eth0").addresses[0]


def test_rules_are_live_for_the_host_and_for_docker():
    assert input_ports(4) == {80} and input_ports(6) == {80}
    state = docker_path()
    assert state["jump_first"] and state["ports"] == {443: 100}
    # ufw-docker's rules are all still there, after ours
    assert any("ufw-user-forward" in r for r in state["other_rules"])
    assert state["other_rules"][-1] == "-A DOCKER-USER -j RETURN"
    assert VPS.check_output("ufw status").startswith("Status: active")


@pytest.mark.parametrize("port, served", [(80, "vps backend ok"), (443, "Directory listing")])
def test_flood_of_500_from_one_address_is_held_at_100(port, served):
    """80: nginx on the host (ufw-before-input); 443: published by Docker (DOCKER-USER path)."""
    flood = probes.tcp_flood(docker.from_env().containers.get("vps-client1"), vps_ip(), port, n=500, hold=8).started()
    second = CLIENT2.run("curl -s -m 5 http://%s:%d/" % (vps_ip(), port))
    counts = flood.result()
    adhoc.record("vps_connlimit", "flood_%d" % port, second_client_ok=served in second.stdout, **counts)
    assert 90 <= counts["established"] <= LIMITS[port]
    assert counts["reset"] >= 400
    assert counts["established"] + counts["reset"] == 500
    assert second.rc == 0 and served in second.stdout


def test_rules_survive_ufw_reload_beside_ufw_docker():
    """ufw-docker's block re-declares DOCKER-USER on every reload (flushing
    it); the hook puts the jump back in front, after it."""
    assert "Firewall reloaded" in VPS.check_output("ufw reload")
    state = docker_path()
    assert state["jump_first"] and state["ports"] == {443: 100}
    assert any("ufw-user-forward" in r for r in state["other_rules"])
    assert input_ports(4) == {80}


def ufw_docker_block(kind):
    """The ufw-docker block in after.rules and after6.rules replaced by the lab's copy of `kind` ("current" or the
    legacy one, ""), then ufw reloaded."""
    for fam in ("after", "after6"):
        with open(os.path.join(ROOT, "lab", "user-configs", "vps", "ufw-docker-%s%s.rules"
                               % (kind + "-" if kind else "", fam))) as f:
            block = f.read()
        path = "/etc/ufw/%s.rules" % fam
        text = VPS.check_output("cat %s" % path)
        begin, end = text.index("# BEGIN UFW AND DOCKER\n"), text.index("# END UFW AND DOCKER")
        new = text[:begin] + "# BEGIN UFW AND DOCKER\n" + block.rstrip("\n") + "\n" + text[end:]
        VPS.check_output("cat > %s <<'EOF'\n%s\nEOF" % (path, new))
    assert "Firewall reloaded" in VPS.check_output("ufw reload")


def test_the_limit_holds_beside_ufw_dockers_current_block():
    """ufw-docker's current block (conntrack-based: established traffic returned before anything else) in
    place of the legacy one: after the reload our jump is first again, and one client is still held at the
    limit on the published 443."""
    ufw_docker_block("current")
    try:
        state = docker_path()
        assert state["jump_first"] and state["ports"] == {443: 100}
        assert "-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN" in state["other_rules"]
        flood = probes.tcp_flood(docker.from_env().containers.get("vps-client1"), vps_ip(), 443, n=300, hold=6)
        counts = flood.result()
        adhoc.record("vps_connlimit", "flood_443_current_ufw_docker", **counts)
        assert 90 <= counts["established"] <= LIMITS[443] and counts["established"] + counts["reset"] == 300
        assert CLIENT2.run("curl -s -m 5 http://%s:443/" % vps_ip()).rc == 0
    finally:
        ufw_docker_block("")
    assert docker_path()["jump_first"]


def web_back_and_limited():
    """Until the published container runs again (bounded: 60 s); then our jump is first in DOCKER-USER and
    443 is limited."""
    for dummy in range(60):
        if VPS.run("docker ps --format '{{.Names}}' 2>/dev/null").stdout.split() == ["web"]:
            break
        time.sleep(1)
    state = docker_path()
    assert state["jump_first"] and state["ports"] == {443: 100}


def test_rules_survive_a_restart_of_dockerd():
    """Engine 29 restarted by systemd (an upgrade does it): dockerd rebuilds its own chains and never flushes
    DOCKER-USER; our jump stays first in it once the container is back."""
    VPS.check_output("systemctl restart docker")
    web_back_and_limited()
    assert "-A FORWARD -j DOCKER-USER" in VPS.check_output("iptables -S FORWARD")


def test_rules_survive_a_reboot():
    """Boot order of the VPS: ufw first, then Docker's engine and its container."""
    subprocess.run(["docker", "restart", "-t", "2", "vps-lab"], check=True, capture_output=True)
    web_back_and_limited()
    assert input_ports(4) == {80}


def test_other_docker_user_rules_are_kept_without_ufw_docker():
    """Without ufw-docker nothing flushes DOCKER-USER: a rule the admin keeps
    there by hand survives the module and every reload, behind our jump."""
    own = "-A DOCKER-USER -s 203.0.113.7/32 -j DROP"
    saved = VPS.file("/etc/ufw/after.rules").content_string
    try:
        VPS.check_output("sed -i '/# BEGIN UFW AND DOCKER/,/# END UFW AND DOCKER/d' /etc/ufw/after.rules")
        VPS.check_output("ufw reload && iptables -I DOCKER-USER 2 -s 203.0.113.7/32 -j DROP")
        for dummy in range(2):
            res = run_module({"limit": 60})
            assert not res.get("failed"), res.get("msg")
            VPS.check_output("ufw reload")
            state = docker_path()
            assert state["jump_first"] and state["ports"] == {443: 60}
            assert own in state["other_rules"]
            assert len([r for r in VPS.check_output("iptables -S DOCKER-USER").splitlines()
                        if ufw_connlimit.DOCKER_CHAIN in r]) == 1  # one jump, however often reloaded
    finally:
        VPS.check_output("cat > /etc/ufw/after.rules <<'EOF'\n%sEOF" % saved)
        run_module({"limit": 100})
        VPS.check_output("ufw reload")
    assert docker_path()["ports"] == {443: 100}


def test_the_docker_limit_is_gone_when_the_hook_is_removed():
    """The net itself: without the hook, ufw-docker's reload leaves nothing."""
    VPS.check_output("chmod -x /etc/ufw/%s && ufw reload" % ufw_connlimit.HOOK)
    try:
        state = docker_path()
        assert state["jump_position"] is None
        res = run_module({}, check=True)
        assert "443/ipv4" not in str(res.get("live"))  # the live check sees it honestly
        assert res["live"]["ipv4"] == [80]
    finally:
        VPS.check_output("chmod +x /etc/ufw/%s && ufw reload" % ufw_connlimit.HOOK)
    assert docker_path()["jump_first"]


def test_a_failed_reload_puts_the_old_files_back_and_ufw_stays_up():
    """ufw reload fails after the new files are written (a before.init that
    fails once): the previous files come back, ufw is reloaded with them."""
    before = firewall_state()
    VPS.check_output("printf '#!/bin/sh\\nif [ -f /run/fail-once ]; then rm -f /run/fail-once; exit 1; fi\\n' "
                     "> /etc/ufw/before.init && chmod 755 /etc/ufw/before.init && touch /run/fail-once")
    try:
        res = run_module({"limit": 42})
        assert res.get("failed")
        assert "previous files are back and ufw was reloaded with them" in res["msg"]
        assert VPS.check_output("ufw status").startswith("Status: active")
        assert firewall_state()[:6] == before[:6]
        assert "--connlimit-above 42" not in VPS.check_output("iptables -S")
        assert input_ports(4) == {80} and docker_path()["jump_first"]
    finally:
        VPS.check_output("rm -f /etc/ufw/before.init /run/fail-once")


def test_a_reload_that_keeps_failing_restores_the_live_ruleset():
    VPS.check_output("printf '#!/bin/sh\\nexit 1\\n' > /etc/ufw/before.init && chmod 755 /etc/ufw/before.init")
    try:
        res = run_module({"limit": 43})
        assert res.get("failed") and "part of the ruleset that was live before was restored" in res["msg"], res["msg"]
        assert "ENABLED=yes" in VPS.file("/etc/ufw/ufw.conf").content_string
        assert input_ports(4) == {80} and docker_path()["ports"] == {443: 100}
        assert "--connlimit-above 43" not in VPS.file("/etc/ufw/before.rules").content_string
    finally:
        VPS.check_output("rm -f /etc/ufw/before.init && ufw reload")


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
        res = run_module({"ports": [80, 443], "limit": 50})
        assert res.get("failed") and words in res["msg"]
        assert "nothing was written" in res["msg"] or "old file is kept" in res["msg"]
        assert firewall_state() == before
    finally:
        VPS.check_output("cat > /etc/ufw/before.rules <<'EOF'\n%sEOF" % saved)
    assert input_ports(4) == {80}


def test_not_root_says_so():
    res = run_module({}, become=False)
    assert res.get("failed") and "must run as root" in res["msg"] and "become: true" in res["msg"]
    out = adhoc.playbook(INVENTORY, "- hosts: vps-lab\n  gather_facts: false\n  roles: [homelab.edge.vps_connlimit]\n")
    assert out.returncode != 0
    assert "must run as root" in " ".join(out.stdout.split()), out.stdout[-2000:]


def test_docker_nftables_backend_is_refused_with_what_to_do():
    """Docker 29's nftables firewall backend has no DOCKER-USER. The VPS's
    Engine 29 runs its iptables backend for the rest of the scenario: a docker
    CLI on PATH answers `info` as Engine 29 does with the nftables one (and
    passes everything else to the real one). The refusal hands over the
    table that does the job there (loaded and run both ways on the real nft:
    tests/lab/test_docker_nft_rules.py)."""
    VPS.check_output("mkdir -p /opt/fake && cat > /opt/fake/docker <<'EOF'\n#!/bin/sh\n"
                     "if [ \"$1\" = info ]; then\n"
                     "  echo '{\"ServerVersion\":\"29.0.0\",\"FirewallBackend\":{\"Driver\":\"nftables\"}}'; exit 0\n"
                     "fi\nexec /usr/bin/docker \"$@\"\nEOF\nchmod 755 /opt/fake/docker")
    before = firewall_state()
    out = adhoc.playbook(INVENTORY, "- hosts: vps-lab\n  gather_facts: false\n  become: true\n  tasks:\n"
                                    "    - homelab.edge.ufw_connlimit: {docker_published: docker_user}\n"
                                    "      environment: {PATH: '/opt/fake:/usr/sbin:/usr/bin:/sbin:/bin'}\n")
    text = " ".join(out.stdout.split())
    assert out.returncode != 0 and "nftables firewall backend" in text and "no DOCKER-USER chain" in text, text[-2000:]
    assert "load the table in nftables_rules yourself" in text and "table inet homelab-edge-docker" in text
    assert firewall_state() == before


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
    res = run_module({"ports": [80, 443], "limit": 20}, check=True, diff=True)
    assert res["changed"] and not res.get("failed")
    diffs = dict((d["after_header"], d) for d in res["diff"])
    assert "--connlimit-above 20 " in diffs["/etc/ufw/before.rules"]["after"]
    assert "--connlimit-above 20 " in diffs["/etc/ufw/homelab-edge-docker.rules"]["after"]
    assert "--connlimit-above 100 " in diffs["/etc/ufw/before.rules"]["before"]
    assert firewall_state() == before


def test_absent_removes_everything_it_wrote_and_the_live_rules():
    before = firewall_state()
    try:
        res = run_module({"state": "absent"})
        assert res["changed"] and res["reloaded"]
        assert ufw_connlimit.BEGIN not in VPS.file("/etc/ufw/before.rules").content_string
        assert not VPS.file("/etc/ufw/%s" % ufw_connlimit.HOOK).exists
        assert ufw_connlimit.BEGIN not in VPS.file("/etc/ufw/after.init").content_string
        assert input_ports(4) == set() and docker_path()["jump_position"] is None
        assert VPS.run("iptables -S %s" % ufw_connlimit.DOCKER_CHAIN).rc != 0  # the chain itself, live, is gone too
        assert VPS.run("ip6tables -S %s" % ufw_connlimit.DOCKER_CHAIN).rc != 0
        assert any("ufw-user-forward" in r for r in docker_path()["other_rules"])  # ufw-docker's stay
    finally:
        res = run_module({"ports": [80, 443], "limit": 100})
    assert not res.get("failed")
    assert firewall_state()[:6] == before[:6]
    assert input_ports(4) == {80} and docker_path()["jump_first"]
