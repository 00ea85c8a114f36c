# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-source connection limits for ufw: pure text logic.

Ports the host serves itself: one marked block inside the *filter section of
before.rules (before6.rules), before its COMMIT line. Nothing else in the
file changes.

Ports Docker publishes never pass ufw's INPUT chains (Docker DNATs them
through FORWARD, which jumps to DOCKER-USER first). Their limit lives in a
chain of our own, homelab-edge-docker, loaded by a hook that ufw's
after.init runs on every start (boot, enable, reload): it loads the chain
and puts one jump to it first in DOCKER-USER. DOCKER-USER itself is never
declared, so nothing else in it is flushed: neither Docker's own rules, nor
ufw-docker's block (which after.rules loads, and which re-declares and so
flushes the chain on every reload), nor rules the user keeps there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

BEGIN = "# BEGIN homelab.edge.ufw_connlimit (managed by Ansible; edit the inventory, not this block)"
END = "# END homelab.edge.ufw_connlimit"
COMMIT_COMMENT = "# don't delete the 'COMMIT' line"
DOCKER_CHAIN = "homelab-edge-docker"
HOOK = "homelab-edge.init"
AFTER_INIT = "after.init"
# Stock after.init (Debian/Ubuntu): comments and a case statement that does nothing.
_STOCK_AFTER_INIT = ['set -e', 'case "$1" in', 'start)', ';;', 'stop)', ';;', 'status)', ';;', 'flush-all)', ';;',
                     '*)', "echo \"'$1' not supported\"", 'echo "Usage: after.init {start|stop|flush-all|status}"',
                     ';;', 'esac']

FAMILIES = {
    4: {"chain": "ufw-before-input", "mask": 32, "file": "before.rules", "docker_file": "homelab-edge-docker.rules",
        "restore": "iptables-restore", "save": "iptables"},
    6: {"chain": "ufw6-before-input", "mask": 128, "file": "before6.rules", "docker_file": "homelab-edge-docker6.rules",
        "restore": "ip6tables-restore", "save": "ip6tables"},
}


class RulesError(ValueError):
    """The rules file is not of the shape ufw ships, or the input is invalid."""


def validate(ports, limit):
    problems = []
    if not ports:
        problems.append("ports must list at least one port")
    for p in ports:
        if not isinstance(p, int) or isinstance(p, bool) or not 1 <= p <= 65535:
            problems.append("port %r is outside 1-65535" % (p,))
    if len(set(ports)) != len(ports):
        problems.append("ports are listed twice: %s" % sorted(p for p in set(ports) if ports.count(p) > 1))
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        problems.append("limit must be a positive number of connections, got %r" % (limit,))
    return problems


def rule(chain, port, limit, mask, docker=False):
    """One iptables-restore line. INPUT rules match the local port; DOCKER-USER
    rules match the original destination port (before Docker's DNAT)."""
    if docker:
        match = "-p tcp -m conntrack --ctstate NEW --ctorigdstport %d" % port
    else:
        match = "-p tcp --dport %d -m conntrack --ctstate NEW" % port
    return ("-A %s %s -m connlimit --connlimit-above %d --connlimit-mask %d "
            "-j REJECT --reject-with tcp-reset" % (chain, match, limit, mask))


def render_block(family, ports, limit):
    """The marked block of before.rules for ports the host serves itself."""
    f = FAMILIES[family]
    return [BEGIN] + [rule(f["chain"], port, limit, f["mask"]) for port in ports] + [END]


def docker_chain_rules(family, ports, limit):
    """iptables-restore input for our chain (it flushes our chain only)."""
    f = FAMILIES[family]
    lines = ["# homelab.edge.ufw_connlimit: per-source limit for ports Docker publishes (managed by Ansible)",
             "*filter", ":%s - [0:0]" % DOCKER_CHAIN]
    lines += [rule(DOCKER_CHAIN, port, limit, f["mask"], docker=True) for port in ports]
    return "\n".join(lines + ["COMMIT", ""])


def hook_script(rules_dir):
    """The after.init hook: on start, load our chain and make its jump the
    first rule of DOCKER-USER (creating the chain when Docker has not yet);
    on stop, remove both. Never fails ufw's start: problems go to stderr."""
    return """#!/bin/sh
# homelab.edge.ufw_connlimit (managed by Ansible): per-source connection limit
# for ports Docker publishes. Run by %(dir)s/after.init with start|stop|status|flush-all.
chain=%(chain)s
load() { # iptables-command rules-file
    [ -s "$2" ] || return 0
    command -v "$1" >/dev/null 2>&1 || return 0
    if ! "$1-restore" -n < "$2"; then echo "homelab.edge: $2 did not load" >&2; return 0; fi
    "$1" -N DOCKER-USER 2>/dev/null || true
    while "$1" -D DOCKER-USER -j "$chain" 2>/dev/null; do :; done
    "$1" -I DOCKER-USER 1 -j "$chain" || echo "homelab.edge: no jump to $chain in DOCKER-USER" >&2
}
unload() {
    command -v "$1" >/dev/null 2>&1 || return 0
    while "$1" -D DOCKER-USER -j "$chain" 2>/dev/null; do :; done
    "$1" -F "$chain" 2>/dev/null && "$1" -X "$chain" 2>/dev/null
    return 0
}
case "$1" in
start)
    load iptables %(dir)s/%(v4)s
    load ip6tables %(dir)s/%(v6)s
    ;;
stop|flush-all)
    unload iptables
    unload ip6tables
    ;;
esac
exit 0
""" % {"dir": rules_dir, "chain": DOCKER_CHAIN, "v4": FAMILIES[4]["docker_file"], "v6": FAMILIES[6]["docker_file"]}


def init_call(rules_dir):
    return [BEGIN, '[ -x %s/%s ] && %s/%s "$1" || true' % (rules_dir, HOOK, rules_dir, HOOK), END]


def is_stock_after_init(text):
    """after.init as the package ships it: nothing but comments and a no-op case."""
    body = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return body == _STOCK_AFTER_INIT or not body


def apply_init_block(text, block, present=True):
    """after.init with our one call placed (or removed): after the shebang
    and the leading comments, before any command of the user's. Everything
    else stays byte for byte. A missing file (None) becomes a script with
    only our call."""
    if text is None:
        return "#!/bin/sh\n" + "\n".join(block) + "\n" if present else None
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    begins = [i for i, ln in enumerate(lines) if ln.strip() == BEGIN]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if len(begins) != len(ends) or len(begins) > 1:
        raise RulesError("after.init: the managed block's markers are damaged (%d begin, %d end)"
                         % (len(begins), len(ends)))
    if begins:
        del lines[begins[0]:ends[0] + 1]
    if present:
        at = 0
        while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()) and at < len(lines) - 1:
            at += 1
        lines[at:at] = list(block)
    return nl.join(lines)


def _filter_bounds(lines):
    """(start, commit) line indexes of the *filter section."""
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "*filter"), None)
    if start is None:
        raise RulesError("no *filter section")
    for i in range(start + 1, len(lines)):
        s = lines[i].strip()
        if s == "COMMIT":
            return start, i
        if s.startswith("*"):
            break
    raise RulesError("the *filter section has no COMMIT line")


def apply_block(text, block, present=True):
    """Return the file with the managed block placed (or removed).

    `block` is a list of lines from render_block. Raises RulesError when the
    file has no *filter/COMMIT, or when connlimit rules or the managed block
    stand after COMMIT (invalid iptables-restore input that breaks ufw).
    """
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    start, commit = _filter_bounds(lines)
    after = [i for i in range(commit + 1, len(lines))
             if "connlimit" in lines[i] and not lines[i].lstrip().startswith("#")]
    section_end = next((i for i in range(commit + 1, len(lines)) if lines[i].strip().startswith("*")), len(lines))
    stray = [i for i in after if i < section_end]
    if stray:
        raise RulesError("a connlimit rule stands after the *filter COMMIT line (line %d): ufw cannot load "
                         "that file; move or delete it first" % (stray[0] + 1))
    begins = [i for i, ln in enumerate(lines) if ln.strip() == BEGIN]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if len(begins) != len(ends) or len(begins) > 1:
        raise RulesError("the managed block's markers are damaged (%d begin, %d end)" % (len(begins), len(ends)))
    if begins:
        b, e = begins[0], ends[0]
        if not start < b < e < commit:
            raise RulesError("the managed block is not inside the *filter section before COMMIT")
        del lines[b:e + 1]
        commit -= e + 1 - b
    if present:
        at = commit
        # keep ufw's "don't delete the 'COMMIT' line" comment next to COMMIT
        if at > 0 and lines[at - 1].strip().startswith(COMMIT_COMMENT):
            at -= 1
        lines[at:at] = list(block)
    return nl.join(lines)


# ------------------------------------------------------------ live ruleset

def docker_user_state(docker_user_rules, chain_rules):
    """What DOCKER-USER and our chain hold live, from `iptables -S` of each:
    dict(jump_first, jump_position, ports={port: limit}, other_rules)."""
    rules = [ln for ln in docker_user_rules.splitlines() if ln.startswith("-A DOCKER-USER ")]
    jumps = [i for i, ln in enumerate(rules) if ln.split()[-2:] == ["-j", DOCKER_CHAIN]]
    return {"jump_first": jumps[:1] == [0] and len(jumps) == 1,
            "jump_position": jumps[0] + 1 if jumps else None,
            "ports": iptables_connlimit_rules(chain_rules, DOCKER_CHAIN),
            "other_rules": [ln for i, ln in enumerate(rules) if i not in jumps]}


def firewall_backend(docker_info):
    """Docker's firewall backend from `docker info --format '{{json .}}'`:
    'iptables' (Docker before 28 says nothing: it only has iptables) or
    'nftables' (Docker 29's experimental backend, which has no DOCKER-USER)."""
    backend = (docker_info or {}).get("FirewallBackend") or {}
    return backend.get("Driver") or "iptables"


DOCKER_NFT_TABLE = "homelab-edge-docker"


def docker_nft_rules(ports, limit, ipv6=True):
    """The nftables rules that do under Docker's nftables firewall backend what
    DOCKER-USER does under its iptables one: for each published port, at most
    `limit` connections per client address (IPv4 /32, IPv6 /128), the rest
    reset. A table of its own on the forward hook just before Docker's
    (priority filter - 1, as Docker's docs say); only connections Docker
    DNATed (ct status dnat: a published port, not traffic this host routes),
    their port as the client sent it (ct original proto-dst). Text for
    `nft -f`, which replaces the table when loaded again; this module does
    not load it (see the module's notes)."""
    lines = ["table inet %s {}" % DOCKER_NFT_TABLE, "delete table inet %s" % DOCKER_NFT_TABLE,
             "table inet %s {" % DOCKER_NFT_TABLE]
    families = [("ipv4_addr", "ip"), ("ipv6_addr", "ip6")] if ipv6 else [("ipv4_addr", "ip")]
    for port in sorted(ports):
        for addr_type, fam in families:
            lines += ["  set conn%d_%s { type %s; size 65535; flags dynamic; }" % (port, fam, addr_type)]
    lines += ["  chain forward {", "    type filter hook forward priority filter - 1; policy accept;"]
    for port in sorted(ports):
        for dummy, fam in families:
            lines += ["    meta nfproto %s meta l4proto tcp ct status dnat ct original proto-dst %d ct state new "
                      "add @conn%d_%s { %s saddr ct count over %d } reject with tcp reset"
                      % ("ipv4" if fam == "ip" else "ipv6", port, port, fam, fam, limit)]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


_NFT_RULE = re.compile(
    r"tcp dport (?P<port>\d+)\b.*?xt match \"?connlimit\"?.*?reject with tcp reset"
    r"|tcp dport (?P<port2>\d+)\b.*?ct count over (?P<count>\d+).*?reject with tcp reset")


def nft_connlimit_ports(ruleset, family):
    """Ports with a connlimit reject in ufw's input chain of `nft list ruleset`.

    Accepts the compat rendering (`xt match connlimit`, quoted or not) and the
    native one (`ct count over N`)."""
    table = "ip" if family == 4 else "ip6"
    chain = FAMILIES[family]["chain"]
    ports = set()
    cur_table = cur_chain = None
    for line in ruleset.splitlines():
        s = line.strip()
        m = re.match(r"table (\S+) (\S+) \{", s)
        if m:
            cur_table, cur_chain = (m.group(1), m.group(2)), None
            continue
        m = re.match(r"chain (\S+) \{", s)
        if m:
            cur_chain = m.group(1).strip('"')
            continue
        if cur_table != (table, "filter") or cur_chain != chain:
            continue
        r = _NFT_RULE.search(s)
        if r:
            ports.add(int(r.group("port") or r.group("port2")))
    return ports


def iptables_connlimit_rules(save_output, chain, mask=None):
    """{port: limit} from `iptables -S` lines of `chain`: per-source limits that reset. With `mask` (32, 128),
    only rules that count per source address with that prefix: a rule with --connlimit-mask 0 (one count for
    every client together) or --connlimit-daddr limits something else and is not ours."""
    found = {}
    for line in save_output.splitlines():
        if not line.startswith("-A %s " % chain) or "connlimit" not in line:
            continue
        port = re.search(r"--(?:dport|ctorigdstport) (\d+)", line)
        above = re.search(r"--connlimit-above (\d+)", line)
        if not (port and above and "tcp-reset" in line):
            continue
        if mask is not None:
            has = re.search(r"--connlimit-mask (\d+)", line)
            if not has or int(has.group(1)) != mask or "--connlimit-daddr" in line:
                continue
        found[int(port.group(1))] = int(above.group(1))
    return found


def docker_published_tcp_ports(containers):
    """Host TCP ports published by running containers.

    `containers` is what `docker inspect` returns (a list of dicts)."""
    ports = {}
    for c in containers:
        if not c.get("State", {}).get("Running"):
            continue
        bindings = (c.get("NetworkSettings") or {}).get("Ports") or {}
        for spec, hosts in bindings.items():
            if not spec.endswith("/tcp") or not hosts:
                continue
            for h in hosts:
                if h.get("HostPort", "").isdigit():
                    ports.setdefault(int(h["HostPort"]), set()).add(c.get("Name", "").lstrip("/"))
    return dict((p, sorted(n)) for p, n in ports.items())
