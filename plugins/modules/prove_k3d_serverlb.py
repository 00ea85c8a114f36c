#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: prove_k3d_serverlb
short_description: Prove on this host that k3d's load balancers hold DNS load (for homelab.edge.prove)
version_added: "2.0.0"
description:
  - For each k3d load balancer that publishes a UDP port, sends a small, bounded DNS load through it, as seed 000's
    clients did - every query from a fresh source port, so every query is a new UDP session in nginx. The load goes
    through the published UDP ports that answer one DNS query first (a published UDP port need not be DNS). Meanwhile
    it probes the load balancer's published TCP ports (the API, HTTPS, DNS over TCP) twice a second, and samples its
    busiest worker's connections.
  - Proved when every query is answered, its log has no "worker_connections are not enough" line over the run, every
    probe answered and the busiest worker stayed under O(max_share) % of its C(worker_connections).
  - B(Refuses) a load balancer that is not fixed (as M(homelab.edge.k3d_serverlb) reads it) - that load would start
    the outage it proves absent. Refuses too a plan whose sessions would take more than O(max_share) % of the fix's UDP
    budget, and any count, rate or timeout outside the module's hard bounds.
  - Changes nothing. In check mode it reads the load balancers and returns the plan (what it would send, its bound
    in time, or why it would refuse) without sending anything.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  rate:
    description: DNS queries per second (at most 500).
    type: int
    default: 20
  count:
    description: DNS queries in all (at most 5000). With O(rate), it sets the run's length.
    type: int
    default: 200
  timeout:
    description: Seconds to wait for each answer and each probe (at most 10).
    type: float
    default: 2.0
  max_share:
    description:
      - Percent (at most 50) of the UDP session budget the planned sessions may take, and of C(worker_connections)
        the busiest worker may reach, for the check to run and to pass.
    type: int
    default: 25
  name:
    description: The name each DNS query asks for. Any answer counts (NXDOMAIN too) - the server behind answered.
    type: str
    default: kubernetes.default.svc.cluster.local
extends_documentation_fragment:
  - homelab.edge.k3d_serverlb_fix
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Reads and plans; sends nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Targets are the load balancers' published ports on this host (C(0.0.0.0) is reached at C(127.0.0.1), C(::) at
    C(::1)). Run it on the Docker host of the k3d clusters.
seealso:
  - module: homelab.edge.k3d_serverlb
  - module: homelab.edge.k3d_serverlb_info
"""

EXAMPLES = r"""
- name: Prove the load balancers of cluster dev hold 20 DNS queries/s for 10 s
  homelab.edge.prove_k3d_serverlb:
    clusters: [dev]
  register: proof
"""

RETURN = r"""
rows:
  description: One row per load balancer for the prove table (host, check, target, expected, measured, status, reasons).
  returned: always
  type: list
  elements: dict
load_balancers:
  description: Per load balancer, what was planned and measured.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: The load balancer's container., type: str}
    status: {description: "C(proved), C(failed), C(refused), C(skipped) or (check mode) C(planned).", type: str}
    reasons: {description: Why it did not prove (or was not run)., type: list, elements: str}
    plan: {description: "What it would send: rate, count, seconds, peak_sessions, sessions_allowed, bound_s.", type: dict}
    measured:
      description: >-
        planned, sent, answered, send_errors, late_max_s (the latest a query left after its due time), seconds,
        not_enough, probes_ok, probes_failed, peak_connections, worker_connections; unprobed (TCP ports that
        answered no probe before the load: left out), not_dns (UDP ports that answered no DNS query before it: left
        out).
      type: dict
    targets: {description: "The DNS targets (host:port) and the probed TCP ports (host:port kind).", type: dict}
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import signals as k3d_signals
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template
from ansible_collections.homelab.edge.plugins.module_utils.prove import checks as prove_checks
from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net
from ansible_collections.homelab.edge.plugins.module_utils.docker_engine import connect, docker

LOCAL = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
SAMPLE_S = 1.0


def published(container):
    """{"udp": [(host, port)], "tcp": [(host, port, container_port)]}: where
    the load balancer's ports are published on this host, one address per
    port (IPv4 first: Docker publishes on both families by default)."""
    out = {"udp": [], "tcp": []}
    for key, bindings in sorted(((container.attrs.get("NetworkSettings") or {}).get("Ports") or {}).items()):
        port, dummy, proto = key.partition("/")
        if proto not in out:
            continue
        for b in sorted(bindings or [], key=lambda b: ":" in (b.get("HostIp") or "")):
            host = LOCAL.get(b.get("HostIp") or "", b.get("HostIp"))
            out[proto].append((host, int(b["HostPort"])) + ((int(port),) if proto == "tcp" else ()))
            break
    return out


def read(container, want):
    """Step 1: the load balancer as it is now, and where it is published."""
    if container.status != "running":
        return {"name": container.name, "running": False}, None
    try:
        entry = k3d_signals.signals(container, want, time.time())
    except (k3d_container.ApplyError, k3d_template.ShapeError, docker.errors.DockerException) as e:
        return {"name": container.name, "error": str(e)}, None
    return entry, published(container)


def plan(entry, ports, p):
    """Step 2: refuse, skip or plan the run (raises nothing)."""
    refusal = prove_checks.k3d_refusal(entry)
    if refusal:
        return prove_checks.REFUSED, [refusal], None
    if not ports["udp"]:
        return prove_checks.SKIPPED, ["%s publishes no UDP port: no DNS goes through it" % entry["name"]], None
    try:
        the_plan = prove_checks.k3d_plan(p["rate"], p["count"], p["timeout"], entry["udp_timeout"] or p["udp_timeout"],
                                         entry["udp_session_budget"] or 1, p["max_share"])
    except prove_checks.PlanError as e:
        return prove_checks.REFUSED, [str(e)], None
    if not prove_net.room_for(the_plan["peak_sessions"] + len(ports["tcp"])):
        return prove_checks.REFUSED, ["this host's open-file limit is too low for %d sockets" % the_plan["peak_sessions"]], None
    return prove_checks.PLANNED, [], the_plan


def run(container, entry, ports, the_plan, p):
    """Step 3: the kind of each TCP port's probe, found before the load; then
    the load, with the probes and the worker samples beside it; then the log
    over the run."""
    # a published UDP port is not always DNS (WireGuard, a game server...): the load goes only to those that
    # answer one DNS query now
    dns = [t for t in ports["udp"] if prove_net.dns_paced([t], 1, 1, p["name"], p["timeout"], p["timeout"] + 1)["answered"]]
    if not dns:
        return None, []
    kinds = [(h, port, prove_net.probe_kind(h, port, p["timeout"], inside)) for h, port, inside in ports["tcp"]]
    targets = [k for k in kinds if k[2]]
    rounds = int(the_plan["bound_s"] / 0.5) + 1
    probes = prove_net.probes(targets, 0.5, p["timeout"], rounds)
    peak = {"value": None}

    def sample():
        connections = k3d_signals.worker_load_of(container)[2]
        if connections is not None:
            peak["value"] = max(peak["value"] or 0, connections)

    sampler = prove_net.Every(sample, SAMPLE_S, rounds)
    start = time.time()
    probes.start()
    sampler.start()
    try:
        measured = prove_net.dns_paced(dns, the_plan["rate"], the_plan["count"], p["name"], p["timeout"],
                                       the_plan["seconds"] * 1.5 + 1)
    finally:
        probes.stop(p["timeout"] * max(1, len(targets)) + 1)
        sampler.stop(30)
    measured.update(probes.counts)
    after = k3d_signals.log_signals(container.logs(since=int(start)).decode("utf-8", "replace"))
    measured.update(not_enough=after["not_enough_total"], peak_connections=peak["value"],
                    worker_connections=entry["worker_connections"],
                    unprobed=["%s:%d" % k[:2] for k in kinds if not k[2]],
                    not_dns=["%s:%d" % t for t in ports["udp"] if t not in dns])
    return measured, targets


def verify(measured, p):
    """Step 4: the verdict on what was measured."""
    return prove_checks.k3d_verdict(measured, measured["worker_connections"] or p["worker_connections"], p["max_share"])


def row(host, entry, status, reasons, the_plan, measured):
    expected = ("%d queries answered, no 'not enough', probes answered" % the_plan["count"]) if the_plan else "-"
    if measured:
        got = "%d/%d answered, %d 'not enough', probes %d/%d, busiest worker %s/%s" % (
            measured["answered"], measured["sent"], measured["not_enough"], measured["probes_ok"],
            measured["probes_ok"] + measured["probes_failed"], measured["peak_connections"],
            measured["worker_connections"])
    elif the_plan:
        got = "would send %d queries at %d/s (%.0f s, bound %.0f s), up to %d sessions of %d allowed" % (
            the_plan["count"], the_plan["rate"], the_plan["seconds"], the_plan["bound_s"], the_plan["peak_sessions"],
            the_plan["sessions_allowed"])
    else:
        got = "-"
    return prove_checks.row(host, "k3d DNS load", entry["name"], expected, got, status, reasons)


def main():
    module = AnsibleModule(
        argument_spec=dict(k3d_fix.option_spec(),
                           clusters=dict(type="list", elements="str", default=[]),
                           rate=dict(type="int", default=20),
                           count=dict(type="int", default=200),
                           timeout=dict(type="float", default=2.0),
                           max_share=dict(type="int", default=25),
                           name=dict(type="str", default=prove_net.DNS_PROBE_NAME),
                           docker_host=dict(type="str")),
        supports_check_mode=True,
    )
    p = module.params
    want = dict((k, p[k]) for k in k3d_fix.DEFAULTS)
    client = connect(module, p["docker_host"])
    try:
        found = k3d_container.find_load_balancers(client, (), p["clusters"])
    except docker.errors.DockerException as e:
        module.fail_json(msg="cannot list the load balancers: %s" % e)
    host = None  # the role names the inventory host
    results, rows = [], []
    for name, container, dummy in found:
        entry, ports = read(container, want)
        status, reasons, the_plan = plan(entry, ports, p)
        measured, targets = None, []
        if status == prove_checks.PLANNED and not module.check_mode:
            measured, targets = run(container, entry, ports, the_plan, p)
            if measured is None:
                status, reasons = prove_checks.SKIPPED, ["no UDP port %s publishes answers a DNS query now (%s): no DNS "
                                                         "server behind it, or a hung one (homelab.edge.diagnose names which)"
                                                         % (entry["name"], ", ".join("%s:%d" % t for t in ports["udp"]))]
            else:
                status, reasons = verify(measured, p)
        results.append({"name": name, "status": status, "reasons": reasons, "plan": the_plan, "measured": measured,
                        "targets": {"dns": ["%s:%d" % t for t in (ports or {}).get("udp", [])],
                                    "probed": ["%s:%d %s" % t for t in targets]}})
        rows.append(row(host, entry, status, reasons, the_plan, measured))
    if not found:
        reason = "no k3d load balancer on this host" + (" in clusters %s" % ", ".join(p["clusters"]) if p["clusters"] else "")
        rows.append(prove_checks.row(host, "k3d DNS load", "-", "-", "-", prove_checks.SKIPPED, [reason]))
    module.exit_json(changed=False, load_balancers=results, rows=rows)


if __name__ == "__main__":
    main()
