# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's TOML file (Traefik's traefik.toml) edited line by line, the same
way yaml_text.py edits YAML: tables and keys are found by their headers and
(dotted) names, edits insert or replace whole lines or a list's items, every
other byte stays. The result is parsed (tomllib, or tomli before Python
3.11) and compared with the intended data; anything else is refused and
nothing is written.

Styles: [tables] and [sub.tables] in any order, dotted keys (http.tls = ...),
quoted keys, one-line and multi-line arrays, comments, CRLF. A new table goes
to the end of the file as a [header], or as dotted keys in the nearest table
when a header is not allowed there; an inline table ({a = 1}) that must grow
is refused. A new table goes after the whole of its sibling table: the
sibling's commented-out options (as Traefik's sample files list them) stay
with it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from .text_edit import (
    EditError, apply_changes, check_result, describe, make)

try:
    import tomllib as toml_reader  # novermin (guarded: tomli, or TOML refused, before Python 3.11)
    HAS_TOML = True
except ImportError:
    try:
        import tomli as toml_reader
        HAS_TOML = True
    except ImportError:
        toml_reader = None
        HAS_TOML = False

_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = r"%s(?:\s*\.\s*%s)*" % (_PART, _PART)
_HEADER = re.compile(r"^\s*\[\s*(?P<path>%s)\s*\]\s*(?:#.*)?$" % _DOTTED)
_ARRAY_HEADER = re.compile(r"^\s*\[\[\s*(?P<path>%s)\s*\]\]\s*(?:#.*)?$" % _DOTTED)
_KEYLINE = re.compile(r"^(?P<indent>\s*)(?P<key>%s)\s*=\s*" % _DOTTED)


def _parts(dotted):
    out = []
    for p in re.findall(_PART, dotted):
        if p.startswith('"'):
            p = json.loads(p)
        elif p.startswith("'"):
            p = p[1:-1]
        out.append(p)
    return tuple(out)


def _low(path):
    return tuple(p.lower() for p in path)


def key_text(key):
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else json.dumps(key)


def value_text(value):
    """A value as TOML text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s = %s" % (key_text(k), value_text(v)) for k, v in value.items()) \
            if value else "{}"
    return json.dumps(str(value))


def _nl(lines):
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def _is_content(line):
    s = line.strip()
    return bool(s) and not s.startswith("#")


# A commented-out option or table of a table ("# exposedByDefault = false", "#  [providers.docker.tls]"):
# Traefik's sample files list a table's optional keys this way, each under its own comment block.
_COMMENTED_OPTION = re.compile(r"^\s*#+\s*(?:\[{1,2}\s*(?P<table>%s)\s*\]{1,2}|%s\s*=)" % (_DOTTED, _DOTTED))


class TomlText(object):
    """A TOML document as lines, edited in place."""

    def __init__(self, text):
        self.lines = text.splitlines(True)
        if self.lines and not self.lines[-1].endswith("\n"):
            self.lines[-1] += _nl(self.lines)
        self.added = False

    def text(self):
        return "".join(self.lines)

    # -- reading
    def _scan(self, i, col):
        """(line, column) of the last character of the value that starts at
        line i, column col (arrays and strings may span lines)."""
        depth, j, c, last = 0, i, col, (i, col)
        while j < len(self.lines):
            line = self.lines[j].rstrip("\r\n")
            while c < len(line):
                if line.startswith(('"""', "'''"), c):
                    q = line[c:c + 3]
                    c += 3
                    while True:
                        k = line.find(q, c)
                        if k >= 0:
                            c = k + 3
                            break
                        j += 1
                        if j >= len(self.lines):
                            raise EditError("an unterminated string starts on line %d" % (i + 1))
                        line, c = self.lines[j].rstrip("\r\n"), 0
                    last = (j, c - 1)
                    continue
                ch = line[c]
                if ch in "\"'":
                    k = c + 1
                    while k < len(line) and line[k] != ch:
                        k += 2 if ch == '"' and line[k] == "\\" else 1
                    c = k
                elif ch in "[{":
                    depth += 1
                elif ch in "]}":
                    depth -= 1
                elif ch == "#":
                    break
                if not ch.isspace():
                    last = (j, c)
                c += 1
            if depth <= 0:
                return last
            j, c = j + 1, 0
        raise EditError("a value that starts on line %d never ends" % (i + 1))

    def index(self):
        """Sections [{path, array, header, start, end}] and keys
        [{path, start, end, section, indent, key}] of the document."""
        sections = [{"path": (), "array": False, "header": None, "start": 0}]
        keys = []
        i = 0
        while i < len(self.lines):
            raw = self.lines[i].rstrip("\r\n")
            m = _ARRAY_HEADER.match(raw) or _HEADER.match(raw)
            if m and not _KEYLINE.match(raw):
                sections.append({"path": _parts(m.group("path")), "array": raw.strip().startswith("[["),
                                 "header": i, "start": i + 1})
                i += 1
                continue
            m = _KEYLINE.match(raw)
            if m:
                end, dummy = self._scan(i, m.end())
                section = sections[-1]
                keys.append({"path": section["path"] + _parts(m.group("key")), "start": i, "end": end,
                             "section": len(sections) - 1, "indent": m.group("indent"), "key": m.group("key"),
                             "value_col": m.end(), "in_array": section["array"]})
                i = end + 1
                continue
            i += 1
        for n, s in enumerate(sections):
            s["end"] = sections[n + 1]["header"] if n + 1 < len(sections) else len(self.lines)
        return sections, keys

    def _key(self, path):
        sections, keys = self.index()
        return next((k for k in keys if not k["in_array"] and _low(k["path"]) == _low(path)), None)

    def _table(self, path):
        sections, keys = self.index()
        return next((s for s in sections if s["header"] is not None and not s["array"]
                     and _low(s["path"]) == _low(path)), None)

    def _present(self, path):
        sections, keys = self.index()
        low = _low(path)
        return any(_low(k["path"])[:len(low)] == low for k in keys if not k["in_array"]) or \
            any(_low(s["path"])[:len(low)] == low for s in sections if s["header"] is not None)

    # -- writing
    def _section_tail(self, section):
        """Where a new key of a section goes: after its last content line."""
        j = section["end"]
        while j > section["start"] and not _is_content(self.lines[j - 1]):
            j -= 1
        return j

    def _table_end(self, section):
        """Where a new table after `section` goes: after the whole of it, its commented-out
        options included (uncommenting one later must leave it in `section`), but before the
        comments that lead into the next table (its banner and description)."""
        j = last = self._section_tail(section)
        own = _low(section["path"])
        while j < section["end"]:
            m = _COMMENTED_OPTION.match(self.lines[j])
            if m and m.group("table") and _low(_parts(m.group("table")))[:len(own)] != own:
                break  # a commented-out table of its own: what follows belongs to it
            if m:
                last = j + 1
                # the comment lines right under it (no blank line between) belong to it too
                while last < section["end"] and self.lines[last].strip().startswith("#") \
                        and not _COMMENTED_OPTION.match(self.lines[last]) and self.lines[last][:1] in (" ", "\t"):
                    last += 1
            j += 1
        return last

    def _insert(self, at, lines):
        nl = _nl(self.lines)
        self.lines[at:at] = [ln + nl for ln in lines]

    def _header_allowed(self, path):
        """A [path] header may be written: no prefix of it (or it) is a value
        or a table made by dotted keys."""
        sections, keys = self.index()
        low = _low(path)
        for k in keys:
            kp, base = _low(k["path"]), _low(sections[k["section"]]["path"])
            if kp == low[:len(kp)]:
                return False  # a prefix of path is a value (an inline table, a scalar)
            for n in range(len(base) + 1, len(kp)):
                if kp[:n] == low[:n]:
                    return False  # defined by dotted keys
        return True

    def _section_for(self, path):
        """The deepest [table] that is a prefix of path (the root when none)."""
        sections, keys = self.index()
        low = _low(path)
        best = sections[0]
        for s in sections[1:]:
            if not s["array"] and _low(s["path"]) == low[:len(s["path"])] and len(s["path"]) >= len(best["path"]):
                best = s
        return best

    def _add_key_lines(self, path, value):
        """path = value as a key (dotted as needed) in the deepest table above it."""
        section = self._section_for(path[:-1])
        rel = path[len(section["path"]):]
        sections, keys = self.index()
        mine = [k for k in keys if k["section"] == sections.index(section)]
        indent = mine[-1]["indent"] if mine else ""
        if isinstance(value, dict) and value:
            lines = ["%s%s = %s" % (indent, ".".join(key_text(p) for p in rel + (k,)), value_text(v))
                     for k, v in value.items()]
        else:
            lines = ["%s%s = %s" % (indent, ".".join(key_text(p) for p in rel), value_text(value))]
        self._insert(self._section_tail(section), lines)

    def _add_table(self, path, value):
        """A new [path] table after the last table that shares most of its
        path (its siblings), else at the end of the document."""
        sections, keys = self.index()
        low, at, best, sibling = _low(path), len(self.lines), 0, None
        for s in sections[1:]:
            common = 0
            while common < min(len(low), len(s["path"])) and _low(s["path"])[common] == low[common]:
                common += 1
            if common and common >= best and not s["array"]:
                best, at = common, self._table_end(s)
                sibling = s if len(s["path"]) == len(path) else sibling
        # indented as its sibling is, else as the tables of its depth are (Traefik's docs indent sub-tables)
        indented = any(self.lines[s["header"]][:1] in (" ", "\t") for s in sections[1:])
        indent = "  " * (len(path) - 1) if indented else ""
        if sibling is not None and len(path) > 1:
            indent = re.match(r"[ \t]*", self.lines[sibling["header"]]).group(0)
        kpad = "  " if any(k["indent"] for k in keys) else ""
        lines = [""] if at and self.lines[at - 1].strip() else []
        lines.append("%s[%s]" % (indent, ".".join(key_text(p) for p in path)))
        subs = []
        for k, v in value.items():
            if isinstance(v, dict) and v:
                subs.append((k, v))
            else:
                lines.append("%s%s%s = %s" % (indent, kpad, key_text(k), value_text(v)))
        if at < len(self.lines) and _is_content(self.lines[at]):
            lines.append("")
        self._insert(at, lines)
        for k, v in subs:
            self._add_table(path + (k,), v)

    def ensure(self, path, value):
        path = tuple(path)
        if self._present(path):
            return
        if isinstance(value, dict):
            if self._header_allowed(path):
                self._add_table(path, value)
            else:
                self._add_key_lines(path, value)
            return
        parent = path[:-1]
        if parent and self._table(parent) is None and self._header_allowed(parent):
            self._add_table(parent, {path[-1]: value})
        else:
            self._add_key_lines(path, value)

    def append(self, path, item):
        k = self._key(path)
        if k is None:
            if self._table(path) is not None:
                raise EditError("%s is a table, not a list; nothing was written" % ".".join(path))
            self.ensure(path, [item])
            return
        end_line, end_col = self._scan(k["start"], k["value_col"])
        line = self.lines[end_line]
        if line[end_col] != "]":
            raise EditError("line %d (%s) is not a list the role can add to; nothing was written"
                            % (k["start"] + 1, self.lines[k["start"]].strip()))
        # what the list holds before its closing bracket, comments left out
        body = "".join(re.sub(r"#.*$", "", ln.rstrip("\r\n")) + "\n"
                       for ln in self.lines[k["start"]:end_line]) + line[:end_col]
        body = body[body.index("[", len(k["indent"]) + len(k["key"])) + 1:].strip()
        new = value_text(item)
        if end_line == k["start"] or line[:end_col].strip():
            sep = "" if not body else (" " if body.endswith(",") else ", ")
            head = line[:end_col].rstrip()
            self.lines[end_line] = head + sep + new + line[len(head):]
            return
        # a multi-line list whose ] stands on its own line: the item on a line of its own
        j = end_line - 1
        while j > k["start"] and not _is_content(self.lines[j]):
            j -= 1
        prev = self.lines[j]
        code = re.sub(r"\s+#.*$", "", prev.rstrip("\r\n"))
        trailing = code.rstrip().endswith(",")
        if body and not trailing:
            self.lines[j] = code.rstrip() + "," + prev.rstrip("\r\n")[len(code.rstrip()):] + _nl(self.lines)
        pad = re.match(r"\s*", prev).group(0) if j > k["start"] else k["indent"] + "  "
        self._insert(end_line, ["%s%s%s" % (pad, new, "," if trailing else "")])

    def set(self, path, value):
        k = self._key(path)
        if k is None:
            if self._table(path) is not None or self._present(path):
                raise EditError("%s is a table: cannot set it to %s; nothing was written" % (".".join(path), value))
            self.ensure(path, value)
            return
        self._rewrite(k, k["key"], value)

    def replace(self, path, new_key, value):
        k = self._key(path)
        if k is None:
            raise EditError("%s is not a key of its own line; nothing was written" % ".".join(path))
        parts = re.findall(_PART, k["key"])
        spelled = k["key"][:k["key"].rindex(parts[-1])] + key_text(new_key)
        self._rewrite(k, spelled, value)

    def _rewrite(self, k, key, value):
        end_line, end_col = self._scan(k["start"], k["value_col"])
        rest = self.lines[end_line].rstrip("\r\n")[end_col + 1:]
        self.lines[k["start"]:end_line + 1] = ["%s%s = %s%s%s" % (k["indent"], key, value_text(value), rest,
                                                                  _nl(self.lines))]

    def delete(self, path):
        low = _low(path)
        while True:
            sections, keys = self.index()
            key = next((k for k in keys if not k["in_array"] and _low(k["path"])[:len(low)] == low), None)
            if key is not None:
                del self.lines[key["start"]:key["end"] + 1]
                continue
            section = next((s for s in sections if s["header"] is not None and _low(s["path"])[:len(low)] == low), None)
            if section is None:
                return
            del self.lines[section["header"]:self._section_tail(section)]


def parse(text, what):
    if not HAS_TOML:
        raise EditError("%s is TOML: editing it needs Python 3.11 or the tomli package on the host; nothing was "
                        "changed" % what)
    try:
        return toml_reader.loads(text)
    except (ValueError, TypeError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise EditError("%s does not parse as TOML: %s; nothing was changed" % (what, e))


def edit_toml(text, changes, what="the static config"):
    """Apply data changes to TOML text as line edits; returns the new text,
    checked like yaml_text.edit_yaml."""
    before = parse(text, what)
    new = make(TomlText(text), changes, what)
    try:
        got = toml_reader.loads(new)
    except ValueError as e:
        raise EditError("editing %s as text would break it (%s); nothing was written. Make the change by hand: %s"
                        % (what, e, describe(changes)))
    check_result(got, apply_changes(before, changes), what, changes, "inline tables, arrays of tables")
    return new
