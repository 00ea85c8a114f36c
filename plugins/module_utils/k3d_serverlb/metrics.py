# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: the keeper's metrics, in Prometheus's text format
for node_exporter's textfile collector (the load balancer itself has none).
Pure: entries as k3d_signals.signals() returns them in, text out.
The alert rules over them: roles/k3d_serverlb/templates/prometheus-rules.yml.j2."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

FILE = "homelab_edge_k3d.prom"
# The k3d cluster's label: not "cluster", which multi-cluster Prometheus setups (Thanos, Mimir, kube-prometheus'
# external labels) set for the Prometheus's own cluster and would overwrite or clash with.
CLUSTER = "k3d_cluster"
STATES = ("fixed", "capped", "not_fixed")
# name: (type, help); one line per load balancer each (labels lb, k3d_cluster)
GAUGES = (
    ("homelab_edge_k3d_lb_connections", "connections",
     "Connections of the busiest nginx worker: its open files plus its UDP sessions (nginx counts each twice)."),
    ("homelab_edge_k3d_lb_worker_connections", "worker_connections",
     "worker_connections as nginx runs it, per worker: the connections HTTPS, the API and DNS share."),
    ("homelab_edge_k3d_lb_open_files", "open_files",
     "Files all nginx workers hold open."),
    ("homelab_edge_k3d_lb_udp_sessions", "udp_sessions",
     "UDP (DNS) sessions open now: nginx's connected UDP sockets toward the servers."),
    ("homelab_edge_k3d_lb_udp_session_budget", "udp_session_budget",
     "UDP sessions the fix allows at once (absent: no budget, k3d's stock template)."),
)


def _labels(**kw):
    return "{%s}" % ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"'))
                             for k, v in sorted(kw.items()))


def add_not_enough(totals, entry, held=None):
    """The keeper's running count of "worker_connections are not enough"
    lines, by load balancer and server (a counter: it only grows). Every
    key goes out at 0 first: a series whose first sample is above 0 shows
    increase() no rise. So each key the load balancer has is written from
    0, and the lines of a key seen for the first time wait in `held` (the
    keeper's, kept between writes) for the next write."""
    held = {} if held is None else held
    counts = entry.get("not_enough") or {}
    lb = (entry["name"], entry.get("cluster") or "")
    waiting = set(k[2] for k in held if k[:2] == lb)
    for server in sorted(set(entry.get("not_enough_keys") or []) | set(counts) | waiting):
        key = lb + (server,)
        if key not in totals:
            totals[key] = 0
            held[key] = held.get(key, 0) + counts.get(server, 0)
        else:
            totals[key] += held.pop(key, 0) + counts.get(server, 0)
    return totals


_TOTAL = re.compile(r'^homelab_edge_k3d_lb_not_enough_total\{(.*)\} (\d+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def read_totals(text):
    """The not-enough counts of the textfile an earlier keeper wrote: a restarted keeper continues them (a
    counter that fell back to 0 would hide the lines of the restart's first window)."""
    totals = {}
    for line in (text or "").splitlines():
        m = _TOTAL.match(line)
        if m:
            labels = dict((k, re.sub(r"\\(.)", r"\1", v)) for k, v in _LABEL.findall(m.group(1)))
            # a file written before the label was k3d_cluster names it cluster
            cluster = labels.get(CLUSTER, labels.get("cluster", ""))
            totals[(labels.get("lb", ""), cluster, labels.get("server", ""))] = int(m.group(2))
    return totals


def text(entries, not_enough_totals, now):
    """The textfile: every load balancer's state (one of STATES is 1),
    gauges, the not-enough counter, and when the keeper wrote it."""
    out = ["# HELP homelab_edge_k3d_lb_state The load balancer's state: 1 for the one it is in (%s)."
           % ", ".join(STATES), "# TYPE homelab_edge_k3d_lb_state gauge"]
    for e in entries:
        for state in STATES:
            labels = _labels(lb=e["name"], state=state, **{CLUSTER: e.get("cluster") or ""})
            out.append("homelab_edge_k3d_lb_state%s %d" % (labels, e.get("state") == state))
    for name, key, helptext in GAUGES:
        out += ["# HELP %s %s" % (name, helptext), "# TYPE %s gauge" % name]
        for e in entries:
            if e.get(key) is not None:
                out.append("%s%s %d" % (name, _labels(lb=e["name"], **{CLUSTER: e.get("cluster") or ""}), e[key]))
    out += ["# HELP homelab_edge_k3d_lb_not_enough_total 'worker_connections are not enough' lines in the load "
            "balancer's log since the keeper started, by server.",
            "# TYPE homelab_edge_k3d_lb_not_enough_total counter"]
    for (lb, cluster, server), count in sorted(not_enough_totals.items()):
        out.append("homelab_edge_k3d_lb_not_enough_total%s %d" % (_labels(lb=lb, server=server, **{CLUSTER: cluster}),
                                                                  count))
    out += ["# HELP homelab_edge_k3d_keeper_last_write_timestamp_seconds When the keeper last wrote these metrics.",
            "# TYPE homelab_edge_k3d_keeper_last_write_timestamp_seconds gauge",
            "homelab_edge_k3d_keeper_last_write_timestamp_seconds %d" % now]
    return "\n".join(out) + "\n"
