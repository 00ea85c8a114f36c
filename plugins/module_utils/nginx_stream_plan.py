# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PROXY protocol in the user's nginx stream servers: which servers get it,
which are refused and why, and the edit of the user's own bytes. Pure: it
reads nginx's configuration as nginx_stream_dump gives it (from `nginx -T`).

A server gets one marked line, `proxy_protocol on;`, after its proxy_pass
(in the server's own file), only when every server nginx may send its
connections to is a listed upstream: an address, an upstream block whose
servers (backup and down ones too) are all listed, or a variable whose every
value (through `set` and `map`/`geo`/`split_clients`) is one of those. UDP
servers never get it: nginx would put the header in front of the first
datagram (QUIC, DNS and WireGuard cannot parse that).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re

from . import nginx_stream_dump as dump

MARK = "# homelab.edge: PROXY protocol to the NAS (managed by Ansible)"
LINE = "proxy_protocol on;"
# After a proxy_pass with more statements on its line (`server { listen 80; proxy_pass x; }`)
# the marked line goes on a line of its own and the rest of the line follows
# on the next; this mark says so, and removing the line joins them again.
SPLIT = " [split]"
MAX_VALUES = 256
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
# directives of a value table's block that are not "key value" entries
TABLE_FLAGS = {"map": ("hostnames", "volatile"), "geo": ("ranges", "proxy", "proxy_recursive", "delete"),
               "split_clients": ()}

# a server's outcome: what the run does (or would do) to it
ADD, HAS, REMOVE = "add", "has", "remove"
UDP, THEIRS, REFUSED, UNKNOWN, OTHER, NO_PASS = "udp", "theirs", "refused", "unknown", "other", "no_proxy_pass"


class Listen(object):
    """One `listen` of a stream server."""

    def __init__(self, directive):
        self.directive = directive
        self.address = directive.args[0] if directive.args else ""
        self.params = directive.args[1:]
        self.udp = "udp" in self.params
        self.ssl = "ssl" in self.params
        self.proxy_protocol = "proxy_protocol" in self.params

    @property
    def text(self):
        return " ".join(self.directive.args)


def stream_block(conf):
    found = [d for d in dump.children(conf.top) if d.name == "stream" and d.block is not None]
    return found[0] if found else None


def _last(directives, name):
    found = [d for d in directives if d.name == name]
    return found[-1] if found else None


def upstream_blocks(stream):
    """{name: [(address, params)]} of the stream's upstream blocks."""
    out = {}
    for d in dump.children(stream.block):
        if d.name == "upstream" and d.block is not None and d.args:
            out[d.args[0]] = (d, [(s.args[0], s.args[1:]) for s in dump.children(d.block)
                                  if s.name == "server" and s.args])
    return out


def value_tables(stream):
    """{variable: (directive, [values], has default)} of map, geo and split_clients blocks."""
    out = {}
    for d in dump.children(stream.block):
        if d.name in TABLE_FLAGS and d.block is not None and d.args:
            values, default = [], False
            for e in dump.children(d.block):
                if e.name in TABLE_FLAGS[d.name] or not e.args:
                    continue
                if e.name == "default" or (d.name == "split_clients" and e.name == "*"):
                    default = True
                values.append(e.args[0])
            out[d.args[-1].lstrip("$")] = (d, values, default)
    return out


def _parts(expr):
    """A value as [literal or ("var", name)]."""
    out, pos = [], 0
    for m in VARIABLE.finditer(expr):
        if m.start() > pos:
            out.append(expr[pos:m.start()])
        out.append(("var", m.group(1) or m.group(2)))
        pos = m.end()
    if pos < len(expr):
        out.append(expr[pos:])
    return out


class Values(object):
    """What an expression can be: `values`, the variables known only per
    connection (`unknown`), and where each variable came from (`via`)."""

    def __init__(self):
        self.values, self.unknown, self.via = set(), [], []


def expand(expr, sets, tables, conf, depth=0, out=None):
    out = out if out is not None else Values()
    if depth > 8:
        out.unknown.append("(variables nested deeper than 8)")
        return out
    choices = []
    for part in _parts(expr):
        if not isinstance(part, tuple):
            choices.append([part])
            continue
        name = part[1]
        inner = Values()
        if name in sets:
            d = sets[name]
            _note(out, "set $%s at %s" % (name, conf.where(d)))
            expand(d.args[1] if len(d.args) > 1 else "", sets, tables, conf, depth + 1, inner)
        elif name in tables:
            d, values, has_default = tables[name]
            _note(out, "%s %s at %s" % (d.name, " ".join(d.args), conf.where(d)))
            for v in values:
                expand(v, {}, tables, conf, depth + 1, inner)
            if not has_default:
                inner.values.add("")
        else:
            inner.unknown.append("$" + name)
        for u in inner.unknown:
            if u not in out.unknown:
                out.unknown.append(u)
        for v in inner.via:
            _note(out, v)
        choices.append(sorted(inner.values))
    count = 1
    for c in choices:
        count *= max(len(c), 1)
    if count > MAX_VALUES:
        out.unknown.append("(more than %d combinations)" % MAX_VALUES)
        return out
    if all(choices):
        for combo in itertools.product(*choices):
            out.values.add("".join(combo))
    return out


def _note(out, via):
    if via not in out.via:
        out.via.append(via)


def normal(address):
    return address.strip().lower()


class Target(object):
    """Where a value sends connections: an address, or each server of an upstream block."""

    def __init__(self, address, upstream=None, params=()):
        self.address, self.upstream, self.params = address, upstream, list(params)

    def describe(self):
        flags = [p for p in self.params if p in ("backup", "down")]
        return self.address + (" (%s, upstream %s)" % (" ".join(flags), self.upstream) if flags
                               else " (upstream %s)" % self.upstream if self.upstream else "")


def targets_of(values, upstreams):
    out = []
    for v in sorted(values):
        if v == "":
            continue  # an empty value sends nowhere (nginx closes the connection)
        if v in upstreams:
            out.extend(Target(a, v, params) for a, params in upstreams[v][1])
        else:
            out.append(Target(v))
    return out


class Server(object):
    """A stream server as nginx runs it, and what the plan does with it."""

    def __init__(self, conf, stream, directive, upstreams, tables, listed):
        self.conf, self.directive = conf, directive
        inner = list(dump.children(directive.block))
        self.listens = [Listen(d) for d in inner if d.name == "listen"]
        self.proxy_pass = _last(inner, "proxy_pass")
        self.sets = dict((d.args[0].lstrip("$"), d) for d in inner if d.name == "set" and d.args)
        protocols = [d for d in inner if d.name == "proxy_protocol"]
        self.managed = [d for d in protocols if is_managed(conf, d)]
        theirs = [d for d in protocols if d not in self.managed]
        self.own_protocol = theirs[-1] if theirs else None
        stream_level = [d for d in dump.children(stream.block) if d.name == "proxy_protocol"]
        self.stream_protocol = stream_level[-1] if stream_level else None
        ssl = _last(inner, "proxy_ssl") or _last(list(dump.children(stream.block)), "proxy_ssl")
        self.proxy_ssl = bool(ssl and ssl.args[:1] == ["on"])
        self.values = expand(self.proxy_pass.args[0], self.sets, tables, conf) if self.proxy_pass and \
            self.proxy_pass.args else Values()
        self.targets = targets_of(self.values.values, upstreams)
        self.listed = [t for t in self.targets if normal(t.address) in listed]
        self.unlisted = [t for t in self.targets if normal(t.address) not in listed]
        self.sni = _sni(self, tables, upstreams, listed)
        self.outcome, self.why = None, ""

    @property
    def udp(self):
        return bool(self.listens) and all(x.udp for x in self.listens)

    @property
    def mixed(self):
        return any(x.udp for x in self.listens) and not all(x.udp for x in self.listens)

    def name(self):
        """How messages name it: by its listens, file and line."""
        return "the stream server on " + self.where()

    def where(self):
        """Its listens, file and line, for a list."""
        return "%s (%s)" % (" / ".join(x.text for x in self.listens) or "(no listen)", self.conf.where(self.directive))

    def forwards(self):
        """What its proxy_pass says, and where its variables come from."""
        if not self.proxy_pass:
            return "no proxy_pass"
        what = " ".join(self.proxy_pass.args)
        return what + (" (%s)" % ", ".join(self.values.via) if self.values.via else "")

    def ports(self):
        ports = []
        for x in self.listens:
            if str(port_of(x.address)) not in ports:
                ports.append(str(port_of(x.address)))
        return ", ".join(ports)

    def result(self):
        return {"file": self.directive.file, "line": self.conf.line(self.directive),
                "listen": [x.text for x in self.listens],
                "proxy_pass": " ".join(self.proxy_pass.args) if self.proxy_pass else None,
                "targets": [t.describe() for t in self.targets], "unknown": list(self.values.unknown),
                "outcome": self.outcome, "why": self.why}


def is_managed(conf, directive):
    """Our marked line: `proxy_protocol on;` followed on its line by the mark."""
    text = conf.files[directive.file]
    end = text.find("\n", directive.end)
    rest = text[directive.end:len(text) if end < 0 else end].strip()
    return directive.args == ["on"] and rest.startswith(MARK)


def _sni(server, tables, upstreams, listed):
    """A server name whose route (an SNI map) reaches listed upstreams only: what the check sends."""
    if not server.proxy_pass or not server.proxy_pass.args:
        return None
    for part in _parts(server.proxy_pass.args[0]):
        if isinstance(part, tuple) and part[1] in tables:
            d = tables[part[1]][0]
            if d.name != "map" or d.args[:1] != ["$ssl_preread_server_name"]:
                continue
            for e in dump.children(d.block):
                key = e.name
                if key in ("default", "hostnames", "volatile", "include") or key.startswith("~") or not e.args:
                    continue
                reach = targets_of(expand(e.args[0], {}, tables, server.conf).values, upstreams)
                if reach and all(normal(t.address) in listed for t in reach):
                    return "probe" + key if key.startswith(".") else \
                        "probe." + key[2:] if key.startswith("*.") else key[:-2] + ".probe" if key.endswith(".*") else key
    return None


def decide(server, present):
    """The server's outcome and why (in words for the user)."""
    relevant = bool(server.listed)
    if not server.proxy_pass:
        outcome, why = NO_PASS, "has no proxy_pass"
    elif server.udp and relevant:
        outcome = UDP
        mine = server.own_protocol or (server.stream_protocol if not server.managed else None)
        if mine is not None and mine.args[:1] == ["on"]:
            why = ("is UDP (port %s) and sends PROXY protocol by your own line (%s): nginx puts the header in front "
                   "of the first datagram of each session, which QUIC (HTTP/3) cannot parse. That line is yours, "
                   "left as it is" % (server.ports(), server.conf.where(mine)))
        else:
            why = ("is UDP (port %s): it never gets PROXY protocol (nginx would put the header in front of the first "
                   "datagram of each session, which QUIC (HTTP/3) cannot parse)" % server.ports())
    elif not relevant:
        if server.values.unknown:
            outcome = UNKNOWN
            why = ("forwards to %s, whose value nginx knows only per connection (%s): homelab.edge cannot tell "
                   "where a PROXY header would go, so it leaves this server alone"
                   % (server.forwards(), ", ".join(server.values.unknown)))
        else:
            outcome, why = OTHER, "forwards to %s, not a listed upstream" % server.forwards()
    elif server.mixed:
        outcome = REFUSED
        why = ("listens on TCP and UDP in one server (%s): proxy_protocol there would put the header in front of "
               "UDP datagrams too. Give the UDP listen a server of its own (same proxy_pass), then run this again"
               % ", ".join(x.text for x in server.listens))
    elif server.own_protocol is not None and server.own_protocol.args[:1] != ["on"]:
        outcome = REFUSED
        why = ("sets '%s;' itself (%s): that is your choice, left to you. Remove that line if the servers behind "
               "it should get PROXY protocol, then run this again"
               % (" ".join([server.own_protocol.name] + server.own_protocol.args), server.conf.where(server.own_protocol)))
    elif server.values.unknown:
        outcome = REFUSED
        why = ("forwards to %s, which can be %s besides the listed upstreams: values nginx knows only per "
               "connection, so homelab.edge cannot tell where the PROXY header would go. Route the listed "
               "upstreams through a server of their own (or a map whose every value is listed), then run this again"
               % (server.forwards(), ", ".join(server.values.unknown)))
    elif server.unlisted:
        outcome = REFUSED
        why = ("forwards to %s, which can also reach %s, not in upstreams: nginx would send the PROXY header there "
               "too%s. List %s in upstreams if %s PROXY protocol, or send the listed upstreams through a server "
               "of their own, then run this again"
               % (server.forwards(), ", ".join(t.describe() for t in server.unlisted),
                  " (when it picks a backup server, or when a down one comes back)"
                  if any(set(t.params) & set(["backup", "down"]) for t in server.unlisted) else "",
                  "them" if len(server.unlisted) > 1 else "it",
                  "they accept" if len(server.unlisted) > 1 else "it accepts"))
    elif server.own_protocol is not None:
        outcome = THEIRS
        why = "sends PROXY protocol by its own line (%s): left as it is" % server.conf.where(server.own_protocol)
    elif server.stream_protocol is not None and server.stream_protocol.args[:1] == ["on"] and not server.managed:
        outcome = THEIRS
        why = "sends PROXY protocol by the stream block's own line (%s): left as it is" % \
            server.conf.where(server.stream_protocol)
    else:
        outcome, why = (HAS, "has homelab.edge's line") if server.managed else (ADD, "gets PROXY protocol")
    if server.managed and outcome not in (ADD, HAS):
        if outcome == REFUSED:
            why += " (it has homelab.edge's PROXY protocol line from an earlier run: state=absent takes it out)"
        else:
            outcome, why = REMOVE, "%s: homelab.edge's line from an earlier run comes out" % why
    if not present:
        if server.managed:
            outcome, why = REMOVE, "homelab.edge's line comes out (state=absent)"
        elif outcome in (ADD, REFUSED):
            outcome, why = OTHER, "has no homelab.edge line"
        elif outcome == THEIRS:
            why += "; state=absent takes out only homelab.edge's lines"
    server.outcome, server.why = outcome, why


class Plan(object):
    """What a run does: each stream server's outcome, the refusals (each one
    message), warnings, the edits by file and the checks through nginx."""

    def __init__(self, conf, upstreams, present=True):
        self.conf, self.present = conf, present
        listed = set(normal(u) for u in upstreams)
        self.listed = list(upstreams)
        self.stream = stream_block(conf)
        self.servers = []
        if self.stream is not None:
            ups, tables = upstream_blocks(self.stream), value_tables(self.stream)
            seen = set()
            for d in dump.children(self.stream.block):
                if d.name == "server" and d.block is not None and id(d) not in seen:
                    seen.add(id(d))
                    s = Server(conf, self.stream, d, ups, tables, listed)
                    decide(s, present)
                    self.servers.append(s)

    def of(self, *outcomes):
        return [s for s in self.servers if s.outcome in outcomes]

    @property
    def refusals(self):
        return ["%s %s" % (s.name(), s.why) for s in self.of(REFUSED)] if self.present else []

    @property
    def warnings(self):
        said = (UDP, UNKNOWN, THEIRS, REMOVE) if self.present else (THEIRS,)  # absent: only what stays sending
        return ["%s %s" % (s.name(), s.why) for s in self.servers if s.outcome in said]

    def nothing_forwards(self):
        """Why there is nothing to do with state=present, when that is so (else None)."""
        if not self.present or self.of(ADD, HAS, THEIRS, REMOVE, REFUSED, UDP):
            return None
        if self.stream is None:
            return "nginx (%s and the files it includes) has no stream {} block: no stream server forwards to %s" % (
                self.conf.main, ", ".join(self.listed))
        found = "; ".join("%s -> %s" % (s.where(), s.forwards()) for s in self.servers)
        return "no stream server of nginx forwards to %s (read as nginx loads it: %d files from %s). The stream " \
               "servers forward to: %s" % (", ".join(self.listed), len(self.conf.files), self.conf.main,
                                           found or "(none)")

    def edits(self):
        """{path: [(offset, kind, directive)]}: our line in after a statement, or out."""
        out = {}
        for s in self.of(ADD):
            at = dump.own_statement(s.directive.block, s.proxy_pass)
            out.setdefault(at.file, []).append((at.end, "add", at))
        for s in self.of(REMOVE):
            for d in s.managed:
                out.setdefault(d.file, []).append((d.start, "remove", d))
        return out

    def changed_servers(self):
        return [[x.text for x in s.listens] for s in self.of(ADD, REMOVE)]

    def checks(self):
        """Where a client's connection goes through each server that gets PROXY protocol: one per listen
        (its own address: the wildcard as the loopback), with what the listener itself expects."""
        out, skipped = [], []
        for s in self.of(ADD):
            for x in s.listens:
                host, port = connect_address(x.address)
                if host is None:
                    skipped.append("%s: %s is a unix socket, not checked" % (s.name(), x.text))
                    continue
                entry = {"listen": x.text, "host": host, "port": port, "tls": x.ssl, "proxy_protocol": x.proxy_protocol,
                         "sni": s.sni, "proxy_ssl": s.proxy_ssl, "targets": sorted(set(t.address for t in s.listed)),
                         "server": s.name()}
                if not any(e["host"] == host and e["port"] == port for e in out):
                    out.append(entry)
        return out, skipped

    def upstreams_to_ask(self):
        """The listed upstreams a changed server forwards to, each with a server name to ask it with."""
        out = {}
        for s in self.of(ADD):
            for t in s.listed:
                out.setdefault(t.address, s.sni)
        return sorted(out.items())


def port_of(address):
    return connect_address(address)[1] if not address.startswith("unix:") else address


def connect_address(address):
    """(host, port) a client on this host reaches a listen address at: the
    wildcard (`443`, `*:443`, `0.0.0.0:443`) at 127.0.0.1, `[::]` at ::1, a
    specific address at itself; (None, None) for a unix socket."""
    if address.startswith("unix:"):
        return None, None
    if address.startswith("["):
        host, rest = address[1:].split("]", 1)
        port = rest[1:] if rest.startswith(":") else "80"
    elif ":" in address:
        host, port = address.rsplit(":", 1)
    elif address.isdigit() or "-" in address and address.replace("-", "").isdigit():
        host, port = "*", address
    else:
        host, port = address, "80"
    port = port.split("-")[0]
    host = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return host, int(port) if port.isdigit() else port


# ---- the edit of the user's bytes

def apply_edits(text, edits):
    """The file's text with our line added after each statement (or taken
    out): every other byte as it was."""
    for offset, kind, d in sorted(edits, key=lambda e: -e[0]):
        text = _add(text, d) if kind == "add" else _remove(text, d)
    return text


def _add(text, statement):
    at = statement.end
    line_end = text.find("\n", at)
    line_end = len(text) if line_end < 0 else line_end
    rest = text[at:line_end]
    nl = "\r\n" if rest.endswith("\r") or (line_end == len(text) and "\r\n" in text) else "\n"
    line_start = text.rfind("\n", 0, statement.start) + 1
    indent = re.match(r"[ \t]*", text[line_start:]).group(0)
    ours = nl + indent + LINE + "  " + MARK
    if not rest.strip():
        return text[:at] + ours + text[at:]
    if rest.strip().startswith("#"):  # a comment of the user's ends the line: ours goes after it
        end = line_end - 1 if rest.endswith("\r") else line_end
        return text[:end] + ours + text[end:]
    return text[:at] + ours + SPLIT + nl + indent + text[at:]


REMOVE_LINE = re.compile(r"\r?\n([ \t]*)" + re.escape(LINE) + r"[ \t]*" + re.escape(MARK) +
                         r"(?:" + re.escape(SPLIT) + r"\r?\n\1|[ \t]*(?=\r?\n|\Z))")


def _remove(text, directive):
    nl = text.rfind("\n", 0, directive.start)
    start = nl - 1 if nl > 0 and text[nl - 1] == "\r" else nl
    m = REMOVE_LINE.match(text, start) if nl >= 0 else None
    if m:
        return text[:m.start()] + text[m.end():]
    # reformatted by hand: the directive and its mark go, and its line when nothing else is on it
    end = text.find("\n", directive.end)
    end = len(text) if end < 0 else end
    cut_end = end - 1 if text[end - 1:end] == "\r" else end
    line_start = nl + 1
    if not text[line_start:directive.start].strip() and nl >= 0:
        return text[:start] + text[cut_end:]
    return text[:directive.start].rstrip(" \t") + text[cut_end:]


def proxy_header(client="198.51.100.7", server="10.8.0.2", client_port=40000, server_port=443):
    """A PROXY protocol v1 line, as nginx sends it (TCP6 for an IPv6 server address)."""
    if ":" in server:
        client = "2001:db8::7" if ":" not in client else client
        return ("PROXY TCP6 %s %s %d %d\r\n" % (client, server, client_port, server_port)).encode("ascii")
    return ("PROXY TCP4 %s %s %d %d\r\n" % (client, server, client_port, server_port)).encode("ascii")


BACKUP_COPY = re.compile(r"/[^\s\"':]*(?::[^\s\"':]*)*?\.\d+\.\d{4}-\d{2}-\d{2}@\d{2}:\d{2}:\d{2}~")


def backup_copies(message):
    """The paths in nginx's message that look like backup copies Ansible's backup_local writes
    (`NAME.PID.DATE@TIME~`), which an earlier homelab.edge left beside the config."""
    return sorted(set(m.group(0) for m in BACKUP_COPY.finditer(message)))
