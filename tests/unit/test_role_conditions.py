"""No role decides whether a task failed from the words of its message (issue 62): a message is for people,
and its words differ from one host to the next - the drain role's undo let "no systemd here" pass by looking for
the word "systemd" in a message that said "systemctl", and stopped on every host without systemd. Roles decide
from facts (ansible_facts.service_mgr, a unit's file) and from results' data."""
import glob
import os

import pytest
import yaml

from .conftest import ROOT

TASK_FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
                    + glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml")))
WORDS = ("msg", "stderr")


def tasks(items):
    for t in items or []:
        yield t
        for key in ("block", "rescue", "always"):
            yield from tasks(t.get(key))


def conditions(task):
    value = task.get("failed_when")
    return value if isinstance(value, list) else [value] if value is not None else []


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_no_failed_when_reads_a_message(path):
    with open(path) as f:
        found = [(t.get("name"), c) for t in tasks(yaml.safe_load(f)) for c in conditions(t)
                 if isinstance(c, str) and any(w in c for w in WORDS)]
    assert not found, "failed_when that reads a message's words: %s" % found
