# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's YAML file (Traefik's static config, a compose file) edited line
by line: keys are found by their indentation, edits insert or replace whole
lines, so every other byte (comments, blank lines, quoting, order, line
endings) stays as it was. The result is parsed and compared with the intended
data (text_edit.apply_changes); anything else is refused, nothing written.

Styles: block mappings at any indentation step, block lists indented or at
the indent of their key, flow lists ([a, b]), quoted keys, comments anywhere,
CRLF, the document markers --- and ... . A flow mapping ({a: 1}) that must
grow, and a document the editor cannot reproduce exactly (anchors whose
aliases would change too, several documents), are refused."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from .text_edit import (
    EditError, apply_changes, check_result, describe, in_place_of, make)

try:
    import yaml
    HAS_YAML = True
except ImportError:  # the controller always has it; a target may not
    HAS_YAML = False

_KEY = re.compile(r"""^(?P<indent>[ ]*)(?P<q>["']?)(?P<key>[^"'#:\n]+?)(?P=q)[ ]*:(?:[ ]+|$)(?P<rest>.*)$""")
_DOC_END = re.compile(r"^\.\.\.\s*(#.*)?$")
# A flag word in a command string (after the start, blanks or a quote), and the
# end of a one-line string: its closing quote, blanks and comment.
_FLAG_WORD = re.compile(r"""(?P<pre>^|\s+|(?<=["']))--(?P<key>[^=\s"'#]+)(?:=[^\s"']*)?""")
_STRING_END = re.compile(r"""^(?P<body>.*?)(?P<quote>["']?)(?P<tail>\s*(?:\s#.*)?)$""")


def _is_content(line):
    s = line.strip()
    return bool(s) and not s.startswith("#") and not _DOC_END.match(s) and not s.startswith("---")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _is_item(line):
    s = line.lstrip(" ")
    return s.startswith("- ") or s.rstrip("\r\n") == "-"


def _value(rest):
    """A key line's inline value without its comment."""
    return re.sub(r"(^|\s+)#.*$", "", rest).strip()


def _nl(lines):
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def scalar(value):
    """A value as YAML text that reads back as the very same value."""
    if value == {}:
        return "{}"
    if value == []:
        return "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    # plain when YAML reads it back as this very string ("1" or "true" would come back as a number or a bool)
    if re.match(r"^[A-Za-z0-9_./@=:-]+$", text) and (not HAS_YAML or yaml.safe_load(text) == text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


class YamlText(object):
    """One block-style YAML document as lines, edited in place."""

    def __init__(self, text):
        self.added_top = False
        self.lines = text.splitlines(True)
        # a file without a final newline keeps going without one
        self.open_end = bool(self.lines) and not self.lines[-1].endswith("\n")
        if self.open_end:
            self.lines[-1] += _nl(self.lines)

    def text(self):
        text = "".join(self.lines)
        if self.open_end:
            text = text[:-len(_nl(self.lines))]
        return text

    def _key(self, i):
        return _KEY.match(self.lines[i].rstrip("\r\n"))

    def _block(self, start, end, indent):
        """Keys at `indent` between lines start and end: {key: line index}."""
        keys = {}
        for i in range(start, end):
            line = self.lines[i]
            if not _is_content(line) or _indent(line) != indent or _is_item(line):
                continue
            m = self._key(i)
            if m:
                keys[m.group("key").strip()] = i
        return keys

    def _end(self, i):
        """End (exclusive) of the block of the key at line i (a block list at
        the key's own indent included), trailing blank lines and comments
        left outside."""
        indent = _indent(self.lines[i])
        m = self._key(i)
        same_indent_list = m is not None and not _value(m.group("rest"))
        j = i + 1
        while j < len(self.lines):
            line = self.lines[j]
            if _DOC_END.match(line.strip()) or line.startswith("---"):
                break
            if _is_content(line) and _indent(line) <= indent:
                if not (same_indent_list and _indent(line) == indent and _is_item(line)):
                    break
            j += 1
        while j > i + 1 and not _is_content(self.lines[j - 1]):
            j -= 1
        return j

    def _child_indent(self, i):
        for j in range(i + 1, self._end(i)):
            if _is_content(self.lines[j]):
                return _indent(self.lines[j])
        return None

    def find(self, path):
        """(line index, indent) of the key at `path`, or None. Keys match
        case-insensitively (Traefik's do), exact spelling first."""
        start, end, indent, found = 0, self._doc_end(), 0, None
        for part in path:
            keys = self._block(start, end, indent)
            k = part if part in keys else next((k for k in keys if k.lower() == part.lower()), None)
            if k is None:
                return None
            found = keys[k]
            child = self._child_indent(found)
            start, end = found + 1, self._end(found)
            indent = child if child is not None else indent + 2
        return found, _indent(self.lines[found])

    def _doc_end(self):
        """Where new top-level keys go: before a closing `...`, else the end."""
        for i in range(len(self.lines) - 1, -1, -1):
            if _DOC_END.match(self.lines[i].strip()):
                return i
            if _is_content(self.lines[i]):
                break
        return len(self.lines)

    def _insert(self, at, lines):
        nl = _nl(self.lines)
        self.lines[at:at] = [ln + nl for ln in lines]

    def _dump(self, key, value, indent, step):
        pad = " " * indent
        if value == {} or value == [] or not isinstance(value, (dict, list)):
            return ["%s%s: %s" % (pad, key, scalar(value))]
        out = ["%s%s:" % (pad, key)]
        if isinstance(value, dict):
            for k, v in value.items():
                out += self._dump(k, v, indent + step, step)
        else:
            out += ["%s%s- %s" % (pad, " " * step, scalar(v)) for v in value]
        return out

    def _step(self):
        """The document's indentation step (2 unless it uses another)."""
        for line in self.lines:
            if _is_content(line) and _indent(line) > 0 and not _is_item(line):
                return _indent(line)
        return 2

    def _open(self, i, adding):
        """Make the key at line i ready for children: an empty flow mapping
        `{}` is dropped; any other inline value is refused."""
        rest = _value(self._key(i).group("rest"))
        if rest.startswith("{"):
            if rest != "{}":
                raise EditError("line %d (%s) is a flow mapping: write it in block style (one key per line) to let "
                                "the role add %s; nothing was written" % (i + 1, self.lines[i].strip(), adding))
            self.lines[i] = self.lines[i].replace("{}", "", 1).rstrip() + _nl(self.lines)
        elif rest and not rest.startswith(("&", "!")):
            raise EditError("line %d (%s) has a value of its own: cannot add %s under it; nothing was written"
                            % (i + 1, self.lines[i].strip(), adding))

    def ensure(self, path, value):
        """Add `path: value` where it is missing (parents included)."""
        if self.find(path):
            return
        parent = self.find(path[:-1]) if len(path) > 1 else None
        step = self._step()
        if len(path) > 1 and parent is None:
            self.ensure(path[:-1], {})
            parent = self.find(path[:-1])
        if parent is None:  # top level: at the end, the first one after a blank line
            at = self._doc_end()
            extra = [""] if at and self.lines[at - 1].strip() and not self.added_top else []
            self._insert(at, extra + self._dump(path[-1], value, 0, step))
            self.added_top = True
            return
        i, indent = parent
        self._open(i, path[-1])
        child = self._child_indent(i)
        if child is not None and child == indent:  # a list at the key's indent: not a mapping
            raise EditError("line %d (%s) holds a list: cannot add %s to it; nothing was written"
                            % (i + 1, self.lines[i].strip(), path[-1]))
        self._insert(self._end(i), self._dump(path[-1], value, child if child is not None else indent + step, step))

    def append(self, path, item):
        """Add `item` to the list at `path` (a block or flow list), or create it."""
        found = self.find(path)
        if not found:
            self.ensure(path, [item])
            return
        i, indent = found
        rest = _value(self._key(i).group("rest"))
        if rest.startswith("[") and rest.endswith("]"):
            inner = rest[1:-1].strip()
            new = "[%s]" % (", ".join([inner, scalar(item)]) if inner else scalar(item))
            self.lines[i] = self.lines[i].replace(rest, new, 1)
            return
        if rest:
            raise EditError("line %d (%s) is not a list the role can add to; nothing was written"
                            % (i + 1, self.lines[i].strip()))
        end = self._end(i)
        items = [j for j in range(i + 1, end) if _is_item(self.lines[j])]
        dash = _indent(self.lines[items[0]]) if items else indent + self._step()
        self._insert(end, ["%s- %s" % (" " * dash, scalar(item))])

    def replace(self, path, new_key, value):
        """Rename the key at `path` to `new_key` with a scalar value, on its line."""
        i, indent = self.find(path)
        m = self._key(i)
        comment = re.search(r"(\s+#.*)$", m.group("rest"))
        end = self._end(i)
        q = m.group("q")
        self.lines[i:end] = ["%s%s%s%s: %s%s%s" % (" " * indent, q, new_key, q, scalar(value),
                                                   comment.group(1) if comment else "", _nl(self.lines))]

    def set(self, path, value):
        """Set `path` to `value` (its old block replaced), creating it when missing."""
        found = self.find(path)
        if not found:
            self.ensure(path, value)
            return
        i, indent = found
        end = self._end(i)
        key = self._key(i)
        nl = _nl(self.lines)
        self.lines[i:end] = [ln + nl for ln in self._dump(path[-1], value, indent, self._step())]
        spelled = key.group("q") + key.group("key") + key.group("q")
        if spelled != path[-1]:
            self.lines[i] = self.lines[i].replace(path[-1], spelled, 1)

    def flags(self, path, add, remove):
        """Edit a block list of command-line flags item by item: a flag
        that is there gets its new value on its own line, a removed one loses
        its line, a new one is appended; comments and other items stay. A
        command written as one string (plain, quoted, or a folded or literal
        block) is edited word by word in place (flags_in_string)."""
        i, indent = self.find(path)
        rest = _value(self._key(i).group("rest"))
        if rest.startswith("["):
            raise EditError("line %d (%s): write the command as a block list to let the role edit it"
                            % (i + 1, self.lines[i].strip()))
        if rest:
            self.flags_in_string(i, add, remove)
            return
        done = set()
        j = i + 1
        present = set()
        for k in range(i + 1, self._end(i)):
            m = re.match(r"""^\s*-\s*["']?--([^=\s"']+)""", self.lines[k])
            present.add(m.group(1).lower() if m else None)
        while j < self._end(i):
            line = self.lines[j]
            m = re.match(r"""^(\s*-\s*)(["']?)--([^=\s"']+)(=[^"'#]*?)?(["']?)(\s*(?:#.*)?)$""", line.rstrip("\r\n"))
            key = m.group(3).lower() if m else None
            if key in remove:
                instead = in_place_of(key, add, present | done)
                if instead:  # its line (and comment) taken by the flag of its group that replaces it
                    self.lines[j] = "%s%s--%s=%s%s%s%s" % (
                        m.group(1), m.group(2), instead, add[instead], m.group(5), m.group(6), _nl(self.lines))
                    done.add(instead)
                    j += 1
                    continue
                del self.lines[j]
                continue
            if key in add:
                self.lines[j] = "%s%s--%s=%s%s%s%s" % (
                    m.group(1), m.group(2), m.group(3), add[key], m.group(5), m.group(6), _nl(self.lines))
                done.add(key)
            j += 1
        for key in sorted(k for k in add if k not in done):
            self.append(path, "--%s=%s" % (key, add[key]))

    def flags_in_string(self, i, add, remove):
        """The flags of a command written as one string, at the key on line
        i: each flag that is there gets its new value where it stands or goes
        with its word; new ones are added at the end of the string (a block
        scalar: a line of their own at its indent; a quoted one: before its
        closing quote; a plain one: before its comment)."""
        nl = _nl(self.lines)
        value_text = self._key(i).group("rest")
        block = _value(value_text)[:1] in (">", "|")
        span = [j for j in range(i + 1 if block else i, self._end(i)) if _is_content(self.lines[j])]
        if not span:
            raise EditError("line %d: the command block is empty" % (i + 1))
        done = set()

        present = set(k.lower() for j in span for k in re.findall(r"--([^=\s\"'#]+)", self.lines[j]))

        def word(m):
            key = m.group("key").lower()
            if key in remove:
                instead = in_place_of(key, add, present | done)
                if instead:
                    done.add(instead)
                    return "%s--%s=%s" % (m.group("pre"), instead, add[instead])
                return ""
            if key in add:
                done.add(key)
                return "%s--%s=%s" % (m.group("pre"), m.group("key"), add[key])
            return m.group(0)
        emptied = []
        for j in span:
            line = self.lines[j].rstrip("\r\n")
            head = len(line) - len(value_text) if j == i else 0
            edited = _FLAG_WORD.sub(word, line[head:])
            if edited != line[head:] and j == i:
                # a first word removed takes the blank after it along (inside the quote, if any)
                edited = re.sub(r"""^(["']?)\s+""", r"\1", edited)
            elif edited != line[head:] and edited.strip():
                # a line of the block keeps its indent (a first word removed took it along)
                edited = " " * _indent(line) + edited.lstrip(" ")
            if j != i and not edited.strip():
                emptied.append(j)
            self.lines[j] = line[:head] + edited + nl
        for j in reversed(emptied):  # a line of the block whose only flag went
            del self.lines[j]
            span.remove(j)
        if not span:
            raise EditError("line %d: the command would be empty" % (i + 1))
        new = ["--%s=%s" % (k, add[k]) for k in sorted(add) if k not in done]
        if not new:
            return
        last = span[-1] - len([j for j in emptied if j < span[-1]])
        if block:  # a line each, at the block's indent
            self.lines[last + 1:last + 1] = [" " * _indent(self.lines[last]) + flag + nl for flag in new]
            return
        new = " ".join(new)
        value_text = self._key(i).group("rest")  # as edited above
        line = self.lines[last].rstrip("\r\n")
        head = len(line) - len(value_text) if last == i else 0
        m = _STRING_END.match(line[head:])
        body, quote = m.group("body"), m.group("quote")
        if quote and not value_text.lstrip().startswith(quote):
            body, quote = body + quote, ""  # a quote inside a plain string, not one around it
        self.lines[last] = line[:head] + body + " " + new + quote + m.group("tail") + nl

    def delete(self, path):
        found = self.find(path)
        if found:
            del self.lines[found[0]:self._end(found[0])]


def parse(text, what):
    """The data of a YAML text ({} when empty); EditError when it does not
    parse or is not a mapping."""
    if not HAS_YAML:
        raise EditError("PyYAML is needed on the host to edit %s (apt install python3-yaml)" % what)
    text = text[1:] if text.startswith("\ufeff") else text
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise EditError("%s does not parse as YAML: %s; nothing was changed" % (what, str(e).replace("\n", " ")))
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise EditError("%s is not a YAML mapping; nothing was changed" % what)
    return doc


def edit_yaml(text, changes, what="the static config"):
    """Apply data changes to YAML text as line edits; returns the new text.
    The result is parsed and compared with the intended data: an edit that
    would mean anything else raises EditError (nothing to write)."""
    if text.startswith("\ufeff"):  # a byte-order mark (YAML parsers skip it) stays as it was
        return "\ufeff" + edit_yaml(text[1:], changes, what)
    before = parse(text, what)
    flow = next((ln for ln in text.splitlines() if _is_content(ln) and _indent(ln) == 0), "").lstrip()
    if flow.startswith(("{", "[")):
        raise EditError("%s is written as one flow mapping ({...}): write it in block style (one key per line) to "
                        "let the role edit it; nothing was written" % what)
    new = make(YamlText(text), changes, what)
    want = apply_changes(before, changes)
    try:
        got = yaml.safe_load(new)
    except yaml.YAMLError as e:
        raise EditError("editing %s as text would break it (%s); nothing was written. Make the change by hand: %s"
                        % (what, str(e).replace("\n", " "), describe(changes)))
    check_result(got, want, what, changes, "anchors and aliases, flow mappings, several documents")
    return new
