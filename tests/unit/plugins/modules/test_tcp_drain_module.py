"""tcp_drain's main() over a host's sysctl.d directories laid out in a
temporary root (Debian 12's, with a guide's line in /etc/sysctl.conf): the
refusal changes nothing, live or on disk; boot_order=win writes the drop-in
under a later name, diff shows it, state=absent removes it under each name."""
import os

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import boot as tcp_drain_boot
from ansible_collections.homelab.edge.plugins.modules import tcp_drain as mod

from .conftest import run_module

FIN = "net.ipv4.tcp_fin_timeout"
ABORT = "net.ipv4.tcp_abort_on_overflow"
CT = "net.netfilter.nf_conntrack_tcp_timeout_time_wait"


class FakeNamespace(object):
    """The host's live values: a dict instead of sysctl."""
    live = {}

    def __init__(self, module, container):
        self.where = "the host"

    def read(self, key):
        return self.live[key], None

    def write(self, key, value):
        self.live[key] = value


@pytest.fixture
def root(tmp_path, monkeypatch):
    def under(dirs):
        return tuple(str(tmp_path) + d for d in dirs)
    monkeypatch.setattr(tcp_drain_boot, "SYSCTL_DIRS", under(tcp_drain_boot.SYSCTL_DIRS))
    monkeypatch.setattr(tcp_drain_boot, "MODULES_LOAD_DIRS", under(tcp_drain_boot.MODULES_LOAD_DIRS))
    monkeypatch.setattr(mod, "Namespace", FakeNamespace)
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    FakeNamespace.live = {FIN: 60, ABORT: 0, CT: 120}
    for d in ("/etc/sysctl.d", "/usr/lib/sysctl.d", "/etc/modules-load.d"):
        os.makedirs(str(tmp_path) + d)
    (tmp_path / "etc" / "sysctl.conf").write_text(
        "#kernel.domainname = example.com\n\n# a guide\nnet.ipv4.tcp_fin_timeout = 30\n")
    os.symlink("../sysctl.conf", str(tmp_path / "etc" / "sysctl.d" / "99-sysctl.conf"))
    (tmp_path / "usr" / "lib" / "sysctl.d" / "50-pid-max.conf").write_text("kernel.pid_max = 4194304\n")
    (tmp_path / "etc" / "modules").write_text("# /etc/modules\n")
    os.symlink("../modules", str(tmp_path / "etc" / "modules-load.d" / "modules.conf"))
    return tmp_path


def run(monkeypatch, capsys, root, check=False, diff=False, **args):
    args = dict({"values": {FIN: 15, ABORT: 1}, "persist": str(root) + "/etc/sysctl.d/60-homelab-edge-drain.conf",
                 "state_dir": str(root / "state"), "_ansible_check_mode": check, "_ansible_diff": diff}, **args)
    return run_module(mod, args, monkeypatch, capsys)


def listing(root):
    return sorted(os.listdir(str(root / "etc" / "sysctl.d")))


@pytest.mark.parametrize("check", [False, True])
def test_refused_before_anything_changes_naming_file_line_and_key(root, monkeypatch, capsys, check):
    res = run(monkeypatch, capsys, root, check=check)
    assert res["failed"] and not res["changed"]
    assert "99-sysctl.conf (-> ../sysctl.conf) line 4 sets net.ipv4.tcp_fin_timeout = 30" in res["msg"]
    assert "Nothing was changed." in res["msg"]
    assert FakeNamespace.live == {FIN: 60, ABORT: 0, CT: 120}
    assert listing(root) == ["99-sysctl.conf"] and not (root / "state").exists()
    # what the next boot applies, beside the live value
    assert res["boot"][FIN]["boot"] == 30 and res["boot"][FIN]["live"] == 60 and res["boot"][FIN]["status"] == "differs"
    assert res["conflicts"][0]["line"] == 4


def test_win_writes_a_later_name_that_boot_applies_and_absent_removes_it(root, monkeypatch, capsys):
    res = run(monkeypatch, capsys, root, check=True, diff=True, boot_order="win")
    win = str(root) + "/etc/sysctl.d/99-zzz-homelab-edge-drain.conf"
    assert res["changed"] and res["dropin"] == win and listing(root) == ["99-sysctl.conf"]
    assert [d["after_header"] for d in res["diff"]] == ["host (live)", win]
    assert "net.ipv4.tcp_fin_timeout = 15" in res["diff"][1]["after"]

    res = run(monkeypatch, capsys, root, boot_order="win")
    assert res["changed"] and listing(root) == ["99-sysctl.conf", "99-zzz-homelab-edge-drain.conf"]
    assert res["boot"][FIN] == {"boot": 15, "live": 15, "status": "same", "from": win + ":5"}
    assert "tcp_fin_timeout=15 (boot 15)" in res["boot_summary"]
    assert not run(monkeypatch, capsys, root, boot_order="win")["changed"]  # idempotent

    # the user removes their line: the configured name again, the later one gone
    (root / "etc" / "sysctl.conf").write_text("#kernel.domainname = example.com\n")
    res = run(monkeypatch, capsys, root, boot_order="win")
    assert res["changed"] and listing(root) == ["60-homelab-edge-drain.conf", "99-sysctl.conf"]

    res = run(monkeypatch, capsys, root, state="absent", values=None)
    assert res["changed"] and listing(root) == ["99-sysctl.conf"]
    assert FakeNamespace.live == {FIN: 60, ABORT: 0, CT: 120}


def test_the_conntrack_key_gets_a_modules_load_entry_and_absent_removes_it(root, monkeypatch, capsys):
    (root / "etc" / "sysctl.conf").write_text("")
    entry = str(root) + "/etc/modules-load.d/homelab-edge-conntrack.conf"
    res = run(monkeypatch, capsys, root, values={FIN: 15, CT: 30})
    assert res["boot"][CT]["status"] == "module-late"  # check mode: nothing loads nf_conntrack at boot yet
    res = run(monkeypatch, capsys, root, values={FIN: 15, CT: 30}, conntrack_modules_load=entry)
    assert res["changed"] and open(entry).read().splitlines()[-1] == "nf_conntrack"
    assert res["boot"][CT] == {"boot": 30, "live": 30, "status": "same",
                               "from": str(root) + "/etc/sysctl.d/60-homelab-edge-drain.conf:4"}
    run(monkeypatch, capsys, root, state="absent", values=None, conntrack_modules_load=entry)
    assert not os.path.exists(entry)


def test_persist_is_refused_for_a_container(root, monkeypatch, capsys):
    res = run(monkeypatch, capsys, root, container="traefik")
    assert res["failed"] and "not set by boot" in res["msg"]
