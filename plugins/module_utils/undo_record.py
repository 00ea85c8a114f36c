# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a module wrote over a user's files, kept so that `state: absent`
puts back exactly what was there and nothing else. Pure: the record is a
dict (saved as JSON by the module); these functions only decide.

A record: {"files": {path: {"original": text or None (the module created
the file), "written": text}}, "dirs": [directories the module created],
"moved": {"src": path, "dest": path} or None, plus whatever the module
needs to restart its service ("extra")}."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy


def remember(record, writes, dirs=(), moved=None, extra=None):
    """The record after a change: `writes` [(path, old, new)]. A file's
    first original is kept (the user's, before any run), its last written
    text replaces the one before. A file someone changed between two runs
    (other than back to its original) is marked `diverged`: its original no
    longer holds their change, so it will not be put back blindly."""
    rec = copy.deepcopy(record or {})
    files = rec.setdefault("files", {})
    for path, old, new in writes:
        if path in files:
            if old not in (files[path]["written"], files[path]["original"]):
                files[path]["diverged"] = True
            files[path]["written"] = new
        else:
            files[path] = {"original": old, "written": new}
    rec["dirs"] = list(rec.get("dirs") or []) + [d for d in dirs if d not in (rec.get("dirs") or [])]
    if moved and not rec.get("moved"):
        rec["moved"] = moved
    if extra:
        rec.setdefault("extra", {}).update(extra)
    return rec


def undo_plan(record, current):
    """How to put every file back: (steps, changed_since). `current`
    {path: text or None} is each recorded file as it is now. steps:
    [("write", path, original) or ("remove", path, None)]; a file already
    as it was needs none. changed_since: files changed after the module
    wrote them (by hand, or by another tool): undoing would lose that, so
    the caller refuses before writing anything."""
    steps, changed_since = [], []
    for path, f in sorted(((record or {}).get("files") or {}).items()):
        now = current.get(path)
        if now == f["original"]:
            continue
        if now != f["written"] or f.get("diverged"):
            changed_since.append(path)
        elif f["original"] is None:
            steps.append(("remove", path, None))
        else:
            steps.append(("write", path, f["original"]))
    return steps, changed_since


def undo_diff(steps, current):
    """Ansible's diff list for the steps."""
    return [{"before_header": path, "after_header": path if op == "write" else "/dev/null",
             "before": current.get(path) or "", "after": text or ""} for op, path, text in steps]
