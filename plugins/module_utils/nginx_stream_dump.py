# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nginx's configuration as nginx itself loaded it: the output of `nginx -T`.

`nginx -T` tests the configuration and then prints every file it loaded, in
the order it loaded them, each after a line `# configuration file PATH:`
(PATH as the include wrote it: a symlink's own path) and followed by one
newline of nginx's. This module splits that output into (path, text), reads
each text with nginx's own tokenizer rules (ngx_conf_read_token) and puts
each included file's directives where its `include` stands, so a `server`
in a file included inside `stream {}` is a stream server, whatever the
layout (one-line blocks, globs, symlinks, conf.d). Pure: it takes the dump's
text and reads nothing else.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

HEADER = re.compile(r"^# configuration file (.+):\n", re.M)
SPACE = " \t\r\n"
# nginx includes a pattern with any of these as a glob (ngx_conf_include), else one file
GLOB_CHARS = "*?["
MAX_DEPTH = 30


class DumpError(ValueError):
    """The dump cannot be read as nginx read it; the message says why."""


class Directive(object):
    """One directive of a file: its name and arguments (unquoted as nginx
    reads them), where it stands (`start`: its first byte; `end`: after its
    `;` or its block's `}`), and for a block its children (`open`: after
    `{`, `close`: the `}`). An include's `included` is [(path, [Directive])]
    of the files it loaded, in nginx's order."""

    __slots__ = ("name", "args", "file", "start", "end", "block", "open", "close", "included")

    def __init__(self, name, args, file, start):
        self.name, self.args, self.file, self.start = name, args, file, start
        self.end = self.open = self.close = None
        self.block = None
        self.included = None

    def __repr__(self):
        return "<%s %s @%s:%d>" % (self.name, " ".join(self.args), self.file, self.start)


class Config(object):
    """The files nginx loaded ({path: text}, in its order) and the main file's directives."""

    def __init__(self, files, main, top):
        self.files, self.main, self.top = files, main, top

    def line(self, directive):
        """The line number of a directive in its file (1-based)."""
        return self.files[directive.file].count("\n", 0, directive.start) + 1

    def where(self, directive):
        return "%s:%d" % (directive.file, self.line(directive))


def split_dump(text):
    """[(path, text)] of `nginx -T`'s output, in nginx's order."""
    found = list(HEADER.finditer(text))
    if not found:
        raise DumpError("no '# configuration file PATH:' line: this is not what nginx -T prints")
    if text[:found[0].start()].strip():
        raise DumpError("nginx -T printed something before its first file: %r" % text[:found[0].start()][:200])
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[m.end():end]
        if not body.endswith("\n"):
            raise DumpError("the text of %s in nginx -T's output does not end with nginx's newline" % m.group(1))
        out.append((m.group(1), body[:-1]))
    return out


def _unescape(raw):
    """A word as nginx stores it: \\" \\' \\\\ lose the backslash, \\t \\r \\n become the character."""
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt in "\"'\\":
                out.append(nxt)
                i += 2
                continue
            if nxt in "trn":
                out.append({"t": "\t", "r": "\r", "n": "\n"}[nxt])
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def tokens(text):
    """nginx's tokens of one file: ("word", value, start, end), (";", pos),
    ("{", pos) and ("}", pos), read by ngx_conf_read_token's rules: `#`
    starts a comment only where a word could start, quotes only at a word's
    start, `}` inside a word belongs to the word, `${` keeps a word going."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in SPACE:
            i += 1
            continue
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c in ";{}":
            yield (c, i)
            i += 1
            continue
        start = i
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise DumpError("a quoted string that does not end, at offset %d" % start)
            yield ("word", _unescape(text[i + 1:j]), start, j + 1)
            i = j + 1
            continue
        j = i
        variable = False
        while j < n:
            ch = text[j]
            if ch == "\\":
                j += 2
                variable = False
                continue
            if ch == "{" and variable:
                j += 1
                continue
            variable = ch == "$"
            if ch in SPACE or ch in ";{":
                break
            j += 1
        j = min(j, n)
        yield ("word", _unescape(text[start:j]), start, j)
        i = j


def parse(text, path):
    """The directives of one file (includes not followed yet)."""
    top = []
    stack = [top]
    current = None
    for tok in tokens(text):
        kind = tok[0]
        if kind == "word":
            if current is None:
                current = Directive(tok[1], [], path, tok[2])
            else:
                current.args.append(tok[1])
        elif kind == ";":
            if current is None:
                raise DumpError("%s: unexpected ';' at offset %d" % (path, tok[1]))
            current.end = tok[1] + 1
            stack[-1].append(current)
            current = None
        elif kind == "{":
            if current is None:
                raise DumpError("%s: unexpected '{' at offset %d" % (path, tok[1]))
            current.open, current.block = tok[1] + 1, []
            stack[-1].append(current)
            stack.append(current.block)
            current = None
        else:  # "}"
            if current is not None or len(stack) == 1:
                raise DumpError("%s: unexpected '}' at offset %d" % (path, tok[1]))
            stack.pop()
            block_owner = _owner(stack[-1])
            block_owner.close, block_owner.end = tok[1], tok[1] + 1
    if current is not None or len(stack) != 1:
        raise DumpError("%s: unexpected end of file (a directive or block is not closed)" % path)
    return top


def _owner(directives):
    """The last block directive of a list whose block is still open."""
    for d in reversed(directives):
        if d.block is not None and d.close is None:
            return d
    raise DumpError("unbalanced braces")


def glob_matches(pattern, path):
    """Whether glob(3) (as nginx calls it: no flags) matches `path` with
    `pattern`: `*` and `?` stay within one name and never match a leading
    dot, `[...]` is a class (`[!...]` its negation), `\\` quotes."""
    pparts, tparts = pattern.split("/"), path.split("/")
    if len(pparts) != len(tparts):
        return False
    for p, t in zip(pparts, tparts):
        if t.startswith(".") and not p.startswith("."):
            if any(ch in p for ch in GLOB_CHARS):
                return False
        if not re.match(_component_regex(p) + r"\Z", t, re.S):
            return False
    return True


def _component_regex(p):
    out, i = [], 0
    while i < len(p):
        c = p[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "\\" and i + 1 < len(p):
            i += 1
            out.append(re.escape(p[i]))
        elif c == "[":
            j = i + 1
            if j < len(p) and p[j] in "!^":
                j += 1
            if j < len(p) and p[j] == "]":
                j += 1
            while j < len(p) and p[j] != "]":
                j += 1
            if j >= len(p):
                out.append(re.escape(c))
            else:
                inner = p[i + 1:j]
                if inner[:1] in "!^":
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def include_path(pattern, prefix):
    """The include's pattern as nginx opens it: relative to the main file's directory."""
    return pattern if pattern.startswith("/") else prefix + pattern


def included_files(pattern, prefix, paths):
    """The paths (of nginx's dump) an include loaded: one file, or a glob's
    matches in glob(3)'s order (byte order: nginx sets no locale)."""
    full = include_path(pattern, prefix)
    if not any(ch in full for ch in GLOB_CHARS):
        return [full] if full in paths else None
    return sorted((p for p in paths if glob_matches(full, p)),
                  key=lambda p: p.encode("utf-8", "surrogateescape"))


def load(dump):
    """The Config of `nginx -T`'s output: the main file's directives, each
    include's files placed where it stands (a file included twice is in
    the dump once and placed twice, as nginx reads it twice)."""
    files = split_dump(dump)
    texts = {}
    for path, text in files:
        texts.setdefault(path, text)
    order = [p for p, t in files]
    main = order[0]
    prefix = main.rsplit("/", 1)[0] + "/" if "/" in main else ""
    parsed = {}
    reached = set([main])

    def parsed_file(path):
        if path not in parsed:
            parsed[path] = parse(texts[path], path)
        return parsed[path]

    def follow(directives, depth):
        if depth > MAX_DEPTH:
            raise DumpError("includes nest deeper than %d files: a loop?" % MAX_DEPTH)
        for d in directives:
            if d.name == "include" and d.block is None and len(d.args) == 1:
                paths = included_files(d.args[0], prefix, texts)
                if paths is None:
                    raise DumpError("%s includes %s, which is not in nginx -T's output"
                                    % (_where(texts, d), include_path(d.args[0], prefix)))
                d.included = []
                for p in paths:
                    reached.add(p)
                    inner = parsed_file(p)
                    follow(inner, depth + 1)
                    d.included.append((p, inner))
            elif d.block is not None:
                follow(d.block, depth)

    top = parsed_file(main)
    follow(top, 0)
    missing = [p for p in order if p not in reached]
    if missing:
        raise DumpError("nginx loaded %s, but no include read here leads to it: homelab.edge cannot tell where "
                        "it stands" % ", ".join(missing))
    ordered = dict()
    for p in order:
        ordered.setdefault(p, texts[p])
    return Config(ordered, main, top)


def _where(texts, d):
    return "%s:%d" % (d.file, texts[d.file].count("\n", 0, d.start) + 1)


def children(block):
    """The directives of a block (or a file's top), each include replaced by
    the directives of the files it loaded, in order."""
    for d in block:
        if d.included is not None:
            for path, inner in d.included:
                yield from children(inner)
        else:
            yield d


def own_statement(block, target):
    """The directive of `block` itself (not of an included file) that is
    `target` or the include that brings it in."""
    for d in block:
        if d is target:
            return d
        if d.included is not None and any(x is target for p, inner in d.included for x in _all(inner)):
            return d
    return None


def _all(block):
    for d in block:
        yield d
        if d.block is not None:
            yield from _all(d.block)
        if d.included is not None:
            for p, inner in d.included:
                yield from _all(inner)
