"""ufw_revert's main() over a state directory in a temporary path: query reads each revert's markers (a
confirmed one settled, an armed one whose time passed long ago pending as missed); arming while that one is
pending is refused with what to do and arms nothing; a state_dir a shell script cannot take is refused first."""
import json

import pytest

from ansible_collections.homelab.edge.plugins.modules import ufw_revert as mod

from .conftest import assert_documented_as_specified


def revert(state_dir, rid, marker, armed_at):
    d = state_dir / rid
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"id": rid, "armed_at": armed_at, "fires_at": armed_at + 120,
                                             "timeout": 120, "was_enabled": True}))
    (d / marker).write_text("")


@pytest.fixture
def state_dir(tmp_path, monkeypatch, commands):
    monkeypatch.setattr(mod.host, "is_root", lambda: True)
    revert(tmp_path, "1700000000-10", "confirmed", 1700000000)
    revert(tmp_path, "1700000500-11", "armed", 1700000500)  # no timer ran it: missed
    return tmp_path


def test_documentation_matches_the_argument_spec(monkeypatch):
    assert_documented_as_specified(mod, monkeypatch)


def test_query_lists_the_reverts_newest_first_and_the_missed_one_as_pending(run_main, state_dir):
    res = run_main(mod, state_dir=str(state_dir))
    assert not res["changed"]
    assert [(r["id"], r["state"]) for r in res["reverts"]] == [("1700000500-11", "missed"),
                                                               ("1700000000-10", "confirmed")]
    assert [r["id"] for r in res["pending"]] == ["1700000500-11"]


def test_arming_while_a_revert_is_missed_is_refused_and_arms_nothing(run_main, state_dir, commands):
    res = run_main(mod, state_dir=str(state_dir), state="armed")
    assert res["failed"] and "past its time and never ran" in res["msg"]
    assert "state=reverted id=1700000500-11" in res["msg"] and res["msg"].endswith("nothing was changed")
    assert sorted(p.name for p in state_dir.iterdir() if p.is_dir()) == ["1700000000-10", "1700000500-11"]
    assert commands.calls == []


def test_a_state_dir_unfit_for_a_shell_script_is_refused(run_main, tmp_path):
    res = run_main(mod, state_dir=str(tmp_path / "a b"))
    assert res["failed"] and "use an absolute path of letters" in res["msg"] and not (tmp_path / "a b").exists()


def test_a_query_of_roots_reverts_by_another_user_says_to_run_as_root(run_main, state_dir, monkeypatch):
    monkeypatch.setattr(mod.os, "access", lambda path, how: path != str(state_dir))
    monkeypatch.setattr(mod.host, "is_root", lambda: False)
    res = run_main(mod, state_dir=str(state_dir))
    assert res["failed"] and "must run as root: it reads the firewall reverts kept in %s" % state_dir in res["msg"]
