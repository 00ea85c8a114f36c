# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: reading what k3d and nginx have. k3d's
values.yaml (its ports and nodes) and the rendered nginx.conf (or
`nginx -T`), what it lacks of the fix, and the per load balancer report.
Pure parsing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from . import capacity as k3d_capacity
from . import profiles as k3d_profiles
from . import template as k3d_template
from .. import nginx_stream


def parse_values(text):
    """Parse k3d's values.yaml (ports: {key: [nodes]}, settings: {k: v}).

    Only the small YAML subset k3d writes: two top-level maps, lists in
    either indentation style, scalars. Raises ShapeError otherwise.
    """
    ports, settings = {}, {}
    section, key = None, None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0 and not body.startswith("-"):
            if not body.endswith(":"):
                raise k3d_template.ShapeError("values.yaml line %d: expected a top-level key, got %r" % (n, raw))
            section, key = body[:-1].strip(), None
            continue
        if section == "ports":
            if body.startswith("- "):
                if key is None:
                    raise k3d_template.ShapeError("values.yaml line %d: list item outside a port" % n)
                ports[key].append(body[2:].strip().strip("'\""))
            elif body.endswith(":"):
                key = body[:-1].strip().strip("'\"")
                ports[key] = []
            else:
                raise k3d_template.ShapeError("values.yaml line %d: unexpected %r under ports" % (n, raw))
        elif section == "settings":
            k, sep, v = body.partition(":")
            if not sep:
                raise k3d_template.ShapeError("values.yaml line %d: unexpected %r under settings" % (n, raw))
            settings[k.strip()] = v.strip().strip("'\"")
    for k in ports:
        if "." not in k or k.rsplit(".", 1)[1] not in ("tcp", "udp"):
            raise k3d_template.ShapeError("values.yaml: port key %r is not of the form <port>.<tcp|udp>" % k)
    return {"ports": ports, "settings": settings}


def udp_ports(values):
    return sorted((k for k in values["ports"] if k.endswith(".udp")), key=lambda k: int(k.split(".")[0]))


def upstreams_from_values(values):
    """{upstream name: sorted 'node:port'} as k3d's template renders them."""
    return dict((key.replace(".", "_"), sorted("%s:%s" % (node, key.split(".")[0]) for node in nodes))
                for key, nodes in values["ports"].items())


def _blocks(text, name):
    """Yield (arguments, body) of every `name ... { }` block, nested ones too
    (an unclosed one runs to the end)."""
    plain = nginx_stream.blanked(text)
    for m in re.finditer(r"(?m)^[ \t]*%s\b([^{;\n]*)\{" % name, plain):
        close = nginx_stream.closing_brace(plain, m.end())
        yield text[m.start(1):m.end(1)].strip(), text[m.end():len(text) if close is None else close]


def _directive(text, name):
    m = re.search(r"(?m)^[ \t]*%s[ \t]+([^;]+);" % name, text)
    return m.group(1).strip() if m else None


def parse_live(conf):
    """Facts from nginx's config: the rendered nginx.conf, or `nginx -T`
    output (which prints every file as "# configuration file <path>:")."""
    parts = conf.split("# configuration file ", 2)
    conf = parts[1].split(":\n", 1)[1] if len(parts) > 1 else conf
    facts = {"worker_connections": None, "worker_rlimit_nofile": None,
             "udp_servers": [], "tcp_servers": [], "upstreams": {}}
    wc = _directive(conf, "worker_connections")
    facts["worker_connections"] = int(wc) if wc and wc.isdigit() else None
    rl = _directive(conf, "worker_rlimit_nofile")
    facts["worker_rlimit_nofile"] = int(rl) if rl and rl.isdigit() else None
    for dummy, stream in _blocks(conf, "stream"):
        for name, body in _blocks(stream, "upstream"):
            facts["upstreams"][name] = sorted(re.findall(r"(?m)^[ \t]*server[ \t]+(\S+?)[ \t;]", body))
        for dummy, server in _blocks(stream, "server"):
            listen = _directive(server, "listen") or ""
            limit = re.search(r"(?m)^[ \t]*limit_conn[ \t]+(\S+)[ \t]+(\d+);", server)
            entry = {
                "listen": listen,
                "port": listen.split()[0] if listen else "",
                "proxy_responses": _directive(server, "proxy_responses"),
                "proxy_timeout": _directive(server, "proxy_timeout"),
                "limit_conn": int(limit.group(2)) if limit else None,
                "limit_conn_log_level": _directive(server, "limit_conn_log_level"),
            }
            (facts["udp_servers"] if "udp" in listen.split()[1:] else facts["tcp_servers"]).append(entry)
    return facts


def timeout_seconds(value):
    """nginx time ('10s', '600', '2m', '1h') -> seconds."""
    if value is None:
        return None
    m = re.match(r"^(\d+)(ms|s|m|h)?$", value.strip())
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2) or "s"
    return {"ms": n / 1000.0, "s": n, "m": n * 60, "h": n * 3600}[unit]


def _profile(server, want):
    """The profile a parsed UDP server should run under `want` (its map of ports)."""
    try:
        return k3d_profiles.profile_of(server["port"], want.get("udp_ports", k3d_profiles.IMPLICIT))[0]
    except ValueError:
        return k3d_profiles.UNDECLARED


def _stream_timeout(facts, want):
    """Seconds a stream session should be held: the option, or k3d's own
    timeout, which its TCP servers carry (None: no TCP server to read it from)."""
    if want.get("udp_stream_timeout"):
        return want["udp_stream_timeout"]
    tcp = [timeout_seconds(t["proxy_timeout"]) for t in facts["tcp_servers"]]
    return tcp[0] if tcp else None


def shortfalls(facts, want):
    """What the loaded config lacks of `want` (empty when fixed)."""
    wc = facts["worker_connections"]
    out = []
    if wc is None or wc < want["worker_connections"]:
        out.append("worker_connections %s below %d" % (wc, want["worker_connections"]))
    elif want.get("cap") and wc > want["cap"]:
        out.append("worker_connections %s above the open-file cap %d" % (wc, want["cap"]))
    if facts["worker_rlimit_nofile"] != want["worker_rlimit_nofile"]:
        out.append("worker_rlimit_nofile %s, not %d" % (facts["worker_rlimit_nofile"], want["worker_rlimit_nofile"]))
    budget = k3d_capacity.udp_budget(max(wc or 0, want["worker_connections"]), want["udp_share"])
    for s in facts["udp_servers"]:
        port = "UDP %s" % s["port"]
        profile = _profile(s, want)
        if profile == k3d_profiles.DNS:
            if s["proxy_responses"] != "1":
                out.append("%s (dns): proxy_responses %s" % (port, s["proxy_responses"] or "unset"))
            if timeout_seconds(s["proxy_timeout"]) != want["udp_timeout"]:
                out.append("%s (dns): proxy_timeout %s" % (port, s["proxy_timeout"]))
        else:
            if s["proxy_responses"] is not None:
                out.append("%s (stream): proxy_responses %s ends a session at its first replies, dropping what the "
                           "server sends after them" % (port, s["proxy_responses"]))
            stream_timeout = _stream_timeout(facts, want)
            if stream_timeout is not None and timeout_seconds(s["proxy_timeout"]) != stream_timeout:
                out.append("%s (stream): proxy_timeout %s, not %s" % (port, s["proxy_timeout"], stream_timeout))
        if s["limit_conn"] != budget:
            out.append("%s: session budget %s, not %d" % (port, s["limit_conn"], budget))
        if s["limit_conn_log_level"] != want["budget_log_level"]:
            out.append("%s: limit_conn_log_level %s" % (port, s["limit_conn_log_level"]))
    return out


def summarize(name, facts):
    """The seed's --check line, from live facts."""
    patched = sum(1 for s in facts["udp_servers"] if s["proxy_responses"] == "1")
    return "%s: worker_connections %s, worker_rlimit_nofile %s, UDP servers %d, with proxy_responses %d" % (
        name, facts["worker_connections"], facts["worker_rlimit_nofile"] or "unset",
        len(facts["udp_servers"]), patched)


# the server of a "not enough" line that does not name one (a UDP datagram no connection was left for)
UNNAMED = "unnamed"


def udp_profiles(facts, want):
    """Each UDP server's profile: wanted (from the map), declared, and what nginx runs."""
    out = []
    for s in facts["udp_servers"]:
        try:
            profile, declared = k3d_profiles.profile_of(s["port"], want.get("udp_ports", k3d_profiles.IMPLICIT))
        except ValueError:
            profile, declared = k3d_profiles.UNDECLARED, False
        live = k3d_profiles.live_profile(s)
        out.append({"port": s["port"], "profile": profile, "declared": declared, "live": live,
                    "proxy_timeout": timeout_seconds(s["proxy_timeout"]),
                    "text": k3d_profiles.describe(s["port"], profile, declared, live, s["proxy_timeout"])})
    return out


def report(name, cluster, facts, open_file_limit, want=None):
    """Per load balancer result: live settings, each UDP port's profile
    (under `want`'s map; port 53 dns, the rest stream, without one) and
    the capacity math."""
    wc = facts["worker_connections"] or 0
    udp = facts["udp_servers"]
    profiles = udp_profiles(facts, want or {})
    # the DNS profile's hold decides how fast unanswered queries fill the connections; a stream session is meant
    # to be held (the budget bounds those)
    timeouts = [timeout_seconds(s["proxy_timeout"]) or 600 for s, p in zip(udp, profiles)
                if p["profile"] == k3d_profiles.DNS]
    udp_timeout = max(timeouts) if timeouts else None
    budgets = [s["limit_conn"] for s in udp if s["limit_conn"]]
    nofile = open_file_limit or facts["worker_rlimit_nofile"]
    out = {
        "name": name,
        "cluster": cluster,
        "worker_connections": facts["worker_connections"],
        "worker_rlimit_nofile": facts["worker_rlimit_nofile"],
        "open_file_limit": nofile,
        "udp_servers": len(udp),
        "udp_servers_patched": sum(1 for s in udp if s["proxy_responses"] == "1"),
        "udp_ports": [s["port"] for s in udp],
        "udp_profiles": profiles,
        "udp_profiles_text": "; ".join(p["text"] for p in profiles),
        # dns ports that do not end a session at the first reply, stream ports that do (tunnels cut)
        "udp_dns_unfixed": [p["port"] for p in profiles if p["profile"] == k3d_profiles.DNS and p["live"] != k3d_profiles.DNS],
        "udp_stream_cut": [p["port"] for p in profiles if p["profile"] == k3d_profiles.STREAM and p["live"] != k3d_profiles.STREAM],
        "udp_ports_undeclared": [p["port"] for p in profiles if not p["declared"]],
        # every key a "not enough" line is counted under: the keeper exports each from 0
        "not_enough_keys": sorted(["udp %s" % s["port"] for s in udp] + ["tcp %s" % s["port"] for s in facts["tcp_servers"]]
                                  + [UNNAMED]),
        "udp_timeout": udp_timeout,
        # the weakest server decides how much of the worker UDP can take
        "udp_session_budget": min(budgets) if len(budgets) == len(udp) and budgets else None,
        "exhaustion_rate": k3d_capacity.exhaustion_rate(wc, udp_timeout) if udp_timeout and wc else None,
        "summary": summarize(name, facts),
        "warnings": [],
    }
    if nofile and k3d_capacity.beyond_open_files(wc, nofile):
        out["warnings"].append(
            "%s: %d worker_connections exceed the open file limit %d: the real ceiling is %d"
            % (name, wc, nofile, k3d_capacity.connections_held(wc, nofile)))
    if out["udp_ports_undeclared"]:
        out["warnings"].append(k3d_profiles.undeclared_warning(name, out["udp_ports_undeclared"]))
    if out["udp_servers"] and out["udp_session_budget"] is None:
        out["warnings"].append(
            "%s: UDP servers have no session budget: a hung DNS server or a flood of UDP sessions can exhaust the "
            "connections that HTTPS and the API share%s" % (
                name, " (at %s new sessions/s)" % out["exhaustion_rate"] if out["exhaustion_rate"] else ""))
    return out
