# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fix k3d's load balancer ("serverlb") for UDP: the template logic, the
capacity math, and applying it to a container through the Docker SDK.

No Ansible imports: the same file serves the module and the host keeper
that re-applies the fix when k3d recreates a load balancer.

What the fix changes, all inside k3d's confd template (values.yaml is k3d's
and is never written here, so nothing k3d writes there can be lost):
- UDP servers end a session at the first reply (proxy_responses 1), time out
  after udp_timeout seconds and share a session budget (limit_conn);
- worker_connections is at least worker_connections, whatever k3d writes into
  values.yaml (k3d rewrites it to 1024 + ports x servers when servers come
  and go), and the budget is computed from that same number;
- worker_rlimit_nofile, so the connections are real.
Renders go through `confd -onetime` in the container: confd checks the result
with nginx and reloads it, exactly as its watch would, but without depending
on a file event.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
import secrets
import tarfile
import time

TEMPLATE_PATH = "/etc/confd/templates/nginx.tmpl"
VALUES_PATH = "/etc/confd/values.yaml"
NGINX_CONF = "/etc/nginx/nginx.conf"
ROLE_LABEL = "k3d.role"
ROLE_LOADBALANCER = "loadbalancer"
CLUSTER_LABEL = "k3d.cluster"
ZONE = "homelab_edge_udp"
CONNECTIONS = "$homelabEdgeConnections"
BEGIN = "{{- /* homelab.edge: begin UDP session policy */}}"
END = "{{- /* homelab.edge: end UDP session policy */}}"
FLOOR_BEGIN = "{{- /* homelab.edge: begin connection floor */}}"
FLOOR_END = "{{- /* homelab.edge: end connection floor */}}"
RENAMED_LEFTOVER = re.compile(r"^(?P<base>.+-serverlb)-[A-Za-z0-9]{5}$")
# `confd -onetime` renders, checks with nginx (the template's check_cmd) and reloads.
CONFD_RENDER = ["confd", "-onetime", "-backend", "file", "-file", VALUES_PATH]

# The fix's options and their defaults: the one home of these numbers (the
# module's argument spec, the role's defaults and the docs are checked against it).
DEFAULTS = dict(
    udp_timeout=5,
    worker_connections=4096,
    worker_rlimit_nofile=16384,
    udp_share=50,
    budget_log_level="info",
)
# nginx's limit_conn_log_level values. k3d's nginx logs at notice and above.
LOG_LEVELS = ("info", "notice", "warn", "error")
# Seconds per load balancer to wait for nginx, one render and its new workers.
RENDER_TIMEOUT = 30
# Where the role writes the keeper's configuration (and the keeper reads it).
KEEPER_CONFIG = "/etc/homelab-edge/k3d-serverlb.json"


def option_spec():
    """The fix's options as an Ansible argument spec (the modules share it)."""
    spec = dict((key, dict(type="int", default=default)) for key, default in DEFAULTS.items())
    spec["budget_log_level"] = dict(type="str", default=DEFAULTS["budget_log_level"], choices=list(LOG_LEVELS))
    return spec


# The three states every part reports (module, keeper, status, diagnose):
# the words for people, the codes for data.
STATES = {"fixed": "fixed", "capped": "fixed with a cap", "not_fixed": "not fixed"}


def state_text(state, cap=None):
    """'fixed', 'fixed with a cap (1024 open files)' or 'not fixed'."""
    text = STATES[state]
    return "%s (%d open files)" % (text, cap) if state == "capped" and cap else text


def capped_want(want, hard_limit):
    """The fix that fits under an open-file limit nginx cannot raise.

    nginx's master has no CAP_SYS_RESOURCE in the container: its workers get
    at most the container's hard limit, whatever worker_rlimit_nofile asks.
    The UDP parts (proxy_responses 1, the short timeout, the budget) need no
    open files and stay whole; worker_rlimit_nofile is the hard limit and
    worker_connections fits under it (nginx warns above). Returns (want, cap):
    cap is None when the limit is high enough (or unknown)."""
    if not hard_limit or hard_limit >= want["worker_rlimit_nofile"]:
        return want, None
    fitted = dict(want, worker_rlimit_nofile=hard_limit,
                  worker_connections=min(want["worker_connections"], hard_limit), cap=hard_limit)
    return fitted, hard_limit


def cap_remedy(name, cluster, want, cap):
    """What a capped load balancer costs and how to lift the cap, for people."""
    budget = udp_budget(cap, want["udp_share"])
    return ("%s: fixed with a cap (%d open files): the container's hard open-file limit is %d, which nginx cannot "
            "raise to %d (no CAP_SYS_RESOURCE), so worker_connections is %d instead of %d. DNS is fixed "
            "(proxy_responses 1, %d s timeout, a budget of %d sessions); TCP (HTTPS, the API) keeps %d connections "
            "beside it. To lift the cap, give the load balancer more open files: create the cluster with "
            "`k3d cluster create %s --runtime-ulimit nofile=%d:%d`, or set dockerd's \"default-ulimits\": "
            "{\"nofile\": {\"Name\": \"nofile\", \"Soft\": %d, \"Hard\": %d}} in /etc/docker/daemon.json, "
            "restart dockerd and recreate the load balancer (for example `k3d cluster edit %s --port-add ...`)."
            % (name, cap, cap, want["worker_rlimit_nofile"], min(want["worker_connections"], cap),
               want["worker_connections"], want["udp_timeout"], budget,
               max(0, min(want["worker_connections"], cap) - 2 * budget), cluster or "<cluster>",
               want["worker_rlimit_nofile"], want["worker_rlimit_nofile"], want["worker_rlimit_nofile"],
               want["worker_rlimit_nofile"], cluster or "<cluster>"))


class ShapeError(ValueError):
    """The template or values file is not of the shape k3d writes."""


class ApplyError(RuntimeError):
    """Applying to a container failed; the message says why."""


def validate_options(udp_timeout, worker_connections, worker_rlimit_nofile, udp_share, budget_log_level):
    """Return a list of problems with the options (empty when valid)."""
    problems = []
    if budget_log_level not in LOG_LEVELS:
        problems.append("budget_log_level must be one of %s, got %r" % (", ".join(LOG_LEVELS), budget_log_level))
    if not 1 <= udp_timeout <= 600:
        problems.append("udp_timeout must be between 1 and 600 seconds, got %r" % (udp_timeout,))
    if not 64 <= worker_connections <= 1048576:
        problems.append("worker_connections must be between 64 and 1048576, got %r" % (worker_connections,))
    if not 1024 <= worker_rlimit_nofile <= 1048576:
        problems.append("worker_rlimit_nofile must be between 1024 and 1048576, got %r" % (worker_rlimit_nofile,))
    if not 1 <= udp_share <= 90:
        problems.append("udp_share must be a percentage between 1 and 90, got %r" % (udp_share,))
    if worker_connections > worker_rlimit_nofile:
        problems.append("worker_connections (%r) must not exceed worker_rlimit_nofile (%r): each connection needs "
                        "an open file, and nginx only warns about it" % (worker_connections, worker_rlimit_nofile))
    return problems


def udp_budget(worker_connections, udp_share):
    """UDP sessions allowed at once: each holds two connections, so the UDP
    servers together may use udp_share percent of the worker's connections."""
    return max(1, worker_connections * udp_share // 200)


def exhaustion_rate(connections, udp_timeout):
    """New UDP sessions per second that fill `connections` when no reply ever
    ends a session (each holds 2 connections for udp_timeout seconds)."""
    return round(connections / (2.0 * udp_timeout), 2)


# ---------------------------------------------------------------- template

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
    return _indented(indent, [
        BEGIN,
        '{{- if (eq $protocol "udp") }}',
        "proxy_responses 1;",
        "proxy_timeout %ds;" % want["udp_timeout"],
        "limit_conn %s {{ div (mul %s %d) 200 }};" % (ZONE, CONNECTIONS, want["udp_share"]),
        "limit_conn_log_level %s;" % want["budget_log_level"],
        "{{- else }}",
        'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};',
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


# ------------------------------------------------------------------ values

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
                raise ShapeError("values.yaml line %d: expected a top-level key, got %r" % (n, raw))
            section, key = body[:-1].strip(), None
            continue
        if section == "ports":
            if body.startswith("- "):
                if key is None:
                    raise ShapeError("values.yaml line %d: list item outside a port" % n)
                ports[key].append(body[2:].strip().strip("'\""))
            elif body.endswith(":"):
                key = body[:-1].strip().strip("'\"")
                ports[key] = []
            else:
                raise ShapeError("values.yaml line %d: unexpected %r under ports" % (n, raw))
        elif section == "settings":
            k, sep, v = body.partition(":")
            if not sep:
                raise ShapeError("values.yaml line %d: unexpected %r under settings" % (n, raw))
            settings[k.strip()] = v.strip().strip("'\"")
    for k in ports:
        if "." not in k or k.rsplit(".", 1)[1] not in ("tcp", "udp"):
            raise ShapeError("values.yaml: port key %r is not of the form <port>.<tcp|udp>" % k)
    return {"ports": ports, "settings": settings}


def udp_ports(values):
    return sorted((k for k in values["ports"] if k.endswith(".udp")), key=lambda k: int(k.split(".")[0]))


def upstreams_from_values(values):
    """{upstream name: sorted 'node:port'} as k3d's template renders them."""
    return dict((key.replace(".", "_"), sorted("%s:%s" % (node, key.split(".")[0]) for node in nodes))
                for key, nodes in values["ports"].items())


# --------------------------------------------------------- rendered config

def _blocks(text, name):
    """Yield (arguments, body) of `name ... { }` blocks."""
    for m in re.finditer(r"(?m)^[ \t]*%s\b([^{;\n]*)\{" % name, text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        yield m.group(1).strip(), text[m.end():i - 1]


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
    budget = udp_budget(max(wc or 0, want["worker_connections"]), want["udp_share"])
    for s in facts["udp_servers"]:
        port = "UDP %s" % s["port"]
        if s["proxy_responses"] != "1":
            out.append("%s: proxy_responses %s" % (port, s["proxy_responses"] or "unset"))
        if timeout_seconds(s["proxy_timeout"]) != want["udp_timeout"]:
            out.append("%s: proxy_timeout %s" % (port, s["proxy_timeout"]))
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


def report(name, cluster, facts, open_file_limit):
    """Per load balancer result: live settings and the capacity math."""
    wc = facts["worker_connections"] or 0
    udp = facts["udp_servers"]
    timeouts = [timeout_seconds(s["proxy_timeout"]) or 600 for s in udp]
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
        "udp_timeout": udp_timeout,
        # the weakest server decides how much of the worker UDP can take
        "udp_session_budget": min(budgets) if len(budgets) == len(udp) and budgets else None,
        "exhaustion_rate": exhaustion_rate(wc, udp_timeout) if udp and wc else None,
        "summary": summarize(name, facts),
        "warnings": [],
    }
    if nofile and wc > nofile:
        out["warnings"].append(
            "%s: %d worker_connections exceed the open file limit %d: the real ceiling is %d"
            % (name, wc, nofile, nofile))
    if out["udp_servers"] and out["udp_session_budget"] is None:
        out["warnings"].append(
            "%s: UDP servers have no session budget: a hung DNS server can exhaust the connections "
            "that HTTPS and the API share (at %s new sessions/s)" % (name, out["exhaustion_rate"]))
    return out


# -------------------------------------------------------------- container

def is_renamed_leftover(name):
    """k3d renames the old load balancer to <name>-<5 chars> while recreating it."""
    return bool(RENAMED_LEFTOVER.match(name))


def is_load_balancer(container):
    return (container.labels or {}).get(ROLE_LABEL) == ROLE_LOADBALANCER


def wanted(container, names=(), clusters=()):
    """Whether a container is one of the load balancers to fix: named
    explicitly, or discovered (a k3d load balancer of one of `clusters`, or of
    any cluster when empty), never the renamed leftover of a recreate."""
    if names:
        return container.name in names
    if not is_load_balancer(container) or is_renamed_leftover(container.name):
        return False
    return not clusters or container.labels.get(CLUSTER_LABEL) in clusters


def find_load_balancers(client, names=(), clusters=(), not_found=LookupError):
    """[(name, container or None, explicit)], sorted by name."""
    if names:
        found = []
        for name in names:
            try:
                found.append((name, client.containers.get(name), True))
            except not_found:
                found.append((name, None, True))
        return found
    containers = client.containers.list(all=True, filters={"label": ["%s=%s" % (ROLE_LABEL, ROLE_LOADBALANCER)]})
    return [(c.name, c, False) for c in sorted(containers, key=lambda c: c.name) if wanted(c, (), clusters)]


def _exec(container, argv):
    res = container.exec_run(argv, demux=True)
    out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
    return res.exit_code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")


# nginx's master and its current workers (not those of an earlier reload that
# are still draining connections: "worker process is shutting down").
_WORKERS = ("for p in $(pgrep -f 'nginx: worker process'); do "
            "grep -q 'shutting down' /proc/$p/cmdline 2>/dev/null && continue; "
            "awk '/Max open files/ {print $4; exit}' /proc/$p/limits 2>/dev/null || true; done")
# the hard open-file limit of nginx's master: what its workers can get at most
_MASTER_HARD = ("for p in $(pgrep -f 'nginx: master process'); do "
                "awk '/Max open files/ {print $5; exit}' /proc/$p/limits 2>/dev/null || true; done")
_SPLIT = "\x1fhomelab-edge\x1f"


def read_state(container):
    """Template, values, the rendered nginx.conf and the open-file limits of
    nginx's current workers, in one exec: a no-change run is one round trip."""
    sep = "; printf '%s'; " % _SPLIT.replace("\x1f", "\\037")
    script = "set -e; " + sep.join(["cat %s" % path for path in (TEMPLATE_PATH, VALUES_PATH, NGINX_CONF)]
                                   + [_WORKERS, _MASTER_HARD])
    rc, out, err = _exec(container, ["sh", "-c", script])
    parts = out.split(_SPLIT)
    if rc != 0 or len(parts) != 5:
        raise ApplyError("cannot read the load balancer's files: %s" % (err or out).strip()[-300:])
    limits = sorted(set(int(x) for x in parts[3].split() if x.isdigit()))
    hard = [int(x) for x in parts[4].split() if x.isdigit()]
    return {"template": parts[0], "values": parts[1], "conf": parts[2], "worker_limits": limits,
            "hard_limit": min(hard) if hard else None}


def _tar(name, content, mode):
    data = content.encode("utf-8")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def replace_file(container, path, content, mode=0o644):
    """Copy to an unpredictable temporary name in the same directory, then
    rename over `path`: a reader never sees a truncated or missing file."""
    directory, base = path.rsplit("/", 1)
    tmp = ".%s.homelab-edge-%s" % (base, secrets.token_hex(6))
    if not container.put_archive(directory, _tar(tmp, content, mode)):
        raise ApplyError("copying %s into the container failed" % path)
    rc, out, err = _exec(container, ["mv", "-f", "%s/%s" % (directory, tmp), path])
    if rc != 0:
        _exec(container, ["rm", "-f", "%s/%s" % (directory, tmp)])
        raise ApplyError("renaming into %s failed: %s" % (path, (err or out).strip()))


def nginx_running(container):
    return _exec(container, ["pgrep", "-f", "nginx: master process"])[0] == 0


def wait_for_nginx(container, timeout, sleep=time.sleep, clock=time.monotonic):
    """k3d's entrypoint renders three times, 2 s apart, before it starts nginx:
    a load balancer that just started has no nginx for a few seconds."""
    deadline = clock() + timeout
    while not nginx_running(container):
        if clock() >= deadline:
            return False
        sleep(0.5)
    return True


def render(container, timeout):
    """Render nginx.conf with confd once: confd checks the result with nginx
    (the template's check_cmd) and reloads nginx, as its watch would. Raises
    ApplyError with confd's error; nginx then keeps its last good config."""
    argv = ["timeout", str(timeout)] + CONFD_RENDER
    rc, out, err = _exec(container, argv)
    errors = [ln.split(" ERROR ", 1)[-1].strip() for ln in (err + out).splitlines()
              if " ERROR " in ln or "[emerg]" in ln]
    if rc != 0 or errors:
        raise ApplyError("confd rejected the render: %s" % (" / ".join(errors[-3:]) if errors else
                                                            "rc=%d %s" % (rc, (err or out).strip()[-300:])))


def wait_settled(container, want, timeout, sleep=time.sleep, clock=time.monotonic):
    """After a reload nginx starts new workers and lets the old ones drain:
    poll until the rendered file and the current workers carry `want`."""
    deadline = clock() + timeout
    while True:
        state = read_state(container)
        missing = plan(state, want)[2]
        if not missing:
            return state
        if clock() >= deadline:
            raise ApplyError("after the render: %s" % "; ".join(missing))
        sleep(0.3)


def plan(state, want):
    """The desired template and why a render is needed (empty: nothing to do)."""
    new_template = patch_template(state["template"], want)
    facts = parse_live(state["conf"])
    reasons = []
    if new_template != state["template"]:
        reasons.append("template not patched")
    reasons += shortfalls(facts, want)
    if state["worker_limits"] and state["worker_limits"] != [want["worker_rlimit_nofile"]]:
        reasons.append("nginx workers run with open-file limit %s" % ",".join(map(str, state["worker_limits"])))
    return new_template, facts, reasons


def apply(container, want, check_mode=False, render_timeout=RENDER_TIMEOUT):
    """Bring one running load balancer to `want`, or to as much of it as fits
    under an open-file limit nginx cannot raise (capped_want).

    Decides from the files and from what nginx runs: a patched template whose
    render never went live is rendered again. Returns dict(changed, reasons,
    template=(before, after), facts, open_file_limit, cap). A render
    confd or nginx rejects puts the template back, renders the old one and
    raises ApplyError."""
    container.reload()
    if container.status != "running":
        raise ApplyError("container is %s, not running" % container.status)
    if not wait_for_nginx(container, render_timeout):
        raise ApplyError("nginx is not running in the container (waited %ds)" % render_timeout)
    state = read_state(container)
    want, cap = capped_want(want, state["hard_limit"])
    new_template, facts, reasons = plan(state, want)
    result = {"changed": bool(reasons), "reasons": reasons, "template": (state["template"], new_template),
              "facts": facts, "open_file_limit": max(state["worker_limits"] or [0]) or None,
              "udp_ports": udp_ports(parse_values(state["values"])), "cap": cap}
    if check_mode or not reasons:
        return result
    if new_template != state["template"]:
        replace_file(container, TEMPLATE_PATH, new_template)
    try:
        render(container, render_timeout)
        after = wait_settled(container, want, render_timeout)
    except ApplyError as e:
        raise ApplyError("%s; %s" % (e, _roll_back(container, state["template"], new_template, render_timeout)))
    result["facts"] = parse_live(after["conf"])
    result["open_file_limit"] = max(after["worker_limits"] or [0]) or None
    return result


def _roll_back(container, template, new_template, render_timeout):
    if template == new_template:
        return "the template was not changed"
    try:
        replace_file(container, TEMPLATE_PATH, template)
        render(container, render_timeout)
        return "template rolled back and rendered"
    except ApplyError as e:
        return "template rolled back; rendering it failed too: %s" % e


def created_hard_limit(container):
    """The hard open-file limit a created container will run with, where its
    HostConfig says (k3d's --runtime-ulimit); None when it is the engine's."""
    for u in ((container.attrs.get("HostConfig") or {}).get("Ulimits") or []):
        if u.get("Name") == "nofile" and u.get("Hard"):
            return int(u["Hard"])
    return None


def patch_created(container, want):
    """Patch the template of a load balancer that is created but not started
    yet (k3d creates, copies values.yaml in, then starts): its first render is
    then already fixed (capped where the container's ulimit says so). Uses the
    archive API, which works on stopped containers. Returns True when it wrote."""
    want = capped_want(want, created_hard_limit(container))[0]
    stream, stat = container.get_archive(TEMPLATE_PATH)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.getmembers()[0]
        template = tar.extractfile(member).read().decode("utf-8")
    new = patch_template(template, want)
    if new == template:
        return False
    if not container.put_archive(TEMPLATE_PATH.rsplit("/", 1)[0],
                                 _tar(TEMPLATE_PATH.rsplit("/", 1)[1], new, stat.get("mode", 0o644) & 0o777)):
        raise ApplyError("copying the template into the container failed")
    return True


def render_is_stale(container):
    """Whether nginx.conf lacks what values.yaml asks for (an upstream or a
    node). confd's watch can miss k3d's copy of values.yaml (Docker replaces
    the file by remove then create), leaving k3d's change unrendered."""
    state = read_state(container)
    wanted_upstreams = upstreams_from_values(parse_values(state["values"]))
    return wanted_upstreams != parse_live(state["conf"])["upstreams"]


def handle(container, name, explicit, want, check_mode=False, render_timeout=RENDER_TIMEOUT, require_full_fix=False):
    """One load balancer, as the module and the keeper report it: its state
    (fixed, capped, not_fixed; STATES has the words). Never raises: one
    failing load balancer cannot stop the others. A capped one is a failure
    only with require_full_fix."""
    entry = {"name": name, "cluster": None, "changed": False, "failed": False, "msg": "", "reasons": [],
             "diff": [], "state": "not_fixed", "state_text": STATES["not_fixed"], "open_file_cap": None}
    if container is None:
        entry.update(failed=True, msg="no container named %s" % name)
        return entry
    entry["cluster"] = (container.labels or {}).get(CLUSTER_LABEL)
    if container.status != "running" and not explicit:
        entry["msg"] = "skipped: container is %s" % container.status
        return entry
    try:
        res = apply(container, want, check_mode=check_mode, render_timeout=render_timeout)
    except (ShapeError, ApplyError) as e:
        entry.update(failed=True, msg="%s: %s" % (name, e))
        return entry
    except Exception as e:  # deliberate: the Docker API fails in many ways, and one LB must not stop the rest
        entry.update(failed=True, msg="%s: %s: %s" % (name, type(e).__name__, e))
        return entry
    entry.update(report(name, entry["cluster"], res["facts"], res["open_file_limit"]))
    entry.update(changed=res["changed"], reasons=res["reasons"], open_file_cap=res["cap"])
    before, after = res["template"]
    if before != after:
        header = "%s:%s" % (name, TEMPLATE_PATH)
        entry["diff"] = [{"before_header": header, "after_header": header, "before": before, "after": after}]
    if check_mode and res["changed"]:
        entry["msg"] = "would fix: %s" % "; ".join(res["reasons"])
        return entry
    entry["state"] = "capped" if res["cap"] else "fixed"
    entry["state_text"] = state_text(entry["state"], res["cap"])
    if res["cap"]:
        entry["warnings"].append(cap_remedy(name, entry["cluster"], want, res["cap"]))
        if require_full_fix:
            entry.update(failed=True, msg="%s (require_full_fix)" % entry["warnings"][-1])
    return entry


# -------------------------------------------------------------- signals

_NOT_ENOUGH = re.compile(r"worker_connections are not enough.*?(?P<proto>udp|tcp) client: [^,]+, server: "
                         r"[^,]*?:(?P<port>\d+)")
_EXCEED = re.compile(r"(\d+) worker_connections exceed open file resource limit: (\d+)")


def log_signals(log_text):
    """From a load balancer's log: "not enough" alerts by protocol and
    server port, and the open-file warning nginx gives at start."""
    alerts, exceed = {}, None
    for line in log_text.splitlines():
        m = _NOT_ENOUGH.search(line)
        if m:
            key = "%s %s" % (m.group("proto"), m.group("port"))
            alerts[key] = alerts.get(key, 0) + 1
            continue
        m = _EXCEED.search(line)
        if m:
            exceed = {"worker_connections": int(m.group(1)), "open_file_limit": int(m.group(2))}
    return {"not_enough": alerts, "not_enough_total": sum(alerts.values()), "exceed_open_file_limit": exceed}


_FDS = ("n=0; for p in $(pgrep -f 'nginx: worker process'); do "
        "n=$((n + $(ls /proc/$p/fd 2>/dev/null | wc -l))); done; echo $n")


def signals(container, want, since, dns_probe=None):
    """What a running load balancer shows now: its config as rendered, what
    it lacks of the fix, its log since `since` (epoch s), the files its
    workers hold open, and (dns_probe(address, port) -> seconds or None)
    whether each UDP upstream answers."""
    state = read_state(container)
    want, cap = capped_want(want, state["hard_limit"])
    new_template, facts, reasons = plan(state, want)
    entry = report(container.name, (container.labels or {}).get(CLUSTER_LABEL), facts,
                   max(state["worker_limits"] or [0]) or None)
    code = "not_fixed" if reasons else "capped" if cap else "fixed"
    entry.update(state=code, state_text=state_text(code, cap), open_file_cap=cap)
    raw = container.logs(since=int(since)).decode("utf-8", "replace")
    entry.update(log_signals(raw), drift=reasons, template_patched=new_template == state["template"])
    rc, out = _exec(container, ["sh", "-c", _FDS])[:2]
    entry["open_files"] = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    entry["dns_upstreams"] = []
    if dns_probe:
        for key in udp_ports(parse_values(state["values"])):
            port = int(key.split(".")[0])
            for node in parse_values(state["values"])["ports"][key]:
                entry["dns_upstreams"].append({"node": node, "port": port, "answer_s": dns_probe(node, port)})
    return entry
