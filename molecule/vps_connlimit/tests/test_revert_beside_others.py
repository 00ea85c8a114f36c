"""A revert beside the software a VPS runs with ufw (issue 33), on the admin's
VPS: booted by systemd, reached over SSH as a sudo user, ufw beside
ufw-docker, its own Docker engine. Inside the window of an unconfirmed change
to ufw, the others work as they do on a real host:

- fail2ban (Debian's package, its iptables-multiport action, sshd's journal)
  bans an address;
- a published container comes back on a new address (as a restart by autoheal
  or compose can give it), and Docker points its DNAT there;
- `docker compose up` creates a network of its own with a published service
  (a new MASQUERADE and DNAT).

The revert then fires from its transient systemd timer. ufw's change is gone;
the ban is still live and both services answer a client from outside. The net
removed - the whole ruleset saved at arm time restored, as the revert did
before - the same window loses the ban and cuts both services."""
import json
import os
import shlex
import sys
import time

import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
from module_utils.ufw import revert as ufw_revert  # noqa: E402

VPS = testinfra.get_host("docker://vps-lab")
CLIENT = testinfra.get_host("docker://vps-client1")
INVENTORY = adhoc.molecule_inventory()
WINDOW_S = 45  # the revert's timeout: long enough for the window's work on a loaded machine (checked below)
BANNED = "203.0.113.77"
# fail2ban as a Debian/Ubuntu admin sets it up: sshd's jail, read from the journal (Debian 12 has no auth.log),
# banning with iptables (Ubuntu's default action); the lab's own networks are never banned
JAIL = ("[DEFAULT]\nbanaction = iptables-multiport\nbackend = systemd\n"
        "ignoreip = 127.0.0.1/8 ::1 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16\n[sshd]\nenabled = true\nport = 22\n")
MOVED_NET, MOVED_OLD, MOVED_NEW, MOVED_PORT = "hle-moved", "10.231.0.10", "10.231.0.11", 8082
COMPOSE_PORT = 8081
COMPOSE = """services:
  web:
    image: homelab-edge/client:lab
    command: ["python3", "-m", "http.server", "8443"]
    init: true
    ports: ["%d:8443"]
networks:
  default:
    ipam:
      config: [{subnet: 10.232.0.0/24}]
""" % COMPOSE_PORT
CHANGE = "8088/tcp"  # the unconfirmed change to ufw: a deny rule of its own


def vps_ip():
    return VPS.interface("eth0").addresses[0]


def answers(port):
    """A client from outside gets a 200 from PORT on the VPS (bounded: 5 s)."""
    out = CLIENT.run("curl -s -o /dev/null -m 5 -w '%%{http_code}' http://%s:%d/" % (vps_ip(), port))
    return out.stdout.strip() == "200"


def banned():
    """The ban as the kernel has it, and as fail2ban has it."""
    return (("-s %s/32 -j REJECT" % BANNED) in VPS.run("iptables -w -S f2b-sshd").stdout,
            BANNED in VPS.run("fail2ban-client status sshd").stdout)


def ufw_change_live():
    return "--dport 8088 -j DROP" in VPS.run("iptables -w -S ufw-user-input").stdout


def until(what, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if what():
            return True
        time.sleep(1)
    return what()


@pytest.fixture(scope="module")
def others():
    """fail2ban running, and a published container on a network of its own at a fixed address; all removed after
    (fail2ban stopped takes its chain with it)."""
    VPS.check_output("printf %%s %s >/etc/fail2ban/jail.local && systemctl enable --now fail2ban" % shlex.quote(JAIL))
    assert until(lambda: VPS.run("fail2ban-client status sshd").rc == 0, 30), VPS.run("journalctl -u fail2ban -n 30")
    VPS.check_output("docker network create --subnet 10.231.0.0/24 %s >/dev/null && docker run -d --init --name moved "
                     "--network %s --ip %s -p %d:8443 homelab-edge/client:lab python3 -m http.server 8443 >/dev/null"
                     % (MOVED_NET, MOVED_NET, MOVED_OLD, MOVED_PORT))
    VPS.check_output("printf %%s %s >/root/window-compose.yml" % shlex.quote(COMPOSE))
    assert until(lambda: answers(MOVED_PORT), 20) and answers(443)
    yield
    VPS.run("docker compose -p window -f /root/window-compose.yml down >/dev/null 2>&1; docker rm -f moved; "
            "docker network rm %s; systemctl disable --now fail2ban; rm -f /etc/fail2ban/jail.local "
            "/root/window-compose.yml /root/window.*.save" % MOVED_NET)


def move(ip, strict=True):
    """The published container moved to `ip` on its network, as a restart by autoheal or compose can give it;
    not strict: each step tried even when one before it failed (taking back a window that failed half way)."""
    steps = ["docker stop -t 1 moved >/dev/null", "docker network disconnect %s moved" % MOVED_NET,
             "docker network connect --ip %s %s moved" % (ip, MOVED_NET), "docker start moved >/dev/null"]
    if strict:
        VPS.check_output(" && ".join(steps))
    else:
        VPS.run("; ".join(steps))


def window():
    """Arm a revert, change ufw, then let the others work inside the window (still armed when they are done:
    checked). Returns the revert's id."""
    VPS.check_output("iptables-save -t filter >/root/window.filter.save && iptables-save -t nat >/root/window.nat.save")
    res = adhoc.run_module("ufw_revert", {"state": "armed", "timeout": WINDOW_S}, target="vps-lab",
                           inventory=INVENTORY, become=True)
    assert res.get("id") and res.get("timer", "").startswith("systemd"), res
    VPS.check_output("ufw deny %s >/dev/null" % CHANGE)
    assert ufw_change_live()
    VPS.check_output("fail2ban-client set sshd banip %s" % BANNED)
    move(MOVED_NEW)
    VPS.check_output("docker compose -p window -f /root/window-compose.yml up -d --quiet-pull 2>&1")
    assert until(lambda: answers(MOVED_PORT) and answers(COMPOSE_PORT), 30)
    assert banned() == (True, True)
    state = VPS.run("ls %s/%s" % (ufw_revert.STATE_DIR, res["id"])).stdout.split()
    assert "armed" in state, "the window's work outlasted the window (%d s): %s" % (WINDOW_S, state)
    return res["id"]


def reverted(rid):
    """Until the timer's revert has run (bounded: the window and 2 minutes, for a loaded machine); its outcome:
    the revert's files, and what it and its unit logged (printed when an assertion on it fails)."""
    def state():
        return VPS.run("ls %s/%s" % (ufw_revert.STATE_DIR, rid)).stdout.split()
    until(lambda: "reverted" in state(), WINDOW_S + 120)
    unit = ufw_revert.UNIT_PREFIX + rid
    return {"files": state(), "rc": VPS.run("cat %s/%s/revert_rc" % (ufw_revert.STATE_DIR, rid)).stdout.strip(),
            "log": VPS.run("cat %s/%s/revert.log" % (ufw_revert.STATE_DIR, rid)).stdout,
            "unit": VPS.run("systemctl status --no-pager %s.service %s.timer; journalctl --no-pager -n 40 -u %s.service"
                            % (unit, unit, unit)).stdout}


def undo_window():
    """What window() did beside the change, taken back (the ban, the compose project, the container's address),
    so that one test's failure does not carry into the next; a revert still armed (the window failed half way)
    runs now instead of firing inside the next test's window."""
    VPS.run("for d in %s/*/; do if [ -e \"${d}armed\" ]; then sh \"${d}revert.sh\" now; fi; done" % ufw_revert.STATE_DIR)
    VPS.run("fail2ban-client set sshd unbanip %s; docker compose -p window -f /root/window-compose.yml down "
            ">/dev/null 2>&1" % BANNED)
    if "--to-destination %s:8443" % MOVED_OLD not in VPS.run("iptables -w -t nat -S").stdout:
        move(MOVED_OLD, strict=False)
    assert until(lambda: answers(MOVED_PORT), 20)


def test_the_revert_takes_back_ufws_change_and_leaves_fail2ban_and_docker_alone(others):
    try:
        out = reverted(window())
        assert "reverted" in out["files"] and out["rc"] == "0", out
        assert not ufw_change_live() and "8088" not in VPS.check_output("ufw status")
        assert banned() == (True, True)
        assert "--to-destination %s:8443" % MOVED_NEW in VPS.check_output("iptables -w -t nat -S")
        assert answers(MOVED_PORT) and answers(COMPOSE_PORT) and answers(443)
        adhoc.record("vps_connlimit", "revert_beside_others", window_s=WINDOW_S, banned=BANNED, moved_to=MOVED_NEW,
                     compose_port=COMPOSE_PORT,
                     answers_after={str(p): answers(p) for p in (443, MOVED_PORT, COMPOSE_PORT)})
    finally:
        undo_window()


def test_without_the_net_the_whole_restore_loses_the_ban_and_cuts_both_services(others):
    """The net removed: after the same window, the whole ruleset as saved at arm time is restored (what the
    revert did before). Repaired afterwards from the ruleset as the scoped revert had left it."""
    try:
        out = reverted(window())
        assert "reverted" in out["files"], out
        VPS.check_output("iptables-save -t filter >/root/window.good-filter.save && "
                         "iptables-save -t nat >/root/window.good-nat.save")
        try:
            VPS.check_output("iptables-restore -w </root/window.filter.save && "
                             "iptables-restore -w </root/window.nat.save")
            assert banned()[0] is False  # fail2ban still thinks it banned; the kernel lets the address in
            assert "--to-destination %s:8443" % MOVED_NEW not in VPS.check_output("iptables -w -t nat -S")
            assert not answers(MOVED_PORT) and not answers(COMPOSE_PORT)
        finally:
            VPS.check_output("iptables-restore -w </root/window.good-filter.save && "
                             "iptables-restore -w </root/window.good-nat.save")
    finally:
        undo_window()
    assert answers(443) and answers(MOVED_PORT)
    assert json.loads(VPS.check_output("docker inspect moved"))[0]["State"]["Running"]


def test_two_runs_arming_at_once_arm_one_revert_and_the_other_refuses():
    """Issue 50: the look at what is pending and the armed marker are one step under the firewall's lock, so of
    two runs arming at the same moment one arms and the other refuses, naming the pending revert (without the
    lock both armed, and the second's unconfirmed revert could undo the first's confirmed change)."""
    from concurrent.futures import ThreadPoolExecutor

    def arm():
        return adhoc.run_module("ufw_revert", {"state": "armed", "timeout": 60}, target="vps-lab",
                                inventory=INVENTORY, become=True, new_connection=True)
    with ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(arm) for _ in range(2)]]
    armed = [r for r in results if r.get("id") and not r.get("failed")]
    try:
        refused = [r for r in results if r.get("failed")]
        assert len(armed) == 1 and len(refused) == 1, results
        assert "still pending (id %s" % armed[0]["id"] in refused[0]["msg"], refused[0]["msg"]
        assert "nothing was changed" in refused[0]["msg"]
    finally:
        for r in armed:  # nothing was changed inside the window: the revert puts back the same firewall
            adhoc.run_module("ufw_revert", {"state": "reverted", "id": r["id"]}, target="vps-lab",
                             inventory=INVENTORY, become=True)
