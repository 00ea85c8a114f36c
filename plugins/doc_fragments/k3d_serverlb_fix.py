# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The fix's options, for the modules that read a load balancer against it (k3d_serverlb_info, prove_k3d_serverlb).
    DOCUMENTATION = r"""
options:
  docker_host:
    description: Docker API address. Defaults to the environment (C(DOCKER_HOST)) or the local socket.
    type: str
  udp_timeout:
    description: The fix's UDP timeout (as set for M(homelab.edge.k3d_serverlb)), to read the load balancer against.
    type: int
    default: 5
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
