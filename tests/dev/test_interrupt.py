"""The interruption harness's own parts (tests/support/interrupt.py, its callback
tests/support/callback_plugins/homelab_edge_interrupt.py): the boundaries it tries, how it pairs them, how it
compares a host before and after the undo, and the callback ending a real ansible-playbook at the task it names."""
import json
import os
import signal
import subprocess
import sys
import textwrap

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import interrupt  # noqa: E402


def record(*events):
    return interrupt.parse_record(json.dumps(e) for e in events)


def start(n, task, occurrence=1):
    return {"start": n, "task": task, "occurrence": occurrence}


RECORDED = record(
    start(1, "a : read"), {"task": 1, "host": "h1", "status": "ok"}, {"task": 1, "host": "h2", "status": "ok"},
    start(2, "a : write"), {"task": 2, "host": "h1", "status": "ok"}, {"task": 2, "host": "h2", "status": "changed"},
    start(3, "a : say"), {"task": 3, "host": "h1", "status": "skipped"},
    start(4, "b : restart"), {"task": 4, "host": "h1", "status": "changed"},
    start(5, "a : say", 2), {"task": 5, "host": "h1", "status": "ok"},
    start(6, "b : rules"), {"task": 6, "host": "h2", "status": "changed"},
    {"stats": {"h1": {"changed": 1, "failures": 0}, "h2": {"changed": 2, "failures": 0}}})


def test_a_boundary_is_the_start_of_each_task_after_one_that_changed_a_host():
    assert interrupt.boundaries(RECORDED) == [{"n": 3, "task": "a : say", "occurrence": 1, "after": "a : write"},
                                              {"n": 5, "task": "a : say", "occurrence": 2, "after": "b : restart"}]
    # the last task's change has no boundary after it: the run ends there
    assert interrupt.changed_hosts(RECORDED) == {"h1": 1, "h2": 2}
    assert interrupt.failed_hosts(RECORDED) == [] and interrupt.failed_before_kill(RECORDED) == []
    assert interrupt.describe(interrupt.boundaries(RECORDED)[1]) == "a : say #2 (after b : restart)"


def test_a_killed_run_has_no_stats_and_says_where_it_was_killed():
    r = record(start(1, "a : read"), {"task": 1, "host": "h1", "status": "failed"},
               {"killed": 2, "task": "a : write", "occurrence": 1})
    assert r["killed"] == {"n": 2, "task": "a : write", "occurrence": 1, "t": None} and r["stats"] is None
    assert interrupt.changed_hosts(r) is None and interrupt.failed_before_kill(r) == [("a : read", "h1")]


def test_each_boundary_is_tried_once_an_apply_and_an_undo_per_cycle():
    assert interrupt.cycles([1, 2, 3], ["a"]) == [(1, "a"), (2, None), (3, None)]
    assert interrupt.cycles([], ["a", "b"]) == [(None, "a"), (None, "b")]


def test_the_comparison_names_every_file_not_back_and_everything_left():
    before = {"/etc/a": "file 644 1", "/etc/b": "file 644 2", "/srv/c": "file 644 3", "unit x.service": "enabled"}
    after = {"/etc/a": "file 644 1", "/etc/b": "file 755 2", "/srv/d": "file 644 4", "unit x.service": "enabled",
             "/var/lib/homelab-edge/r/1": "dir 700"}
    diff = interrupt.compare(before, after)
    assert diff == {"changed": ["/etc/b"], "added": ["/srv/d", "/var/lib/homelab-edge/r/1"], "removed": ["/srv/c"],
                    "kept": []}
    assert interrupt.problems_of(diff) == ["not back as it was: /etc/b", "left behind: /srv/d, /var/lib/homelab-edge/r/1",
                                           "gone: /srv/c"]
    assert interrupt.problems_of(interrupt.compare(before, dict(before))) == []


def test_a_difference_the_roles_undo_keeps_by_design_is_listed_apart_and_hides_nothing_else():
    before = {"/etc/ufw/user.rules": "file 640 1", "/etc/ufw/before.rules": "file 640 2"}
    after = {"/etc/ufw/user.rules": "file 640 9", "/etc/ufw/before.rules": "file 640 8", "/etc/ufw/user.rules.bak": "x"}
    diff = interrupt.compare(before, after, [(r"/etc/ufw/user\.rules", "ufw stays enabled with its rules")])
    assert diff["kept"] == [("/etc/ufw/user.rules", "ufw stays enabled with its rules")]
    # a pattern matches a whole key only
    assert diff["changed"] == ["/etc/ufw/before.rules"] and diff["added"] == ["/etc/ufw/user.rules.bak"]


PLAY = textwrap.dedent("""\
    - hosts: localhost
      gather_facts: false
      tasks:
        - name: first
          ansible.builtin.copy: {dest: "{{ d }}/one", content: "1"}
        - name: second
          ansible.builtin.command: {argv: [sleep, "{{ nap | default(0) }}"]}
          changed_when: false
        - name: third
          ansible.builtin.copy: {dest: "{{ d }}/three", content: "3"}
        - name: fourth
          ansible.builtin.copy: {dest: "{{ d }}/four", content: "4"}
    """)


def play(tmp_path, nap=0, **env):
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    rec = tmp_path / ("record-%d.jsonl" % len(list(tmp_path.glob("record-*"))))
    e = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=interrupt.CALLBACKS, ANSIBLE_CALLBACKS_ENABLED="homelab_edge_interrupt",
             HOMELAB_EDGE_INTERRUPT_RECORD=str(rec), **env)
    p = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", "d=%s nap=%d" % (tmp_path, nap),
                        "-e", "ansible_python_interpreter=%s" % sys.executable, str(book)],
                       env=e, capture_output=True, text=True, timeout=120, start_new_session=True, check=False)
    with open(str(rec)) as f:
        return p, interrupt.parse_record(f)


def test_the_callback_records_a_run_and_ends_the_next_at_the_task_it_names(tmp_path):
    p, r = play(tmp_path)
    assert p.returncode == 0, p.stdout[-2000:]
    assert [s["task"] for s in r["starts"]] == ["first", "second", "third", "fourth"]
    assert [interrupt.describe(b) for b in interrupt.boundaries(r)] == ["second (after first)", "fourth (after third)"]
    for f in ("one", "three", "four"):
        (tmp_path / f).unlink()
    # killed at the start of the fourth: the first three ran, the fourth never did, the run has no end
    p, r = play(tmp_path, HOMELAB_EDGE_INTERRUPT_TASK="fourth")
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout[-2000:])
    assert dict((k, r["killed"][k]) for k in ("n", "task", "occurrence")) == {"n": 4, "task": "fourth", "occurrence": 1}
    assert r["stats"] is None and (tmp_path / "three").exists() and not (tmp_path / "four").exists()


def test_with_a_delay_the_run_is_killed_while_the_task_runs(tmp_path):
    p, r = play(tmp_path, nap=3, HOMELAB_EDGE_INTERRUPT_TASK="second", HOMELAB_EDGE_INTERRUPT_DELAY="1")
    assert p.returncode == -signal.SIGKILL and r["killed"]["n"] == 2
    # killed during the sleep of the second: started, never ended, the third never began
    assert [s["task"] for s in r["starts"]] == ["first", "second"] and 2 not in r["results"]
    assert r["killed"]["t"] - r["starts"][1]["t"] >= 1 and not (tmp_path / "three").exists()


def test_a_task_that_never_starts_as_often_as_asked_ends_no_run(tmp_path):
    p, r = play(tmp_path, HOMELAB_EDGE_INTERRUPT_TASK="fourth", HOMELAB_EDGE_INTERRUPT_OCCURRENCE="2")
    assert p.returncode == 0 and r["killed"] is None and r["stats"]
