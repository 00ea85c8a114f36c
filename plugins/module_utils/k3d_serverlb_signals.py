# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: what a running load balancer shows now, for
homelab.edge.diagnose (its log's "not enough" lines, the files its workers
hold, whether its DNS upstreams answer)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb_capacity as lb_capacity
    from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb_config as lb_config
    from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb_container as lb_container
    from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb as lb
except ImportError:  # beside the keeper (no collection there): the files sit side by side
    import k3d_serverlb_capacity as lb_capacity  # noqa: F811
    import k3d_serverlb_config as lb_config  # noqa: F811
    import k3d_serverlb_container as lb_container  # noqa: F811
    import k3d_serverlb as lb  # noqa: F811


_NOT_ENOUGH = re.compile(r"worker_connections are not enough.*?(?P<proto>udp|tcp) client: [^,]+, server: "
                         r"[^,]*?:(?P<port>\d+)")
_EXCEED = re.compile(r"(\d+) worker_connections exceed open file resource limit: (\d+)")


def log_signals(log_text):
    """From a load balancer's log: "not enough" alerts by protocol and
    server port, and the open-file warning nginx gives at start."""
    alerts, exceed = {}, None
    for line in log_text.splitlines():
        m = _NOT_ENOUGH.search(line)
        if m:
            key = "%s %s" % (m.group("proto"), m.group("port"))
            alerts[key] = alerts.get(key, 0) + 1
            continue
        m = _EXCEED.search(line)
        if m:
            exceed = {"worker_connections": int(m.group(1)), "open_file_limit": int(m.group(2))}
    return {"not_enough": alerts, "not_enough_total": sum(alerts.values()), "exceed_open_file_limit": exceed}


# the files nginx's workers hold open (each connection is one), and the UDP
# sessions: nginx's connected UDP sockets toward the upstreams (a listener's
# remote address is 0)
_FDS = ("n=0; for p in $(pgrep -f 'nginx: worker process'); do "
        "n=$((n + $(ls /proc/$p/fd 2>/dev/null | wc -l))); done; echo $n; "
        "cat /proc/net/udp /proc/net/udp6 2>/dev/null | awk '$3 ~ /:/ && $3 !~ /^0+:0000$/' | wc -l")


def signals(container, want, since, dns_probe=None):
    """What a running load balancer shows now: its config as rendered, what
    it lacks of the fix, its log since `since` (epoch s), the files its
    workers hold open, and (dns_probe(address, port) -> seconds or None)
    whether each UDP upstream answers."""
    state = lb_container.read_state(container)
    want, cap = lb_capacity.capped_want(want, state["hard_limit"])
    new_template, facts, reasons = lb.plan(state, want)
    entry = lb_config.report(container.name, (container.labels or {}).get(lb_container.CLUSTER_LABEL), facts,
                             max(state["worker_limits"] or [0]) or None)
    code = "not_fixed" if reasons else "capped" if cap else "fixed"
    entry.update(state=code, state_text=lb.state_text(code, cap), open_file_cap=cap)
    raw = container.logs(since=int(since)).decode("utf-8", "replace")
    entry.update(log_signals(raw), drift=reasons, template_patched=new_template == state["template"])
    rc, out = lb_container._exec(container, ["sh", "-c", _FDS])[:2]
    counts = [int(x) if x.isdigit() else None for x in out.split()] if rc == 0 else []
    entry["open_files"], entry["udp_sessions"] = (counts + [None, None])[:2]
    entry["dns_upstreams"] = []
    if dns_probe:
        for key in lb_config.udp_ports(lb_config.parse_values(state["values"])):
            port = int(key.split(".")[0])
            for node in lb_config.parse_values(state["values"])["ports"][key]:
                entry["dns_upstreams"].append({"node": node, "port": port, "answer_s": dns_probe(node, port)})
    return entry
