# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PROXY protocol in the user's nginx stream proxy: pure text logic.

The edit is one marked line, `proxy_protocol on;`, right after the
proxy_pass of each stream server that forwards to one of the given
upstreams (an address, or an upstream block whose servers are those
addresses). Every other byte of the user's file stays as it was.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MARK = "# homelab.edge: PROXY protocol to the NAS (managed by Ansible)"
LINE = "proxy_protocol on;"
# After a proxy_pass with more on its line (`server { listen 80; proxy_pass x; }`)
# the marked line goes on a line of its own and the rest of the line follows
# on the next; this mark says so, and removing the line joins them again.
SPLIT = " [split]"


class NginxConfigError(ValueError):
    """The config cannot be edited safely; the message says why."""


def blanked(text):
    """The text with comments and quoted strings blanked out (same length),
    so braces and semicolons can be found by position."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n - 1) - i - 1) + c if j < n else " " * (n - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)[:n]


def closing_brace(plain_text, body_start, end=None):
    """Index of the `}` that closes the block whose body starts at
    `body_start` (in blanked() text, before `end`); None when it is not closed."""
    end = len(plain_text) if end is None else end
    depth, i = 1, body_start
    while i < end:
        depth += {"{": 1, "}": -1}.get(plain_text[i], 0)
        if not depth:
            return i
        i += 1
    return None


def blocks(text, name, start=0, end=None):
    """[(body_start, body_end)] of `name ... { }` blocks in text[start:end]."""
    plain = blanked(text)
    end = len(text) if end is None else end
    found = []
    for m in re.finditer(r"(?<![\w.-])%s\b[^;{}]*\{" % re.escape(name), plain[start:end]):
        close = closing_brace(plain, start + m.end(), end)
        if close is None:
            raise NginxConfigError("unbalanced braces after '%s' at offset %d" % (name, start + m.start()))
        found.append((start + m.end(), close))
    # only blocks at the top of this range (not inside a nested block)
    top = []
    for b in found:
        if not any(o[0] <= b[0] < o[1] for o in found if o != b):
            top.append(b)
    return top


def _directives(text, start, end, name):
    """[(start, end, arguments)] of the `name ...;` directives at the top of
    text[start:end]: at the start of a statement (after `{`, `;`, `}` or the
    start of the range), on a line of their own or not."""
    plain = blanked(text)
    out = []
    for m in re.finditer(r"(?<![\w.$-])%s[ \t\r\n]+([^;{}]*);" % re.escape(name), plain[start:end]):
        at = m.start() + start
        before = plain[start:at].rstrip()
        if (not before or before[-1] in "{;}") and _depth(plain, start, at) == 0:
            out.append((at, m.end() + start, " ".join(m.group(1).split())))
    return out


def _depth(plain, start, pos):
    return plain[start:pos].count("{") - plain[start:pos].count("}")


def upstream_servers(text, in_stream=False):
    """{upstream name: [server addresses]} of the stream upstream blocks."""
    out = {}
    plain = blanked(text)
    for s, e in ([(0, len(text))] if in_stream else blocks(text, "stream")):
        for m in re.finditer(r"(?<![\w.-])upstream[ \t]+(\S+)[ \t]*\{", plain[s:e]):
            body_start = s + m.end()
            close = closing_brace(plain, body_start, e)
            out[m.group(1)] = [d[2].split()[0] for d in _directives(text, body_start, e if close is None else close,
                                                                    "server")]
    return out


def servers(text, in_stream=False):
    """The stream servers: [dict(start, end, listen, proxy_pass, pass_end,
    proxy_protocol, managed)]. `in_stream`: the text is a file included inside
    stream {} (its servers stand at its top level)."""
    out = []
    ranges = [(0, len(text))] if in_stream else blocks(text, "stream")
    for s, e in ranges:
        for bs, be in blocks(text, "server", s, e):
            passes = _directives(text, bs, be, "proxy_pass")
            listens = [d[2] for d in _directives(text, bs, be, "listen")]
            protocols = _directives(text, bs, be, "proxy_protocol")
            out.append({"start": bs, "end": be, "listen": listens,
                        "proxy_pass": passes[0][2] if passes else None, "pass_end": passes[0][1] if passes else None,
                        "proxy_protocol": protocols[0][2] if protocols else None,
                        "managed": MARK in text[bs:be]})
    return out


def targets(server, upstreams):
    """The addresses a stream server forwards to."""
    target = server["proxy_pass"] or ""
    return upstreams.get(target, [target])


def forwards_to(server, upstreams, addresses):
    return bool(set(targets(server, upstreams)) & set(addresses))


def includes(text):
    """[(pattern, inside stream {})] of the include directives of a file."""
    plain = blanked(text)
    streams = blocks(text, "stream")
    return [(m.group(1).strip().strip("\"'"), any(s <= m.start() < e for s, e in streams))
            for m in re.finditer(r"(?m)^[ \t]*include[ \t]+([^;]+);", plain)]


def edit(text, addresses, present=True, in_stream=False, upstreams=None):
    """The config with the marked line in (or out of) every stream server that
    forwards to one of `addresses`. Returns (new text, [listen of each server
    changed]). A server of that kind that already sets proxy_protocol itself
    (without our mark) is the user's choice: refused, nothing changed."""
    upstreams = upstreams if upstreams is not None else upstream_servers(text, in_stream)
    found = [s for s in servers(text, in_stream) if forwards_to(s, upstreams, addresses)]
    for s in found:
        if s["proxy_protocol"] is not None and not s["managed"]:
            raise NginxConfigError("the stream server listening on %s sets 'proxy_protocol %s;' itself: leave it to "
                                   "you, or remove that line first" % (" / ".join(s["listen"]), s["proxy_protocol"]))
    changed = []
    nl = "\r\n" if "\r\n" in text else "\n"
    for s in sorted(found, key=lambda x: -x["start"]):  # from the end: offsets stay valid
        if present and not s["managed"]:
            at = s["pass_end"]
            line_start = text.rfind("\n", 0, at) + 1
            indent = re.match(r"[ \t]*", text[line_start:]).group(0)
            rest = text[at:].split("\n", 1)[0].strip()
            added = nl + indent + LINE + "  " + MARK + ((SPLIT + nl + indent) if rest else "")
            text = text[:at] + added + text[at:]
            changed.append(s["listen"])
        elif not present and s["managed"]:
            text = _remove_line(text, s["start"], s["end"])
            changed.append(s["listen"])
    return text, changed


def _remove_line(text, start, end):
    pattern = re.compile(r"\r?\n([ \t]*)" + re.escape(LINE) + r"[ \t]*" + re.escape(MARK) +
                         r"(?:" + re.escape(SPLIT) + r"\r?\n\1|[ \t]*(?=\r?\n))")
    m = pattern.search(text, start, end)
    return text[:m.start()] + text[m.end():] if m else text


def proxy_header(client="198.51.100.7", server="10.8.0.2", client_port=40000, server_port=443):
    """A PROXY protocol v1 line, as nginx sends it."""
    return ("PROXY TCP4 %s %s %d %d\r\n" % (client, server, client_port, server_port)).encode("ascii")
