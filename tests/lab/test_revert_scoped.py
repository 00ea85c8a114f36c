"""The revert puts back only ufw's part of the ruleset (issue 33), on the real
iptables (Debian's, nft backend) in a network namespace this test makes: the
chains of ufw and of this collection, the built-in policies and the jumps into
them come back as they were armed; a fail2ban ban, Docker's NAT for a container
restarted on a new address and a DOCKER-USER rule the admin typed, all made
inside the window, stay. Run the other way (the whole saved ruleset restored,
as the revert did before), the same window loses all three: that is the net.
The revert script is the one ufw_revert writes (module_utils/ufw_revert.py);
ufw itself is not installed here, so it is armed as for a host whose ufw was
enabled and never needs ufw's fallback."""
import os
import shutil
import subprocess
import sys
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins"))
from module_utils.ufw import revert as ufw_revert  # noqa: E402

ARMED = """*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 443 -j DNAT --to-destination 172.17.0.2:443
COMMIT
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
:f2b-sshd - [0:0]
:homelab-edge-docker - [0:0]
:ufw-before-input - [0:0]
:ufw-user-input - [0:0]
:ufw-user-forward - [0:0]
-A INPUT -p tcp -m multiport --dports 22 -j f2b-sshd
-A INPUT -j ufw-before-input
-A INPUT -p tcp -m tcp --dport 9999 -j DROP
-A FORWARD -j DOCKER-USER
-A DOCKER-USER -j homelab-edge-docker
-A DOCKER-USER -j ufw-user-forward
-A DOCKER-USER -j RETURN
-A f2b-sshd -s 203.0.113.7/32 -j REJECT --reject-with icmp-port-unreachable
-A f2b-sshd -j RETURN
-A homelab-edge-docker -p tcp -m tcp --dport 443 -m connlimit --connlimit-above 100 --connlimit-mask 32 --connlimit-saddr -j REJECT --reject-with tcp-reset
-A ufw-before-input -i lo -j ACCEPT
-A ufw-before-input -j ufw-user-input
-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT
COMMIT
"""
# What happens on the host inside the window: the change (ufw's chains), and other software's work
WINDOW = [
    # the change being reverted: a rule of ufw's changed, a chain and jump of ufw's added, a policy changed
    "-A ufw-user-input -p tcp -m tcp --dport 80 -j DROP",
    "-N ufw-after-input", "-A INPUT -j ufw-after-input", "-A ufw-after-input -j DROP", "-P OUTPUT DROP",
    "-D homelab-edge-docker 1",
    # fail2ban bans an address
    "-I f2b-sshd 1 -s 198.51.100.9/32 -j REJECT --reject-with icmp-port-unreachable",
    # the admin types a rule into DOCKER-USER
    "-I DOCKER-USER 3 -s 192.0.2.66/32 -j DROP",
    # autoheal restarts the container: Docker points its DNAT at the new address; compose adds a network
    "-t nat -R DOCKER 1 ! -i docker0 -p tcp -m tcp --dport 443 -j DNAT --to-destination 172.17.0.3:443",
    "-t nat -A POSTROUTING -s 172.18.0.0/16 ! -o br-new -j MASQUERADE",
]


def sh(ns, command, data=None, check=True):
    return subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", command], input=data, capture_output=True,
                          text=True, check=check, timeout=60)


@pytest.fixture
def ns():
    if os.geteuid() != 0 or not shutil.which("iptables") or not shutil.which("ip"):
        pytest.skip("needs root, iptables and iproute2")
    name = "hle-revert-%s" % uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        sh(name, "iptables-restore", ARMED)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def arm(ns, tmp_path, ufw_conf=None):
    """What ufw_revert's arm does for iptables: the save, its scoped part, and the live part it must equal;
    with `ufw_conf`, ufw's settings as armed (then a policy goes back only where they changed)."""
    d = tmp_path / "rev"
    (tmp_path / "etc-ufw").mkdir()
    d.mkdir()
    if ufw_conf is not None:
        (tmp_path / "etc-ufw" / "ufw.conf").write_text(ufw_conf)
        (d / "ufw.policy").write_text(sh(ns, ufw_revert.policy_conf_cmd((str(tmp_path / "etc-ufw" / "ufw.conf"),))).stdout)
    live = sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout
    save = ufw_revert.with_filter_table(sh(ns, "iptables-save").stdout, live)
    scoped = ufw_revert.scoped_restore(save)
    assert sh(ns, "iptables-restore -w --test --noflush", scoped, check=False).returncode == 0
    live = sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout
    assert live == "".join(x + "\n" for x in sorted(ufw_revert.own_part(save)))  # the arm's round-trip check, on real iptables
    subprocess.run(["tar", "-C", "/", "-cf", str(d / "files.tar"), str(tmp_path / "etc-ufw").lstrip("/")], check=True)
    for name, text in (("files.list", ""), ("armed", ""), ("iptables.save", save), ("iptables.scoped", scoped),
                       ("iptables.expected", live), ("iptables.expected.order", ufw_revert.jumps_in_order(save)),
                       ("iptables.policies", ufw_revert.policies(save)),
                       ("revert.sh", ufw_revert.script(str(d), 1, True, roots=(str(tmp_path / "etc-ufw"),)))):
        (d / name).write_text(text)
    return d, live


def window(ns):
    for rule in WINDOW:
        sh(ns, "iptables -w %s" % rule)


def others(ns):
    """What other software made inside the window, as the kernel has it."""
    rules = sh(ns, "iptables -S; iptables -t nat -S").stdout
    return {"fail2ban ban": "-A f2b-sshd -s 198.51.100.9/32 -j REJECT" in rules,
            "admin DOCKER-USER rule": "-A DOCKER-USER -s 192.0.2.66/32 -j DROP" in rules,
            "DNAT to the restarted container": "--to-destination 172.17.0.3:443" in rules,
            "compose network MASQUERADE": "-A POSTROUTING -s 172.18.0.0/16 ! -o br-new -j MASQUERADE" in rules}


def test_the_revert_puts_back_ufws_part_and_leaves_everyone_elses(ns, tmp_path):
    d, armed = arm(ns, tmp_path)
    window(ns)
    assert sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout != armed
    sh(ns, "sh %s now" % (d / "revert.sh"))
    assert (d / "revert_rc").read_text().strip() == "0", (d / "revert.log").read_text()
    assert sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout == armed
    assert others(ns) == dict.fromkeys(others(ns), True)
    rules = sh(ns, "iptables -S DOCKER-USER").stdout.splitlines()
    assert rules[1] == "-A DOCKER-USER -j homelab-edge-docker"  # ours first again
    # ufw's jump keeps its place before a rule another tool appended after it when ufw started
    inp = sh(ns, "iptables -S INPUT").stdout.splitlines()
    assert inp.index("-A INPUT -j ufw-before-input") < inp.index("-A INPUT -p tcp -m tcp --dport 9999 -j DROP"), inp
    assert "--to-destination 172.17.0.2:443" not in sh(ns, "iptables -t nat -S").stdout


def test_without_the_net_the_whole_restore_loses_what_others_did_in_the_window(ns, tmp_path):
    """The net removed: the revert as it was (iptables-restore of the whole save) in the same window."""
    d, armed = arm(ns, tmp_path)
    window(ns)
    sh(ns, "iptables-restore <%s" % (d / "iptables.save"))
    assert sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout == armed  # ufw's part back, too...
    assert others(ns) == dict.fromkeys(others(ns), False)  # ...and everything the others did in the window gone


def test_a_revert_whose_part_does_not_come_back_says_so_and_falls_back(ns, tmp_path):
    """The check after the restore: an expected part that the restore cannot give (here: edited) is rc 2."""
    d, armed = arm(ns, tmp_path)
    (d / "iptables.expected").write_text(armed + "-A ufw-user-input -j ACCEPT\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ufw").write_text("#!/bin/sh\necho ufw \"$@\" >>%s/ufw.calls\n" % tmp_path)
    os.chmod(str(bindir / "ufw"), 0o755)
    script = (d / "revert.sh").read_text().replace("PATH=/usr/sbin", "PATH=%s:/usr/sbin" % bindir)
    (d / "revert.sh").write_text(script)
    sh(ns, "sh %s now" % (d / "revert.sh"))
    assert (d / "revert_rc").read_text().strip() == "2"
    assert (tmp_path / "ufw.calls").read_text().splitlines() == ["ufw reload"]


def waits_for_the_lock(pid):
    """A flock process started by `pid` (revert.sh waiting for the firewall's lock)."""
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == "flock" and int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            return True
    return False


def racing_change(ns, d, tmp_path, with_lock):
    """The timer fires while the change module runs: the module holds the lock (as ufw_revert.hold_revert does),
    the revert starts, the change then lands and the module lets go."""
    import fcntl
    import time
    script = (d / "revert.sh").read_text()
    if not with_lock:  # the net removed: the script as it was, without the lock
        script = script.replace("if command -v flock >/dev/null 2>&1; then", "if false; then")
        (d / "revert.sh").write_text(script)
    fd = os.open(str(tmp_path / "lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    revert = subprocess.Popen(["ip", "netns", "exec", ns, "sh", str(d / "revert.sh"), "now"])
    deadline = time.time() + 60  # until the revert waits for the lock or is done, however long that takes
    while not ((d / "reverted").exists() or revert.poll() is not None or waits_for_the_lock(revert.pid)):
        assert time.time() < deadline, "the revert neither waited for the lock nor ran within 60 s"
        time.sleep(0.1)
    reverted_early = (d / "reverted").exists()
    sh(ns, "iptables -w -A ufw-user-input -p tcp -m tcp --dport 8443 -j DROP")  # the change lands
    os.close(fd)
    revert.wait(timeout=60)
    return reverted_early


def test_a_revert_that_fires_during_a_change_waits_for_it_then_puts_it_back(ns, tmp_path):
    d, armed = arm(ns, tmp_path)
    assert racing_change(ns, d, tmp_path, with_lock=True) is False
    assert (d / "revert_rc").read_text().strip() == "0"
    assert sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout == armed  # the late change is reverted too


def test_without_the_lock_a_change_lands_after_its_revert_and_stays(ns, tmp_path):
    d, armed = arm(ns, tmp_path)
    assert racing_change(ns, d, tmp_path, with_lock=False) is True
    assert "--dport 8443 -j DROP" in sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout  # live, with no revert left


def test_a_fresh_host_whose_filter_table_was_never_used_gets_it_back_empty(tmp_path):
    """A fresh VPS (nothing loaded since boot) saves no filter table at all: armed there, the revert of a change
    that enabled ufw leaves the table as it was - ACCEPT policies, no chains of ufw."""
    if os.geteuid() != 0 or not shutil.which("iptables"):
        pytest.skip("needs root and iptables")
    name = "hle-fresh-%s" % uuid.uuid4().hex[:6]
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert "*filter" not in sh(name, "iptables-save").stdout
        d, armed = arm(name, tmp_path)
        assert armed == ufw_revert.EMPTY_LIVE
        for rule in ("-N ufw-before-input", "-A INPUT -j ufw-before-input", "-A ufw-before-input -j DROP",
                     "-P INPUT DROP"):
            sh(name, "iptables -w %s" % rule)
        sh(name, "sh %s now" % (d / "revert.sh"))
        assert (d / "revert_rc").read_text().strip() == "0", (d / "revert.log").read_text()
        assert sh(name, ufw_revert.own_lines_cmd("iptables")).stdout == ufw_revert.EMPTY_LIVE
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_revert_cut_off_half_way_is_finished_by_resume_and_at_boot_and_by_nothing_else(ns, tmp_path):
    """The host restarted (or the script was killed) after the revert took its marker: it stays `reverting`,
    with the change still live. A second `now` (a timer, revert_now) leaves it alone - it cannot tell a stale
    revert from a running one; `resume` (state=reverted on a stalled revert) finishes it, and so does the boot
    unit's `boot` (nothing runs across a restart)."""
    d, armed = arm(ns, tmp_path)
    window(ns)
    os.rename(str(d / "armed"), str(d / "reverting"))  # cut off right after taking its marker
    sh(ns, "sh %s now" % (d / "revert.sh"))
    assert not (d / "reverted").exists() and sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout != armed
    sh(ns, "sh %s resume" % (d / "revert.sh"))
    assert (d / "reverted").exists() and not (d / "reverting").exists()
    assert (d / "revert_rc").read_text().strip() == "0", (d / "revert.log").read_text()
    assert sh(ns, ufw_revert.own_lines_cmd("iptables")).stdout == armed
    # at boot: the files back (the ruleset is empty at boot: ufw.service loads the files next)
    (tmp_path / "etc-ufw" / "added-in-the-window").write_text("x")
    os.rename(str(d / "reverted"), str(d / "reverting"))
    subprocess.run(["sh", str(d / "revert.sh"), "boot"], check=True, timeout=60)
    assert (d / "reverted").exists() and not (tmp_path / "etc-ufw" / "added-in-the-window").exists()


def test_a_policy_set_inside_the_window_by_someone_else_stays(ns, tmp_path):
    """Docker's first start sets FORWARD DROP, a WireGuard guide sets FORWARD ACCEPT: inside the window, with ufw's
    settings untouched by the change, the revert puts ufw's chains back and leaves the policy as it is now. Run the
    other way (no record of ufw's settings, as before: every policy put back), the guide's ACCEPT is lost."""
    d, armed = arm(ns, tmp_path, ufw_conf="ENABLED=yes\n")
    sh(ns, "iptables -w -A ufw-user-input -p tcp -m tcp --dport 80 -j DROP; iptables -w -P FORWARD ACCEPT")
    sh(ns, "sh %s now" % (d / "revert.sh"))
    assert (d / "revert_rc").read_text().strip() == "0", (d / "revert.log").read_text()
    now = sh(ns, "iptables -S").stdout
    assert "-P FORWARD ACCEPT" in now and "--dport 80 -j DROP" not in now


def test_without_the_record_of_ufws_settings_every_policy_goes_back(ns, tmp_path):
    d, armed = arm(ns, tmp_path)
    sh(ns, "iptables -w -P FORWARD ACCEPT")
    sh(ns, "sh %s now" % (d / "revert.sh"))
    assert "-P FORWARD DROP" in sh(ns, "iptables -S").stdout


def test_native_nft_rules_in_ufws_chains_are_found_by_a_scratch_restore(ns):
    """iptables-nft prints a set lookup in ufw-user-input as `-j DROP` (-S and -save alike); the arm loads the save
    into a scratch network namespace and compares nft's view of our chains: the native rule is found. Without it,
    the same check finds nothing (the restore is exact)."""
    if "nf_tables" not in sh(ns, "iptables -V").stdout or not shutil.which("nft") or not shutil.which("unshare"):
        pytest.skip("needs iptables-nft, nft and unshare")

    def check():
        save = sh(ns, "iptables-save").stdout
        back = sh(ns, "unshare -n sh -c 'iptables-restore -w && nft list table ip filter'", ufw_revert.scratch_restore(save))
        return save, ufw_revert.unfaithful(ufw_revert.nft_chains(sh(ns, "nft list table ip filter").stdout), ufw_revert.nft_chains(back.stdout))

    assert check()[1] == []
    sh(ns, "nft add set ip filter blocked '{ type ipv4_addr; }'; nft add element ip filter blocked '{ 203.0.113.5 }';"
           " nft insert rule ip filter ufw-user-input ip saddr @blocked drop;"
           " nft add rule ip filter ufw-user-input tcp dport '{ 8081, 8082 }' drop")
    save, found = check()
    assert "-A ufw-user-input -j DROP" in save  # what a revert would restore: a DROP of everything
    assert found and found[0][0] == "ufw-user-input" and found[0][1] == "ip saddr @blocked drop"
