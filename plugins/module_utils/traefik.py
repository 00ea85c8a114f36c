# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Traefik on the NAS: pure logic.

- the inFlightReq middleware (and the one router the role adds to read
  Traefik's own API from inside its network namespace);
- where a running Traefik takes its static config from (a file, or
  command-line flags) and where its files are on the host (its mounts);
- the minimal change to the user's static config, compose file or flags,
  made as line edits to their text (every other byte kept, comments
  included) and checked against the intended result with a YAML parser;
- what Traefik's API says about routers and middlewares after a change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import posixpath
import re

try:
    import yaml
    HAS_YAML = True
except ImportError:  # only the plugins that edit text need it (the controller has it)
    HAS_YAML = False

SOURCES = ("ip", "host", "header")
# Traefik's API, for the role to read after a change: an entrypoint on the
# loopback of Traefik's own network namespace (unreachable from outside it)
# and one router to api@internal on it.
API_ENTRYPOINT = "homelab-edge-api"
API_PORT = 9099
API_ROUTER = "homelab-edge-api"
# Traefik looks for its static config file here when no --configFile is given.
DEFAULT_STATIC_FILES = ("/etc/traefik/traefik.yml", "/etc/traefik/traefik.yaml", "/etc/traefik/traefik.toml")
DYNAMIC_SUFFIXES = (".yml", ".yaml", ".toml")


class TraefikConfigError(ValueError):
    """Input or a config the role cannot change safely; the message says what to do."""


# ------------------------------------------------------------ middleware

def inflight_middleware(name, amount, source="ip", depth=0, excluded_ips=None, header="", version=3):
    """The dynamic-config document with one inFlightReq middleware.

    Traefik groups by request Host when no sourceCriterion is given; this
    always writes one explicitly (per client IP by default)."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TraefikConfigError("amount must be an integer >= 1, got %r" % (amount,))
    if source not in SOURCES:
        raise TraefikConfigError("source must be one of %s, got %r" % (", ".join(SOURCES), source))
    if source == "ip":
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise TraefikConfigError("depth must be an integer >= 0, got %r" % (depth,))
        strategy = {"depth": depth}
        if excluded_ips:
            strategy["excludedIPs"] = list(excluded_ips)
        criterion = {"ipStrategy": strategy}
    elif source == "host":
        criterion = {"requestHost": True}
    else:
        if not header:
            raise TraefikConfigError("source 'header' needs a header name")
        criterion = {"requestHeaderName": header}
    return {"http": {"middlewares": {name: {"inFlightReq": {"amount": amount, "sourceCriterion": criterion}}}}}


def dynamic_document(name, amount, source="ip", depth=0, excluded_ips=None, header="", api=True):
    """The role's dynamic file: the middleware, and the API router."""
    doc = inflight_middleware(name, amount, source, depth, excluded_ips, header)
    if api:
        doc["http"]["routers"] = {API_ROUTER: {"rule": "PathPrefix(`/api`)", "entryPoints": [API_ENTRYPOINT],
                                               "service": "api@internal"}}
    return doc


# ------------------------------------------------------------- container

def traefik_args(inspect):
    """The arguments Traefik runs with, from `docker inspect` (the official
    image's entrypoint passes arguments that start with '-' to traefik)."""
    config = inspect.get("Config") or {}
    argv = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
    return [a for a in argv if a.startswith("-")]


def parse_flags(args):
    """{lower-cased flag name: value} ('--ping' alone is 'true')."""
    flags, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            key, sep, value = a[2:].partition("=")
            if not sep:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is not None and not nxt.startswith("-"):
                    value, i = nxt, i + 1
                else:
                    value = "true"
            flags[key.lower()] = value
        i += 1
    return flags


def static_source(args, existing_files=()):
    """Where Traefik takes its static config from, as Traefik decides: an
    explicit --configFile; else a file in a default location (which makes
    Traefik ignore every other flag); else the flags; else the environment.
    `existing_files` are the default locations that exist in the container."""
    flags = parse_flags(args)
    if "configfile" in flags:
        return {"mode": "file", "path": flags["configfile"]}
    for path in DEFAULT_STATIC_FILES:
        if path in existing_files:
            return {"mode": "file", "path": path}
    if flags:
        return {"mode": "flags", "flags": flags}
    return {"mode": "env"}


def host_path(container_path, mounts):
    """The host path behind a path in the container (its longest mount).
    Returns dict(host, destination, rw, type) or None when the path is not
    on a mount (it lives in the container's own layer and would not survive
    a re-creation)."""
    best = None
    for m in mounts or []:
        dest = m.get("Destination", "").rstrip("/") or "/"
        if container_path == dest or container_path.startswith(dest + "/"):
            if best is None or len(dest) > len(best["destination"]):
                rest = container_path[len(dest):].lstrip("/")
                best = {"host": posixpath.join(m.get("Source", ""), rest) if rest else m.get("Source", ""),
                        "destination": dest, "rw": bool(m.get("RW", True)), "type": m.get("Type", "bind"),
                        "whole_mount": container_path == dest}
    return best


def parse_version(output):
    """'Version: 3.6.12' (from `traefik version`) -> (3, '3.6.12')."""
    m = re.search(r"(?m)^Version:\s+v?(\d+)\.(\d+)\.(\d+)\S*\s*$", output or "")
    if not m:
        raise TraefikConfigError("cannot tell Traefik's version from %r" % (output or "")[:200])
    return int(m.group(1)), "%s.%s.%s" % m.groups()


def compose_labels(inspect):
    """The compose project that made the container, or None (docker run)."""
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    if "com.docker.compose.project" not in labels:
        return None
    files = labels.get("com.docker.compose.project.config_files", "")
    return {"project": labels["com.docker.compose.project"], "service": labels.get("com.docker.compose.service"),
            "working_dir": labels.get("com.docker.compose.project.working_dir"),
            "files": [f for f in files.split(",") if f]}


# ------------------------------------------------------------ the change

def _ci(mapping, key):
    """The key of `mapping` that matches `key` (Traefik's keys are
    case-insensitive: entryPoints, entrypoints), exact spelling first."""
    if not isinstance(mapping, dict):
        return None
    if key in mapping:
        return key
    for k in mapping:
        if isinstance(k, str) and k.lower() == key.lower():
            return k
    return None


def lookup(doc, path):
    node = doc
    for part in path:
        k = _ci(node, part)
        if k is None:
            return None
        node = node[k]
    return node


def static_changes(static, opts):
    """The edits a static config needs, as data: a list of
    (op, path, value) with op in append (to a list), ensure (add when
    missing), replace (rename the last key and set its value) and set.

    Raises TraefikConfigError for input that cannot work (an entrypoint that
    does not exist, a file provider the role cannot reach)."""
    static = static or {}
    eps = lookup(static, ["entryPoints"]) or {}
    missing = [e for e in opts["entrypoints"] if _ci(eps, e) is None]
    if missing:
        raise TraefikConfigError("entrypoint(s) %s not defined in the static config (defined: %s)"
                                 % (", ".join(missing), ", ".join(sorted(eps)) or "none"))
    if opts.get("verify_api", True) and _ci(eps, API_ENTRYPOINT) is not None and \
            (lookup(eps, [API_ENTRYPOINT, "address"]) != "127.0.0.1:%d" % API_PORT):
        raise TraefikConfigError("an entrypoint named %s exists with another address: rename yours" % API_ENTRYPOINT)
    ref = "%s@file" % opts["name"]
    changes = []
    for ep in opts["entrypoints"]:
        name = _ci(eps, ep)
        mws = lookup(eps, [name, "http", "middlewares"]) or []
        if ref not in mws:
            changes.append(("append", ["entryPoints", name, "http", "middlewares"], ref))
    trusted = opts.get("proxy_protocol_trusted_ips")
    if trusted is not None:
        # every entrypoint the proxy in front may forward to (all of the user's): one without the
        # trust would read the PROXY header as a broken request
        for name in sorted(e for e in eps if e not in (API_ENTRYPOINT, "traefik")):
            have = lookup(eps, [name, "proxyProtocol", "trustedIPs"])
            if trusted and have != list(trusted):
                changes.append(("set", ["entryPoints", name, "proxyProtocol", "trustedIPs"], list(trusted)))
            elif not trusted and lookup(eps, [name, "proxyProtocol"]) is not None:
                changes.append(("delete", ["entryPoints", name, "proxyProtocol"], None))
    provider = opts["provider"]
    if provider["kind"] == "filename":
        changes.append(("replace", ["providers", "file", "filename"], ("directory", provider["dir"])))
    elif provider["kind"] == "none":
        changes.append(("ensure", ["providers", "file"], {"directory": provider["dir"], "watch": True}))
    if lookup(static, ["ping"]) is None:
        changes.append(("ensure", ["ping"], {}))
    if opts.get("verify_api", True):
        if lookup(static, ["api"]) is None:
            changes.append(("ensure", ["api"], {}))
        if _ci(eps, API_ENTRYPOINT) is None:
            changes.append(("ensure", ["entryPoints", API_ENTRYPOINT], {"address": "127.0.0.1:%d" % API_PORT}))
    return changes


def apply_changes(doc, changes):
    """The intended result, as data (what the text edit must parse to)."""
    out = copy.deepcopy(doc) if doc else {}
    for op, path, value in changes:
        node = out
        for part in path[:-1]:
            k = _ci(node, part) or part
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        last = _ci(node, path[-1]) or path[-1]
        if op == "append":
            node[last] = list(node.get(last) or []) + [value]
        elif op == "ensure":
            node.setdefault(last, copy.deepcopy(value))
        elif op == "set":
            node[last] = copy.deepcopy(value)
        elif op == "delete":
            node.pop(last, None)
        elif op == "flags":
            node[last] = edit_args(list(node.get(last) or []), value[0], value[1])
        elif op == "replace":
            node.pop(last, None)
            node[value[0]] = value[1]
    return out


# --------------------------------------------------------- YAML as text

_KEY = re.compile(r"""^(?P<indent>[ ]*)(?P<q>["']?)(?P<key>[^"'#:\n]+?)(?P=q)[ ]*:(?:[ ]+|$)(?P<rest>.*)$""")


def _is_content(line):
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _value(rest):
    """A key line's inline value without its comment."""
    return re.sub(r"\s+#.*$", "", rest).strip()


def _nl(lines):
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


class YamlText(object):
    """A block-style YAML document edited line by line: keys are found by
    their indentation, edits insert or replace whole lines, so every other
    byte (comments, blank lines, quoting, order) stays as it was."""

    def __init__(self, text):
        self.added_top = False
        self.lines = text.splitlines(True)
        if self.lines and not self.lines[-1].endswith("\n"):
            self.lines[-1] += _nl(self.lines)

    def text(self):
        return "".join(self.lines)

    def _block(self, start, end, indent):
        """Keys at `indent` between lines start and end: {key: line index}."""
        keys = {}
        for i in range(start, end):
            line = self.lines[i]
            if not _is_content(line) or _indent(line) != indent:
                continue
            m = _KEY.match(line.rstrip("\r\n"))
            if m:
                keys[m.group("key").strip()] = i
        return keys

    def _end(self, i):
        """End (exclusive) of the block of the key at line i, trailing blank
        lines and comments left outside."""
        indent = _indent(self.lines[i])
        j = i + 1
        while j < len(self.lines) and (not _is_content(self.lines[j]) or _indent(self.lines[j]) > indent):
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
        start, end, indent, found = 0, len(self.lines), 0, None
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

    def _insert(self, at, lines):
        nl = _nl(self.lines)
        self.lines[at:at] = [ln + nl for ln in lines]

    def _dump(self, key, value, indent, step):
        pad = " " * indent
        if value == {} or value == [] or not isinstance(value, (dict, list)):
            return ["%s%s: %s" % (pad, key, _scalar(value))]
        out = ["%s%s:" % (pad, key)]
        if isinstance(value, dict):
            for k, v in value.items():
                out += self._dump(k, v, indent + step, step)
        else:
            out += ["%s%s- %s" % (pad, " " * step, _scalar(v)) for v in value]
        return out

    def _step(self):
        """The document's indentation step (2 unless it uses another)."""
        for line in self.lines:
            if _is_content(line) and _indent(line) > 0 and not line.lstrip().startswith("-"):
                return _indent(line)
        return 2

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
            extra = [""] if self.lines and self.lines[-1].strip() and not self.added_top else []
            self.lines += [ln + _nl(self.lines) for ln in extra + self._dump(path[-1], value, 0, step)]
            self.added_top = True
            return
        i, indent = parent
        m = _KEY.match(self.lines[i].rstrip("\r\n"))
        if _value(m.group("rest")) not in ("", "{}"):
            raise TraefikConfigError("line %d (%s) is a flow-style or scalar value: cannot add %s to it without "
                                     "rewriting it" % (i + 1, self.lines[i].strip(), path[-1]))
        if _value(m.group("rest")) == "{}":
            self.lines[i] = self.lines[i].replace("{}", "", 1).rstrip() + _nl(self.lines)
        child = self._child_indent(i)
        self._insert(self._end(i), self._dump(path[-1], value, child if child is not None else indent + step, step))

    def append(self, path, item):
        """Add `item` to the list at `path` (a block or flow list), or create it."""
        found = self.find(path)
        if not found:
            self.ensure(path, [item])
            return
        i, indent = found
        m = _KEY.match(self.lines[i].rstrip("\r\n"))
        rest = _value(m.group("rest"))
        if rest.startswith("[") and rest.endswith("]"):
            inner = rest[1:-1].strip()
            new = "[%s]" % (", ".join([inner, _scalar(item)]) if inner else _scalar(item))
            self.lines[i] = self.lines[i].replace(rest, new, 1)
            return
        if rest:
            raise TraefikConfigError("line %d (%s) is not a list" % (i + 1, self.lines[i].strip()))
        end = self._end(i)
        items = [j for j in range(i + 1, end) if self.lines[j].lstrip().startswith("- ")]
        dash = _indent(self.lines[items[0]]) if items else indent + self._step()
        self._insert(end, ["%s- %s" % (" " * dash, _scalar(item))])

    def replace(self, path, new_key, value):
        """Rename the key at `path` to `new_key` with a scalar value, on its line."""
        i, indent = self.find(path)
        m = _KEY.match(self.lines[i].rstrip("\r\n"))
        comment = re.search(r"(\s+#.*)$", m.group("rest"))
        end = self._end(i)
        self.lines[i:end] = ["%s%s: %s%s%s" % (" " * indent, new_key, _scalar(value), comment.group(1) if comment else "",
                                               _nl(self.lines))]

    def set(self, path, value):
        """Set `path` to `value` (its old block replaced), creating it when missing."""
        found = self.find(path)
        if not found:
            self.ensure(path, value)
            return
        i, indent = found
        end = self._end(i)
        nl = _nl(self.lines)
        self.lines[i:end] = [ln + nl for ln in self._dump(path[-1], value, indent, self._step())]
        key = _KEY.match(self.lines[i].rstrip("\r\n")).group("key")
        if key != path[-1]:
            self.lines[i] = self.lines[i].replace(path[-1], key, 1)

    def flags(self, path, add, remove):
        """Edit a block list of command-line flags item by item: a flag
        that is there gets its new value on its own line, a removed one loses
        its line, a new one is appended; comments and other items stay."""
        i, indent = self.find(path)
        rest = _value(_KEY.match(self.lines[i].rstrip("\r\n")).group("rest"))
        if rest:
            raise TraefikConfigError("line %d (%s): write the command as a block list to let the role edit it"
                                     % (i + 1, self.lines[i].strip()))
        done = set()
        j = i + 1
        while j < self._end(i):
            line = self.lines[j]
            m = re.match(r"""^(\s*-\s*)(["']?)--([^=\s"']+)(=[^"'#]*)?(["']?)(.*)$""", line.rstrip("\r\n"))
            key = m.group(3).lower() if m else None
            if key in remove:
                del self.lines[j]
                continue
            if key in add:
                self.lines[j] = "%s%s--%s=%s%s%s%s" % (
                    m.group(1), m.group(2), m.group(3), add[key], m.group(5), m.group(6), _nl(self.lines))
                done.add(key)
            j += 1
        for key in sorted(k for k in add if k not in done):
            self.append(path, "--%s=%s" % (key, add[key]))

    def delete(self, path):
        found = self.find(path)
        if found:
            del self.lines[found[0]:self._end(found[0])]


def _scalar(value):
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
    if re.match(r"^[A-Za-z0-9_./@-]+$", text) and (not HAS_YAML or yaml.safe_load(text) == text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def edit_yaml(text, changes, what="the static config"):
    """Apply data changes to YAML text as line edits; returns the new text.
    The result is parsed and compared with the intended data: an edit that
    would mean anything else raises TraefikConfigError (nothing to write)."""
    if not HAS_YAML:
        raise TraefikConfigError("PyYAML is needed to check the edit")
    try:
        before = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise TraefikConfigError("%s does not parse as YAML: %s" % (what, str(e).replace("\n", " ")))
    if before is not None and not isinstance(before, dict):
        raise TraefikConfigError("%s is not a YAML mapping" % what)
    doc = YamlText(text)
    for op, path, value in changes:
        if op == "append":
            doc.append(path, value)
        elif op == "ensure":
            doc.ensure(path, value)
        elif op == "replace":
            doc.replace(path, value[0], value[1])
        elif op == "set":
            doc.set(path, value)
        elif op == "delete":
            doc.delete(path)
        elif op == "flags":
            doc.flags(path, value[0], value[1])
    new = doc.text()
    want = apply_changes(before or {}, changes)
    try:
        got = yaml.safe_load(new)
    except yaml.YAMLError as e:
        raise TraefikConfigError("editing %s as text would break it (%s); nothing was written" % (what, e))
    if got != want:
        raise TraefikConfigError("%s has a layout the role cannot edit line by line (anchors, flow mappings, "
                                 "tabs...); nothing was written. Make the change by hand: %s" % (what, changes))
    return new


# ---------------------------------------------------------------- flags

def flag_changes(flags, opts):
    """The same change for a Traefik configured with command-line flags:
    (flags to add or replace {name: value}, flags to remove [name])."""
    ref = "%s@file" % opts["name"]
    add, remove = {}, []
    for ep in opts["entrypoints"]:
        if "entrypoints.%s.address" % ep.lower() not in flags:
            raise TraefikConfigError("entrypoint %s is not defined by the flags (--entrypoints.%s.address)" % (ep, ep))
        key = "entrypoints.%s.http.middlewares" % ep.lower()
        have = [m for m in flags.get(key, "").split(",") if m]
        if ref not in have:
            add[key] = ",".join(have + [ref])

    trusted = opts.get("proxy_protocol_trusted_ips")
    defined = sorted(set(k.split(".")[1] for k in flags if k.startswith("entrypoints.") and k.endswith(".address")))
    for ep in (e for e in defined if e not in (API_ENTRYPOINT, "traefik")):
        pkey = "entrypoints.%s.proxyprotocol.trustedips" % ep
        if trusted and flags.get(pkey) != ",".join(trusted):
            add[pkey] = ",".join(trusted)
        elif trusted is not None and not trusted and pkey in flags:
            remove.append(pkey)
    provider = opts["provider"]
    if provider["kind"] == "filename":
        remove.append("providers.file.filename")
        add["providers.file.directory"] = provider["dir"]
    elif provider["kind"] == "none":
        add["providers.file.directory"] = provider["dir"]
    if "ping" not in flags:
        add["ping"] = "true"
    if opts.get("verify_api", True):
        if not any(k == "api" or k.startswith("api.") for k in flags):
            add["api"] = "true"
        if "entrypoints.%s.address" % API_ENTRYPOINT not in flags:
            add["entrypoints.%s.address" % API_ENTRYPOINT] = "127.0.0.1:%d" % API_PORT
    return add, remove


def edit_args(args, add, remove):
    """The argument list with flags replaced in place, removed, or appended."""
    out, done = [], set()
    for a in args:
        key = a[2:].partition("=")[0].lower() if a.startswith("--") else None
        if key in remove:
            continue
        if key in add:
            out.append("--%s=%s" % (a[2:].partition("=")[0], add[key]))
            done.add(key)
            continue
        out.append(a)
    return out + ["--%s=%s" % (k, v) for k, v in sorted(add.items()) if k not in done]


def flags_text(add, remove):
    """What to add to a `docker run`, for the message when the role cannot."""
    parts = ["--%s=%s" % kv for kv in sorted(add.items())]
    if remove:
        parts.append("and remove %s" % ", ".join("--" + r for r in remove))
    return " ".join(parts)


def compose_command_changes(compose, service, args, add, remove):
    """Data changes to a compose file for new Traefik flags: the service's
    `command` list, item by item where its items are the flags."""
    svc = lookup(compose, ["services", service])
    if svc is None:
        raise TraefikConfigError("service %s is not in the compose file" % service)
    command = svc.get("command")
    if isinstance(command, str) or command is None:
        raise TraefikConfigError("the compose service %s has no command list; write its flags as a list" % service)
    return [("flags", ["services", service, "command"], (add, remove))]


# -------------------------------------------------------- dynamic files

def dynamic_names(texts):
    """(routers, middlewares) named in YAML dynamic-config texts."""
    routers, middlewares = set(), set()
    for text in texts:
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        http = lookup(doc, ["http"]) or {}
        routers |= set((lookup(http, ["routers"]) or {}).keys())
        middlewares |= set((lookup(http, ["middlewares"]) or {}).keys())
    return routers, middlewares


# ------------------------------------------------------------------ API

def check_api(routers, middlewares, expected_routers, entrypoints, middleware_ref, amount=None):
    """Problems in what Traefik's API says (empty when all is well): every
    expected router exists and is enabled, the middleware is loaded with the
    amount just written (not an earlier one Traefik still runs), and every
    router on the limited entrypoints runs it."""
    by_name = dict((r.get("name"), r) for r in routers or [])
    problems = []
    for name in sorted(expected_routers):
        # Traefik splits a router without entryPoints whose entrypoint has
        # middlewares into <entrypoint>-<name> (with them) and <name> (the rest)
        found = [r for n, r in by_name.items()
                 if n == name or any(n == "%s-%s" % (ep, name) for ep in entrypoints)]
        if not found:
            problems.append("router %s is gone" % name)
        for r in found:
            if r.get("status") != "enabled":
                problems.append("router %s is %s: %s" % (r.get("name"), r.get("status"), "; ".join(r.get("error") or [])))
    mws = dict((m.get("name"), m) for m in middlewares or [])
    mw = mws.get(middleware_ref)
    if mw is None:
        problems.append("middleware %s is not loaded" % middleware_ref)
    elif mw.get("status") != "enabled":
        problems.append("middleware %s is %s: %s" % (middleware_ref, mw.get("status"), "; ".join(mw.get("error") or [])))
    elif amount is not None and (mw.get("inFlightReq") or {}).get("amount") != amount:
        problems.append("middleware %s runs amount %s, not %s (not reloaded yet)"
                        % (middleware_ref, (mw.get("inFlightReq") or {}).get("amount"), amount))
    for r in routers or []:
        if r.get("name", "").startswith(API_ROUTER + "@"):
            continue
        on = set(r.get("using") or r.get("entryPoints") or [])
        if on & set(entrypoints) and middleware_ref not in (r.get("middlewares") or []):
            problems.append("router %s does not run %s" % (r.get("name"), middleware_ref))
    return problems


# ------------------------------------------------------------------ plan

def _dirname(path):
    return posixpath.dirname(path.rstrip("/"))


def locate(facts, static_text, opts):
    """Where everything is: the static config (file or flags), the file
    provider (directory, filename or none), the directory the middleware goes
    to, as Traefik sees it and on the host. Raises TraefikConfigError when
    the role cannot work here (before anything is changed)."""
    if facts["major"] < 2:
        raise TraefikConfigError("Traefik %s is not supported (v2 and v3 are)" % facts["version"])
    src = facts["source"]
    out = {"mode": src["mode"], "static": None, "provider": None}
    if src["mode"] == "env":
        raise TraefikConfigError("%s takes its static config from TRAEFIK_* environment variables; the role changes a "
                                 "static config file or command-line flags only" % facts["name"])
    if src["mode"] == "file":
        if not src["path"].endswith((".yml", ".yaml")):
            raise TraefikConfigError("%s reads %s: only YAML static configs are changed by the role"
                                     % (facts["name"], src["path"]))
        where = host_path(src["path"], facts["mounts"])
        if where is None:
            raise TraefikConfigError("%s reads %s from its own image layer (no mount): a change there would be lost "
                                     "when the container is re-created; mount it from the host" % (facts["name"], src["path"]))
        out["static"] = where["host"]
        try:
            doc = yaml.safe_load(static_text) if static_text and static_text.strip() else {}
        except yaml.YAMLError as e:
            raise TraefikConfigError("%s does not parse as YAML: %s; nothing was changed"
                                     % (where["host"], str(e).replace("\n", " ")))
        if not isinstance(doc, dict):
            raise TraefikConfigError("%s is not a YAML mapping; nothing was changed" % where["host"])
        file_provider = lookup(doc, ["providers", "file"]) or {}
        directory, filename = lookup(file_provider, ["directory"]), lookup(file_provider, ["filename"])
        base = _dirname(src["path"])
    else:
        flags = src["flags"]
        directory, filename = flags.get("providers.file.directory"), flags.get("providers.file.filename")
        base = "/etc/traefik"
    if directory:
        provider = {"kind": "directory", "dir": directory.rstrip("/")}
    elif filename:
        provider = {"kind": "filename", "file": filename,
                    "dir": (opts.get("dynamic_dir") or posixpath.join(_dirname(filename), "dynamic")).rstrip("/")}
    else:
        provider = {"kind": "none", "dir": (opts.get("dynamic_dir") or posixpath.join(base, "dynamic")).rstrip("/")}
    where = host_path(provider["dir"], facts["mounts"])
    if where is None:
        raise TraefikConfigError(
            "the dynamic directory %s is not visible inside %s (no mount covers it; mounts: %s): mount a host "
            "directory there (compose volumes: - ./dynamic:%s) or set traefik_inflight_dynamic_dir_in_container to "
            "a directory under one of its mounts; nothing was changed"
            % (provider["dir"], facts["name"], ", ".join(m["Destination"] for m in facts["mounts"]) or "none",
               provider["dir"]))
    provider["dir_host"] = where["host"]
    if provider["kind"] == "filename":
        where = host_path(filename, facts["mounts"])
        if where is None or where["whole_mount"]:
            raise TraefikConfigError(
                "%s reads its routes from %s, %s: the role moves that file into %s (where Traefik's directory watch "
                "sees every change) and needs the directory around it mounted; mount its directory instead of the "
                "file; nothing was changed" % (facts["name"], filename, "a single-file mount" if where else
                                               "which is on no mount", provider["dir"]))
        provider["file_host"] = where["host"]
    out["provider"] = provider
    return out


def plan(facts, where, static_text, compose_text, dynamic_texts, opts):
    """Everything the role changes, computed before it changes anything."""
    provider = where["provider"]
    opts = dict(opts, provider=provider)
    routers, middlewares = dynamic_names(dynamic_texts.values())
    if opts["name"] in middlewares:
        raise TraefikConfigError("a middleware named %s already exists in your dynamic config (%s): choose another "
                                 "traefik_inflight_name; nothing was changed" % (opts["name"], ", ".join(sorted(dynamic_texts))))
    if API_ROUTER in routers:
        raise TraefikConfigError("a router named %s already exists in your dynamic config; nothing was changed" % API_ROUTER)
    out = {"mode": where["mode"], "static": None, "compose": None, "restart": False, "recreate": False,
           "provider": provider, "middleware_ref": "%s@file" % opts["name"], "entrypoints": list(opts["entrypoints"]),
           "expected_routers": sorted("%s@file" % r for r in routers), "version": facts["version"],
           "amount": int(opts["amount"])}
    compose_changes = []
    if where["mode"] == "file":
        changes = static_changes(yaml.safe_load(static_text) or {}, opts)
        new = edit_yaml(static_text, changes, where["static"]) if changes else static_text
        out["static"] = {"path": where["static"], "old": static_text, "new": new}
        out["restart"] = new != static_text
    else:
        add, remove = flag_changes(where.get("flags") or facts["source"]["flags"], opts)
        if (add or remove) and not facts["compose"]:
            raise TraefikConfigError(
                "%s was started with docker run and takes its static config from flags: add %s to its command and "
                "re-create it (the role changes flags only in a compose file); nothing was changed"
                % (facts["name"], flags_text(add, remove)))
        if add or remove:
            compose_changes += compose_command_changes(yaml.safe_load(compose_text), facts["compose"]["service"],
                                                       facts["args"], add, remove)
    if facts["compose"] and compose_text is not None:
        compose_changes += service_changes(yaml.safe_load(compose_text), facts, opts)
        new = edit_yaml(compose_text, compose_changes, facts["compose"]["files"][0]) if compose_changes else compose_text
        out["compose"] = {"path": facts["compose"]["files"][0], "old": compose_text, "new": new,
                          "project_dir": facts["compose"]["working_dir"], "service": facts["compose"]["service"],
                          "project": facts["compose"]["project"]}
        out["recreate"] = new != compose_text
    return out


def service_changes(compose, facts, opts):
    """The compose service of Traefik: the autoheal label and a health check
    that asks Traefik itself (ping), and the drain sysctls of its own
    network namespace, where missing."""
    service = facts["compose"]["service"]
    svc = lookup(compose, ["services", service]) or {}
    changes = []
    label = opts.get("autoheal_label")
    if label:
        labels = svc.get("labels")
        if isinstance(labels, list):
            if "%s=true" % label not in labels and not any(str(x).startswith(label + "=") for x in labels):
                changes.append(("append", ["services", service, "labels"], "%s=true" % label))
        elif str((labels or {}).get(label, "")).lower() != "true":
            changes.append(("set", ["services", service, "labels", label], "true"))
    hc = opts.get("healthcheck")
    if hc and not (svc.get("healthcheck") or {}).get("test"):
        argv = ["CMD", "traefik", "healthcheck", "--ping"]
        if facts["source"]["mode"] == "file":
            argv.append("--configFile=%s" % facts["source"]["path"])
        else:
            argv += [a for a in facts["args"] if a.lower().startswith(("--ping", "--entrypoints.traefik."))]
        changes.append(("set", ["services", service, "healthcheck"], dict(test=argv, **hc)))
    for key, value in sorted((opts.get("sysctls") or {}).items()):
        have = svc.get("sysctls")
        if isinstance(have, list):
            raise TraefikConfigError("the compose service %s lists its sysctls as a list; write them as a mapping" % service)
        if str((have or {}).get(key)) != str(value):
            changes.append(("set", ["services", service, "sysctls", key], str(value)))
    return changes


# ------------------------------------------------------------ access log

def access_records(log_lines):
    """The JSON records among log lines (Traefik's access log on stdout,
    mixed with its own log lines)."""
    for line in log_lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except ValueError:
                continue


def _count(log_lines, field):
    counts = {}
    for record in access_records(log_lines):
        value = record.get(field)
        if value:
            counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def status_counts(log_lines):
    """{status: requests} of the access log (DownstreamStatus)."""
    return _count(log_lines, "DownstreamStatus")


# One address with at least this share of at least this many requests: Traefik
# sees a proxy, not the clients (its per-IP limit is blind).
BLIND_SHARE, BLIND_MIN_REQUESTS = 0.9, 20


def is_blind(requests, share):
    return requests >= BLIND_MIN_REQUESTS and share >= BLIND_SHARE


def client_share(log_lines):
    """From Traefik's JSON access log: (the address most requests come from,
    its share 0..1, how many requests were read). One address carrying nearly
    every request means Traefik sees a proxy, not the clients: a per-IP limit
    is then one bucket for everyone."""
    counts = _count(log_lines, "ClientHost")
    total = sum(counts.values())
    if not total:
        return None, 0.0, 0
    top = max(sorted(counts), key=lambda h: counts[h])
    return top, round(counts[top] / float(total), 3), total
