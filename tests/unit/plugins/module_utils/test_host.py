"""module_utils/host.py: the one home for file writes, the C locale and the root check."""
import os

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import host


class Module(object):
    """What host needs of AnsibleModule: atomic_move, backup_local, fail_json."""

    def __init__(self, check_mode=False):
        self.check_mode = check_mode
        self._name = "homelab.edge.example"
        self.failed = None

    def atomic_move(self, src, dest, unsafe_writes=False):
        os.rename(src, dest)

    def backup_local(self, path):
        copy = path + ".bak"
        with open(path, "rb") as f, open(copy, "wb") as g:
            g.write(f.read())
        return copy

    def fail_json(self, **kw):
        self.failed = kw
        raise SystemExit(1)


def test_a_new_file_gets_the_new_mode_and_an_existing_one_keeps_its_own(tmp_path):
    path = str(tmp_path / "f")
    host.write_text(Module(), path, "one\n", new_mode=0o600)
    assert os.stat(path).st_mode & 0o7777 == 0o600
    os.chmod(path, 0o640)
    host.write_text(Module(), path, "two\n", new_mode=0o600, add_mode=0o110)
    assert os.stat(path).st_mode & 0o7777 == 0o750
    assert host.read_text(path) == "two\n"
    assert os.listdir(str(tmp_path)) == ["f"], "no temporary file left behind"


def test_none_removes_the_file_and_backup_keeps_a_copy(tmp_path):
    path = str(tmp_path / "f")
    host.write_text(Module(), path, "mine\n")
    saved = host.write_text(Module(), path, None, backup=True)
    assert not os.path.exists(path)
    assert host.read_text(saved) == "mine\n"
    assert host.write_text(Module(), path, None) is None  # already gone: nothing to do


def test_read_text_gives_the_default_only_for_a_missing_file(tmp_path):
    assert host.read_text(str(tmp_path / "missing"), "") == ""
    assert host.read_text(str(tmp_path / "missing" / "below")) is None
    with pytest.raises((IOError, OSError)):
        host.read_text(str(tmp_path))  # a directory is an error, not "missing"


@pytest.mark.parametrize("check_mode, reads, fails", [
    (False, False, True), (True, False, True), (True, True, False), (False, True, True),
])
def test_require_root_says_what_to_do(monkeypatch, check_mode, reads, fails):
    monkeypatch.setattr(host, "is_root", lambda: False)
    m = Module(check_mode)
    if fails:
        with pytest.raises(SystemExit):
            host.require_root(m, "writes a file", check_mode_reads=reads)
        assert m.failed["msg"].startswith("example must run as root: it writes a file. Run it with become: true")
    else:
        host.require_root(m, "writes a file", check_mode_reads=reads)
        assert m.failed is None


def test_a_record_is_roots_only_and_none_forgets_it(tmp_path):
    path = str(tmp_path / "state" / "traefik.json")
    assert host.read_record(path) is None
    host.write_record(Module(), path, {"files": {"/s.yml": {"original": "theirs\n", "written": "ours\n"}}})
    assert host.read_record(path) == {"files": {"/s.yml": {"original": "theirs\n", "written": "ours\n"}}}
    assert os.stat(path).st_mode & 0o7777 == 0o600 and os.stat(os.path.dirname(path)).st_mode & 0o7777 == 0o700
    host.write_record(Module(), path, None)
    assert not os.path.exists(path) and host.read_record(path) is None


def test_the_last_record_forgotten_takes_its_empty_directories_up_to_homelab_edge(tmp_path):
    """Issue 62: an undo left /var/lib/homelab-edge/tcp-drain behind, empty."""
    state = tmp_path / "var" / "lib" / "homelab-edge"
    for name in ("a.json", "b.json"):
        host.write_record(Module(), str(state / "tcp-drain" / name), {"before": {}})
    host.write_record(Module(), str(state / "tcp-drain" / "a.json"), None)
    assert os.listdir(str(state / "tcp-drain")) == ["b.json"]  # another record: the directory stays
    host.write_record(Module(), str(state / "tcp-drain" / "b.json"), None)
    assert not state.exists() and (tmp_path / "var" / "lib").is_dir()  # ours gone, nothing above it
    host.write_record(Module(), str(state / "traefik" / "t.json"), {})
    host.write_record(Module(), str(state / "other" / "o.json"), {})
    host.write_record(Module(), str(state / "traefik" / "t.json"), None)
    assert sorted(os.listdir(str(state))) == ["other"]  # another module's records keep the shared directory


def test_a_record_directory_of_the_users_choosing_stays_even_empty(tmp_path):
    mine = tmp_path / "srv" / "state"
    host.write_record(Module(), str(mine / "r.json"), {})
    host.write_record(Module(), str(mine / "r.json"), None)
    assert mine.is_dir()
