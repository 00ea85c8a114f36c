"""The revert's systemd path on VPSes booted by systemd (issue 32, 33): the
transient timer that `systemd-run` starts, `systemctl stop` of a confirmed
one, Ubuntu's socket-activated sshd, and a restart of the host inside the
window, which the boot-time unit reverts before ufw.service loads the rules.
Each net is run both ways: with the net removed (the timer stopped, the boot
unit disabled) the same change keeps the admin out.

New logins are real SSH logins over new connections (this machine ->
127.0.0.1:PORT -> the host's sshd); the firewall is read and repaired from
the console (docker exec)."""
import json
import os
import subprocess
import sys
import time

import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support"),
                os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import hosts  # noqa: E402
from module_utils.ufw import connlimit as ufw_connlimit  # noqa: E402
from module_utils.ufw import revert as ufw_revert  # noqa: E402

INVENTORY = adhoc.molecule_inventory()
PORTS = {"vps-systemd": 2230, "vps-socket": 2231}
CUT_SSH = "-A ufw-before-input -p tcp --dport 22 -j DROP"  # a line of the admin's own, never loaded yet


def console(name):
    return testinfra.get_host("docker://%s" % name)


def new_login(name):
    try:
        return subprocess.run(["ssh", "-i", hosts.key(), "-p", str(PORTS[name])] + hosts.SSH_OPTIONS
                              + ["%s@127.0.0.1" % hosts.USER, "true"], capture_output=True, timeout=8,
                              check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def wait_login(name, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if new_login(name):
            return True
        time.sleep(2)
    return False


def wait_revert_state(name, rid, state, seconds):
    """The revert's record once it reaches `state`, or as it stands when `seconds` have passed."""
    deadline = time.time() + seconds
    while True:
        (rec,) = [r for r in reverts(name) if r["id"] == rid]
        if rec["state"] == state or time.time() > deadline:
            return rec
        time.sleep(2)


def make_fresh(name):
    """ufw as the package leaves it, inactive; no revert; the boot unit as arming leaves it (if any)."""
    console(name).check_output("ufw --force reset >/dev/null && rm -f /etc/ufw/*.rules.20* /etc/ufw/*.init.20* && "
                               "rm -rf %s" % ufw_revert.STATE_DIR)
    assert new_login(name)


def reverts(name):
    return adhoc.run_module("ufw_revert", {"state": "query"}, target=name, inventory=INVENTORY, become=True)["reverts"]


# the window of a revert armed before a change that cuts SSH: the ad hoc arm's return and the cut must both
# come inside it on a loaded machine (CI runs this beside floods)
ARM_S = 30


def arm(name, timeout):
    res = adhoc.run_module("ufw_revert", {"state": "armed", "timeout": timeout}, target=name, inventory=INVENTORY,
                           become=True)
    assert res.get("id") and res["timer"] == "systemd-run", res
    return res["id"]


def cut_ssh(name):
    """The change that cuts new logins: the admin's DROP line for SSH in before.rules, ufw enabled."""
    console(name).check_output("sed -i '/^COMMIT$/i %s' /etc/ufw/before.rules && ufw --force enable >/dev/null"
                               % CUT_SSH)
    assert not new_login(name)


def repair(name):
    c = console(name)
    c.check_output("ufw --force disable >/dev/null; sed -i '/--dport 22 -j DROP/d' /etc/ufw/before.rules; "
                   "systemctl enable %s >/dev/null 2>&1; true" % ufw_revert.BOOT_UNIT)
    make_fresh(name)


def cut_off(name, rid):
    """The revert cut off right after it took its marker (the host went down, the script was killed)."""
    console(name).check_output("systemctl stop %s%s.timer; mv %s/%s/armed %s/%s/reverting"
                               % (ufw_revert.UNIT_PREFIX, rid, ufw_revert.STATE_DIR, rid, ufw_revert.STATE_DIR, rid))


def restart(name):
    subprocess.run(["docker", "restart", name], check=True, capture_output=True, timeout=120)
    c = console(name)
    deadline = time.time() + 90
    while time.time() < deadline:
        if c.run("systemctl is-system-running").stdout.strip() in ("running", "degraded"):
            return
        time.sleep(1)
    raise AssertionError("%s did not finish booting" % name)


@pytest.mark.parametrize("name", sorted(PORTS))
def test_the_role_confirmed_its_change_and_its_transient_timer_is_gone(name):
    c = console(name)
    assert c.check_output("ps -p 1 -o comm=") == "systemd"
    assert c.check_output("ufw status").startswith("Status: active")
    assert ufw_connlimit.nft_connlimit_ports(c.check_output("nft list ruleset 2>/dev/null"), 4) == {80, 443}
    assert new_login(name)
    done = reverts(name)
    assert done and all(r["state"] == "confirmed" and r["timer"] == "systemd-run" for r in done), done
    # the confirmation stopped the transient timer, and --collect let systemd forget it
    left = c.check_output("systemctl list-units --all --no-legend --plain '%s*' | grep -v boot || true" % ufw_revert.UNIT_PREFIX)
    assert left == "", left
    assert c.check_output("systemctl is-enabled %s" % ufw_revert.BOOT_UNIT) == "enabled"


def test_socket_activated_sshd_keeps_new_logins():
    c = console("vps-socket")
    assert c.check_output("systemctl is-enabled ssh.socket") == "enabled"
    assert c.check_output("systemctl is-enabled ssh.service 2>/dev/null || true") == "disabled"
    assert "22/tcp" in c.check_output("ufw status") and new_login("vps-socket")


def test_an_unconfirmed_change_is_undone_by_the_transient_timer():
    name = "vps-systemd"
    make_fresh(name)
    rid = arm(name, ARM_S)
    cut_ssh(name)
    assert wait_login(name, ARM_S + 45)  # the timer fired: the host let the admin back in
    # the revert lets SSH in at its first step (ufw disable) and marks itself reverted at its last
    rec = wait_revert_state(name, rid, "reverted", 60)
    assert rec["state"] == "reverted" and rec["ok"], rec
    assert console(name).check_output("ufw status") == "Status: inactive"
    make_fresh(name)


def test_with_the_timer_stopped_the_same_change_keeps_the_admin_out():
    """The net removed: the transient timer stopped right after arming."""
    name = "vps-systemd"
    make_fresh(name)
    rid = arm(name, ARM_S)
    console(name).check_output("systemctl stop %s%s.timer" % (ufw_revert.UNIT_PREFIX, rid))
    cut_ssh(name)
    assert not wait_login(name, ARM_S + 30)  # past the time the timer would have reverted
    repair(name)


@pytest.mark.parametrize("half_way", [False, True], ids=["armed", "revert-cut-off-half-way"])
def test_a_restart_inside_the_window_reverts_at_boot_before_ufw_loads_the_change(half_way):
    """Also when the revert had started and was cut off half way (the host went down while it ran)."""
    name = "vps-systemd"
    make_fresh(name)
    before = console(name).check_output("cat /etc/ufw/before.rules /etc/ufw/ufw.conf")
    rid = arm(name, 600)
    cut_ssh(name)
    if half_way:
        cut_off(name, rid)
    restart(name)  # what a locked-out admin does from the provider's panel
    assert new_login(name)
    c = console(name)
    assert c.check_output("ufw status") == "Status: inactive"
    assert c.check_output("cat /etc/ufw/before.rules /etc/ufw/ufw.conf") == before
    (rec,) = [r for r in reverts(name) if r["id"] == rid]
    assert rec["state"] == "reverted", rec
    assert "(boot)" in c.check_output("cat %s/%s/revert.log" % (ufw_revert.STATE_DIR, rid))
    make_fresh(name)


def test_without_the_boot_unit_a_restart_keeps_the_unconfirmed_change():
    """The net removed: the boot unit disabled after arming. ufw.service loads the unconfirmed change at boot,
    the admin stays out, and the revert is left armed past its time (what status calls missed)."""
    name = "vps-systemd"
    make_fresh(name)
    rid = arm(name, 600)
    console(name).check_output("systemctl disable %s >/dev/null 2>&1" % ufw_revert.BOOT_UNIT)
    cut_ssh(name)
    restart(name)
    assert not wait_login(name, 20)
    c = console(name)
    assert c.check_output("ufw status").startswith("Status: active")
    assert c.run("test -e %s/%s/armed" % (ufw_revert.STATE_DIR, rid)).rc == 0
    repair(name)


def test_a_stalled_revert_is_reported_refused_and_finished_on_demand():
    """Cut off before the host's last boot: `stalled`, in pending; a new arm refuses naming the way out;
    state=reverted finishes it (the script's resume mode: a second `now` would find no marker to take)."""
    name = "vps-systemd"
    make_fresh(name)
    rid = arm(name, 600)
    c = console(name)
    c.check_output("ufw allow 8082/tcp >/dev/null")
    cut_off(name, rid)
    c.check_output("touch -d '2000-01-01' %s/%s/reverting" % (ufw_revert.STATE_DIR, rid))
    (rec,) = [r for r in reverts(name) if r["id"] == rid]
    assert rec["state"] == "stalled", rec
    refused = adhoc.run_module("ufw_revert", {"state": "armed", "timeout": 60}, target=name, inventory=INVENTORY,
                               become=True)
    assert refused.get("failed") and "cut off half way" in refused["msg"] and "state=reverted id=%s" % rid in \
        refused["msg"], refused
    done = adhoc.run_module("ufw_revert", {"state": "reverted", "id": rid}, target=name, inventory=INVENTORY,
                            become=True)
    assert done.get("outcome") == "reverted", done
    assert "8082" not in c.check_output("cat /etc/ufw/user.rules")
    make_fresh(name)
