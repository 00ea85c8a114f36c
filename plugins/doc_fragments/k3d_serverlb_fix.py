# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The load balancers and the fix's options, for the modules that read load balancers against it
    # (k3d_serverlb_info, prove_k3d_serverlb).
    DOCUMENTATION = r"""
requirements:
  - docker (Python SDK) on the host that runs the module
options:
  clusters:
    description: Only the load balancers of these k3d clusters. Empty means all.
    type: list
    elements: str
    default: []
  docker_host:
    description: Docker API address. Defaults to the environment (C(DOCKER_HOST)) or the local socket.
    type: str
  udp_timeout:
    description: The fix's UDP timeout (as set for M(homelab.edge.k3d_serverlb)), to read the load balancer against.
    type: int
    default: 5
  udp_ports:
    description: The fix's UDP profile per port (as set for M(homelab.edge.k3d_serverlb)), to read each UDP port against.
    type: dict
    default: {"53": dns}
  udp_stream_timeout:
    description: The fix's timeout of C(stream) UDP ports (0 - k3d's own), to read them against.
    type: int
    default: 0
  worker_connections:
    description: The fix's connection floor to read it against.
    type: int
    default: 4096
  worker_rlimit_nofile:
    description: The fix's open-file limit to read it against.
    type: int
    default: 16384
  udp_share:
    description: The fix's UDP share to read it against.
    type: int
    default: 50
  budget_log_level:
    description: The fix's budget log level to read it against.
    type: str
    choices: [info, notice, warn, error]
    default: info
"""
