# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The data side of an edit to a user's config file, shared by the YAML and
TOML line editors (yaml_text.py, toml_text.py).

A change is data: (op, path, value) with op one of
- append: add value to the list at path (created when missing);
- ensure: add path: value when path is missing;
- set: path becomes value;
- delete: path goes;
- replace: the key at path is renamed to value[0] with the value value[1];
- flags: the command-line flags at path (a list, or one string that compose
  splits as a shell does) get value[0] ({name: value}) added or replaced and
  the names in value[1] removed.
`apply_changes` gives the intended result as data; each editor makes the same
change as text and checks that its text parses to exactly that.

Keys match case-insensitively, exact spelling first (Traefik's keys are
case-insensitive: entryPoints, entrypoints)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import shlex


class EditError(ValueError):
    """A change that cannot be made safely; the message says what to do."""


def ci(mapping, key):
    """The key of `mapping` that matches `key`, exact spelling first, or None."""
    if not isinstance(mapping, dict):
        return None
    if key in mapping:
        return key
    for k in mapping:
        if isinstance(k, str) and k.lower() == key.lower():
            return k
    return None


def lookup(doc, path):
    """The value at `path` in nested mappings, or None."""
    node = doc
    for part in path:
        k = ci(node, part)
        if k is None:
            return None
        node = node[k]
    return node


def flag_key(arg):
    """--name=value -> name (lower-cased), None for anything else."""
    return arg[2:].partition("=")[0].lower() if arg.startswith("--") else None


def in_place_of(key, add, present):
    """The added flag that takes a removed flag's place (and its comment): one of
    the same group (providers.file.filename -> providers.file.directory) that is
    not there yet. None: the removed flag just goes."""
    group = key.rpartition(".")[0]
    return next((k for k in sorted(add) if k.rpartition(".")[0] == group and k not in present), None)


def edit_args(args, add, remove):
    """A list of command-line flags with flags replaced in place, removed (or
    replaced by a flag of their group: in_place_of), or appended (--name=value;
    names match case-insensitively)."""
    out, done = [], set()
    present = set(flag_key(a) for a in args)
    for a in args:
        key = flag_key(a)
        if key in remove:
            instead = in_place_of(key, add, present | done)
            if instead:
                out.append("--%s=%s" % (instead, add[instead]))
                done.add(instead)
            continue
        if key in add:
            out.append("--%s=%s" % (a[2:].partition("=")[0], add[key]))
            done.add(key)
            continue
        out.append(a)
    return out + ["--%s=%s" % (k, v) for k, v in sorted(add.items()) if k not in done]


class SplitCommand(list):
    """The intended words of a command written as one string (compose splits
    it as a shell does, without expanding anything): equal to any string that
    splits into exactly these words, so an edit may keep the user's spacing,
    quoting and line breaks."""

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                return shlex.split(other) == list(self)
            except ValueError:
                return False
        return list.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None


def unshared(value):
    """Parsed data as a plain tree: a node that YAML anchors and aliases
    share becomes separate copies, so a change meant for one place is not
    taken for a change of every alias."""
    if isinstance(value, dict):
        return dict((k, unshared(v)) for k, v in value.items())
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def apply_changes(doc, changes):
    """The intended result of `changes` on parsed data `doc` (a copy)."""
    out = unshared(doc) if doc else {}
    for op, path, value in changes:
        node = out
        for part in path[:-1]:
            k = ci(node, part) or part
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        last = ci(node, path[-1]) or path[-1]
        if op == "append":
            node[last] = list(node.get(last) or []) + [value]
        elif op == "ensure":
            node.setdefault(last, copy.deepcopy(value))
        elif op == "set":
            node[last] = copy.deepcopy(value)
        elif op == "delete":
            node.pop(last, None)
        elif op == "flags":
            have = node.get(last)
            if isinstance(have, str):
                node[last] = SplitCommand(edit_args(shlex.split(have), value[0], value[1]))
            else:
                node[last] = edit_args(list(have or []), value[0], value[1])
        elif op == "replace":
            node.pop(last, None)
            node[value[0]] = value[1]
        else:
            raise EditError("unknown edit %r" % (op,))
    return out


def make(doc, changes, what):
    """Make `changes` on a line editor (yaml_text.YamlText, toml_text.TomlText):
    each op is the editor's method of that name. Returns the new text."""
    for op, path, value in changes:
        method = getattr(doc, op, None) if op in ("append", "ensure", "set", "delete", "replace", "flags") else None
        if method is None:
            raise EditError("%s cannot take the edit %s; nothing was written" % (what, op))
        if op in ("replace", "flags"):
            method(path, value[0], value[1])
        elif op == "delete":
            method(path)
        else:
            method(path, value)
    return doc.text()


def check_result(got, want, what, changes, hint):
    """Raise EditError unless the edited text parsed to the intended data."""
    if got != want:
        raise EditError("%s has a layout the role cannot edit line by line (%s); nothing was written. Make the "
                        "change by hand: %s" % (what, hint, describe(changes)))


def shown(value):
    """A value as a user writes it (JSON for mappings and lists: YAML reads it too), not as Python prints it."""
    if isinstance(value, (dict, list, bool)) or value is None:
        return json.dumps(value, sort_keys=True)
    return str(value)


def describe(changes):
    """The changes in words a user can follow by hand."""
    words = []
    for op, path, value in changes:
        where = ".".join(path)
        if op == "append":
            words.append("add %s to the list %s" % (shown(value), where))
        elif op in ("ensure", "set"):
            words.append("set %s to %s" % (where, shown(value)))
        elif op == "delete":
            words.append("remove %s" % where)
        elif op == "replace":
            words.append("replace %s with %s: %s" % (where, value[0], shown(value[1])))
        elif op == "flags":
            flags = ", ".join("--%s=%s" % kv for kv in sorted(value[0].items()))
            gone = (" and remove " + ", ".join("--" + r for r in value[1])) if value[1] else ""
            words.append("in %s set %s%s" % (where, flags, gone))
    return "; ".join(words)
