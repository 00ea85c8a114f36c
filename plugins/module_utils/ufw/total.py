# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bounds beside the per-address limit: pure text logic.

The per-address limit (connlimit.py) holds one client; a flood spread over
many addresses passes it untouched. Two more rules per managed port bound what
all sources bring in together:

- a rate bound on new connections: hashlimit without a mode is one token
  bucket for every source (`--hashlimit-above R/sec --hashlimit-burst B`),
  over it REJECT with a TCP reset. An "above" match that refuses, never an
  "up to" match that accepts: an ACCEPT would let the excess fall through to
  ufw's user rules, which allow the port anyway.
- a total: connlimit with mask 0 counts every connection the rule let through
  under one key (xt_connlimit.c), over it REJECT with a TCP reset.

Both only see NEW connections (the conntrack match, and ufw accepts
ESTABLISHED ones earlier): the total's walk over its list (O(counted)) runs
once per new connection, not per packet. Order in the chain: per-address,
rate, total - a connection one address is not allowed, or that comes faster
than the rate, never joins the total's list.

What a SYN flood can hold: every new connection the rate lets through may sit
half-open (SYN_RECV) for nf_conntrack_tcp_timeout_syn_recv seconds, counted by
the total meanwhile. burst + rate x that timeout must stay below the total,
or a SYN flood alone keeps the total full for everyone (validate()).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

TAG = "homelab.edge.ufw_connlimit"
# xt_hashlimit names are at most 15 characters; one bucket per port and family
RATE_NAME = "edge-rate-%d"
SYN_RECV_SYSCTL = "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_syn_recv"
SYN_RECV_DEFAULT = 60  # the kernel's default (nf_conntrack-sysctl.rst)
# socket states a connlimit count holds (conntrack's, as ss names them): all but TIME-WAIT and CLOSE
COUNTED_STATES = ("ESTAB", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "CLOSE-WAIT", "LAST-ACK", "CLOSING")


def _int(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def half_open(rate, burst, syn_recv_timeout):
    """The half-open connections a SYN flood at the rate bound can hold at once: burst + rate x timeout."""
    return burst + rate * syn_recv_timeout


def validate(total, rate, burst, limit, syn_recv_timeout=SYN_RECV_DEFAULT):
    """Problems with the bounds asked (empty when fine). 0 turns a bound off."""
    problems = []
    if not _int(total, 0):
        problems.append("total must be 0 (no total bound) or a positive number of connections, got %r" % (total,))
    if not _int(rate, 0):
        problems.append("rate must be 0 (no rate bound) or a positive number of new connections a second, got %r"
                        % (rate,))
    if not _int(burst, 1):
        problems.append("burst must be a positive number of connections, got %r" % (burst,))
    if problems:
        return problems
    if total and _int(limit, 1) and total <= limit:
        problems.append("total (%d) is not above the per-address limit (%d): one address alone could fill it; "
                        "raise total or lower limit" % (total, limit))
    if total and rate and half_open(rate, burst, syn_recv_timeout) >= total:
        problems.append(
            "a SYN flood at the rate bound holds up to burst + rate x syn_recv timeout = %d + %d x %d s = %d half-open "
            "connections, not below the total (%d): it alone could keep the total full for everyone. Lower rate or "
            "burst, raise total, or shorten net.netfilter.nf_conntrack_tcp_timeout_syn_recv"
            % (burst, rate, syn_recv_timeout, half_open(rate, burst, syn_recv_timeout), total))
    return problems


def _match(port, docker):
    if docker:
        return "-p tcp -m conntrack --ctstate NEW --ctorigdstport %d" % port
    return "-p tcp --dport %d -m conntrack --ctstate NEW" % port


def total_rule(chain, port, total, docker=False):
    """At most `total` connections to the port from all sources together (connlimit, mask 0)."""
    return ("-A %s %s -m connlimit --connlimit-above %d --connlimit-mask 0 -m comment --comment %s "
            "-j REJECT --reject-with tcp-reset" % (chain, _match(port, docker), total, TAG))


def expire_ms(rate, burst):
    """How long the bucket's entry must outlive its last packet: the time it takes to refill from empty. iptables
    otherwise sets about one token's time (measured with iptables 1.8.9: 1 s at 4/sec, /proc/net/ipt_hashlimit), and an
    expired entry comes back with a full bucket: a flood that pauses a second would get the whole burst again."""
    return max(1000, -(-1000 * burst // rate))


def rate_rule(chain, port, rate, burst, docker=False):
    """At most `rate` new connections a second to the port from all sources together (hashlimit without a
    mode: one bucket of `burst`, refilled at `rate` and no sooner); the excess is refused, never accepted."""
    return ("-A %s %s -m hashlimit --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-name %s "
            "--hashlimit-htable-expire %d -m comment --comment %s -j REJECT --reject-with tcp-reset"
            % (chain, _match(port, docker), rate, burst, RATE_NAME % port, expire_ms(rate, burst), TAG))


def bound_rules(chain, port, bounds, docker=False):
    """The lines that follow a port's per-address rule: the rate bound, then the total (those asked)."""
    bounds = bounds or {}
    out = []
    if bounds.get("rate"):
        out.append(rate_rule(chain, port, bounds["rate"], bounds.get("burst") or 1, docker))
    if bounds.get("total"):
        out.append(total_rule(chain, port, bounds["total"], docker))
    return out


def nft_bound_rules(match, port, bounds):
    """The same bounds as nft statements for the table handed over under Docker's nftables backend: one rule-level
    `limit` (one bucket) and one rule-level `ct count` (one count, IPv4 and IPv6 together in an inet table)."""
    bounds = bounds or {}
    out = []
    if bounds.get("rate"):
        out.append("%s limit rate over %d/second burst %d packets reject with tcp reset"
                   % (match, bounds["rate"], bounds.get("burst") or 1))
    if bounds.get("total"):
        out.append("%s ct count over %d reject with tcp reset" % (match, bounds["total"]))
    return out


# ------------------------------------------------------------ read back

_PORT = re.compile(r"--(?:dport|ctorigdstport) (\d+)")


def live_bounds(save_output, chain):
    """{port: {"total": N, "rate": R, "burst": B}} of the module's bounds (its comment) in `iptables -S CHAIN`; a
    bound not live is absent from its port's dict."""
    found = {}
    for line in save_output.splitlines():
        if not line.startswith("-A %s " % chain) or TAG not in line or "tcp-reset" not in line:
            continue
        port = _PORT.search(line)
        if not port:
            continue
        got = found.setdefault(int(port.group(1)), {})
        mask = re.search(r"--connlimit-mask (\d+)", line)
        above = re.search(r"--connlimit-above (\d+)", line)
        if mask and above and int(mask.group(1)) == 0:
            got["total"] = int(above.group(1))
        rate = re.search(r"--hashlimit-above (\d+)/sec(?:ond)?", line)
        if rate and "--hashlimit-mode" not in line:
            got["rate"] = int(rate.group(1))
            burst = re.search(r"--hashlimit-burst (\d+)", line)
            got["burst"] = int(burst.group(1)) if burst else 5
    return dict((p, b) for p, b in found.items() if b)


def bucket_path(family, port):
    """Where the kernel shows the rate bound's bucket of a port (xt_hashlimit's proc file, one per name and family)."""
    return "/proc/net/%s_hashlimit/%s" % ("ipt" if family == 4 else "ip6t", RATE_NAME % port)


def bucket(proc_text, burst):
    """{"tokens": n, "size": burst, "full": bool}: what the rate bound's bucket holds now, from its proc file (`bucket_path`). The
    kernel recomputes an entry as it prints it (expires, addresses, credit, credit cap, cost per connection); a bound
    without a mode has one entry, and none once it expired - a full bucket (its expiry is the time to refill). None
    when the text is not that shape."""
    lines = [ln.split() for ln in (proc_text or "").splitlines() if ln.strip()]
    if not lines:
        return {"tokens": burst, "size": burst, "full": True}
    f = lines[0]
    if len(f) < 5 or not all(x.isdigit() for x in f[2:5]) or int(f[4]) <= 0:
        return None
    credit, cap, cost = int(f[2]), int(f[3]), int(f[4])
    return {"tokens": min(credit, cap) // cost, "size": cap // cost, "full": credit >= cap}


def bounds_live(asked, live, ports):
    """The ports whose bounds are not live as asked ({"total", "rate", "burst"}; 0 = not asked): a list."""
    missing = []
    for port in ports:
        have = live.get(port) or {}
        for key in ("total", "rate"):
            if asked.get(key) and have.get(key) != asked[key]:
                missing.append(port)
                break
        else:
            if asked.get("rate") and have.get("burst") != asked.get("burst"):
                missing.append(port)
    return missing


# one line of `iptables -L CHAIN -v -x -n`: the packets a REJECT rule refused, its port and what it bounds
_COUNTED = re.compile(r"^\s*(\d+)\s+\d+\s+REJECT\s+.*?(?:dpt:(\d+)|ctorigdstport (\d+))(?P<rest>.*)$")


def counters(iptables_lvxn):
    """{port: {"address": n, "rate": n, "total": n}}: the new connections each bound of a port refused, from
    `iptables -L CHAIN -v -x -n` (`#conn src/32 > N`: per address; `#conn src/0 > N`: the total; `limit: above`
    without a mode: the rate)."""
    out = {}
    for line in iptables_lvxn.splitlines():
        m = _COUNTED.search(line)
        if not m:
            continue
        rest = m.group("rest")
        conn = re.search(r"#conn (?:src|dst)/(\d+) > \d+", rest)
        if conn:
            kind = "total" if int(conn.group(1)) == 0 else "address"
        elif re.search(r"limit: above \S+", rest) and " mode " not in rest:
            kind = "rate"
        else:
            continue
        port = int(m.group(2) or m.group(3))
        per = out.setdefault(port, {"address": 0, "rate": 0, "total": 0})
        per[kind] += int(m.group(1))
    return out


def counted_connections(ss_tan, ports):
    """{port: connections in the states a connlimit count holds} on the local `ports`, from `ss -Htan` (State
    Recv-Q Send-Q Local Peer) in the namespace that terminates them. What the total counts, as the sockets show it."""
    out = dict((p, 0) for p in ports)
    for line in ss_tan.splitlines():
        cols = line.split()
        if len(cols) < 4 or cols[0] not in COUNTED_STATES:
            continue
        port = cols[3].rsplit(":", 1)[-1]
        if port.isdigit() and int(port) in out:
            out[int(port)] += 1
    return out


# ------------------------------------------------------------ the user's own

_BOUND_SHAPE = re.compile(
    r"^-A (?P<chain>\S+) -p tcp(?: -m tcp)? --dport (?P<port>\d+)"
    r"(?: -m (?:conntrack --ctstate|state --state) NEW)?"
    r"(?: -m connlimit --connlimit-above (?P<total>\d+) --connlimit-mask 0(?: --connlimit-saddr)?"
    r"| -m hashlimit --hashlimit-above (?P<rate>\d+)/s(?:ec(?:ond)?)?(?: --hashlimit-burst \d+)?"
    r"(?: --hashlimit-name \S+)?)"
    r" -j (?:REJECT(?: --reject-with tcp-reset)?|DROP)$")


def bound_shaped(rule_text, chain):
    """"total" or "rate" for a user's own bound of the module's shape, which the managed block may take over when it
    writes that bound itself: in ufw's before-input chain `chain`, one TCP port, a connlimit with mask 0 (a total) or
    a hashlimit "above" without a mode (a rate), refused with REJECT or DROP - and nothing else. None otherwise."""
    m = _BOUND_SHAPE.match(" ".join(rule_text.split()))
    if not m or m.group("chain") != chain:
        return None
    return "total" if m.group("total") else "rate"
