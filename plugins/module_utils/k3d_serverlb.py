# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fix k3d's load balancer ("serverlb") for UDP: pure text logic plus one
function that applies it to a container through the Docker SDK.

No Ansible imports: the same file serves the module and the host keeper
service that re-applies the fix when k3d recreates a load balancer.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
import tarfile
import time

TEMPLATE_PATH = "/etc/confd/templates/nginx.tmpl"
VALUES_PATH = "/etc/confd/values.yaml"
NGINX_CONF = "/etc/nginx/nginx.conf"
ZONE = "homelab_edge_udp"
BEGIN = "{{- /* homelab.edge: begin UDP session policy */}}"
END = "{{- /* homelab.edge: end UDP session policy */}}"
RENAMED_LEFTOVER = re.compile(r"^(?P<base>.+-serverlb)-[A-Za-z0-9]{5}$")

DEFAULTS = dict(
    udp_timeout=5,
    worker_connections=4096,
    worker_rlimit_nofile=16384,
    udp_share=50,
    budget_log_level="info",
)
# nginx's limit_conn_log_level values. k3d's nginx logs at notice and above.
LOG_LEVELS = ("info", "notice", "warn", "error")


class ShapeError(ValueError):
    """The template or values file is not of the shape k3d writes."""


class ApplyError(RuntimeError):
    """Applying to a container failed; the message says why."""


def validate_options(udp_timeout, worker_connections, worker_rlimit_nofile, udp_share,
                     budget_log_level=DEFAULTS["budget_log_level"]):
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
    r'worker_connections[ \t]+\{\{-?[ \t]*getv[ \t]+"/settings/workerConnections"[ \t]*-?\}\}[ \t]*;')
_RE_STREAM = re.compile(r"^([ \t]*)stream[ \t]*\{[ \t]*$", re.M)
_RE_ZONE = re.compile(r"^[ \t]*limit_conn_zone[ \t]+\S+[ \t]+zone=%s:[^\n]*\n" % ZONE, re.M)
_GETV_TIMEOUT = r'proxy_timeout[ \t]+\{\{-?[ \t]*getv[ \t]+"/settings/defaultProxyTimeout"(?:[ \t]+"[^"]*")?[ \t]*-?\}\}[ \t]*;'
_RE_PROXY_TIMEOUT = re.compile(r"^([ \t]*)" + _GETV_TIMEOUT + r"[ \t]*\n", re.M)
_RE_MANAGED = re.compile(r"^([ \t]*)" + re.escape(BEGIN) + r"\n.*?^[ \t]*" + re.escape(END) + r"[ \t]*\n", re.M | re.S)
# A hand-made per-protocol conditional around the timeout line (seed 000's patch).
_RE_HANDMADE = re.compile(
    r'^([ \t]*)\{\{-?[ \t]*if[ \t]+\(?eq[ \t]+\$protocol[ \t]+"udp"\)?[ \t]*\}\}[ \t]*\n'
    r"(?:(?!^[ \t]*\{\{-?[ \t]*end).*\n)*?"
    r"[ \t]*\{\{-?[ \t]*else[ \t]*\}\}[ \t]*\n"
    r"[ \t]*" + _GETV_TIMEOUT + r"[ \t]*\n"
    r"[ \t]*\{\{-?[ \t]*end[ \t]*\}\}[ \t]*\n", re.M)


def _udp_block(indent, udp_timeout, udp_share, budget_log_level):
    lines = [
        BEGIN,
        '{{- if (eq $protocol "udp") }}',
        "proxy_responses 1;",
        "proxy_timeout %ds;" % udp_timeout,
        "limit_conn %s {{ div (mul (atoi (getv \"/settings/workerConnections\")) %d) 200 }};" % (ZONE, udp_share),
        "limit_conn_log_level %s;" % budget_log_level,
        "{{- else }}",
        'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};',
        "{{- end }}",
        END,
    ]
    return "".join(indent + line + "\n" for line in lines)


def patch_template(text, udp_timeout, worker_rlimit_nofile, udp_share,
                   budget_log_level=DEFAULTS["budget_log_level"]):
    """Return the confd template with the fix applied (idempotent).

    Raises ShapeError when the template is not of k3d's shape.
    """
    if not _RE_EVENTS.search(text):
        raise ShapeError("no 'events {' block in the template")
    if not _RE_WORKER_CONNECTIONS.search(text):
        raise ShapeError('no worker_connections line reading "/settings/workerConnections"')
    stream = _RE_STREAM.search(text)
    if not stream:
        raise ShapeError("no 'stream {' block in the template")

    # 1. UDP servers: a protocol conditional instead of the shared timeout line.
    managed = list(_RE_MANAGED.finditer(text))
    inside = [(m.start(), m.end()) for m in managed]
    handmade = [h for h in _RE_HANDMADE.finditer(text)
                if not any(a <= h.start() < b for a, b in inside)]
    plain = list(_RE_PROXY_TIMEOUT.finditer(text))
    found = managed or handmade
    if len(managed) + len(handmade) > 1 or (not found and len(plain) != 1):
        raise ShapeError(
            "expected exactly one 'proxy_timeout {{ getv \"/settings/defaultProxyTimeout\" ... }};' line "
            "in the server block, found %d" % (len(plain) if not found else len(managed) + len(handmade)))
    m = found[0] if found else plain[0]
    text = text[:m.start()] + _udp_block(m.group(1), udp_timeout, udp_share, budget_log_level) + text[m.end():]

    # 2. The shared-memory zone that counts UDP sessions, first in stream {}.
    text = _RE_ZONE.sub("", text)
    stream = _RE_STREAM.search(text)
    zone = "%s  limit_conn_zone $protocol zone=%s:1m;\n" % (stream.group(1), ZONE)
    text = text[:stream.end() + 1] + zone + text[stream.end() + 1:]

    # 3. An open-file limit that matches the connections (main context).
    rlimit = "worker_rlimit_nofile %d;" % worker_rlimit_nofile
    if _RE_RLIMIT.search(text):
        text = _RE_RLIMIT.sub(rlimit, text, count=1)
    else:
        wp = _RE_WORKER_PROCESSES.search(text)
        if wp:
            text = text[:wp.end()] + "\n" + wp.group(1) + rlimit + text[wp.end():]
        else:
            ev = _RE_EVENTS.search(text)
            text = text[:ev.start()] + ev.group(1) + rlimit + "\n" + text[ev.start():]
    return text


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


def patch_values(text, worker_connections):
    """Set settings.workerConnections, keeping every other byte."""
    parse_values(text)  # shape check
    lines = text.splitlines(True)
    newline = "\n"
    want = "workerConnections: %d" % worker_connections
    start = None
    for i, line in enumerate(lines):
        if line.rstrip() == "settings:":
            start = i
            continue
        if start is not None and i > start:
            if line.strip() and not line.startswith((" ", "\t", "-")):
                break  # next top-level key
            if line.strip().startswith("workerConnections:"):
                indent = line[:len(line) - len(line.lstrip())]
                lines[i] = indent + want + newline
                return "".join(lines)
    if start is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += newline
        return "".join(lines) + "settings:" + newline + "  " + want + newline
    lines.insert(start + 1, "  " + want + newline)
    return "".join(lines)


# --------------------------------------------------------- rendered config

def _blocks(text, name):
    """Yield the bodies of `name ... { }` blocks."""
    for m in re.finditer(r"(?m)^[ \t]*%s\b([^{;\n]*)\{" % name, text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        yield text[m.end():i - 1]


def _directive(text, name):
    m = re.search(r"(?m)^[ \t]*%s[ \t]+([^;]+);" % name, text)
    return m.group(1).strip() if m else None


def parse_live(nginx_t):
    """Facts from `nginx -T` output (the config nginx actually loaded)."""
    # nginx -T prints every file as "# configuration file <path>:" then its text.
    main = nginx_t.split("# configuration file ", 2)
    conf = main[1].split(":\n", 1)[1] if len(main) > 1 else nginx_t
    facts = {
        "worker_connections": None, "worker_rlimit_nofile": None,
        "udp_servers": [], "tcp_servers": [],
    }
    wc = _directive(conf, "worker_connections")
    facts["worker_connections"] = int(wc) if wc and wc.isdigit() else None
    rl = _directive(conf, "worker_rlimit_nofile")
    facts["worker_rlimit_nofile"] = int(rl) if rl and rl.isdigit() else None
    for stream in _blocks(conf, "stream"):
        for server in _blocks(stream, "server"):
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


def live_is_fixed(facts, want):
    """True when the loaded config carries every setting of `want`."""
    if facts["worker_connections"] != want["worker_connections"]:
        return False
    if facts["worker_rlimit_nofile"] != want["worker_rlimit_nofile"]:
        return False
    budget = udp_budget(want["worker_connections"], want["udp_share"])
    for s in facts["udp_servers"]:
        if s["proxy_responses"] != "1" or timeout_seconds(s["proxy_timeout"]) != want["udp_timeout"]:
            return False
        if s["limit_conn"] != budget:
            return False
        if s["limit_conn_log_level"] != want["budget_log_level"]:
            return False
    return True


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
    nofile = facts["worker_rlimit_nofile"] or open_file_limit
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


def _exec(container, argv):
    res = container.exec_run(argv, demux=True)
    out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
    return res.exit_code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")


def read_file(container, path):
    rc, out, err = _exec(container, ["cat", path])
    if rc != 0:
        raise ApplyError("cannot read %s: %s" % (path, (err or out).strip()))
    return out


def file_mode(container, path):
    rc, out = _exec(container, ["stat", "-c", "%a", path])[:2]
    return int(out.strip(), 8) if rc == 0 and out.strip() else 0o644


def replace_file(container, path, content, mode):
    """Copy to a temporary name in the same directory, then rename over
    `path`: readers (confd's watch) never see a truncated or missing file."""
    directory, base = path.rsplit("/", 1)
    tmp = ".%s.homelab-edge.tmp" % base
    data = content.encode("utf-8")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(tmp)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    if not container.put_archive(directory, buf.getvalue()):
        raise ApplyError("copying %s into the container failed" % path)
    rc, out, err = _exec(container, ["mv", "-f", "%s/%s" % (directory, tmp), path])
    if rc != 0:
        raise ApplyError("renaming into %s failed: %s" % (path, (err or out).strip()))


def nginx_t(container):
    rc, out, err = _exec(container, ["nginx", "-T"])
    if rc != 0:
        raise ApplyError("nginx -T failed: %s" % (err or out).strip()[-500:])
    return out


_NOFILE = ("for p in $(pgrep -f 'nginx: worker' || pgrep nginx); do "
           "awk '/Max open files/ {print $4; exit}' /proc/$p/limits; break; done")
_SPLIT = "\x1fhomelab-edge\x1f"


def open_file_limit(container):
    """Soft open-file limit of an nginx worker (what nginx really gets)."""
    rc, out = _exec(container, ["sh", "-c", _NOFILE])[:2]
    return int(out.strip()) if rc == 0 and out.strip().isdigit() else None


def read_state(container):
    """Template, values, the config nginx runs (as confd last wrote it) and the
    workers' open-file limit, in one exec: a no-change run costs one round trip."""
    script = "set -e; " + "; ".join(
        ["cat %s; printf '%s'" % (path, _SPLIT.replace("\x1f", "\\037"))
         for path in (TEMPLATE_PATH, VALUES_PATH, NGINX_CONF)] + [_NOFILE])
    rc, out, err = _exec(container, ["sh", "-c", script])
    parts = out.split(_SPLIT)
    if rc != 0 or len(parts) != 4:
        raise ApplyError("cannot read the load balancer's files: %s" % (err or out).strip()[-300:])
    nofile = parts[3].strip()
    return parts[0], parts[1], parts[2], int(nofile) if nofile.isdigit() else None


def log_tail(container, since, lines=15):
    try:
        raw = container.logs(since=int(since), tail=200)
    except Exception:  # the container may be gone
        return ""
    text = raw.decode("utf-8", "replace").strip().splitlines()
    return "\n".join(text[-lines:])


def _confd_errors(container, since):
    try:
        raw = container.logs(since=int(since)).decode("utf-8", "replace")
    except Exception:
        return []
    return [ln for ln in raw.splitlines() if " ERROR " in ln or "[emerg]" in ln]


def wait_live(container, want, since, timeout, retrigger=None, sleep=time.sleep, clock=time.time):
    """Poll `nginx -T` until it carries `want`. Fails fast when confd logs an
    error for this render. Calls `retrigger()` once halfway if nothing moved
    (a missed watch event). Returns the live facts."""
    deadline = clock() + timeout
    retriggered = retrigger is None
    last = "nginx -T did not show the new settings"
    while True:
        container.reload()
        if container.status != "running":
            raise ApplyError("container is %s" % container.status)
        errors = _confd_errors(container, since)
        if errors:
            raise ApplyError("confd rejected the render: %s" % errors[-1].strip())
        try:
            facts = parse_live(nginx_t(container))
            if live_is_fixed(facts, want):
                return facts
        except ApplyError as e:  # e.g. while nginx reloads; confd's verdict decides
            last = str(e)
        now = clock()
        if now >= deadline:
            raise ApplyError("%s within %ds" % (last, timeout))
        if not retriggered and now >= deadline - timeout / 2.0:
            retrigger()
            retriggered = True
        sleep(0.5)


def plan(template, values, want):
    """Desired template and values for the current ones."""
    new_template = patch_template(template, want["udp_timeout"], want["worker_rlimit_nofile"], want["udp_share"],
                                  want["budget_log_level"])
    new_values = patch_values(values, want["worker_connections"])
    return new_template, new_values


def apply(container, want, check_mode=False, timeout=30):
    """Bring one load balancer to `want`. Returns a dict with changed, the
    before/after texts and the live facts. On a failed render the template
    and values are put back and ApplyError is raised."""
    container.reload()
    if container.status != "running":
        raise ApplyError("container is %s, not running" % container.status)
    # the running config as confd last wrote it (reading the file needs no
    # upstream name resolution, unlike `nginx -T`, which verifies the result)
    template, values, conf, nofile = read_state(container)
    new_template, new_values = plan(template, values, want)
    facts = parse_live(conf)
    files_change = (new_template != template, new_values != values)
    needs_render = any(files_change) or not live_is_fixed(facts, want)
    result = {"changed": needs_render, "template": (template, new_template),
              "values": (values, new_values), "facts": facts, "open_file_limit": nofile,
              "udp_ports": udp_ports(parse_values(new_values))}
    if check_mode or not needs_render:
        return result
    since = time.time() - 1
    tmode, vmode = file_mode(container, TEMPLATE_PATH), file_mode(container, VALUES_PATH)
    if files_change[0]:
        replace_file(container, TEMPLATE_PATH, new_template, tmode)
    # confd watches only values.yaml: replacing it (even unchanged) renders.
    replace_file(container, VALUES_PATH, new_values, vmode)
    try:
        result["facts"] = wait_live(container, want, since, timeout,
                                    retrigger=lambda: replace_file(container, VALUES_PATH, new_values, vmode))
    except ApplyError as e:
        tail = log_tail(container, since)
        rolled = "not rolled back (container not running)"
        try:
            container.reload()
            if container.status == "running":
                replace_file(container, TEMPLATE_PATH, template, tmode)
                replace_file(container, VALUES_PATH, values, vmode)
                rolled = "template and values.yaml rolled back"
        except Exception as e2:  # report, never mask the first error
            rolled = "rollback failed: %s" % e2
        raise ApplyError("%s; %s. Container log:\n%s" % (e, rolled, tail))
    result["open_file_limit"] = open_file_limit(container)  # new workers after the reload
    return result
