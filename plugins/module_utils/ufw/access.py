# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The way in, as ufw would see it: pure logic.

What listens (`ss -H -tulpn`), which ports sshd serves (`sshd -T`, the
session's $SSH_CONNECTION), and what ufw lets in for a NEW connection (its
default incoming policy and the rules of user.rules / user6.rules, first
match wins, as ufw builds them). From that: the ports that enabling ufw
would cut, and the allow rules that keep them open.

A port is written "PORT/PROTO" (proto tcp or udp) everywhere.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re
import shlex

PROTOS = ("tcp", "udp")
COMMENT = "homelab.edge"  # every rule ufw_access adds carries this comment
# Processes whose listening ports ufw's INPUT rules never filter: Docker
# DNATs published ports through FORWARD (ufw_connlimit limits those).
DOCKER_PROXY = "docker-proxy"


class AccessError(ValueError):
    """Input that names no port."""


def port_spec(value, default_proto="tcp"):
    """'2222', 2222, '51820/udp' -> '2222/tcp', '51820/udp'; AccessError otherwise."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or not text:
        raise AccessError("%r is not a port (write PORT or PORT/tcp or PORT/udp)" % (value,))
    port, slash, proto = text.partition("/")
    proto = proto or ("" if slash else default_proto)
    if not port.isdigit() or not 1 <= int(port) <= 65535 or proto not in PROTOS:
        raise AccessError("%r is not a port (write PORT or PORT/tcp or PORT/udp, PORT 1-65535)" % (value,))
    return "%d/%s" % (int(port), proto)


def port_specs(values, what):
    """A list of port specs, or AccessError naming the option."""
    out, bad = [], []
    for v in values or []:
        try:
            out.append(port_spec(v))
        except AccessError:
            bad.append(v)
    if bad:
        raise AccessError("%s: %s %s not a port (write PORT, PORT/tcp or PORT/udp; PORT 1-65535)"
                          % (what, ", ".join(repr(b) for b in bad), "is" if len(bad) == 1 else "are"))
    return sorted(set(out), key=sort_key)


def sort_key(spec):
    port, dummy, proto = spec.partition("/")
    return (int(port), proto)


# ------------------------------------------------------------ what listens

def _split_addr(local):
    """'0.0.0.0:22', '[::]:22', '*:9100', '127.0.0.53%lo:53' -> (address, port)."""
    addr, dummy, port = local.rpartition(":")
    addr = addr.strip("[]").split("%")[0]
    return addr, int(port) if port.isdigit() else None


def _process(text):
    m = re.search(r'users:\(\("([^"]+)"', text)
    return m.group(1) if m else ""


def is_loopback(addr):
    if addr in ("*", "", "0.0.0.0", "::"):
        return False
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


def listening(ss_output):
    """Sockets reachable from outside the host, from `ss -H -tulpn`:
    [{"spec", "address", "process", "docker"}], loopback ones left out."""
    found = {}
    for line in ss_output.splitlines():
        cols = line.split()
        if len(cols) < 5 or cols[0] not in PROTOS:
            continue
        addr, port = _split_addr(cols[4])
        if port is None or port == 0 or is_loopback(addr):
            continue
        spec = "%d/%s" % (port, cols[0])
        proc = _process(line)
        entry = found.setdefault(spec, {"spec": spec, "addresses": [], "processes": [], "docker": False})
        if addr not in entry["addresses"]:
            entry["addresses"].append(addr)
        if proc and proc not in entry["processes"]:
            entry["processes"].append(proc)
        entry["docker"] = entry["docker"] or proc == DOCKER_PROXY
    return [found[k] for k in sorted(found, key=sort_key)]


def sshd_ports(sshd_t_output):
    """The ports in `sshd -T` (lines 'port N')."""
    ports = set()
    for line in sshd_t_output.splitlines():
        cols = line.split()
        if len(cols) == 2 and cols[0].lower() == "port" and cols[1].isdigit():
            ports.add("%d/tcp" % int(cols[1]))
    return sorted(ports, key=sort_key)


def session(ssh_connection):
    """$SSH_CONNECTION 'client cport server sport' -> {"client", "spec"} or None."""
    cols = (ssh_connection or "").split()
    if len(cols) != 4 or not cols[3].isdigit():
        return None
    return {"client": cols[0], "spec": "%d/tcp" % int(cols[3])}


# ------------------------------------------------------------ what ufw lets in

def enabled(ufw_conf_text):
    """Whether ufw is enabled, from ufw.conf (ENABLED=yes)."""
    return any(line.strip() == "ENABLED=yes" for line in (ufw_conf_text or "").splitlines())


def default_input_policy(default_ufw_text):
    """ACCEPT, DROP or REJECT from /etc/default/ufw (ufw ships DROP)."""
    m = re.search(r'^\s*DEFAULT_INPUT_POLICY\s*=\s*"?(\w+)"?', default_ufw_text or "", re.M)
    return m.group(1).upper() if m else "DROP"


def default_forward_policy(default_ufw_text):
    """The FORWARD policy enabling ufw sets, from /etc/default/ufw (ufw ships DROP)."""
    m = re.search(r'^\s*DEFAULT_FORWARD_POLICY\s*=\s*"?(\w+)"?', default_ufw_text or "", re.M)
    return m.group(1).upper() if m else "DROP"


def _flag(parts, *names):
    for name in names:
        if name in parts and parts.index(name) + 1 < len(parts):
            return parts[parts.index(name) + 1]
    return None


def _target(value):
    """--to-destination ADDR[:PORT[-PORT]] (an IPv6 address in brackets) -> (addr, port or None)."""
    if value.startswith("["):
        addr, dummy, rest = value[1:].partition("]")
        return addr, rest.lstrip(":").split("-")[0] or None
    if value.count(":") == 1:
        addr, dummy, port = value.partition(":")
        return addr, port.split("-")[0] or None
    return value, None


def dnat_forwards(nat_rules):
    """The port forwards through this host, from `iptables -S -t nat` (or
    ip6tables): the DNATs of the user's chains to another host, each
    [{"spec": "PORT/PROTO" (what clients reach), "proto", "to_addr", "to_port"
    (where it goes: a forwarded connection, through FORWARD), "rule"}].
    Docker's chains (DOCKER*) are left out: Docker keeps its own FORWARD
    path. A DNAT to loopback is no forward."""
    out = []
    for line in (nat_rules or "").splitlines():
        try:
            parts = shlex.split(line)
        except ValueError:
            continue
        if parts[:1] != ["-A"] or len(parts) < 2 or parts[1].upper().startswith("DOCKER") or \
                _flag(parts, "-j", "--jump") != "DNAT":
            continue
        proto, dport, to = _flag(parts, "-p", "--protocol"), _flag(parts, "--dport", "--destination-port"), \
            _flag(parts, "--to-destination")
        if proto not in PROTOS or not dport or not to:
            continue  # every protocol or port of an address: not a port forward this plan can keep
        addr, port = _target(to)
        if is_loopback(addr):
            continue
        out.append({"spec": "%s/%s" % (dport, proto), "proto": proto, "to_addr": addr,
                    "to_port": port or dport, "rule": line.strip()})
    return out


def route_allows(rules, forward):
    """Whether a route rule of ufw lets a NEW forwarded connection of `forward` through (first match)."""
    to_port = forward["to_port"].split(":")[0]
    for r in rules:
        if not r["route"] or r["proto"] not in ("any", forward["proto"]):
            continue
        if not to_port.isdigit() or not _port_matches(r["dport"], int(to_port)):
            continue
        if not _net_matches(r["dst"], forward["to_addr"]) or r["src"] not in ("any", "0.0.0.0/0", "::/0"):
            continue
        return r["action"] in ("allow", "limit")
    return False


def forwards_cut(forwards, enabled, rules, forward_policy):
    """The port forwards that enabling ufw would cut: its FORWARD policy
    (DROP as shipped) drops a forwarded NEW connection that no route rule
    allows. None when ufw is active already (as it is, it works) or forwards
    by default."""
    if enabled or forward_policy == "ACCEPT":
        return []
    return [f for f in forwards if not route_allows(rules, f)]


def user_rules(text):
    """The rules of user.rules / user6.rules, in order, from ufw's own
    '### tuple ###' lines: [{"action", "proto", "dport", "dst", "src", "direction", "route"}]."""
    rules = []
    for line in (text or "").splitlines():
        if not line.startswith("### tuple ###"):
            continue
        fields = line[len("### tuple ###"):].split(" comment=")[0].split()
        if len(fields) not in (7, 9):
            continue
        action = fields[0]
        route = action.startswith("route:")
        action = action.split(":")[-1].split("_")[0]  # allow_log -> allow
        rules.append({"action": action, "proto": fields[1], "dport": fields[2], "dst": fields[3],
                      "src": fields[5], "direction": fields[-1].split("_")[0], "route": route})
    return rules


def _port_matches(dport, port):
    if dport == "any":
        return True
    for part in dport.split(","):
        lo, dummy, hi = part.partition(":")
        if lo.isdigit() and int(lo) <= port <= int(hi or lo):
            return True
    return False


def _net_matches(net, addr):
    """A rule's src/dst against an address (None: any address, so only an
    'any' rule matches)."""
    if net in ("any", "0.0.0.0/0", "::/0"):
        return True
    if addr is None:
        return False
    try:
        return ipaddress.ip_address(addr) in ipaddress.ip_network(net, strict=False)
    except ValueError:
        return False


def first_match(rules, spec, src=None):
    """The first rule that decides a NEW connection to spec (incoming, not
    routed), or None (the default policy decides). src: the client (None:
    any client, so rules for some sources only do not count)."""
    port, dummy, proto = spec.partition("/")
    for r in rules:
        if r["route"] or r["direction"] != "in" or r["proto"] not in ("any", proto):
            continue
        if not _port_matches(r["dport"], int(port)) or not _net_matches(r["src"], src):
            continue
        if r["dst"] not in ("any", "0.0.0.0/0", "::/0"):
            continue  # a rule for one of the host's addresses only: not for every client
        return r
    return None


def allows(rules, policy, spec, src=None):
    """Whether a NEW connection to spec gets in."""
    r = first_match(rules, spec, src)
    return policy == "ACCEPT" if r is None else r["action"] in ("allow", "limit")


def reachable(specs, enabled, rules, policy, ssh=None):
    """The specs a new client can reach: all when ufw is off; else per the
    rules (the session's own port from the session's client)."""
    return sorted((s for s in specs if not enabled or allows(rules, policy, s, src=_src(s, ssh))), key=sort_key)


def _src(spec, ssh):
    return ssh["client"] if ssh and ssh["spec"] == spec else None


def _ordered(items):
    return sorted(set(items), key=sort_key)


def plan(listen, ssh_ports, session_, front_door, closed, enabled, rules, policy, keep_listening):
    """What to allow so that nothing that answered stops answering.

    listen: from listening(); ssh_ports: from sshd_ports(); session_: from
    session(); front_door: specs to allow in any case; closed: specs the
    user asks to leave closed by name. Returns a dict of spec lists:
    must_stay (reachable now and must stay so; SSH is left out: a new
    login proves it), allow (allow rules to add),
    denied_by_rule (cut by a deny rule of the user's: left as asked),
    ssh_denied (SSH cut by a rule of the user's: a refusal), would_cut (cut
    by the default policy and not asked for: a refusal unless keep_listening),
    blocked and blocked_unasked (see blocked())."""
    ufw_filtered = [e["spec"] for e in listen if not e["docker"]]
    ssh = set(ssh_ports) | ({session_["spec"]} if session_ else set())
    candidates = sorted(set(ufw_filtered) | ssh, key=sort_key)
    now = reachable(candidates, enabled, rules, policy, session_)
    cut = [s for s in now if not allows(rules, policy, s, src=_src(s, session_))]
    by_rule = [s for s in cut if first_match(rules, s, _src(s, session_)) is not None]
    by_default = [s for s in cut if s not in by_rule]
    keep = [s for s in by_default if s in ssh or (keep_listening and s not in closed)]
    allow = set(keep) | set(s for s in front_door if not allows(rules, policy, s))
    denied_by_rule = _ordered(s for s in by_rule if s not in ssh)
    out = {"must_stay": _ordered(s for s in now if s not in ssh and s not in closed and s not in by_rule),
           "allow": _ordered(allow),
           "denied_by_rule": denied_by_rule,
           "ssh_denied": _ordered(s for s in by_rule if s in ssh),
           "would_cut": _ordered(s for s in by_default if s not in keep and s not in closed and s not in allow)}
    out.update(blocked(listen, enabled, rules, policy, closed, denied_by_rule, session_))
    return out


def blocked(listen, enabled, rules, policy, closed, denied_by_rule, session_=None):
    """Listening ports ufw blocks for new connections (blocked), and those of
    them nobody closed on purpose - neither named in closed nor cut by a deny
    rule of the user's (blocked_unasked: what status and diagnose report)."""
    ufw_filtered = [e["spec"] for e in listen if not e["docker"]]
    now = reachable(ufw_filtered, enabled, rules, policy, session_)
    out = _ordered(s for s in ufw_filtered if s not in now)
    return {"blocked": out, "blocked_unasked": [s for s in out if s not in closed and s not in denied_by_rule]}
