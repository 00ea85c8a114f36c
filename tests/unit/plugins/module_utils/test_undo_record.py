"""The undo record: what a module wrote over a user's files, and putting it back."""
from ansible_collections.homelab.edge.plugins.module_utils import undo_record


def test_the_first_original_is_kept_and_the_last_written_text_replaces_the_one_before():
    rec = undo_record.remember(None, [("/s.yml", "theirs\n", "ours 1\n"), ("/mw.yml", None, "mw 1\n")], dirs=["/d"],
                               moved={"src": "/a", "dest": "/d/a"}, extra={"restart": True})
    rec = undo_record.remember(rec, [("/s.yml", "ours 1\n", "ours 2\n")], dirs=["/d", "/e"], moved={"src": "/x", "dest": "/y"})
    assert rec["files"] == {"/s.yml": {"original": "theirs\n", "written": "ours 2\n"},
                            "/mw.yml": {"original": None, "written": "mw 1\n"}}
    assert rec["dirs"] == ["/d", "/e"] and rec["moved"] == {"src": "/a", "dest": "/d/a"}
    assert rec["extra"] == {"restart": True}


def test_undo_puts_back_the_original_and_removes_what_the_module_created():
    rec = undo_record.remember(None, [("/s.yml", "theirs\n", "ours\n"), ("/mw.yml", None, "mw\n"), ("/same", "x", "y")])
    steps, changed = undo_record.undo_plan(rec, {"/s.yml": "ours\n", "/mw.yml": "mw\n", "/same": "x"})
    assert steps == [("remove", "/mw.yml", None), ("write", "/s.yml", "theirs\n")] and changed == []
    assert undo_record.undo_diff(steps, {"/s.yml": "ours\n", "/mw.yml": "mw\n"})[1] == {
        "before_header": "/s.yml", "after_header": "/s.yml", "before": "ours\n", "after": "theirs\n"}


def test_a_file_changed_since_the_module_wrote_it_is_not_put_back():
    rec = undo_record.remember(None, [("/s.yml", "theirs\n", "ours\n")])
    assert undo_record.undo_plan(rec, {"/s.yml": "ours\n# theirs again\n"}) == ([], ["/s.yml"])
    # changed by someone between two runs: the original lacks their change
    diverged = undo_record.remember(rec, [("/s.yml", "ours\n# mine\n", "ours 2\n# mine\n")])
    assert undo_record.undo_plan(diverged, {"/s.yml": "ours 2\n# mine\n"}) == ([], ["/s.yml"])
    # put back by hand to the original between two runs: still the original
    back = undo_record.remember(rec, [("/s.yml", "theirs\n", "ours\n")])
    assert undo_record.undo_plan(back, {"/s.yml": "ours\n"}) == ([("write", "/s.yml", "theirs\n")], [])
