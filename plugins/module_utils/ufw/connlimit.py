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

from . import total as ufw_total

BEGIN = "# BEGIN homelab.edge.ufw_connlimit (managed by Ansible; edit the inventory, not this block)"
END = "# END homelab.edge.ufw_connlimit"
COMMIT_COMMENT = "# don't delete the 'COMMIT' line"
# the comment every rule of the module carries (iptables' comment match)
TAG = "homelab.edge.ufw_connlimit"
# a line of the user's that the managed block replaced, kept inside the block
KEPT = "#<| "
# the comment seed 001's snippet puts above its rules
SEED_COMMENT = re.compile(r"^#\s*simultaneous connection limit", re.I)
DOCKER_CHAIN = "homelab-edge-docker"
HOOK = "homelab-edge.init"
AFTER_INIT = "after.init"
# Stock after.init (Debian/Ubuntu): comments and a case statement that does nothing.
_STOCK_AFTER_INIT = ['set -e', 'case "$1" in', 'start)', ';;', 'stop)', ';;', 'status)', ';;', 'flush-all)', ';;',
                     '*)', "echo \"'$1' not supported\"", 'echo "Usage: after.init {start|stop|flush-all|status}"',
                     ';;', 'esac']

FAMILIES = {
    4: {"chain": "ufw-before-input", "mask": 32, "file": "before.rules", "docker_file": "homelab-edge-docker.rules",
        "restore": "iptables-restore", "save": "iptables", "others": ("after.rules", "user.rules")},
    6: {"chain": "ufw6-before-input", "mask": 128, "file": "before6.rules", "docker_file": "homelab-edge-docker6.rules",
        "restore": "ip6tables-restore", "save": "ip6tables", "others": ("after6.rules", "user6.rules")},
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
    rules match the original destination port (before Docker's DNAT). Each
    carries the module's comment, which is how the live read-back tells the
    module's rules from anyone else's."""
    if docker:
        match = "-p tcp -m conntrack --ctstate NEW --ctorigdstport %d" % port
    else:
        match = "-p tcp --dport %d -m conntrack --ctstate NEW" % port
    return ("-A %s %s -m connlimit --connlimit-above %d --connlimit-mask %d -m comment --comment %s "
            "-j REJECT --reject-with tcp-reset" % (chain, match, limit, mask, TAG))


def port_rules(chain, port, limit, mask, bounds=None, docker=False):
    """A port's rules in order: per address, then the bounds on all sources together (total.py)."""
    return [rule(chain, port, limit, mask, docker)] + ufw_total.bound_rules(chain, port, bounds, docker)


def render_block(family, ports, limit, kept=(), bounds=None):
    """The marked block of before.rules for ports the host serves itself;
    `kept`: the user's lines the block replaced, kept inside it as comments
    (KEPT prefix) until state=absent puts them back; `bounds`: {total, rate,
    burst} on all sources together (total.py; None or 0: none)."""
    f = FAMILIES[family]
    return ([BEGIN] + [KEPT + ln for ln in kept]
            + [r for port in ports for r in port_rules(f["chain"], port, limit, f["mask"], bounds)] + [END])


def docker_chain_rules(family, ports, limit, bounds=None):
    """iptables-restore input for our chain (it flushes our chain only)."""
    f = FAMILIES[family]
    lines = ["# homelab.edge.ufw_connlimit: per-source limit for ports Docker publishes (managed by Ansible)",
             "*filter", ":%s - [0:0]" % DOCKER_CHAIN]
    lines += [r for port in ports for r in port_rules(DOCKER_CHAIN, port, limit, f["mask"], bounds, docker=True)]
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


def is_stock_after_init(text, name=AFTER_INIT):
    """after.init (or before.init, `name`) as the package ships it: nothing but comments and a no-op case. Blocks
    of this collection's (# BEGIN homelab.edge... to # END homelab.edge...) are not the user's commands."""
    body, ours = [], False
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith("# BEGIN homelab.edge"):
            ours = True
        elif ln.startswith("# END homelab.edge"):
            ours = False
        elif ln and not ln.startswith("#") and not ours:
            body.append(ln)
    return body == [x.replace(AFTER_INIT, name) for x in _STOCK_AFTER_INIT] or not body


def apply_init_block(text, block, present=True, begin=BEGIN, end=END, name=AFTER_INIT):
    """One of ufw's init scripts (after.init, before.init: `name`) with a managed block - lines `block`, from the
    line `begin` to the line `end` - placed (or removed): after the shebang and the leading comments, before any
    command of the user's. Everything else stays byte for byte. A missing file (None) becomes a script with only
    the block. The block of ufw_connlimit by default; ufw_revert's boot hook passes its own markers."""
    if text is None:
        return "#!/bin/sh\n" + "\n".join(block) + "\n" if present else None
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    begins = [i for i, ln in enumerate(lines) if ln.strip() == begin]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == end]
    if len(begins) != len(ends) or len(begins) > 1:
        raise RulesError("%s: the managed block's markers are damaged (%d begin, %d end)"
                         % (name, len(begins), len(ends)))
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


def _block_span(lines):
    """(begin, end) line indexes of the managed block, or None."""
    begins = [i for i, ln in enumerate(lines) if ln.strip() == BEGIN]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if len(begins) != len(ends) or len(begins) > 1 or (begins and begins[0] > ends[0]):
        raise RulesError("the managed block's markers are damaged (%d begin, %d end)" % (len(begins), len(ends)))
    return (begins[0], ends[0]) if begins else None


def kept_lines(text):
    """The user's lines the managed block of `text` keeps (KEPT lines), in order."""
    lines = text.split("\r\n" if "\r\n" in text else "\n")
    span = _block_span(lines)
    return [ln[len(KEPT):] for ln in lines[span[0] + 1:span[1]] if ln.startswith(KEPT)] if span else []


def apply_block(text, block, present=True):
    """Return the file with the managed block placed (or removed; the user's
    lines it kept go back in its place).

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
    span = _block_span(lines)
    kept = []
    if span:
        b, e = span
        if not start < b < e < commit:
            raise RulesError("the managed block is not inside the *filter section before COMMIT")
        kept = [ln[len(KEPT):] for ln in lines[b + 1:e] if ln.startswith(KEPT)]
        del lines[b:e + 1]
        commit -= e + 1 - b
        if not present:
            # the user's lines the block replaced go back where the block stood
            lines[b:b] = kept
    if present:
        at = commit
        # keep ufw's "don't delete the 'COMMIT' line" comment next to COMMIT
        if at > 0 and lines[at - 1].strip().startswith(COMMIT_COMMENT):
            at -= 1
        lines[at:at] = list(block)
    return nl.join(lines)


# ------------------------------------------------------------ other limits
# What else limits connections on a managed port: the user's own rules (seed
# 001's snippet among them) in ufw's files, in chains others load, or native
# nft rules. The module adopts none of them silently: the seed's shape is
# replaced by the block (kept inside it), anything else is refused.

_PORT_OPTS = re.compile(r"(!\s+)?(?:--dports?|--destination-ports?|--ctorigdstport|--ctorigdst-port)\s+(!\s+)?(\S+)")


def _ports(spec):
    """'443', '80,443', '8000:8100' -> a list of (low, high)."""
    out = []
    for part in spec.split(","):
        low, dummy, high = part.partition(":")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        out.append((int(low), int(high or low)))
    return out


def parse_limit(line):
    """A rule that limits connections (connlimit or hashlimit), from an
    iptables-restore file or `iptables -S`: dict(chain, kind, ranges, above,
    mask, daddr, target, reset, ours, rule), or None. `ranges` None: every
    port (no port match); a negated port match counts as every port too."""
    s = line.strip()
    words = s.split()
    if len(words) < 2 or words[0] not in ("-A", "-I") or not re.search(r"\b(connlimit|hashlimit)\b", s):
        return None
    proto = re.search(r"(?:-p|--protocol)\s+(!\s+)?(\S+)", s)
    if proto and not proto.group(1) and proto.group(2).lower() not in ("tcp", "6", "all"):
        return None  # a UDP (or other) limit: not on a TCP port
    ranges = None
    m = _PORT_OPTS.search(s)
    if m and not (m.group(1) or m.group(2)):
        ranges = _ports(m.group(3))
    above = re.search(r"--connlimit-(above|upto)\s+(\d+)", s)
    mask = re.search(r"--connlimit-mask\s+(\d+)", s)
    target = re.search(r"(?:-j|--jump)\s+(\S+)", s)
    return {"chain": words[1], "kind": "connlimit" if "connlimit" in s else "hashlimit", "ranges": ranges,
            "above": int(above.group(2)) if above and above.group(1) == "above" else None,
            "mask": int(mask.group(1)) if mask else None, "daddr": "--connlimit-daddr" in s,
            "target": target.group(1) if target else None, "reset": "tcp-reset" in s, "ours": TAG in s,
            "rule": s}


def _in_ranges(ports, ranges):
    return sorted(p for p in ports if any(lo <= p <= hi for lo, hi in ranges))


def covered(limit, ports):
    """The ports of `ports` a parsed limit applies to."""
    return sorted(ports) if limit["ranges"] is None else _in_ranges(ports, limit["ranges"])


# the tokens of seed 001's snippet and of rules of the same shape (one port, a per-address limit that refuses)
_SEED_SHAPE = re.compile(
    r"^-A (?P<chain>\S+) -p tcp(?: -m tcp)? --dport (?P<port>\d+)"
    r"(?: -m (?:conntrack --ctstate|state --state) NEW)?"
    r" -m connlimit --connlimit-above (?P<above>\d+)(?: --connlimit-mask (?P<mask>\d+))?(?: --connlimit-saddr)?"
    r" -j (?:REJECT(?: --reject-with tcp-reset)?|DROP)$")


def seed_shaped(rule_text, family):
    """True for seed 001's rule and rules of its shape: in ufw's before-input chain of the family, one TCP port,
    a per-address connlimit (the family's mask or none), refused with REJECT or DROP - and nothing else."""
    m = _SEED_SHAPE.match(" ".join(rule_text.split()))
    return bool(m and m.group("chain") == FAMILIES[family]["chain"]
                and (m.group("mask") is None or int(m.group("mask")) == FAMILIES[family]["mask"]))


def file_limits(text, ports, family=None, bounds=None):
    """The limits on `ports` in a rules file, outside the managed block: a list of dict(line (1-based), rule,
    ports, seed). `seed` is True for a line the block may replace: seed-shaped for `family` (None: none are,
    the file is not the family's before.rules), or a total or rate bound of the module's shape where `bounds`
    asks for that bound (total.bound_shaped), and inside the *filter section before its COMMIT."""
    lines = text.split("\r\n" if "\r\n" in text else "\n")
    span = _block_span(lines)
    try:
        start, commit = _filter_bounds(lines)
    except RulesError:
        start = commit = None
    found = []
    for i, ln in enumerate(lines):
        if span and span[0] <= i <= span[1]:
            continue
        limit = parse_limit(ln)
        if not limit or not covered(limit, ports):
            continue
        seed = (family is not None and start is not None and start < i < commit
                and (seed_shaped(ln, family) or bool((bounds or {}).get(
                    ufw_total.bound_shaped(ln, FAMILIES[family]["chain"]) or "none"))))
        found.append({"line": i + 1, "rule": ln.strip(), "ports": covered(limit, ports), "seed": bool(seed)})
    return found


def replace_seed_lines(text, found):
    """(text without the seed-shaped lines of `found`, the lines removed): a comment line right above such a line
    that names it (the seed's `# Simultaneous connection limit per IP`) goes with it."""
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    drop = set()
    for f in found:
        if not f["seed"]:
            continue
        i = f["line"] - 1
        drop.add(i)
        if i > 0 and SEED_COMMENT.match(lines[i - 1].strip()):
            drop.add(i - 1)
    removed = [lines[i] for i in sorted(drop)]
    return nl.join(ln for i, ln in enumerate(lines) if i not in drop), removed


def plan_before_rules(text, family, ports, limit, present=True, managed=None, bounds=None):
    """before.rules (before6.rules) as the module leaves it: dict(text, replaced, refused).

    present: the block limits `ports` (and bounds them, `bounds`); the seed's lines (and rules of its shape, and
    total or rate bounds of the module's shape) on any `managed` port (default: `ports`; the ports Docker publishes
    too, whose limit lives elsewhere) move into the block as KEPT lines; any other limit on them is refused
    (`refused` lists them; `text` is then the old text).
    absent: the block goes and the lines it kept come back in its place."""
    if not present:
        return {"text": apply_block(text, [], False), "replaced": [], "refused": []}
    found = file_limits(text, ports if managed is None else managed, family, bounds)
    refused = [f for f in found if not f["seed"]]
    if refused:
        return {"text": text, "replaced": [], "refused": refused}
    rest, removed = replace_seed_lines(text, found)
    block = render_block(family, ports, limit, kept_lines(text) + removed, bounds)
    return {"text": apply_block(rest, block), "replaced": [f for f in found if f["seed"]], "refused": []}


def live_limits(save_output, ports):
    """Every live limit on `ports` from `iptables -S` (all chains): a list of dict(chain, rule, ports, above, ours),
    `above` the per-address count it allows (None when it is not a per-address connlimit that refuses)."""
    found = []
    for line in save_output.splitlines():
        limit = parse_limit(line)
        if not limit or not covered(limit, ports):
            continue
        per_address = (limit["kind"] == "connlimit" and not limit["daddr"]
                       and limit["target"] in ("REJECT", "DROP") and limit["mask"] in (None, 32, 128))
        found.append({"chain": limit["chain"], "rule": limit["rule"], "ports": covered(limit, ports),
                      "above": limit["above"] if per_address else None,
                      "ours": limit["ours"] or limit["chain"] == DOCKER_CHAIN})
    return found


def nft_rules(ruleset):
    """(table (family, name), chain, rule text) for each rule line of `nft list ruleset` inside a chain."""
    table = chain = None
    for line in ruleset.splitlines():
        s = line.strip()
        m = re.match(r"table (\S+) (\S+) \{", s)
        if m:
            table, chain = (m.group(1), m.group(2)), None
            continue
        m = re.match(r"chain (\S+) \{", s)
        if m:
            chain = m.group(1).strip('"')
            continue
        if table is not None and chain is not None:
            yield table, chain, s


_NFT_COUNT = re.compile(r"ct count (?:over )?(\d+)")
_NFT_DPORT = re.compile(r"(?:tcp|th) dport (?:\{([^}]*)\}|(\d+(?:-\d+)?))|ct original proto-dst (\d+)")


def nft_limits(ruleset, ports):
    """Native nft limits on `ports` (`ct count`, in any table; iptables-nft's `xt match` rules are read with
    iptables instead): a list of dict(chain ('family table chain'), rule, ports, above, ours)."""
    found = []
    for table, where, s in nft_rules(ruleset):
        count = _NFT_COUNT.search(s)
        if not count:
            continue
        d = _NFT_DPORT.search(s)
        if d is None:
            hit = sorted(ports)
        else:
            spec = (d.group(1) or d.group(2) or d.group(3)).replace(" ", "").replace("-", ":")
            hit = _in_ranges(ports, _ports(spec) or [])
        if not hit:
            continue
        refuses = "over" in s and ("reject" in s or "drop" in s)
        # a count keyed on the source address (a set element) is per address; a rule-level one counts everyone
        per_address = re.search(r"\bsaddr\b[^{}]*ct count", s) is not None
        found.append({"chain": "%s %s %s" % (table[0], table[1], where), "rule": s, "ports": hit,
                      "above": int(count.group(1)) if refuses and per_address else None,
                      "ours": table[1] == DOCKER_NFT_TABLE})
    return found


def describe(limit):
    """One of the user's limits in plain words: where it is and the rule."""
    if "path" in limit:
        return "%s line %d: %s" % (limit["path"], limit["line"], limit["rule"])
    if limit.get("source") == "nft":
        return "live in nft chain %s: %s" % (limit["chain"], limit["rule"])
    return "live in the %s chain %s: %s" % (limit.get("family", "ipv4"), limit["chain"], limit["rule"])


def effective_words(found, ports):
    """'443: 100, 80: 200' - the smallest per-address limit live on each port, or 'none'."""
    eff = effective_limits(found, ports)
    return ", ".join("%d: %d" % (p, eff[p]) for p in sorted(eff)) or "none"


def effective_limits(found, ports):
    """{port: the smallest per-address limit live on it} (ports with none are left out)."""
    out = {}
    for f in found:
        if f["above"] is None:
            continue
        for p in f["ports"]:
            if p in ports:
                out[p] = min(out.get(p, f["above"]), f["above"])
    return out


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


def docker_nft_rules(ports, limit, ipv6=True, bounds=None):
    """The nftables rules that do under Docker's nftables firewall backend what
    DOCKER-USER does under its iptables one: for each published port, at most
    `limit` connections per client address (IPv4 /32, IPv6 /128), the rest
    reset, and the bounds on all sources together (`bounds`, total.py: one
    limit bucket and one ct count per port, IPv4 and IPv6 together). A table
    of its own on the forward hook just before Docker's
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
        lines += ["    " + r for r in ufw_total.nft_bound_rules(
            "meta l4proto tcp ct status dnat ct original proto-dst %d ct state new" % port, port, bounds)]
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
    for cur_table, cur_chain, s in nft_rules(ruleset):
        if cur_table != (table, "filter") or cur_chain != chain:
            continue
        r = _NFT_RULE.search(s)
        if r:
            ports.add(int(r.group("port") or r.group("port2")))
    return ports


def iptables_connlimit_rules(save_output, chain, mask=None):
    """{port: limit} from `iptables -S` lines of `chain`: per-source limits that reset. With `mask` (32, 128),
    only rules that count per source address with that prefix: a rule with --connlimit-mask 0 (one count for
    every client together) or --connlimit-daddr limits something else and is not ours. Without, a total (mask 0) is
    still left out: it is not a per-source limit."""
    found = {}
    for line in save_output.splitlines():
        if not line.startswith("-A %s " % chain) or "connlimit" not in line:
            continue
        port = re.search(r"--(?:dport|ctorigdstport) (\d+)", line)
        above = re.search(r"--connlimit-above (\d+)", line)
        if not (port and above and "tcp-reset" in line):
            continue
        has = re.search(r"--connlimit-mask (\d+)", line)
        if has and int(has.group(1)) == 0:
            continue
        if mask is not None:
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
