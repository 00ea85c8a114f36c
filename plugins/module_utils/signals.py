# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a host's live signals (for homelab.edge.diagnose): pure parsing
of what the kernel, ss, iptables and Docker print."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import re
import time


def cpu_times(stat_text):
    """(user, system, idle, total) jiffies from the first line of /proc/stat."""
    v = [int(x) for x in stat_text.splitlines()[0].split()[1:8]]
    user, nice, system, idle, iowait, irq, softirq = v
    return user + nice, system + irq + softirq, idle + iowait, sum(v)


def cpu_pct(before, after):
    """{user, system} percent between two cpu_times()."""
    total = max(1, after[3] - before[3])
    return {"user": round(100.0 * (after[0] - before[0]) / total, 1),
            "system": round(100.0 * (after[1] - before[1]) / total, 1)}


def socket_states(ss_output):
    """{state: count} from `ss -Htan`."""
    counts = {}
    for line in ss_output.splitlines():
        if line.strip():
            state = line.split()[0]
            counts[state] = counts.get(state, 0) + 1
    return counts


def top_talkers(ss_established, ports, top=5):
    """{port: [(peer address, connections)]} from `ss -Htn state established`
    (columns: Recv-Q Send-Q Local:Port Peer:Port), for the local ports given."""
    per = {}
    for line in ss_established.splitlines():
        cols = line.split()
        if len(cols) < 4:
            continue
        local, peer = cols[2], cols[3]
        port = local.rsplit(":", 1)[-1]
        if not port.isdigit() or int(port) not in ports:
            continue
        address = peer.rsplit(":", 1)[0].strip("[]").replace("::ffff:", "")
        per.setdefault(int(port), {})
        per[int(port)][address] = per[int(port)].get(address, 0) + 1
    return dict((port, sorted(peers.items(), key=lambda kv: -kv[1])[:top]) for port, peers in per.items())


_COUNTER = re.compile(r"^\s*(\d+)\s+\d+\s+REJECT\s+.*?(?:dpt:(\d+)|ctorigdstport (\d+)).*?#conn src/[1-9]\d* > (\d+)")


def connlimit_counters(iptables_lvxn):
    """{port: packets rejected} of the per-address connlimit rules in `iptables -L CHAIN -v -x -n` output (a total,
    `#conn src/0`, is no address's: ufw/total.py counters() reads it)."""
    out = {}
    for line in iptables_lvxn.splitlines():
        m = _COUNTER.search(line)
        if m:
            port = int(m.group(2) or m.group(3))
            out[port] = out.get(port, 0) + int(m.group(1))
    return out


def unhealthy(containers, now):
    """[{name, since_s, failing_streak, last_output}] of the unhealthy ones,
    from `docker inspect` documents; `now` is epoch seconds."""
    out = []
    for c in containers:
        health = (c.get("State") or {}).get("Health") or {}
        if health.get("Status") != "unhealthy":
            continue
        log = health.get("Log") or []
        since = None
        ok = [e for e in log if e.get("ExitCode") == 0]
        first_bad = [e for e in log if e.get("ExitCode") != 0 and (not ok or e["Start"] > ok[-1]["Start"])]
        if first_bad:
            since = _age(first_bad[0].get("Start"), now)
        out.append({"name": c.get("Name", "").lstrip("/"), "since_s": since,
                    "failing_streak": health.get("FailingStreak"),
                    "last_output": (log[-1].get("Output") or "").strip()[:200] if log else ""})
    return out


def _age(stamp, now):
    """Seconds since a Docker timestamp (2026-12-01T08:00:00.123456789Z)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", stamp or "")
    if not m:
        return None
    return round(now - calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")), 1)


def autoheal_log(text):
    """What autoheal did, from its log: restarts tried and failed, and the restarts tried of each container."""
    names = re.findall(r"Container /?(\S+) \(\w+\) found to be unhealthy - Restarting container now", text)
    failed = len(re.findall(r"Restarting container \S+ failed", text))
    by_container = {}
    for name in names:
        by_container[name] = by_container.get(name, 0) + 1
    return {"restarts": len(names), "restart_failures": failed, "by_container": by_container}
