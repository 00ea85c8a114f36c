"""A VPS whose admin already limited connections by hand (issue 50): seed 001's
snippet, applied by the seed's own python, is taken over - one limit per port
live, the user's lines kept in the block and put back by state=absent; a limit
of another shape, in a file or live in DOCKER-USER, is refused before anything
is written, named with its file and line (or chain) and the limit in force; a
lower limit stacked live under the module's makes `prove` fail. Every test
leaves the VPS as converge made it."""
import os
import sys

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
import probes  # noqa: E402
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402

VPS = testinfra.get_host("docker://vps-lab")
INVENTORY = adhoc.molecule_inventory()
CONVERGED = {"ports": [80, 443], "limit": 100}

# seed 001's snippet, as its post gives it (its python, run on the VPS)
SEED_PY = r'''
with open('/etc/ufw/before.rules', 'r') as f:
    content = f.read()
if 'connlimit' not in content:
    rules = """# Simultaneous connection limit per IP
-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset
-A ufw-before-input -p tcp --dport 80 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset
"""
    content = content.replace("# don't delete the 'COMMIT'", rules + "# don't delete the 'COMMIT'")
    with open('/etc/ufw/before.rules', 'w') as f:
        f.write(content)
'''


def run_module(args, check=False, diff=False):
    return adhoc.run_module("ufw_connlimit", dict({"docker_published": "docker_user"}, **args), target="vps-lab",
                            inventory=INVENTORY, check=check, diff=diff, become=True)


def files():
    return tuple(VPS.run("cat /etc/ufw/%s" % f).stdout for f in
                 ("before.rules", "before6.rules", "after.rules", "user.rules", "homelab-edge-docker.rules"))


def limits_on(port):
    """Every live per-address connlimit rule on `port` in ufw's input chain (IPv4), as iptables reads them back (the
    bounds on all sources together beside them - the rate bound's hashlimit, the total's mask 0 - are not one)."""
    return [r for r in VPS.check_output("iptables -S ufw-before-input").splitlines()
            if "--dport %d " % port in r and "-m connlimit " in r and "--connlimit-mask 0 " not in r]


def vps_ip():
    return VPS.interface("eth0").addresses[0]


@pytest.fixture
def converged_again():
    """Whatever a test did: the files as converge left them, then the module as converge runs it."""
    before = files()
    yield before
    VPS.check_output("python3 -c %s" % _quote("open('/etc/ufw/before.rules', 'w').write(%r)" % before[0]))
    res = run_module(CONVERGED)
    assert not res.get("failed"), res.get("msg")
    assert files() == before and len(limits_on(80)) == 1


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_the_seeds_snippet_is_taken_over_one_limit_per_port_and_put_back(converged_again):
    # the admin's state before the role: no block, the seed's snippet applied by its own python, ufw enabled
    assert not run_module({"state": "absent"}).get("failed")
    VPS.check_output("python3 -c %s" % _quote(SEED_PY))
    VPS.check_output("ufw reload")
    seeded = VPS.file("/etc/ufw/before.rules").content_string
    assert len(limits_on(80)) == 1 and "--connlimit-above 100 " in limits_on(80)[0]

    # the plan says it: check mode names the lines, --diff shows them moving into the block; nothing written
    plan = run_module({"ports": [80, 443], "limit": 200}, check=True, diff=True)
    lines = [i + 1 for i, ln in enumerate(seeded.split("\n")) if ln.startswith("-A") and "connlimit-above 100" in ln]
    assert plan["changed"] and [r["line"] for r in plan["replaced"]] == lines and len(lines) == 2, plan
    assert any("taken over by the module's block" in w for w in plan.get("warnings", [])), plan
    after = dict((d["after_header"], d["after"]) for d in plan["diff"])["/etc/ufw/before.rules"]
    assert "#<| -A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100" in after
    # the seed's own rule is live beside ours until the run: check mode reads it back, and its limit in force
    assert plan["effective"] == {"80": 100, "443": 100}, plan
    assert [o["chain"] for o in plan["other_limits"]] == ["ufw-before-input", "ufw-before-input"], plan
    assert VPS.file("/etc/ufw/before.rules").content_string == seeded

    res = run_module({"ports": [80, 443], "limit": 200})
    assert res["changed"] and not res.get("failed"), res.get("msg")
    assert res["other_limits"] == [] and res["effective"] == {"80": 200, "443": 200}, res
    # one limit per port, the module's (443 is Docker's: its limit is the module's chain)
    assert len(limits_on(80)) == 1 and "--connlimit-above 200 " in limits_on(80)[0] and ufw_connlimit.TAG in limits_on(80)[0]
    assert limits_on(443) == []
    # 150 connections from one client: all 150 established (the seed's 100 no longer holds)
    counts = probes.tcp_flood(docker.from_env().containers.get("vps-client1"), vps_ip(), 80, n=150, hold=4).result()
    adhoc.record("vps_connlimit", "seed_taken_over_flood_150", **counts)
    assert counts["established"] == 150 and counts["reset"] == 0, counts
    # the seed's script, run again, sees 'connlimit' and adds nothing; the module's next run changes nothing
    VPS.check_output("python3 -c %s" % _quote(SEED_PY))
    assert not run_module({"ports": [80, 443], "limit": 200})["changed"]

    # state=absent: the user's lines back where they were, byte for byte, and live again (said, not removed)
    res = run_module({"state": "absent"})
    assert res["changed"] and not res.get("failed"), res.get("msg")
    assert VPS.file("/etc/ufw/before.rules").content_string == seeded
    assert len(limits_on(80)) == 1 and "--connlimit-above 100 " in limits_on(80)[0]
    assert any("not the module's" in w for w in res.get("warnings", [])), res


USERS_OWN = "-A ufw-before-input -s 0.0.0.0/0 -p tcp --dport 80 -m connlimit --connlimit-above 50 -j DROP"


def test_a_limit_of_another_shape_is_refused_with_its_file_and_line(converged_again):
    VPS.check_output("python3 -c %s" % _quote(
        "p='/etc/ufw/after.rules'; t=open(p).read(); "
        "open(p, 'w').write(t.replace('\\nCOMMIT', '\\n%s\\nCOMMIT', 1))" % USERS_OWN))
    try:
        line = VPS.check_output("grep -n -F -- '%s' /etc/ufw/after.rules | cut -d: -f1" % USERS_OWN)
        before = files()
        for check in (True, False):
            res = run_module({"ports": [80, 443], "limit": 200}, check=check)
            assert res.get("failed"), res
            assert "/etc/ufw/after.rules line %s: %s" % (line, USERS_OWN) in res["msg"], res["msg"]
            assert "nothing was written" in res["msg"] and "port(s) 80 already have" in res["msg"]
            assert [o["path"] for o in res["other_limits"]] == ["/etc/ufw/after.rules"]
            assert files() == before
    finally:
        VPS.check_output("python3 -c %s" % _quote(
            "p='/etc/ufw/after.rules'; t=open(p).read(); open(p, 'w').write(t.replace('%s\\n', '', 1))" % USERS_OWN))


def test_a_live_limit_in_docker_user_is_refused_with_its_chain(converged_again):
    rule = "-p tcp -m tcp --dport 443 -m connlimit --connlimit-above 50 --connlimit-mask 32 -j DROP"
    VPS.check_output("iptables -I DOCKER-USER 2 %s" % rule)
    try:
        before = files()
        res = run_module({"ports": [80, 443], "limit": 200})
        assert res.get("failed") and "live in the ipv4 chain DOCKER-USER" in res["msg"], res
        assert "live now, per port: 443: 50" in res["msg"], res["msg"]
        assert files() == before
    finally:
        VPS.check_output("iptables -D DOCKER-USER %s" % rule)


@pytest.fixture
def lower_limit_stacked_on_80():
    """A limit of 50 put live first in ufw's input chain, under the module's 100 (the files do not have it)."""
    rule = "-p tcp --dport 80 -m connlimit --connlimit-above 50 -j REJECT --reject-with tcp-reset"
    VPS.check_output("iptables -I ufw-before-input 1 %s" % rule)
    try:
        yield
    finally:
        VPS.check_output("iptables -D ufw-before-input %s" % rule)


def test_a_lower_limit_stacked_under_ours_is_not_proved_and_fails_the_read_back(lower_limit_stacked_on_80):
    rc, out, report = adhoc.prove(INVENTORY, "--tags", "vps", "--limit", "vps-lab", "-e",
                                  "vps_connlimit_prove_address=%s" % vps_ip(), "-e", '{"vps_connlimit_ports": [80]}')
    assert rc != 0
    row = report["rows"][0]
    assert row["status"] == "failed", row
    assert any("a lower limit than 100 holds" in r for r in row["reasons"]), row
    # the module's read-back (ufw not reloaded: reload=false keeps the stacked rule live) names it
    res = run_module(dict(CONVERGED, reload=False), check=True)
    assert res["effective"]["80"] == 50 and res["other_limits"][0]["chain"] == "ufw-before-input", res
