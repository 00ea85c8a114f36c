# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: traefik_inflight
short_description: Traefik dynamic config with one inFlightReq middleware and an explicit source criterion
version_added: "0.1.0"
description:
  - Returns the dynamic-config document (C(http.middlewares.<name>.inFlightReq)) with O(amount) and a
    C(sourceCriterion). Without one, Traefik groups by request Host; this filter always writes one,
    per client IP by default.
author: homelab.edge contributors (@homelab-edge)
positional: amount, source, depth, excluded_ips, header
options:
  _input:
    description: Middleware name.
    type: str
    required: true
  amount:
    description: Simultaneous in-flight requests per group (>= 1).
    type: int
    required: true
  source:
    description: Grouping - C(ip) (client address, ipStrategy), C(host) (request Host), C(header).
    type: str
    default: ip
    choices: [ip, host, header]
  depth:
    description: ipStrategy depth (0 uses the connection's remote address; set it only behind a proxy that sets X-Forwarded-For).
    type: int
    default: 0
  excluded_ips:
    description: ipStrategy excludedIPs.
    type: list
    elements: str
    default: []
  header:
    description: Request header name for O(source=header).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Dynamic config document
  ansible.builtin.copy:
    content: "{{ 'inflight-limit' | homelab.edge.traefik_inflight(400) | to_nice_yaml }}"
    dest: /etc/traefik/dynamic/inflight.yml
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The dynamic config document.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.edge.plugins.module_utils import traefik


def traefik_inflight(name, amount, source="ip", depth=0, excluded_ips=None, header=""):
    try:
        return traefik.inflight_middleware(name, int(amount), source, int(depth), excluded_ips, header)
    except (traefik.TraefikConfigError, ValueError) as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self):
        return {"traefik_inflight": traefik_inflight}
