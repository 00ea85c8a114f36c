# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: patching k3d's confd template (the managed
blocks, the connection floor, worker_rlimit_nofile). Pure text in, text out;
ShapeError when the template is not of k3d's shape."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from . import profiles as k3d_profiles


ZONE = "homelab_edge_udp"
CONNECTIONS = "$homelabEdgeConnections"
BEGIN = "{{- /* homelab.edge: begin UDP session policy */}}"
END = "{{- /* homelab.edge: end UDP session policy */}}"
FLOOR_BEGIN = "{{- /* homelab.edge: begin connection floor */}}"
FLOOR_END = "{{- /* homelab.edge: end connection floor */}}"


class ShapeError(ValueError):
    """The template or values file is not of the shape k3d writes."""


_RE_RLIMIT = re.compile(r"^[ \t]*worker_rlimit_nofile[ \t]+\S+?;[^\n]*$", re.M)
_RE_WORKER_PROCESSES = re.compile(r"^([ \t]*)worker_processes[ \t]+[^;\n]+;[^\n]*$", re.M)
_RE_EVENTS = re.compile(r"^([ \t]*)events[ \t]*\{", re.M)
_RE_WORKER_CONNECTIONS = re.compile(
    r'^([ \t]*)worker_connections[ \t]+\{\{-?[ \t]*getv[ \t]+"/settings/workerConnections"[ \t]*-?\}\}[ \t]*;[ \t]*\n',
    re.M)
_RE_STREAM = re.compile(r"^([ \t]*)stream[ \t]*\{[ \t]*$", re.M)
_RE_ZONE = re.compile(r"^[ \t]*limit_conn_zone[ \t]+\S+[ \t]+zone=%s:[^\n]*\n" % ZONE, re.M)
_GETV_TIMEOUT = r'proxy_timeout[ \t]+\{\{-?[ \t]*getv[ \t]+"/settings/defaultProxyTimeout"(?:[ \t]+"[^"]*")?[ \t]*-?\}\}[ \t]*;'
_RE_PROXY_TIMEOUT = re.compile(r"^([ \t]*)" + _GETV_TIMEOUT + r"[ \t]*\n", re.M)


def _managed(begin, end):
    return re.compile(r"^([ \t]*)" + re.escape(begin) + r"\n.*?^[ \t]*" + re.escape(end) + r"[ \t]*\n", re.M | re.S)


_RE_MANAGED = _managed(BEGIN, END)
_RE_FLOOR = _managed(FLOOR_BEGIN, FLOOR_END)
# A hand-made per-protocol conditional around the timeout line (seed 000's patch).
_RE_HANDMADE = re.compile(
    r'^([ \t]*)\{\{-?[ \t]*if[ \t]+\(?eq[ \t]+\$protocol[ \t]+"udp"\)?[ \t]*\}\}[ \t]*\n'
    r"(?:(?!^[ \t]*\{\{-?[ \t]*end).*\n)*?"
    r"[ \t]*\{\{-?[ \t]*else[ \t]*\}\}[ \t]*\n"
    r"[ \t]*" + _GETV_TIMEOUT + r"[ \t]*\n"
    r"[ \t]*\{\{-?[ \t]*end[ \t]*\}\}[ \t]*\n", re.M)


def _indented(indent, lines):
    return "".join(indent + line + "\n" for line in lines)


def _floor_block(indent, worker_connections, cap=None):
    """worker_connections = max(k3d's values.yaml setting, the floor) - and
    no more than the open-file cap, where there is one - kept in a template
    variable that the UDP budget reads too."""
    ceiling = ["{{- if gt %s %d }}{{ %s = %d }}{{ end }}" % (CONNECTIONS, cap, CONNECTIONS, cap)] if cap else []
    return _indented(indent, [
        FLOOR_BEGIN,
        '{{- %s := atoi (getv "/settings/workerConnections") }}' % CONNECTIONS,
        "{{- if lt %s %d }}{{ %s = %d }}{{ end }}" % (CONNECTIONS, worker_connections, CONNECTIONS, worker_connections),
    ] + ceiling + [
        "worker_connections {{ %s }};" % CONNECTIONS,
        FLOOR_END,
    ])


def _udp_block(indent, want):
    """Per UDP port its profile (k3d_profiles): dns ports end a
    session at the first reply, stream ports keep theirs open; both count
    against the UDP session budget. TCP keeps k3d's line."""
    k3d_timeout = 'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};'
    stream_timeout = ("proxy_timeout %ds;" % want["udp_stream_timeout"]) if want.get("udp_stream_timeout") else k3d_timeout
    dns = k3d_profiles.dns_ports(want.get("udp_ports"))
    dns_lines = ["proxy_responses 1;", "proxy_timeout %ds;" % want["udp_timeout"]]
    if dns:
        profile = ["{{- if (eq $port %s) }}" % " ".join('"%s"' % p for p in dns)] + dns_lines + [
            "{{- else }}", stream_timeout, "{{- end }}"]
    else:
        profile = [stream_timeout]
    return _indented(indent, [
        BEGIN,
        '{{- if (eq $protocol "udp") }}',
    ] + profile + [
        "limit_conn %s {{ div (mul %s %d) 200 }};" % (ZONE, CONNECTIONS, want["udp_share"]),
        "limit_conn_log_level %s;" % want["budget_log_level"],
        "{{- else }}",
        k3d_timeout,
        "{{- end }}",
        END,
    ])


def _replace_one(text, candidates, render, what):
    """Replace the one match among all of `candidates` (lists of matches of
    the forms the line may take; together they must hold exactly one) with
    render(indent)."""
    found = [m for group in candidates for m in group]
    if len(found) != 1:
        raise ShapeError("expected exactly one %s in the template, found %d" % (what, len(found)))
    m = found[0]
    return text[:m.start()] + render(m.group(1)) + text[m.end():]


def patch_template(text, want):
    """Return the confd template with the fix for `want` applied (idempotent;
    changing an option rewrites the managed blocks).

    Raises ShapeError when the template is not of k3d's shape.
    """
    if not _RE_EVENTS.search(text):
        raise ShapeError("no 'events {' block in the template")
    if not _RE_STREAM.search(text):
        raise ShapeError("no 'stream {' block in the template")

    # 1. The connection floor instead of k3d's worker_connections line.
    floors = list(_RE_FLOOR.finditer(text))
    text = _replace_one(text, [floors] if floors else [list(_RE_WORKER_CONNECTIONS.finditer(text))],
                        lambda indent: _floor_block(indent, want["worker_connections"], want.get("cap")),
                        "worker_connections line reading \"/settings/workerConnections\"")

    # 2. UDP servers: a protocol conditional instead of the shared timeout line.
    managed = list(_RE_MANAGED.finditer(text))
    inside = [(m.start(), m.end()) for m in managed]
    handmade = [h for h in _RE_HANDMADE.finditer(text) if not any(a <= h.start() < b for a, b in inside)]
    candidates = [managed + handmade] if managed or handmade else [list(_RE_PROXY_TIMEOUT.finditer(text))]
    text = _replace_one(text, candidates, lambda indent: _udp_block(indent, want),
                        "'proxy_timeout {{ getv \"/settings/defaultProxyTimeout\" ... }};' line in the server block")

    # 3. The shared-memory zone that counts UDP sessions, first in stream {}.
    text = _RE_ZONE.sub("", text)
    stream = _RE_STREAM.search(text)
    zone = "%s  limit_conn_zone $protocol zone=%s:1m;\n" % (stream.group(1), ZONE)
    text = text[:stream.end() + 1] + zone + text[stream.end() + 1:]

    # 4. An open-file limit that matches the connections (main context).
    rlimit = "worker_rlimit_nofile %d;" % want["worker_rlimit_nofile"]
    if _RE_RLIMIT.search(text):
        return _RE_RLIMIT.sub(rlimit, text, count=1)
    wp = _RE_WORKER_PROCESSES.search(text)
    if wp:
        return text[:wp.end()] + "\n" + wp.group(1) + rlimit + text[wp.end():]
    ev = _RE_EVENTS.search(text)
    return text[:ev.start()] + ev.group(1) + rlimit + "\n" + text[ev.start():]


# k3d's own lines, as its template has them (tests/unit/fixtures/k3d_nginx.tmpl,
# k3d v5's proxy/templates/nginx.tmpl): what the managed blocks replaced.
K3D_WORKER_CONNECTIONS = 'worker_connections {{ getv "/settings/workerConnections" }};'
K3D_PROXY_TIMEOUT = 'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};'
_RE_ZONE_ANY = re.compile(r"^[ \t]*limit_conn_zone[ \t]+\S+[ \t]+zone=%s:[^\n]*\n" % ZONE, re.M)
_RE_RLIMIT_LINE = re.compile(r"^[ \t]*worker_rlimit_nofile[ \t]+\d+;[ \t]*\n", re.M)


def is_patched(text):
    """Whether the template carries any part of the fix (a managed block or its zone)."""
    return bool(_RE_FLOOR.search(text) or _RE_MANAGED.search(text) or _RE_ZONE_ANY.search(text))


def unpatch_template(text):
    """k3d's own template back from a patched one: the managed blocks become
    k3d's lines again, the zone and worker_rlimit_nofile (which k3d's template
    does not have) go. A template without the fix is returned unchanged:
    nothing of anyone else's is touched. unpatch_template(patch_template(t)) == t
    for k3d's template (tests/unit)."""
    if not is_patched(text):
        return text
    text = _RE_FLOOR.sub(lambda m: m.group(1) + K3D_WORKER_CONNECTIONS + "\n", text)
    text = _RE_MANAGED.sub(lambda m: m.group(1) + K3D_PROXY_TIMEOUT + "\n", text)
    text = _RE_ZONE_ANY.sub("", text)
    return _RE_RLIMIT_LINE.sub("", text, count=1)
