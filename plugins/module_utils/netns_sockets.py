# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A container's own TCP counters, for node_exporter's textfile collector.

TIME_WAIT sockets, orphans, accepts (PassiveOpens) and listen-queue overflows
are kept per network namespace: node_exporter on the host reads the host's
(/proc/net/* of its own namespace) and never sees those of a Traefik on a
Docker bridge network. The host reads a container's through
/proc/PID/net/{sockstat,snmp,netstat}, which name the namespace of PID.
Pure: the files' text in, samples and the textfile out. The writer:
roles/tcp_drain/files/homelab-edge-netns-sockets.py; the alert rules over
these: roles/tcp_drain/templates/prometheus-rules.yml.j2."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

FILE = "homelab_edge_netns.prom"
FILES = ("sockstat", "snmp", "netstat")
# name: (type, help, where it is read: (file, group, field)); one line per container (label container)
METRICS = (
    ("homelab_edge_netns_tcp_time_wait", "gauge", "TCP sockets in TIME_WAIT in the container's network namespace.",
     ("sockstat", "TCP:", "tw")),
    ("homelab_edge_netns_tcp_orphans", "gauge", "Orphaned TCP sockets (closed by their program, not yet by the "
     "kernel) in the container's network namespace.", ("sockstat", "TCP:", "orphan")),
    ("homelab_edge_netns_tcp_established", "gauge", "TCP connections established or in CLOSE_WAIT "
     "(CurrEstab) in the container's network namespace.", ("snmp", "Tcp:", "CurrEstab")),
    ("homelab_edge_netns_tcp_passive_opens_total", "counter", "TCP connections the container accepted "
     "(PassiveOpens); from 0 again when the container is re-created.", ("snmp", "Tcp:", "PassiveOpens")),
    ("homelab_edge_netns_tcp_listen_overflows_total", "counter", "Connections dropped on a full accept queue "
     "(ListenOverflows) in the container's network namespace.", ("netstat", "TcpExt:", "ListenOverflows")),
    ("homelab_edge_netns_tcp_listen_drops_total", "counter", "SYNs dropped at a listening socket, for any reason "
     "(ListenDrops) in the container's network namespace.", ("netstat", "TcpExt:", "ListenDrops")),
)


def parse_sockstat(text):
    """/proc/net/sockstat: {"TCP:": {"inuse": 5, "tw": 0, ...}, ...}."""
    out = {}
    for line in (text or "").splitlines():
        words = line.split()
        if not words:
            continue
        pairs = words[1:]
        out[words[0]] = dict((pairs[i], int(pairs[i + 1])) for i in range(0, len(pairs) - 1, 2)
                             if pairs[i + 1].lstrip("-").isdigit())
    return out


def parse_pairs(text):
    """/proc/net/snmp and /proc/net/netstat: a header line of names, then a
    line of values, for each group: {"Tcp:": {"PassiveOpens": 3, ...}}."""
    out = {}
    lines = [ln.split() for ln in (text or "").splitlines() if ln.strip()]
    for head, values in zip(lines[0::2], lines[1::2]):
        if head[0] != values[0]:
            raise ValueError("a header line of %s is followed by the values of %s" % (head[0], values[0]))
        out[head[0]] = dict((k, int(v)) for k, v in zip(head[1:], values[1:]) if v.lstrip("-").isdigit())
    return out


def sample(texts):
    """{metric name: value} from the three files' text ({"sockstat": ..., "snmp": ..., "netstat": ...}); a
    field the kernel lacks is left out."""
    parsed = {"sockstat": parse_sockstat(texts.get("sockstat")), "snmp": parse_pairs(texts.get("snmp")),
              "netstat": parse_pairs(texts.get("netstat"))}
    out = {}
    for name, dummy, dummy2, (where, group, field) in METRICS:
        value = parsed[where].get(group, {}).get(field)
        if value is not None:
            out[name] = value
    return out


def _label(container):
    return '{container="%s"}' % str(container).replace("\\", "\\\\").replace('"', '\\"')


def text(samples, now):
    """The textfile. `samples`: {container: {metric: value}, or None when it
    is not running (then only homelab_edge_netns_up 0 goes out for it)}."""
    out = ["# HELP homelab_edge_netns_up 1 when the container runs and its namespace's counters were read.",
           "# TYPE homelab_edge_netns_up gauge"]
    out += ["homelab_edge_netns_up%s %d" % (_label(c), samples[c] is not None) for c in sorted(samples)]
    for name, kind, helptext, dummy in METRICS:
        out += ["# HELP %s %s" % (name, helptext), "# TYPE %s %s" % (name, kind)]
        out += ["%s%s %d" % (name, _label(c), samples[c][name]) for c in sorted(samples)
                if samples[c] is not None and name in samples[c]]
    out += ["# HELP homelab_edge_netns_last_write_timestamp_seconds When these counters were last written.",
            "# TYPE homelab_edge_netns_last_write_timestamp_seconds gauge",
            "homelab_edge_netns_last_write_timestamp_seconds %d" % now]
    return "\n".join(out) + "\n"
