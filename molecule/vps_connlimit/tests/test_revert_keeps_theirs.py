"""The revert beside what others do on the VPS (issue 50), on the lab's two VPSes:

- native nft rules in ufw's chains (a set lookup, an anonymous set) print lossily through iptables; the arm
  finds them by loading its snapshot into a scratch network namespace and refuses before anything is written.
  The other way - that snapshot restored, as a revert would - drops every new connection, SSH's included.
- fail2ban banning through ufw (`banaction = ufw`), a package's application profile and a FORWARD policy set
  inside the window all survive the revert, which still takes back ufw's change. The other way (the revert
  script without its keeping of bans) the ban is lost while fail2ban believes it holds.
- the fresh VPS has no systemd: a restart inside the window (the container restarted - its timer dies, the
  kernel's boot id stays) reverts at ufw's own start, through the hook in before.init. The other way (the hook
  taken out) the unconfirmed change survives the restart and the revert is `missed`."""
import os
import shlex
import sys
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "plugins"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
from module_utils.ufw import revert as ufw_revert  # noqa: E402
from test_revert_beside_others import until  # noqa: E402  (one bounded wait for the scenario's tests)

VPS = testinfra.get_host("docker://vps-lab")
FRESH = testinfra.get_host("docker://vps-fresh")
CLIENT = testinfra.get_host("docker://vps-client1")
INVENTORY = adhoc.molecule_inventory()
WINDOW_S = 45
BANNED = "203.0.113.78"
JAIL = ("[DEFAULT]\nbanaction = ufw\nbackend = systemd\n"
        "ignoreip = 127.0.0.1/8 ::1 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16\n[sshd]\nenabled = true\nport = 22\n")
PROFILE = "/etc/ufw/applications.d/homelab-edge-window-test"
UDP_STANDIN = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('0.0.0.0', 51820))\n"
               "while True:\n    d, a = s.recvfrom(2048)\n    s.sendto(b'wg-standin ' + d, a)\n")


def new_connection(host, port):
    """A client from outside opens a NEW TCP connection to HOST:PORT (bounded: 4 s)."""
    ip = host.interface("eth0").addresses[0]
    return CLIENT.run("python3 -c 'import socket; socket.create_connection((\"%s\", %d), 4)'" % (ip, port)).rc == 0


def reverts(host):
    return set(host.run("ls %s" % ufw_revert.STATE_DIR).stdout.split())


def arm(target, timeout=WINDOW_S):
    return adhoc.run_module("ufw_revert", {"state": "armed", "timeout": timeout}, target=target,
                            inventory=INVENTORY, become=True)


def settle(host, target, rid):
    """A revert still armed after a test (it failed half way) runs now."""
    if rid and "armed" in host.run("ls %s/%s" % (ufw_revert.STATE_DIR, rid)).stdout.split():
        adhoc.run_module("ufw_revert", {"state": "reverted", "id": rid}, target=target, inventory=INVENTORY,
                         become=True)


def wait_reverted(host, rid, seconds=WINDOW_S + 120):
    until(lambda: "reverted" in host.run("ls %s/%s" % (ufw_revert.STATE_DIR, rid)).stdout.split(), seconds)
    return host.run("ls %s/%s" % (ufw_revert.STATE_DIR, rid)).stdout.split(), host.run(
        "cat %s/%s/revert.log" % (ufw_revert.STATE_DIR, rid)).stdout


# ------------------------------------------------------------ a lossy snapshot: no arm
def test_native_nft_rules_in_ufws_chains_are_refused_before_anything_is_written():
    VPS.check_output("nft add set ip filter hle_blocked '{ type ipv4_addr; }' && "
                     "nft add element ip filter hle_blocked '{ 203.0.113.99 }' && "
                     "nft insert rule ip filter ufw-user-input ip saddr @hle_blocked drop && "
                     "nft add rule ip filter ufw-user-input tcp dport '{ 8091, 8092 }' drop")
    try:
        before = reverts(VPS)
        res = arm("vps-lab")
        assert res.get("failed"), res
        assert "ufw-user-input" in res["msg"] and "`ip saddr @hle_blocked drop`" in res["msg"], res["msg"]
        assert "no revert was armed and nothing was changed" in res["msg"]
        assert reverts(VPS) == before
        # the other way: what a revert would restore from that snapshot - iptables prints the set lookup as
        # `-j DROP` - cuts every new connection, SSH's first
        save = VPS.check_output("iptables-save -t filter")
        assert "-A ufw-user-input -j DROP" in save
        assert new_connection(VPS, 22)
        VPS.check_output("printf %%s %s | iptables-restore -w --noflush" % shlex.quote(ufw_revert.scoped_restore(save)))
        assert not new_connection(VPS, 22)
    finally:
        VPS.run("ufw reload; nft delete set ip filter hle_blocked")
    assert until(lambda: new_connection(VPS, 22), 10)


# ------------------------------------------------------------ nothing of theirs lost
def ban_window(net=True):
    """fail2ban with ufw's action; arm; change ufw; inside the window a ban, a profile and a FORWARD policy.
    Without the net, the revert script loses its keeping of bans (as it was before)."""
    res = arm("vps-lab")
    assert res.get("id") and not res.get("failed"), res
    rid = res["id"]
    if not net:
        VPS.check_output("sed -i -e 's/^  for f in user.rules user6.rules; do keep_bans .*$/  :/' "
                         "-e 's/^  ban_live ip.*$/  :/' %s/%s/revert.sh" % (ufw_revert.STATE_DIR, rid))
    VPS.check_output("ufw deny 8088/tcp >/dev/null")
    VPS.check_output("fail2ban-client set sshd banip %s" % BANNED)
    VPS.check_output("printf '[hle-window]\\ntitle=t\\ndescription=d\\nports=4242/tcp\\n' >%s" % PROFILE)
    VPS.check_output("iptables -w -P FORWARD ACCEPT")  # a WireGuard guide's policy, inside the window
    assert "armed" in VPS.run("ls %s/%s" % (ufw_revert.STATE_DIR, rid)).stdout.split(), "the window outlasted %d s" % WINDOW_S
    return rid


def ban_live():
    return ("-s %s" % BANNED) in VPS.run("iptables -w -S ufw-user-input").stdout


def test_a_fail2ban_ufw_ban_a_profile_and_a_policy_made_inside_the_window_survive_the_revert():
    VPS.check_output("printf %%s %s >/etc/fail2ban/jail.local && systemctl enable --now fail2ban && "
                     "systemctl restart fail2ban" % shlex.quote(JAIL))
    rid = None
    try:
        assert until(lambda: VPS.run("fail2ban-client status sshd").rc == 0, 30)
        rid = ban_window()
        assert ban_live()
        files, log = wait_reverted(VPS, rid)
        assert "reverted" in files and VPS.check_output("cat %s/%s/revert_rc" % (ufw_revert.STATE_DIR, rid)) == "0", log
        status = VPS.check_output("ufw status")
        assert "8088" not in status and BANNED in status  # the change gone, the ban kept in ufw's files
        assert ban_live() and BANNED in VPS.check_output("fail2ban-client status sshd")
        assert VPS.file(PROFILE).exists
        assert "-P FORWARD ACCEPT" in VPS.check_output("iptables -w -S FORWARD")
        adhoc.record("vps_connlimit", "revert_keeps_theirs", banned=BANNED, profile_kept=True, forward_kept=True)
    finally:
        settle(VPS, "vps-lab", rid)
        VPS.run("fail2ban-client set sshd unbanip %s; ufw delete reject from %s; rm -f %s; iptables -w -P FORWARD DROP"
                % (BANNED, BANNED, PROFILE))


def test_without_the_net_the_ban_made_through_ufw_is_lost():
    rid = None
    try:
        assert until(lambda: VPS.run("fail2ban-client status sshd").rc == 0, 30)
        rid = ban_window(net=False)
        files, log = wait_reverted(VPS, rid)
        assert "reverted" in files, log
        assert not ban_live() and BANNED not in VPS.check_output("ufw status")
        assert BANNED in VPS.check_output("fail2ban-client status sshd")  # fail2ban believes it holds
    finally:
        settle(VPS, "vps-lab", rid)
        VPS.run("fail2ban-client set sshd unbanip %s; ufw delete reject from %s; rm -f %s /etc/fail2ban/jail.local; "
                "systemctl disable --now fail2ban; iptables -w -P FORWARD DROP" % (BANNED, BANNED, PROFILE))


# ------------------------------------------------------------ a restart without systemd
def restart_fresh():
    """The fresh VPS restarted (its container: what boot does, in a real host's order - sshd, then ufw's own
    start if enabled), and the UDP service the scenario runs there started again."""
    import subprocess
    subprocess.run(["docker", "restart", "-t", "2", "vps-fresh"], check=True, timeout=60)
    assert until(lambda: FRESH.run("pgrep -x sshd").rc == 0, 30)
    subprocess.run(["docker", "exec", "-d", "vps-fresh", "python3", "-c", UDP_STANDIN], check=True, timeout=30)


def fresh_change_live():
    return "--dport 8089 -j DROP" in FRESH.run("iptables -w -S ufw-user-input").stdout


def test_a_restart_without_systemd_inside_the_window_reverts_at_ufws_start_and_without_the_hook_does_not():
    assert FRESH.run("test -d /run/systemd/system").rc != 0  # no systemd: the detached timer
    outcomes = {}
    for hook in (True, False):
        res = arm("vps-fresh", timeout=600)
        assert res.get("id") and res.get("boot_path") == "ufw-init" and res.get("timer") == "detached", res
        rid = res["id"]
        try:
            assert ufw_revert.HOOK_BEGIN in FRESH.check_output("cat /etc/ufw/before.init")
            if not hook:  # the net removed
                for name, stage in ufw_revert.HOOKS:
                    text = ufw_revert.init_hook(FRESH.check_output("cat /etc/ufw/%s" % name), ufw_revert.STATE_DIR, stage, present=False)
                    FRESH.check_output("printf %%s %s >/etc/ufw/%s" % (shlex.quote(text), name))
            FRESH.check_output("ufw deny 8089/tcp >/dev/null")
            assert fresh_change_live()
            restart_fresh()
            state = adhoc.run_module("ufw_revert", {"state": "query"}, target="vps-fresh", inventory=INVENTORY,
                                     become=True)
            mine = [r for r in state["reverts"] if r["id"] == rid][0]
            outcomes[hook] = (fresh_change_live(), mine["state"])
            assert new_connection(FRESH, 2222)
        finally:
            settle(FRESH, "vps-fresh", rid)
            FRESH.run("ufw delete deny 8089/tcp")
    assert outcomes[True] == (False, "reverted"), outcomes
    assert outcomes[False] == (True, "missed"), outcomes
    assert ufw_revert.HOOK_BEGIN in FRESH.check_output("cat /etc/ufw/before.init")  # the arm put it back
    assert FRESH.run("ufw status").stdout.startswith("Status: active")
