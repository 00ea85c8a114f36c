#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: reach
short_description: Which ports of a host answer a new client from here, and which of them a change cut
version_added: "2.0.0"
description:
  - Run where clients come from - the controller, outside the host (C(delegate_to)). For each port, one new
    connection (TCP) or one datagram that must be answered (UDP), bounded by O(timeout). A port is C(answered),
    C(refused) (reset, or ICMP port unreachable) or C(no answer).
  - This is the firewall as packets see it - ufw's user rules, its before and after rules, IPv4 or IPv6 as O(host)
    is, Docker's published ports through FORWARD - not a model of its files.
  - With O(answered_before) (this module's RV(answered) from before a change), RV(cut) lists the ports that answered
    then and do not now. M(homelab.edge.ufw_revert) then puts the firewall back (the vps_connlimit role does so
    before it confirms a change).
  - A UDP service that answers no stray datagram (WireGuard) is C(no answer) before and after; it never counts as
    cut. Nor does a port the controller cannot reach in the first place.
  - O(host) on loopback (an SSH tunnel, a port published on this machine) shows nothing about the host's firewall;
    nothing is probed and RV(not_probed) says why.
  - Sends one connection or datagram per port; changes nothing. Runs in check mode too (it only connects).
author:
  - homelab.edge contributors (@homelab-edge)
options:
  host:
    description: The host's address as clients reach it (a name or an IP address).
    type: str
    required: true
  ports:
    description: The ports, written C(PORT/PROTO) (C(tcp) or C(udp)), for example C(80/tcp) or C(51820/udp).
    type: list
    elements: str
    required: true
  answered_before:
    description: RV(answered) of a run before the change; when given, RV(cut) lists those that no longer answer.
    type: list
    elements: str
  timeout:
    description: Seconds to wait for each port (at most 10).
    type: float
    default: 3.0
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Probes as in a normal run; probing changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: homelab.edge.ufw_revert
  - module: homelab.edge.ufw_access
"""

EXAMPLES = r"""
- name: What answers from outside before the change
  homelab.edge.reach:
    host: vps.example.org
    ports: [80/tcp, 443/tcp, 51820/udp]
  delegate_to: localhost
  register: before

- name: Still answers after it
  homelab.edge.reach:
    host: vps.example.org
    ports: [80/tcp, 443/tcp, 51820/udp]
    answered_before: "{{ before.answered }}"
  delegate_to: localhost
  register: after
  failed_when: after.cut | length > 0
"""

RETURN = r"""
answered:
  description: The ports that answered a new client.
  returned: always
  type: list
  elements: str
  sample: ["80/tcp", "51820/udp"]
unanswered:
  description: The other ports, each with why (C(refused) or C(no answer)).
  returned: always
  type: dict
  sample: {"443/tcp": "refused"}
cut:
  description: Ports of O(answered_before) that do not answer now (empty without O(answered_before)).
  returned: always
  type: list
  elements: str
not_probed:
  description: Why nothing was probed (O(host) on loopback), or null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net
from ansible_collections.homelab.edge.plugins.module_utils.ufw import access as ufw_access


def main():
    module = AnsibleModule(
        argument_spec=dict(host=dict(type="str", required=True),
                           ports=dict(type="list", elements="str", required=True),
                           answered_before=dict(type="list", elements="str"),
                           timeout=dict(type="float", default=3.0)),
        supports_check_mode=True,
    )
    p = module.params
    try:
        specs = ufw_access.port_specs(p["ports"], "ports")
        before = ufw_access.port_specs(p["answered_before"], "answered_before") if p["answered_before"] is not None else None
    except ufw_access.AccessError as e:
        module.fail_json(msg="%s; nothing was probed" % e)
    if not 0 < p["timeout"] <= 10:
        module.fail_json(msg="timeout must be over 0 and at most 10 seconds, got %s; nothing was probed" % p["timeout"])
    if prove_net.loopback(p["host"]):
        module.exit_json(changed=False, answered=[], unanswered={}, cut=[],
                         not_probed="%s is a loopback address here: a connection there never reaches the host's "
                                    "firewall; set the address clients use" % p["host"])
    answered, unanswered = [], {}
    for spec in specs:
        port, dummy, proto = spec.partition("/")
        outcome = prove_net.reaches(p["host"], int(port), proto, p["timeout"])
        if outcome == "answered":
            answered.append(spec)
        else:
            unanswered[spec] = outcome
    module.exit_json(changed=False, answered=answered, unanswered=unanswered, not_probed=None,
                     cut=prove_net.cut(before, answered) if before is not None else [])


if __name__ == "__main__":
    main()
