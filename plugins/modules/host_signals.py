#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_signals
short_description: Read a VPS's or NAS's live signals (for homelab.edge.diagnose)
version_added: "0.1.0"
description:
  - Reads, and changes nothing - load and user/system CPU over O(sample_seconds); conntrack entries; TCP sockets
    by state, in the host's network namespace and in each container of O(containers); the drain sysctls in each
    of those namespaces; Docker containers that are unhealthy and since when; whether autoheal runs, what it did
    in the last O(window) seconds and whether it can restart at all (its Docker socket, or a socket proxy whose
    policy allows restarts); Traefik's answers by status and the address most requests come from, from its access
    log (with O(tunnel_entrypoint), the 429s of the tunnel's total apart); for O(ports), the clients with the most
    connections and how fast the per-address connlimit rules reject, and the bounds on all sources together - the
    new connections the total and the rate bound refused since the rules were loaded and per second in the sample,
    and the connections the total counts now; Docker's published ports and firewall backend.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  containers:
    description: Containers whose own network namespace to read as well (Traefik).
    type: list
    elements: str
    default: []
  traefik:
    description: The Traefik container whose access log to read (JSON, on stdout). Empty reads none.
    type: str
    default: ""
  autoheal:
    description: The autoheal container. Empty skips it.
    type: str
    default: ""
  ports:
    description: TCP ports whose clients and connlimit counters to read (the VPS's front door).
    type: list
    elements: int
    default: []
  tunnel_entrypoint:
    description: The entrypoint of the tunnel's total at Traefik (traefik_inflight's tunnel_total); its 429s are counted apart.
    type: str
    default: ""
    version_added: "2.1.0"
  window:
    description: Seconds of logs to read.
    type: int
    default: 300
  sample_seconds:
    description: Seconds between the two readings of CPU and counters.
    type: float
    default: 2
extends_documentation_fragment:
  - homelab.edge.attributes
  - homelab.edge.attributes.info_module
attributes:
  platform:
    platforms: linux
requirements:
  - Root on the target (nsenter, iptables); ss (iproute2); the docker CLI for anything about containers
"""

EXAMPLES = r"""
- name: The NAS's signals
  homelab.edge.host_signals:
    containers: [traefik]
    traefik: traefik
    autoheal: autoheal
  register: signals
"""

RETURN = r"""
host:
  description: load, cpu (user/system %), conntrack (and conntrack_max, its limit), sockets by state, drain sysctls.
  returned: always
  type: dict
containers:
  description: Per container of O(containers), its sockets by state and drain sysctls.
  returned: always
  type: dict
unhealthy:
  description: Unhealthy containers, since when (seconds) and their last health check output.
  returned: always
  type: list
autoheal:
  description: >-
    running, restarts, restart_failures, by_container (restarts of each), loops (each container restarted 3 times or
    more in the window, with the likely cause), can_restart and why.
  returned: when O(autoheal) is set
  type: dict
traefik:
  description: Answers by status in the window, and the address most requests come from with its share.
  returned: when O(traefik) is set
  type: dict
firewall:
  description: >-
    Top talkers per port, per-address connlimit rejections per second per port, the bounds on all sources together
    (C(bounds) - per port C(total) and C(rate) refused since the rules were loaded, C(total_per_s) and C(rate_per_s) in
    the sample, C(counted) connections now), published ports, Docker's firewall backend.
  returned: when O(ports) is set
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import autoheal
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils import signals
from ansible_collections.homelab.edge.plugins.module_utils.traefik import tunnel as traefik_tunnel
from ansible_collections.homelab.edge.plugins.module_utils.ufw import total as ufw_total
from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import sysctl as tcp_drain_sysctl
from ansible_collections.homelab.edge.plugins.module_utils.host import C_ENV
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.ufw import connlimit as ufw_connlimit


class Host(object):
    def __init__(self, module):
        self.module = module
        self.docker = module.get_bin_path("docker")

    def run(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update=C_ENV)
        return out if rc == 0 else ""

    def logs(self, name, window):
        """A container's log of the last `window` seconds (its stdout and stderr)."""
        if not self.docker:
            return ""
        rc, out, err = self.module.run_command([self.docker, "logs", "--since", "%ds" % window, name], environ_update=C_ENV)
        return out + err if rc == 0 else ""

    def read(self, path, default=""):
        return host.read_text(path, default)

    def inspect(self, names):
        if not self.docker or not names:
            return []
        out = self.run([self.docker, "inspect"] + list(names))
        return json.loads(out) if out.strip().startswith("[") else []

    def pid(self, name):
        found = self.inspect([name])
        return found[0]["State"]["Pid"] if found and found[0]["State"].get("Running") else None

    def in_netns(self, pid, argv):
        return self.run(["nsenter", "-t", str(pid), "-n", "--"] + argv) if pid else ""

    def drain(self, pid=None):
        out = {}
        for key in sorted(tcp_drain_sysctl.KEYS):
            text = self.in_netns(pid, ["sysctl", "-n", key]) if pid else self.read("/proc/sys/" + key.replace(".", "/"))
            out[key] = int(text.strip()) if text.strip().isdigit() else None
        return out


def host_part(h, p, before_stat):
    after_stat = h.read("/proc/stat")
    conntrack = h.read("/proc/sys/net/netfilter/nf_conntrack_count").strip()
    conntrack_max = h.read("/proc/sys/net/netfilter/nf_conntrack_max").strip()
    return {"load": [float(x) for x in h.read("/proc/loadavg", "0 0 0").split()[:3]],
            "cpus": os.sysconf("SC_NPROCESSORS_ONLN"),
            "cpu": signals.cpu_pct(signals.cpu_times(before_stat), signals.cpu_times(after_stat)),
            "conntrack": int(conntrack) if conntrack.isdigit() else None,
            "conntrack_max": int(conntrack_max) if conntrack_max.isdigit() else None,
            "sockets": signals.socket_states(h.run(["ss", "-Htan"])), "drain": h.drain()}


def containers_part(h, names):
    out = {}
    for name in names:
        pid = h.pid(name)
        out[name] = {"running": pid is not None,
                     "sockets": signals.socket_states(h.in_netns(pid, ["ss", "-Htan"])) if pid else {},
                     "drain": h.drain(pid) if pid else {}}
    return out


def restart_loops(done, docs):
    """The containers autoheal restarted LOOP_RESTARTS times or more in the window, each with the likely cause."""
    by_name = dict((d.get("Name", "").lstrip("/"), d) for d in docs or [])
    out = []
    for name, n in sorted(done.get("by_container", {}).items()):
        if n < autoheal.LOOP_RESTARTS:
            continue
        doc = by_name.get(name) or {}
        log = ((doc.get("State") or {}).get("Health") or {}).get("Log") or []
        test = ((doc.get("Config") or {}).get("Healthcheck") or {}).get("Test")
        out.append({"name": name, "restarts": n,
                    "cause": autoheal.loop_cause(test, (log[-1].get("Output") or "") if log else "")})
    return out


def autoheal_part(h, name, window, docs=None):
    found = h.inspect([name])
    if not found or not found[0]["State"].get("Running"):
        return {"running": False, "can_restart": False, "why": "autoheal is not running" if found else "no container %s" % name}
    env = dict(e.split("=", 1) for e in found[0]["Config"].get("Env") or [] if "=" in e)
    done = signals.autoheal_log(h.logs(name, window))
    sock = env.get("DOCKER_SOCK", "/var/run/docker.sock")
    out = dict(done, running=True, socket=sock, can_restart=True, why="on the Docker socket",
               loops=restart_loops(done, docs))
    if sock.startswith("tcp://"):
        proxy = sock[len("tcp://"):].split(":")[0]
        p = h.inspect([proxy]) or h.inspect(["%s-%s" % (name, proxy)])  # the service name, or the role's container name
        if not p or not p[0]["State"].get("Running"):
            out.update(can_restart=False, why="its socket proxy %s is not running" % proxy)
        else:
            penv = dict(e.split("=", 1) for e in p[0]["Config"].get("Env") or [] if "=" in e)
            own_policy = any(m.get("Destination", "").endswith("haproxy.cfg.template") for m in p[0].get("Mounts") or [])
            allows = [penv.get(k, "0").lower() in ("1", "true", "yes") for k in ("POST", "ALLOW_RESTARTS")]
            if own_policy:
                out["why"] = "through a socket proxy with a policy of its own (%s)" % proxy
            elif not all(allows):
                out.update(can_restart=False, why="its socket proxy %s runs the image's own policy with POST=%s "
                           "ALLOW_RESTARTS=%s: Tecnativa's v0.3.0 refuses every POST /containers/<id>/restart unless "
                           "POST=1" % (proxy, penv.get("POST", "0"), penv.get("ALLOW_RESTARTS", "0")))
    if done["restart_failures"]:
        failed = "%d of its restarts failed in the window" % done["restart_failures"]
        out.update(can_restart=False, why=failed if out["can_restart"] else "%s; %s" % (out["why"], failed))
    return out


def traefik_part(h, name, window, tunnel_ep=""):
    lines = h.logs(name, window).splitlines()
    top, share, total = traefik_inflight.client_share(lines)
    out = {"statuses": traefik_inflight.status_counts(lines), "requests": total, "top_client": top, "top_share": share}
    if tunnel_ep:
        out["tunnel"] = traefik_tunnel.access_counts(lines, tunnel_ep)
    return out


def firewall_counters(h):
    """({port: per-address rejections}, {port: {address, rate, total}}) from the chains' counters."""
    counters, bounds = {}, {}
    for chain in ("ufw-before-input", ufw_connlimit.DOCKER_CHAIN):
        listed = h.run(["iptables", "-L", chain, "-v", "-x", "-n"])
        for port, n in signals.connlimit_counters(listed).items():
            counters[port] = counters.get(port, 0) + n
        for port, kinds in ufw_total.counters(listed).items():
            mine = bounds.setdefault(port, {"address": 0, "rate": 0, "total": 0})
            for k, n in kinds.items():
                mine[k] += n
    return counters, bounds


def firewall_part(h, ports, before, seconds, docker_docs):
    after, bounds_after = firewall_counters(h)
    before, bounds_before = before
    info = h.run([h.docker, "info", "--format", "{{json .}}"]) if h.docker else ""
    info = json.loads(info) if info.strip().startswith("{") else {}
    return {"top_talkers": signals.top_talkers(h.run(["ss", "-Htn", "state", "established"]), ports),
            "rejected_per_s": dict((port, round((after.get(port, 0) - before.get(port, 0)) / seconds, 1))
                                   for port in sorted(set(after) | set(before))),
            "limited_ports": sorted(after),
            "bounds": dict((port, {"total": b["total"], "rate": b["rate"],
                                   "total_per_s": round((b["total"] - bounds_before.get(port, {}).get("total", 0)) / seconds, 1),
                                   "rate_per_s": round((b["rate"] - bounds_before.get(port, {}).get("rate", 0)) / seconds, 1)})
                           for port, b in sorted(bounds_after.items())),
            "counted": ufw_total.counted_connections(h.run(["ss", "-Htan"]), ports),
            "published": ufw_connlimit.docker_published_tcp_ports(docker_docs),
            "docker_firewall_backend": ufw_connlimit.firewall_backend(info) if info.get("ServerVersion") else None}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type="list", elements="str", default=[]),
            traefik=dict(type="str", default=""),
            tunnel_entrypoint=dict(type="str", default=""),
            autoheal=dict(type="str", default=""),
            ports=dict(type="list", elements="int", default=[]),
            window=dict(type="int", default=300),
            sample_seconds=dict(type="float", default=2),
        ),
        supports_check_mode=True,
    )
    p = module.params
    host.require_root(module, "reads other network namespaces and the firewall")
    h = Host(module)
    before_stat = h.read("/proc/stat")
    before_counters = firewall_counters(h) if p["ports"] else ({}, {})
    time.sleep(p["sample_seconds"])
    ids = h.run([h.docker, "ps", "-q"]).split() if h.docker else []
    docs = h.inspect(ids)
    result = dict(changed=False, host=host_part(h, p, before_stat), containers=containers_part(h, p["containers"]),
                  unhealthy=signals.unhealthy(docs, time.time()))
    if p["autoheal"]:
        result["autoheal"] = autoheal_part(h, p["autoheal"], p["window"], docs)
    if p["traefik"]:
        result["traefik"] = traefik_part(h, p["traefik"], p["window"], p["tunnel_entrypoint"])
    if p["ports"]:
        result["firewall"] = firewall_part(h, p["ports"], before_counters, p["sample_seconds"], docs)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
