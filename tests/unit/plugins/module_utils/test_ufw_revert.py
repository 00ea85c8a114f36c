import os
import subprocess

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import ufw_revert as ur


@pytest.mark.parametrize("timeout, ok", [(120, True), (10, True), (3600, True), (0, False), (-5, False),
                                         (9, False), (3601, False), ("120", False), (True, False), (1.5, False)])
def test_timeout_bounds(timeout, ok):
    assert (ur.check_timeout(timeout) == []) is ok


def test_marker_order_and_states():
    assert ur.marker(["meta.json", "armed"]) == "armed"
    assert ur.marker(["meta.json", "reverting"]) == "reverting"
    assert ur.marker(["meta.json", "reverted"]) == "reverted"
    assert ur.marker(["meta.json"]) == "unknown"


def test_describe_says_missed_when_the_timer_should_have_fired():
    meta = {"id": "x", "armed_at": 1000, "fires_at": 1120, "timeout": 120}
    assert ur.describe(meta, "armed", 1100)["state"] == "armed"
    assert ur.describe(meta, "armed", 1120 + ur.GRACE + 1)["state"] == "missed"
    assert ur.describe(meta, "armed", 1100, alive=False)["state"] == "missed"
    done = ur.describe(meta, "reverted", 2000, reverted_at=1121, rc=0)
    assert done["state"] == "reverted" and done["ok"] and done["reverted_at"] == 1121


def test_systemd_timer_runs_the_script_now():
    argv = ur.systemd_run_argv("/usr/bin/systemd-run", "u", 120, "/bin/sh", "/d/revert.sh")
    assert "--on-active=120s" in argv and argv[-3:] == ["/bin/sh", "/d/revert.sh", "now"]


def revert_tree(tmp_path, was_enabled=False):
    """A revert directory as ufw_revert arms one, for a root of tmp files."""
    root = tmp_path / "etc-ufw"
    root.mkdir()
    (root / "user.rules").write_text("old\n")
    d = tmp_path / "rev"
    d.mkdir()
    subprocess.run(["tar", "-C", "/", "-cf", str(d / "files.tar"), str(root).lstrip("/")], check=True)
    (d / "files.list").write_text(str(root / "user.rules") + "\n")
    (d / "armed").write_text("")
    (d / "iptables.save").write_text("saved4")
    (d / "ip6tables.save").write_text("")
    (d / "revert.sh").write_text(ur.script(str(d), 1, was_enabled, roots=(str(root),)))
    return root, d


def fake_path(tmp_path):
    """A PATH where ufw and iptables-restore only record their calls."""
    b = tmp_path / "bin"
    b.mkdir()
    for tool in ("ufw", "iptables-restore", "ip6tables-restore"):
        (b / tool).write_text("#!/bin/sh\necho %s \"$@\" $(cat) >> %s/calls\n" % (tool, tmp_path))
        os.chmod(str(b / tool), 0o755)
    return str(b)


def run_script(d, tmp_path, *args):
    env = dict(os.environ)
    text = (d / "revert.sh").read_text().replace("PATH=/usr/sbin", "PATH=%s:/usr/sbin" % fake_path(tmp_path))
    (d / "revert.sh").write_text(text)
    return subprocess.run(["sh", str(d / "revert.sh")] + list(args), env=env, check=False)


def test_script_puts_files_back_removes_new_ones_and_disables_ufw(tmp_path):
    root, d = revert_tree(tmp_path)
    (root / "user.rules").write_text("changed\n")
    (root / "added.rules").write_text("new\n")
    run_script(d, tmp_path, "now")
    assert (root / "user.rules").read_text() == "old\n"
    assert not (root / "added.rules").exists()
    assert (tmp_path / "calls").read_text().splitlines() == ["ufw --force disable", "iptables-restore saved4"]
    assert (d / "reverted").exists() and not (d / "armed").exists()
    assert (d / "revert_rc").read_text().strip() == "0"


def test_script_does_nothing_once_confirmed(tmp_path):
    root, d = revert_tree(tmp_path)
    (root / "user.rules").write_text("changed\n")
    os.rename(str(d / "armed"), str(d / "confirmed"))
    run_script(d, tmp_path)  # the timer firing after a confirmation (it sleeps 1 s)
    assert (root / "user.rules").read_text() == "changed\n"
    assert not (tmp_path / "calls").exists() and not (d / "reverted").exists()
