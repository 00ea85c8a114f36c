"""What systemd-sysctl applies at boot, over the layouts distributions ship
(Debian 12's as the lab's systemd host image has it; Ubuntu 22.04's and
24.04's /etc/sysctl.d and systemd's /usr/lib/sysctl.d/50-default.conf), with
a user's /etc/sysctl.conf or drop-in beside the role's."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import boot as tcp_drain_boot

FIN, ABORT = "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_abort_on_overflow"
CT = "net.netfilter.nf_conntrack_tcp_timeout_time_wait"
WANT = {FIN: 15, ABORT: 1}
DROPIN = "/etc/sysctl.d/60-homelab-edge-drain.conf"

# Debian 12 (procps 4.0.2, systemd 252): /etc/sysctl.conf all comments, linked from /etc/sysctl.d; /lib is /usr/lib.
DEBIAN_SYSCTL_CONF = """#
# /etc/sysctl.conf - Configuration file for setting system variables
# See /etc/sysctl.d/ for additional system variables.
# See sysctl.conf (5) for information.
#

#kernel.domainname = example.com

# Uncomment the following to stop low-level messages on console
#kernel.printk = 3 4 1 3

# Uncomment the next line to enable TCP/IP SYN cookies
#net.ipv4.tcp_syncookies=1

# Uncomment the next line to enable packet forwarding for IPv4
#net.ipv4.ip_forward=1
"""
PID_MAX = """# See sysctl.d(5) and core(5) for documentation.

# Bump the numeric PID range to make PID collisions less likely.
kernel.pid_max = 4194304
"""
PROTECT_LINKS = """# Protected links
fs.protected_fifos = 1
fs.protected_hardlinks = 1
fs.protected_regular = 2
fs.protected_symlinks = 1
"""
# systemd's own (Ubuntu ships it; Debian 12 does not)
DEFAULT_50 = """# See sysctl.d(5) and core(5) for documentation.
kernel.sysrq = 16
kernel.core_uses_pid = 1
net.ipv4.conf.default.rp_filter = 2
net.ipv4.conf.*.rp_filter = 2
-net.ipv4.conf.all.rp_filter
net.ipv4.conf.default.accept_source_route = 0
net.ipv4.conf.*.accept_source_route = 0
-net.ipv4.conf.all.accept_source_route
-net.ipv4.ping_group_range = 0 2147483647
-net.core.default_qdisc = fq_codel
fs.protected_regular = 1
fs.protected_fifos = 1
"""
NETWORK_SECURITY = """# Turn on Source Address Verification in all interfaces to
# prevent some spoofing attacks.
net.ipv4.conf.default.rp_filter=2
net.ipv4.conf.all.rp_filter=2
"""


def f(path, text, link=None):
    return {"path": path, "text": text, "link": link}


def debian12(sysctl_conf=DEBIAN_SYSCTL_CONF, extra=()):
    return [f("/etc/sysctl.d/99-sysctl.conf", sysctl_conf, "../sysctl.conf"),
            f("/usr/lib/sysctl.d/50-pid-max.conf", PID_MAX), f("/usr/lib/sysctl.d/99-protect-links.conf", PROTECT_LINKS),
            f("/lib/sysctl.d/50-pid-max.conf", PID_MAX), f("/lib/sysctl.d/99-protect-links.conf", PROTECT_LINKS)] + list(extra)


def ubuntu(sysctl_conf=DEBIAN_SYSCTL_CONF, extra=()):
    return [f("/etc/sysctl.d/10-console-messages.conf",
              "# the following stops low-level messages on console\nkernel.printk = 4 4 1 7\n"),
            f("/etc/sysctl.d/10-ipv6-privacy.conf", "net.ipv6.conf.all.use_tempaddr = 2\n"
                                                    "net.ipv6.conf.default.use_tempaddr = 2\n"),
            f("/etc/sysctl.d/10-kernel-hardening.conf", "kernel.kptr_restrict = 1\n"),
            f("/etc/sysctl.d/10-magic-sysrq.conf", "kernel.sysrq = 176\n"),
            f("/etc/sysctl.d/10-network-security.conf", NETWORK_SECURITY),
            f("/etc/sysctl.d/10-ptrace.conf", "kernel.yama.ptrace_scope = 1\n"),
            f("/etc/sysctl.d/10-zeropage.conf", "vm.mmap_min_addr = 65536\n"),
            f("/etc/sysctl.d/99-sysctl.conf", sysctl_conf, "../sysctl.conf"),
            f("/usr/lib/sysctl.d/50-default.conf", DEFAULT_50), f("/usr/lib/sysctl.d/50-pid-max.conf", PID_MAX),
            f("/usr/lib/sysctl.d/99-protect-links.conf", PROTECT_LINKS)] + list(extra)


def ours(path=DROPIN, values=None):
    return f(path, tcp_drain_boot.drop_in_text(values or WANT))


GUIDE = DEBIAN_SYSCTL_CONF + "\n# from a hardening guide\nnet.ipv4.tcp_fin_timeout = 30\n"


@pytest.mark.parametrize("key, path", [
    ("net.ipv4.tcp_fin_timeout", "net/ipv4/tcp_fin_timeout"),
    ("net/ipv4/tcp_fin_timeout", "net/ipv4/tcp_fin_timeout"),
    ("net.ipv4.conf.enp3s0/200.forwarding", "net/ipv4/conf/enp3s0.200/forwarding"),
    ("net/ipv4/conf/enp3s0.200/forwarding", "net/ipv4/conf/enp3s0.200/forwarding"),
])
def test_keys_are_compared_as_systemd_normalizes_them(key, path):
    assert tcp_drain_boot.to_path(key) == path


def test_parse_reads_assignments_exclusions_and_the_dash_prefix():
    text = "# c\n; c\n\n  net.ipv4.tcp_fin_timeout=30  \n-net.ipv4.tcp_abort_on_overflow = 0\n" \
           "-net.ipv4.conf.all.rp_filter\nnot an assignment\n"
    assert tcp_drain_boot.parse(text) == [(4, "net.ipv4.tcp_fin_timeout", "net/ipv4/tcp_fin_timeout", "30"),
                                          (5, "-net.ipv4.tcp_abort_on_overflow", "net/ipv4/tcp_abort_on_overflow", "0"),
                                          (6, "-net.ipv4.conf.all.rp_filter", "net/ipv4/conf/all/rp_filter", None)]


# (layout, what boot sets fin_timeout to, from which file and line)
BOOT_CASES = [
    ("debian 12 as shipped: nothing sets it", debian12(), None, None, None),
    ("debian 12, the drop-in alone", debian12(extra=[ours()]), 15, DROPIN, 4),
    ("debian 12, a guide's line in /etc/sysctl.conf beats the drop-in (99 > 60)",
     debian12(GUIDE, [ours()]), 30, "/etc/sysctl.d/99-sysctl.conf", 19),
    ("ubuntu, a guide's line in /etc/sysctl.conf beats the drop-in",
     ubuntu(GUIDE, [ours()]), 30, "/etc/sysctl.d/99-sysctl.conf", 19),
    ("ubuntu, 10-network-security.conf sets other keys: the drop-in holds", ubuntu(extra=[ours()]), 15, DROPIN, 4),
    ("a same-named file in /etc replaces /usr/lib's",
     [f("/usr/lib/sysctl.d/70-tune.conf", "net.ipv4.tcp_fin_timeout = 30\n"),
      f("/etc/sysctl.d/70-tune.conf", "# emptied by the admin\nvm.swappiness = 10\n"), ours()], 15, DROPIN, 4),
    ("a /run file replaces /usr/local/lib's of the same name, and is read after the drop-in",
     [f("/usr/local/lib/sysctl.d/80-x.conf", "net.ipv4.tcp_fin_timeout = 20\n"),
      f("/run/sysctl.d/80-x.conf", "net.ipv4.tcp_fin_timeout = 25\n"), ours()], 25, "/run/sysctl.d/80-x.conf", 1),
    ("a symlink to /dev/null masks the vendor's file",
     [f("/usr/lib/sysctl.d/90-vendor.conf", "net.ipv4.tcp_fin_timeout = 30\n"),
      f("/etc/sysctl.d/90-vendor.conf", "", "/dev/null"), ours()], 15, DROPIN, 4),
    ("an earlier file is overridden by the drop-in",
     [f("/etc/sysctl.d/10-tune.conf", "net.ipv4.tcp_fin_timeout = 30\n"), ours()], 15, DROPIN, 4),
    ("the slash form in a later file is the same key",
     [ours(), f("/etc/sysctl.d/90-tune.conf", "net/ipv4/tcp_fin_timeout = 45\n")], 45, "/etc/sysctl.d/90-tune.conf", 1),
    ("a later '-key' without a value unsets it",
     [ours(), f("/etc/sysctl.d/90-tune.conf", "-net.ipv4.tcp_fin_timeout\n")], None, "/etc/sysctl.d/90-tune.conf", 1),
    ("a later glob does not beat an explicit key",
     [ours(), f("/etc/sysctl.d/90-tune.conf", "net.ipv4.tcp_fin_*out = 45\n")], 15, DROPIN, 4),
    ("a glob alone sets it",
     [f("/etc/sysctl.d/90-tune.conf", "net.ipv4.tcp_fin_timeou? = 45\n")], 45, "/etc/sysctl.d/90-tune.conf", 1),
    ("'*' does not cross a separator", [f("/etc/sysctl.d/90-tune.conf", "net.*_fin_timeout = 45\n")], None, None, None),
    ("the same value again keeps the first file as its source",
     [ours(), f("/etc/sysctl.d/90-tune.conf", "net.ipv4.tcp_fin_timeout = 15\n")], 15, DROPIN, 4),
    ("a file not ending in .conf is not read",
     [ours(), f("/etc/sysctl.d/99-tune.conf.disabled", "net.ipv4.tcp_fin_timeout = 30\n"),
      f("/etc/sysctl.d/README.sysctl", "net.ipv4.tcp_fin_timeout = 30\n")], 15, DROPIN, 4),
]


@pytest.mark.parametrize("name, files, value, path, line", BOOT_CASES, ids=[c[0] for c in BOOT_CASES])
def test_what_boot_applies(name, files, value, path, line):
    got = tcp_drain_boot.boot_values(files, WANT)[FIN]
    assert (got["value"], got["path"], got["line"]) == (value, path, line)


def test_files_are_read_sorted_by_name_across_directories():
    order = [x["path"] for x in tcp_drain_boot.applied_files(ubuntu(extra=[ours()]))]
    assert order == ["/etc/sysctl.d/10-console-messages.conf", "/etc/sysctl.d/10-ipv6-privacy.conf",
                     "/etc/sysctl.d/10-kernel-hardening.conf", "/etc/sysctl.d/10-magic-sysrq.conf",
                     "/etc/sysctl.d/10-network-security.conf", "/etc/sysctl.d/10-ptrace.conf",
                     "/etc/sysctl.d/10-zeropage.conf", "/usr/lib/sysctl.d/50-default.conf",
                     "/usr/lib/sysctl.d/50-pid-max.conf", DROPIN, "/usr/lib/sysctl.d/99-protect-links.conf",
                     "/etc/sysctl.d/99-sysctl.conf"]
    # Debian's /lib is /usr/lib: one of each name
    assert [x["path"] for x in tcp_drain_boot.applied_files(debian12())] == [
        "/usr/lib/sysctl.d/50-pid-max.conf", "/usr/lib/sysctl.d/99-protect-links.conf", "/etc/sysctl.d/99-sysctl.conf"]


def test_systemds_own_example_of_globs_and_exclusions():
    """sysctl.d(5), example 4: rp_filter 2 everywhere but 'all' (excluded) and hub0 (explicit)."""
    files = [f("/etc/sysctl.d/20-rp_filter.conf", "net.ipv4.conf.default.rp_filter = 2\nnet.ipv4.conf.*.rp_filter = 2\n"
                                                  "-net.ipv4.conf.all.rp_filter\nnet.ipv4.conf.hub0.rp_filter = 1\n")]
    keys = ["net.ipv4.conf.%s.rp_filter" % i for i in ("default", "eth0", "all", "hub0")]
    got = tcp_drain_boot.boot_values(files, dict((k, 0) for k in keys))
    assert [got[k]["value"] for k in keys] == [2, 2, None, 1]


# (layout, boot_order) -> (where the drop-in goes, or refused; the conflicts named as "path:line key=value")
PLAN_CASES = [
    ("debian 12 as shipped", debian12(), "refuse", DROPIN, []),
    ("debian 12, the guide's sysctl.conf: refused", debian12(GUIDE), "refuse", None,
     ["/etc/sysctl.d/99-sysctl.conf:19 net.ipv4.tcp_fin_timeout=30"]),
    ("debian 12, the guide's sysctl.conf: written to win", debian12(GUIDE), "win",
     "/etc/sysctl.d/99-zzz-homelab-edge-drain.conf", ["/etc/sysctl.d/99-sysctl.conf:19 net.ipv4.tcp_fin_timeout=30"]),
    ("ubuntu, the guide's sysctl.conf and its 10-network-security.conf: written to win", ubuntu(GUIDE), "win",
     "/etc/sysctl.d/99-zzz-homelab-edge-drain.conf", ["/etc/sysctl.d/99-sysctl.conf:19 net.ipv4.tcp_fin_timeout=30"]),
    ("an earlier file of the user's: no conflict",
     debian12(extra=[f("/etc/sysctl.d/10-tune.conf", "net.ipv4.tcp_fin_timeout = 30\n")]), "refuse", DROPIN, []),
    ("a later file with the same value: no conflict",
     debian12(extra=[f("/etc/sysctl.d/90-tune.conf", "net.ipv4.tcp_fin_timeout = 15\n")]), "refuse", DROPIN, []),
    ("two later files, both named",
     debian12(GUIDE, [f("/usr/local/lib/sysctl.d/70-x.conf", "-net.ipv4.tcp_abort_on_overflow = 0\n")]), "refuse",
     None, ["/usr/local/lib/sysctl.d/70-x.conf:1 net.ipv4.tcp_abort_on_overflow=0",
            "/etc/sysctl.d/99-sysctl.conf:19 net.ipv4.tcp_fin_timeout=30"]),
    ("a later exclusion unsets it", [f("/etc/sysctl.d/90-tune.conf", "-net.ipv4.tcp_fin_timeout\n")], "refuse", None,
     ["/etc/sysctl.d/90-tune.conf:1 net.ipv4.tcp_fin_timeout=None"]),
    ("a later file that sorts after 99-zzz-: the next name", [f("/etc/sysctl.d/99-zzzz-last.conf",
                                                              "net.ipv4.tcp_fin_timeout = 30\n")], "win",
     "/etc/sysctl.d/zz-homelab-edge-drain.conf", ["/etc/sysctl.d/99-zzzz-last.conf:1 net.ipv4.tcp_fin_timeout=30"]),
    ("nothing can sort after zzzzz.conf: refused even with win",
     [f("/etc/sysctl.d/zzzzz.conf", "net.ipv4.tcp_fin_timeout = 30\n")], "win", None,
     ["/etc/sysctl.d/zzzzz.conf:1 net.ipv4.tcp_fin_timeout=30"]),
]


@pytest.mark.parametrize("name, files, order, path, conflicts", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan(name, files, order, path, conflicts):
    got = tcp_drain_boot.plan(files, WANT, DROPIN, order)
    assert got["path"] == path
    assert ["%s:%d %s=%s" % (c["path"], c["line"], c["key"], c["value"]) for c in got["conflicts"]] == conflicts
    assert (got["refusal"] is None) == (path is not None)
    if path:  # where it is written, boot applies what was asked
        after = tcp_drain_boot.boot_values(files + [ours(path)], WANT)
        assert dict((k, v["value"]) for k, v in after.items()) == WANT


def test_the_refusal_names_file_line_key_and_what_to_do():
    msg = tcp_drain_boot.plan(debian12(GUIDE), WANT, DROPIN, "refuse")["refusal"]
    for words in ("/etc/sysctl.d/99-sysctl.conf (-> ../sysctl.conf) line 19 sets net.ipv4.tcp_fin_timeout = 30",
                  "after %s" % DROPIN, "the next boot would undo net.ipv4.tcp_fin_timeout",
                  "Change or remove those lines", "tcp_drain_boot_order: win", "Nothing was changed."):
        assert words in msg


def test_win_moves_its_own_drop_in_and_back_when_the_conflict_is_gone():
    win = "/etc/sysctl.d/99-zzz-homelab-edge-drain.conf"
    got = tcp_drain_boot.plan(debian12(GUIDE, [ours()]), WANT, DROPIN, "win")
    assert got["path"] == win and got["remove"] == [DROPIN]
    # the user drops their line: the configured name again, the moved one removed
    got = tcp_drain_boot.plan(debian12(extra=[ours(win)]), WANT, DROPIN, "win")
    assert got["path"] == DROPIN and got["remove"] == [win]
    # the module's own file under a later name is not a conflict of its own
    assert tcp_drain_boot.plan(debian12(extra=[ours(win, {FIN: 30, ABORT: 1})]), WANT, DROPIN, "refuse")["conflicts"] == []


def test_a_file_of_anothers_under_a_name_the_drop_in_may_take_is_neither_replaced_nor_removed():
    theirs = f("/etc/sysctl.d/99-zzz-homelab-edge-drain.conf", "net.ipv4.tcp_fin_timeout = 30\n")
    got = tcp_drain_boot.plan(debian12(GUIDE, [theirs]), WANT, DROPIN, "win")
    assert got["path"] == "/etc/sysctl.d/zz-homelab-edge-drain.conf" and got["remove"] == []


def test_the_drop_in_written_by_the_roles_template_before_is_the_modules_own():
    old = f(DROPIN, "# Ansible managed\n# homelab.edge.tcp_drain: shorter drain after a connection flood. Per network\n"
                    "net.ipv4.tcp_fin_timeout = 15\n")
    assert tcp_drain_boot.is_ours(old)
    assert tcp_drain_boot.plan(debian12(GUIDE, [old]), WANT, DROPIN, "win")["remove"] == [DROPIN]


@pytest.mark.parametrize("files, loaded", [
    ([f("/etc/modules-load.d/modules.conf", "# /etc/modules\n", "../modules")], False),
    ([f("/etc/modules-load.d/homelab-edge-conntrack.conf", tcp_drain_boot.modules_load_text())], True),
    ([f("/etc/modules-load.d/modules.conf", "nf-conntrack\n", "../modules")], True),
    ([f("/usr/lib/modules-load.d/k8s.conf", "nf_conntrack\n"), f("/etc/modules-load.d/k8s.conf", "", "/dev/null")],
     False),
])
def test_conntrack_at_boot_only_where_modules_load_d_loads_it(files, loaded):
    assert (tcp_drain_boot.CONNTRACK_MODULE in tcp_drain_boot.modules_loaded(files)) == loaded


def test_report_and_summary_put_the_boot_value_beside_the_live_one():
    want = dict(WANT, **{CT: 30})
    boot = tcp_drain_boot.boot_values(debian12(GUIDE, [ours(values=want)]), want)
    rep = tcp_drain_boot.report(boot, {FIN: 15, ABORT: 1, CT: 30}, want, conntrack_at_boot=False)
    assert rep[FIN] == {"boot": 30, "live": 15, "from": "/etc/sysctl.d/99-sysctl.conf:19", "status": "differs"}
    assert rep[ABORT]["status"] == "same" and rep[CT]["status"] == "module-late"
    words = tcp_drain_boot.summary(rep)
    assert "tcp_fin_timeout=15 (boot 30 from /etc/sysctl.d/99-sysctl.conf:19)" in words
    assert "tcp_abort_on_overflow=1 (boot 1)" in words
    assert "nf_conntrack loads after systemd-sysctl" in words
    assert tcp_drain_boot.report(boot, {CT: 30}, {CT: 30}, conntrack_at_boot=True)[CT]["status"] == "same"
    assert tcp_drain_boot.report({}, {FIN: 15}, {FIN: 15}, False)[FIN]["status"] == "not-set"


def test_a_file_of_anothers_under_the_configured_name_is_not_overwritten():
    theirs = f(DROPIN, "# my own tuning\nnet.ipv4.tcp_fin_timeout = 15\n")
    got = tcp_drain_boot.plan(debian12(extra=[theirs]), WANT, DROPIN, "refuse")
    assert got["path"] is None and got["refusal"].startswith("%s exists and is not the module's" % DROPIN)
