"""homelab.edge.prove on the VPS, as a user runs it (the playbook from the
controller - this machine, outside the VPS - its table and its JSON): the
limit proves itself on 80 (ufw's input chain) and 443 (Docker's path); with
the limit's rule taken out of the live ruleset the same check fails; a port
that is not reachable from the controller is skipped, and skipped alone
proves nothing."""
import os
import subprocess
import sys

import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

VPS = testinfra.get_host("docker://vps-lab")
INVENTORY = adhoc.molecule_inventory()


def vps_ip():
    return VPS.interface("eth0").addresses[0]


def prove(*args):
    """homelab.edge.prove --tags vps on vps-lab, the connections from this machine to the VPS's address."""
    return adhoc.prove(INVENTORY, "--tags", "vps", "--limit", "vps-lab",
                       "-e", "vps_connlimit_prove_address=%s" % vps_ip(), *args)


def test_prove_proves_the_limit_on_both_paths():
    rc, out, report = prove()
    assert rc == 0, out[-3000:]
    rows = dict((r["target"], r) for r in report["rows"])
    for port in (80, 443):
        row = rows["%s:%d" % (vps_ip(), port)]
        assert row["status"] == "proved" and row["host"] == "vps-lab", row
        # 110 connections against a limit of 100: at most 100 established, the rest reset, none unanswered; as
        # in the floods' tests, a connection of this machine's the VPS still tracks counts against the limit
        # (measured once on a loaded machine: 99 established, 11 reset)
        established, reset, unanswered = [int(w) for w in row["measured"].split()[::2]]
        assert 90 <= established <= 100 and established + reset == 110 and unanswered == 0, row
        adhoc.record("vps_connlimit", "prove_%d" % port, measured=row["measured"].replace(" ", "_"))
    assert report["summary"]["counts"]["proved"] == 2 and report["summary"]["ok"]
    # every connection closed: none left open from this machine to the VPS's ports
    left = subprocess.run(["ss", "-Htn", "state", "established", "dst", vps_ip()], capture_output=True, text=True,
                          check=True).stdout
    assert not [ln for ln in left.splitlines() if ln.split()[-1].rsplit(":", 1)[1] in ("80", "443")], left


def test_check_mode_plans_and_connects_nowhere():
    before = VPS.check_output("conntrack -C 2>/dev/null || cat /proc/sys/net/netfilter/nf_conntrack_count")
    rc, out, report = prove("--check")
    assert rc == 0, out[-3000:]
    assert report["check_mode"] and {r["status"] for r in report["rows"]} == {"planned"}, report
    assert {r["measured"] for r in report["rows"]} == {"would open 110 connections (bound 13 s)"}
    # 220 connections would show in the VPS's connection tracking
    after = VPS.check_output("conntrack -C 2>/dev/null || cat /proc/sys/net/netfilter/nf_conntrack_count")
    assert int(after) < int(before) + 100, (before, after)


@pytest.fixture
def limit_rule_out_of_80():
    """The crafted broken case: port 80's connlimit rule deleted from the live ruleset (the files keep it);
    ufw reload puts it back afterwards."""
    rules = [r for r in VPS.check_output("iptables -S ufw-before-input").splitlines()   # per address, not a bound of all
             if "--dport 80 " in r and "-m connlimit " in r and "--connlimit-mask 0 " not in r]
    assert len(rules) == 1, rules
    VPS.check_output("iptables %s" % rules[0].replace("-A ", "-D ", 1))
    try:
        yield
    finally:
        VPS.check_output("ufw reload")
        assert ufw_connlimit.nft_connlimit_ports(VPS.check_output("nft list ruleset 2>/dev/null"), 4) == {80}


def test_without_the_limit_the_proof_fails(limit_rule_out_of_80):
    rc, out, report = prove("-e", '{"vps_connlimit_ports": [80]}')
    assert rc != 0
    row = report["rows"][0]
    assert row["status"] == "failed" and row["measured"] == "110 established, 0 reset, 0 unanswered", row
    assert any("more than the limit of 100 stayed open" in r for r in row["reasons"]), row


def test_a_port_the_controller_cannot_reach_is_skipped_and_proves_nothing():
    # 81: nothing listens and ufw lets nothing in (default deny: dropped)
    rc, out, report = prove("-e", '{"vps_connlimit_ports": [81]}')
    assert rc != 0
    row = report["rows"][0]
    assert row["status"] == "skipped" and "port 81 is not reachable from here: no answer" in row["reasons"][0], row
    assert "0 failed, 0 refused, 0 proved, 1 skipped" in out, out[-3000:]
