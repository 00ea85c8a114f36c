"""The drain sysctls on a host reached over SSH with sudo: live, persisted,
and per network namespace. Read from outside (the console: docker exec)."""
import os
import subprocess
import sys

import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import hosts  # noqa: E402

HOST = testinfra.get_host("docker://drain-lab")
INVENTORY = adhoc.molecule_inventory()
DROPIN = "/etc/sysctl.d/60-homelab-edge-drain.conf"
WANT = {"net.ipv4.tcp_fin_timeout": 15, "net.ipv4.tcp_abort_on_overflow": 1,
        "net.netfilter.nf_conntrack_tcp_timeout_time_wait": 30}
KEYS = "sysctl -a 2>/dev/null | grep -E 'tcp_fin_timeout|abort_on_overflow'"


def live(key, container=None):
    path = "/proc/sys/%s" % key.replace(".", "/")
    return int(HOST.check_output("docker exec %s cat %s" % (container, path) if container else "cat %s" % path))


def run_module(args, check=False, become=True):
    return adhoc.run_module("tcp_drain", args, target="drain-lab", inventory=INVENTORY, check=check, become=become)


def test_live_values_and_dropin_on_the_host():
    for key, value in WANT.items():
        assert live(key) == value
    text = HOST.file(DROPIN).content_string
    for key, value in WANT.items():
        assert "%s = %d" % (key, value) in text
    assert HOST.file(DROPIN).mode == 0o644


def test_values_hold_after_sysctl_system():
    HOST.check_output("sysctl --system")
    for key, value in WANT.items():
        assert live(key) == value


def test_container_on_a_bridge_network_has_its_own_values():
    assert live("net.ipv4.tcp_fin_timeout", "drain-app") == 15
    assert live("net.ipv4.tcp_abort_on_overflow", "drain-app") == 1
    # and its /proc/sys is read-only from inside: only the host could set them
    assert HOST.run("docker exec drain-app sysctl -w net.ipv4.tcp_fin_timeout=20").rc != 0


def test_without_become_it_fails_per_key_or_skips_and_says_become():
    args = {"values": {"net.ipv4.tcp_fin_timeout": 30}}
    res = run_module(args, become=False)  # the user edge may read /proc/sys, not write it
    assert res.get("failed")
    assert "net.ipv4.tcp_fin_timeout: only root may write it in the host: run the task with become: true" in res["msg"]
    res = run_module(dict(args, unsupported="skip"), become=False)
    assert not res.get("failed") and not res["changed"]
    assert res["settings"]["net.ipv4.tcp_fin_timeout"]["status"] == "not-root"
    assert live("net.ipv4.tcp_fin_timeout") == 15


@pytest.mark.parametrize("values, words", [
    ({"net.ipv4.tcp_fin_timout": 15}, "unknown key net.ipv4.tcp_fin_timout"),
    ({"net.ipv4.tcp_fin_timeout": "fast"}, "must be an integer"),
    ({"net.ipv4.tcp_abort_on_overflow": 2}, "between 0 and 1"),
])
def test_bad_input_fails_clearly_and_changes_nothing(values, words):
    before = HOST.check_output(KEYS)
    res = run_module({"values": values})
    assert res.get("failed") and words in res["msg"]
    assert HOST.check_output(KEYS) == before


def test_check_mode_reports_without_writing():
    res = run_module({"values": {"net.ipv4.tcp_fin_timeout": 20}}, check=True)
    assert res["changed"] and res["settings"]["net.ipv4.tcp_fin_timeout"] == {"before": 15, "after": 20, "status": "changed"}
    assert live("net.ipv4.tcp_fin_timeout") == 15


def test_the_old_name_is_gone_and_names_the_new():
    # netns_sysctl redirected to tcp_drain until 2.0.0, as 0.1.0 and 1.0.0 announced; now its tombstone says where to go
    res = adhoc.run_module("netns_sysctl", {"values": {"net.ipv4.tcp_fin_timeout": 15}}, target="drain-lab",
                           inventory=INVENTORY, become=True)
    assert res.get("failed") and not res["changed"] and "removed" in res["msg"], res
    assert "homelab.edge.tcp_drain" in res["msg"], res


def role(state, *args, ok=True):
    out = adhoc.playbook(INVENTORY, "- hosts: drain-lab\n  gather_facts: false\n  become: true\n"
                                    "  roles: [homelab.edge.tcp_drain]\n", "-e", "tcp_drain_state=%s" % state, *args)
    assert (out.returncode == 0) == ok, out.stdout[-3000:]
    return out


def host_state():
    """Every file of /etc/sysctl.d (path and content), the live values on
    the host and in drain-app."""
    files = HOST.check_output("cd /etc/sysctl.d && for f in $(ls -A | sort); do echo \"== $f\"; cat \"$f\"; done; "
                              "ls -A /etc/modules-load.d")
    return files, [(k, live(k)) for k in sorted(WANT)], [(k, live(k, "drain-app")) for k in sorted(WANT)
                                                         if not k.startswith("net.netfilter")]


TEXTFILE = "/var/lib/prometheus/node-exporter/homelab_edge_netns.prom"  # the role's default tcp_drain_metrics_dir


def textfile():
    HOST.check_output("systemctl start homelab-edge-netns-sockets.service")  # a write now, as the timer does
    lines = HOST.file(TEXTFILE).content_string.splitlines()
    return dict(ln.rsplit(" ", 1) for ln in lines if ln and not ln.startswith("#"))


def host_counters():
    """What node_exporter on the host reads: its own namespace's TIME_WAIT and accepts."""
    tw = int(HOST.check_output("awk '/^TCP:/ {for (i = 2; i < NF; i++) if ($i == \"tw\") print $(i + 1)}' "
                               "/proc/net/sockstat"))
    opens = int(HOST.check_output("awk '/^Tcp:/ {n++; if (n == 1) for (i = 1; i <= NF; i++) if ($i == "
                                  "\"PassiveOpens\") c = i; if (n == 2) print $c}' /proc/net/snmp"))
    return tw, opens


def test_the_containers_own_time_wait_and_accepts_are_written_where_the_hosts_counters_are_blind():
    """drain-app accepts 300 connections from the host and closes each first (TIME_WAIT on its side):
    the textfile the role's timer writes counts them in drain-app's namespace; the host's counters, all
    node_exporter on the host sees, do not."""
    assert HOST.run("systemctl is-active homelab-edge-netns-sockets.timer").stdout.strip() == "active"
    n = 300
    HOST.check_output("docker exec -d drain-app python3 -c \"import socket\n"
                      "s = socket.create_server(('', 7070), backlog=512)\n"
                      "for i in range(%d):\n    c, a = s.accept(); c.close()\n\"" % n)
    ip = HOST.check_output("docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' drain-app")
    before, host_before = textfile(), host_counters()
    key = 'homelab_edge_netns_tcp_%s{container="drain-app"}'
    HOST.check_output("python3 -c \"import socket, time\nfor i in range(%d):\n"
                      "    for t in range(50):\n"
                      "        try:\n            c = socket.create_connection(('%s', 7070), 2); break\n"
                      "        except OSError: time.sleep(0.1)\n"
                      "    c.recv(1); c.close()\n\"" % (n, ip))
    after, host_after = textfile(), host_counters()
    assert after['homelab_edge_netns_up{container="drain-app"}'] == "1"
    accepted = int(after[key % "passive_opens_total"]) - int(before[key % "passive_opens_total"])
    assert accepted >= n and int(after[key % "time_wait"]) >= 0.9 * n, (accepted, after)
    # the host's namespace: the connections were its outgoing ones, closed second (no TIME_WAIT here)
    assert host_after[1] - host_before[1] < n / 10 and host_after[0] < n / 2, (host_before, host_after)


def test_absent_puts_back_exactly_what_was_there_before_the_role():
    """A file of the user's in /etc/sysctl.d and a key they had set
    themselves: the role's own undo (converge ran it first) leaves both, and
    present then absent is byte-identical to before."""
    HOST.check_output("printf '# mine\\nvm.swappiness = 10\\n' > /etc/sysctl.d/99-user.conf")
    try:
        role("absent")
        before = host_state()
        assert not HOST.file(DROPIN).exists and not HOST.file(MODULES_LOAD).exists
        assert dict(before[1])["net.ipv4.tcp_fin_timeout"] == 60 and dict(before[2])["net.ipv4.tcp_fin_timeout"] == 60
        HOST.check_output("sysctl -w net.ipv4.tcp_abort_on_overflow=1")  # theirs, set before the role
        before = host_state()
        assert "changed=0" not in role("present").stdout.split("PLAY RECAP")[1]
        assert host_state() != before
        role("absent")
        assert host_state() == before  # their abort_on_overflow=1 too: the role found it so and left it
        again = role("absent")
        assert "changed=0" in again.stdout.split("PLAY RECAP")[1]
    finally:
        HOST.check_output("rm -f /etc/sysctl.d/99-user.conf")
        role("present")


MODULES_LOAD = "/etc/modules-load.d/homelab-edge-conntrack.conf"
WIN = "/etc/sysctl.d/99-zzz-homelab-edge-drain.conf"
GUIDE_LINE = "net.ipv4.tcp_fin_timeout = 30"


def restart_host():
    subprocess.run(["docker", "restart", "-t", "5", "drain-lab"], check=True, capture_output=True)
    hosts.wait("sshd of drain-lab", lambda: hosts.ssh(2226, "true", check=False).returncode == 0)
    assert HOST.run("systemctl is-active systemd-sysctl.service").stdout.strip() == "active"
    # drain-app has no restart policy: started again for the tests and the role runs after this one
    hosts.wait("drain-app started", lambda: HOST.run("docker start drain-app").rc == 0)


def flat(out):
    """A run's output with its whitespace as single spaces (a callback may fold long messages)."""
    return " ".join(out.stdout.split())


def status_lines(*args):
    out = adhoc.playbook(INVENTORY, "- hosts: drain-lab\n  gather_facts: false\n  become: true\n  tasks:\n"
                                    "    - ansible.builtin.include_role: {name: homelab.edge.tcp_drain, tasks_from: status}\n"
                                    "    - ansible.builtin.debug: {var: homelab_edge_status_lines}\n", *args)
    assert out.returncode == 0, out.stdout[-3000:]
    return flat(out)


@pytest.fixture
def guide_in_sysctl_conf():
    """A guide's line in the user's /etc/sysctl.conf (Debian 12 reads it at boot as /etc/sysctl.d/99-sysctl.conf,
    after the drop-in); taken out again afterwards, and the role's default run back."""
    HOST.check_output("cp -p /etc/sysctl.conf /root/sysctl.conf.orig && echo '%s' >> /etc/sysctl.conf" % GUIDE_LINE)
    try:
        yield int(HOST.check_output("grep -n '^%s$' /etc/sysctl.conf | cut -d: -f1" % GUIDE_LINE))
    finally:
        HOST.check_output("mv /root/sysctl.conf.orig /etc/sysctl.conf")
        role("present")
        assert HOST.file(DROPIN).exists and not HOST.file(WIN).exists


def test_a_later_sysctl_conf_line_is_refused_with_its_file_line_and_key_and_nothing_is_written(guide_in_sysctl_conf):
    HOST.check_output("sysctl -w net.ipv4.tcp_fin_timeout=20")  # by hand: a write of the role's would show
    before = host_state()
    out = flat(role("present", ok=False))
    assert ("/etc/sysctl.d/99-sysctl.conf (-> ../sysctl.conf) line %d sets net.ipv4.tcp_fin_timeout = 30"
            % guide_in_sysctl_conf) in out, out[-3000:]
    assert "tcp_drain_boot_order: win" in out and "Nothing was changed" in out
    assert host_state() == before and live("net.ipv4.tcp_fin_timeout") == 20
    # status: the live value beside the one the next boot applies, and where that comes from
    text = status_lines()
    assert "tcp_fin_timeout=20 (boot 30 from /etc/sysctl.d/99-sysctl.conf:%d)" % guide_in_sysctl_conf in text, text


def test_with_boot_order_win_the_drop_in_sorts_later_and_its_value_wins_after_a_reboot(guide_in_sysctl_conf):
    check = role("present", "-e", "tcp_drain_boot_order=win", "--check", "--diff")
    assert "+++ after: %s" % WIN in check.stdout and "--- before: %s" % DROPIN in check.stdout, check.stdout[-3000:]
    assert HOST.file(DROPIN).exists and not HOST.file(WIN).exists  # check mode wrote nothing
    role("present", "-e", "tcp_drain_boot_order=win")
    assert not HOST.file(DROPIN).exists and "net.ipv4.tcp_fin_timeout = 15" in HOST.file(WIN).content_string
    again = role("present", "-e", "tcp_drain_boot_order=win")
    assert "changed=0" in again.stdout.split("PLAY RECAP")[1]
    restart_host()
    assert live("net.ipv4.tcp_fin_timeout") == 15  # the drop-in's, not /etc/sysctl.conf's 30
    assert "tcp_fin_timeout=15 (boot 15)" in status_lines("-e", "tcp_drain_boot_order=win")
    # and absent removes it under its later name
    role("absent", "-e", "tcp_drain_boot_order=win")
    assert not HOST.file(WIN).exists and not HOST.file(DROPIN).exists


def test_conntrack_is_loaded_by_modules_load_d_which_systemd_runs_before_systemd_sysctl():
    """The lab's hosts are containers on a kernel where nf_conntrack is loaded already (and they may not load
    modules: systemd-modules-load is skipped by its ConditionCapability=CAP_SYS_MODULE), so a boot where the
    module loads late cannot be shown here: the entry and the units' documented order are."""
    assert HOST.file(MODULES_LOAD).content_string.splitlines()[-1] == "nf_conntrack"
    after = HOST.check_output("systemctl show -p After --value systemd-sysctl.service")
    assert "systemd-modules-load.service" in after.split()


def test_values_return_after_a_reboot_from_the_dropin():
    """Last: a restarted host has a new network namespace (kernel defaults
    again); systemd's boot (systemd-sysctl.service) applies the drop-in before
    anything logs in."""
    restart_host()
    for key, value in WANT.items():
        assert live(key) == value
