# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: what a running load balancer shows now, for
homelab.edge.diagnose (its log's "not enough" lines, the files its workers
hold, whether its DNS upstreams answer)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from . import capacity as k3d_capacity
from . import config as k3d_config
from . import container as k3d_container
from . import fix as k3d_fix


_NOT_ENOUGH = re.compile(r"worker_connections are not enough.*?(?P<proto>udp|tcp) client: [^,]+, server: "
                         r"[^,]*?:(?P<port>\d+)")
# the server of a "not enough" line that does not name one
UNNAMED = k3d_config.UNNAMED
_EXCEED = re.compile(r"(\d+) worker_connections exceed open file resource limit: (\d+)")


def log_signals(log_text):
    """From a load balancer's log: "not enough" alerts by protocol and
    server port ("unnamed" where nginx's line names none: a UDP datagram
    no connection was left for), and the open-file warning nginx gives at
    start."""
    alerts, exceed = {}, None
    for line in log_text.splitlines():
        m = _NOT_ENOUGH.search(line)
        if m or "worker_connections are not enough" in line:
            # a datagram nginx had no connection for is logged without its client and server
            key = "%s %s" % (m.group("proto"), m.group("port")) if m else UNNAMED
            alerts[key] = alerts.get(key, 0) + 1
            continue
        m = _EXCEED.search(line)
        if m:
            exceed = {"worker_connections": int(m.group(1)), "open_file_limit": int(m.group(2))}
    return {"not_enough": alerts, "not_enough_total": sum(alerts.values()), "exceed_open_file_limit": exceed}


# Per current nginx worker (not one of an earlier reload, still draining), a
# line "FILES UDP": the files it holds open, and how many of them are UDP
# sessions toward the servers (connected UDP sockets; a listener's remote
# address is 0). nginx counts a UDP session twice (its client side shares the
# listening socket), so a worker's connections are FILES + UDP.
_WORKER_LOAD = ("t=/tmp/.homelab-edge-inodes; for p in $(pgrep -f 'nginx: worker process'); do "
                "grep -q 'shutting down' /proc/$p/cmdline 2>/dev/null && continue; "
                "ls -l /proc/$p/fd 2>/dev/null | sed -n 's/.*socket:\\[\\([0-9]*\\)\\].*/\\1/p' > $t; "
                "u=$(cat /proc/net/udp /proc/net/udp6 2>/dev/null "
                "| awk '$3 ~ /:/ && $3 !~ /^0+:0000$/ {print $10}' | grep -cxFf $t); "
                "echo \"$(ls /proc/$p/fd 2>/dev/null | wc -l) $u\"; done; rm -f $t")


def worker_load(output):
    """From _WORKER_LOAD's lines: (open files of all workers, UDP sessions of
    all workers, connections of the busiest worker - what worker_connections
    limits, per worker)."""
    rows = [tuple(int(x) for x in line.split()) for line in output.splitlines()
            if len(line.split()) == 2 and all(x.isdigit() for x in line.split())]
    if not rows:
        return None, None, None
    return sum(f for f, u in rows), sum(u for f, u in rows), max(f + u for f, u in rows)


def worker_load_of(container):
    """worker_load() of a running load balancer, read now."""
    rc, out = k3d_container._exec(container, ["sh", "-c", _WORKER_LOAD])[:2]
    return worker_load(out if rc == 0 else "")


def signals(container, want, since, dns_probe=None, until=None):
    """What a running load balancer shows now: its config as rendered, what
    it lacks of the fix, its log since `since` (epoch s; up to `until`, so
    that back-to-back windows count no line twice), the files its workers
    hold open, and (dns_probe(address, port) -> seconds or None) whether each
    UDP upstream answers."""
    state = k3d_container.read_state(container)
    want, cap = k3d_capacity.capped_want(want, state["hard_limit"])
    new_template, facts, reasons = k3d_fix.plan(state, want)
    entry = k3d_config.report(container.name, (container.labels or {}).get(k3d_container.CLUSTER_LABEL), facts,
                              max(state["worker_limits"] or [0]) or None, want)
    code = "not_fixed" if reasons else "capped" if cap else "fixed"
    entry.update(state=code, state_text=k3d_fix.state_text(code, cap), open_file_cap=cap)
    raw = (container.logs(since=since, until=until) if until else container.logs(since=since)).decode("utf-8", "replace")
    entry.update(log_signals(raw), drift=reasons, template_patched=new_template == state["template"])
    entry["open_files"], entry["udp_sessions"], entry["connections"] = worker_load_of(container)
    entry["dns_upstreams"] = []
    if dns_probe:
        for key in k3d_config.udp_ports(k3d_config.parse_values(state["values"])):
            port = int(key.split(".")[0])
            for node in k3d_config.parse_values(state["values"])["ports"][key]:
                entry["dns_upstreams"].append({"node": node, "port": port, "answer_s": dns_probe(node, port)})
    return entry
