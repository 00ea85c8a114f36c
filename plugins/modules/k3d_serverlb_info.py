#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k3d_serverlb_info
short_description: Read the live signals of k3d's load balancers (for homelab.edge.diagnose)
version_added: "0.1.0"
description:
  - For each k3d load balancer (label C(k3d.role=loadbalancer)), reads what it shows now and changes
    nothing - the "worker_connections are not enough" alerts of the last O(window) seconds by
    protocol and server port, the "exceed open file resource limit" warning, the files its workers hold
    open against their limit, UDP servers without C(proxy_responses), the capacity math, what it
    lacks of the C(homelab.edge.k3d_serverlb) fix, and whether each DNS server behind it answers a query.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  window:
    description: Seconds of log to read.
    type: int
    default: 300
  dns_probe:
    description: Send one DNS query to each DNS server behind a UDP port (2 s timeout) and time the answer.
    type: bool
    default: true
extends_documentation_fragment:
  - homelab.edge.k3d_serverlb_fix
  - homelab.edge.attributes
  - homelab.edge.attributes.info_module
attributes:
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Signals of every load balancer, last 5 minutes
  homelab.edge.k3d_serverlb_info:
  register: signals
"""

RETURN = r"""
load_balancers:
  description: Per load balancer, the report of M(homelab.edge.k3d_serverlb) plus the signals.
  returned: always
  type: list
  elements: dict
  contains:
    not_enough: {description: '"not enough" alerts in the window by "<protocol> <port>".', type: dict}
    not_enough_total: {description: All of them., type: int}
    exceed_open_file_limit: {description: "nginx's warning that the connections exceed the open-file limit, or null.", type: dict}
    open_files: {description: Files the nginx workers hold open now., type: int}
    udp_sessions: {description: UDP sessions open now (connected UDP sockets of the workers)., type: int}
    connections: {description: Connections of the busiest worker (its open files plus its UDP sessions)., type: int}
    drift: {description: What the load balancer lacks of the fix (of the capped fix where its open files are capped)., type: list, elements: str}
    state: {description: "C(fixed), C(capped) (fixed with a cap on open files) or C(not_fixed), as M(homelab.edge.k3d_serverlb) says.", type: str}
    state_text: {description: The state in words., type: str, sample: fixed with a cap (1024 open files)}
    open_file_cap: {description: The open-file limit nginx cannot raise (null when none)., type: int}
    dns_upstreams: {description: "Each DNS server behind a UDP port and how fast it answered (null: not in 2 s).", type: list}
"""

import random
import socket
import struct
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import signals as k3d_signals
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template
from ansible_collections.homelab.edge.plugins.module_utils.docker_engine import connect, docker


def dns_probe(client):
    """(node, port) -> seconds to any DNS answer, or None."""
    def ask(node, port):
        try:
            address = next(iter(client.containers.get(node).attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        except (docker.errors.NotFound, StopIteration, KeyError):
            return None
        qid = random.randint(0, 65535)
        # a name a cluster's DNS (CoreDNS) answers; any answer, NXDOMAIN included, means it is alive
        query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + b"".join(
            bytes([len(part)]) + part.encode() for part in "kubernetes.default.svc.cluster.local".split(".")) + \
            b"\x00\x00\x01\x00\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        t0 = time.time()
        try:
            s.sendto(query, (address, port))
            reply = s.recv(512)
            return round(time.time() - t0, 3) if reply[:2] == struct.pack(">H", qid) else None
        except OSError:
            return None
        finally:
            s.close()
    return ask


def main():
    module = AnsibleModule(
        argument_spec=dict(k3d_fix.option_spec(),
                           clusters=dict(type="list", elements="str", default=[]),
                           window=dict(type="int", default=300),
                           dns_probe=dict(type="bool", default=True),
                           docker_host=dict(type="str")),
        supports_check_mode=True,
    )
    p = module.params
    client = connect(module, p["docker_host"])
    try:
        found = k3d_container.find_load_balancers(client, (), p["clusters"])
    except docker.errors.DockerException as e:
        module.fail_json(msg="cannot list the load balancers: %s" % e)
    since = time.time() - p["window"]
    out = []
    for name, container, dummy in found:
        if container.status != "running":
            out.append({"name": name, "cluster": container.labels.get(k3d_container.CLUSTER_LABEL), "running": False})
            continue
        try:
            entry = k3d_signals.signals(container, dict((k, p[k]) for k in k3d_fix.DEFAULTS), since,
                                        dns_probe(client) if p["dns_probe"] else None)
        except (k3d_container.ApplyError, k3d_template.ShapeError) as e:
            entry = {"name": name, "error": str(e)}
        entry["running"] = True
        out.append(entry)
    module.exit_json(changed=False, load_balancers=out)


if __name__ == "__main__":
    main()
