# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-source connection limits in ufw's before.rules: pure text logic.

One marked block inside the *filter section, before its COMMIT line. Nothing
else in the file changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

BEGIN = "# BEGIN homelab.edge.ufw_connlimit (managed by Ansible; edit the inventory, not this block)"
END = "# END homelab.edge.ufw_connlimit"
COMMIT_COMMENT = "# don't delete the 'COMMIT' line"

FAMILIES = {
    4: {"chain": "ufw-before-input", "mask": 32, "file": "/etc/ufw/before.rules",
        "restore": "iptables-restore", "save": "iptables"},
    6: {"chain": "ufw6-before-input", "mask": 128, "file": "/etc/ufw/before6.rules",
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


def render_block(family, ports, limit, docker_ports=()):
    f = FAMILIES[family]
    lines = [BEGIN]
    if any(p in docker_ports for p in ports):
        # Docker creates DOCKER-USER when it starts; ufw may load first.
        lines.append(":DOCKER-USER - [0:0]")
    for port in ports:
        if port in docker_ports:
            lines.append(rule("DOCKER-USER", port, limit, f["mask"], docker=True))
        else:
            lines.append(rule(f["chain"], port, limit, f["mask"]))
    lines.append(END)
    return lines


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


def iptables_connlimit_rules(save_output, chain):
    """{port: limit} from `iptables -S` lines of `chain`."""
    found = {}
    for line in save_output.splitlines():
        if not line.startswith("-A %s " % chain) or "connlimit" not in line:
            continue
        port = re.search(r"--(?:dport|ctorigdstport) (\d+)", line)
        above = re.search(r"--connlimit-above (\d+)", line)
        if port and above and "tcp-reset" in line:
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
