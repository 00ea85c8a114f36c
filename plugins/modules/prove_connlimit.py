#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: prove_connlimit
short_description: Prove from outside that the VPS holds one address to its connection limit (for homelab.edge.prove)
version_added: "2.0.0"
description:
  - Run where the connections should come from - the controller, outside the VPS (C(delegate_to)). For each port,
    first opens one connection; when that one is not established the port cannot be checked from here, and the port
    is C(skipped) with the reason (refused, or no answer). Otherwise opens O(limit) + O(extra) idle TCP connections at
    once, waits up to O(timeout) for each, holds the established ones O(hold) seconds, counts them, and closes every one.
  - Proved when about O(limit) stayed established - at most O(limit) and at least O(limit) - max(5, O(limit)/10) -
    and at least O(extra) were reset (the limit answers with a TCP reset), none unanswered.
  - Connections this address already holds to the port count toward the limit too, so a few fewer may be established;
    that still proves it. Many fewer means a lower limit holds (another rule stacked under the module's), so not proved.
  - With O(sources) (opt-in), each port also gets the many-source check of the bound on all sources together
    (issue 63) - the first that a burst of new connections meets, the rate bound's bucket (O(burst), when O(rate) is
    on) or the total (O(total)) - that bound + O(extra) connections at once, connection i from O(sources)[i mod n]
    (each source's share under O(limit), so the per-address limit never answers); proved when about the bound stayed
    established and at least O(extra) were reset. The sources must be this host's own addresses (on an interface,
    or an AnyIP route) that the VPS routes back here.
  - With O(rate) on, the per-address check empties the port's bucket (it is shared by every client), so the
    many-source check of a port waits O(burst) / O(rate) seconds (plus one) after that port's per-address check, for
    the bucket to fill again (at most 120 s; longer is refused). The per-address check itself needs a full bucket of
    at least O(limit) - the role waits for it on the VPS first.
  - Its cost on a live VPS - while the connections are held, the bound is full and new clients of the port are
    reset; after a check of the rate bound's bucket, new connections come at the rate until the bucket is full
    again (O(burst) / O(rate) seconds).
  - Sends no data. Changes nothing. In check mode returns the plan (connections, bound in time) without connecting.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  host:
    description: The VPS's address as the clients reach it (a name or an IP address).
    type: str
    required: true
  ports:
    description: The limited TCP ports.
    type: list
    elements: int
    required: true
  limit:
    description: The limit per client address and port (as set for M(homelab.edge.ufw_connlimit)).
    type: int
    required: true
  extra:
    description: Connections over the limit; each must be reset. O(limit) + O(extra) is at most 2000.
    type: int
    default: 10
  timeout:
    description: Seconds to wait for each connection to be established or reset (at most 10).
    type: float
    default: 3.0
  hold:
    description: Seconds to hold the established connections before counting them (at most 30).
    type: float
    default: 2.0
  sources:
    description: This host's own addresses to open the many-source check's connections from. Empty - no such check.
    type: list
    elements: str
    default: []
    version_added: "2.1.0"
  total:
    description: The total per port on all sources together (as set for M(homelab.edge.ufw_connlimit); 0 - none).
    type: int
    default: 400
    version_added: "2.1.0"
  rate:
    description: The rate bound on new connections per port (as set for M(homelab.edge.ufw_connlimit); 0 - none).
    type: int
    default: 0
    version_added: "2.1.0"
  burst:
    description: The rate bound's bucket (as set for M(homelab.edge.ufw_connlimit)).
    type: int
    default: 100
    version_added: "2.1.0"
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Plans; connects nowhere.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: homelab.edge.ufw_connlimit
"""

EXAMPLES = r"""
- name: Prove the VPS's limit of 100 on 80 and 443, from the controller
  homelab.edge.prove_connlimit:
    host: vps.example.org
    ports: [80, 443]
    limit: 100
  delegate_to: localhost
  register: proof
"""

RETURN = r"""
rows:
  description: One row per port for the prove table (host, check, target, expected, measured, status, reasons).
  returned: always
  type: list
  elements: dict
ports:
  description: Per port, what was planned and counted.
  returned: always
  type: list
  elements: dict
  contains:
    port: {description: The port., type: int}
    check: {description: "C(bound) for the many-source check (none for the per-address one).", type: str}
    status: {description: "C(proved), C(failed), C(refused), C(skipped) or (check mode) C(planned).", type: str}
    reasons: {description: Why it did not prove (or was not run)., type: list, elements: str}
    plan:
      description: >-
        connections, limit, extra, hold_s, timeout_s, bound_s; for the many-source check bound, which, sources,
        per_source, at_least and refill_s (the wait for the rate bound's bucket) instead of limit.
      type: dict
    counts:
      description: >-
        connections, established, reset, timeout, other (and errors: their error names), held (still open after the
        hold), first (the first one's outcome).
      type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.prove import checks as prove_checks
from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net

CHECK = "VPS connection limit"
BOUND_CHECK = "VPS bound on all sources"


def check_port(host, port, the_plan):
    """Read (one connection: can this port be checked from here?), then the
    run, then the verdict."""
    first = prove_net.hold(host, port, 1, the_plan["timeout_s"], 0)
    unreachable = prove_checks.unreachable_reason(first["first"])
    if unreachable:
        return prove_checks.SKIPPED, ["port %d is not reachable from here: %s" % (port, unreachable)], None
    counts = prove_net.hold(host, port, the_plan["connections"], the_plan["timeout_s"], the_plan["hold_s"])
    status, reasons = prove_checks.connlimit_verdict(the_plan, counts)
    return status, reasons, counts


def wait_for_refill(plan, since):
    """With the rate bound on, its bucket is shared by every client of the port and the per-address check (`since`,
    time.monotonic() as it ended) has just emptied it: the many-source check waits until it is full again, or a
    burst would meet what is left of it."""
    wait = since + plan["refill_s"] - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def bound_rows(p, check_mode, results, rows, ended):
    """The many-source check of each port (only with sources), each after its bucket refilled since the port's
    per-address check (`ended`: {port: time.monotonic() at its end}): a plan refused is one row per port, nothing
    sent."""
    try:
        plan = prove_checks.bound_plan(p["total"], p["rate"], p["burst"], p["limit"], p["extra"], p["sources"],
                                       p["hold"], p["timeout"])
    except prove_checks.PlanError as e:
        for port in p["ports"]:
            results.append({"port": port, "check": "bound", "status": prove_checks.REFUSED, "reasons": [str(e)],
                            "plan": None, "counts": None})
            rows.append(prove_checks.row(None, BOUND_CHECK, "%s:%d" % (p["host"], port), "-", "-",
                                         prove_checks.REFUSED, ["refused, nothing was sent: %s" % e]))
        return
    expected = "%d-%d established (the %s), %d+ reset, from %d addresses" % (
        plan["at_least"], plan["bound"], plan["which"], plan["extra"], plan["sources"])
    for port in p["ports"]:
        if check_mode:
            status, reasons, counts = prove_checks.PLANNED, [], None
            measured = "would open %d connections from %d addresses (bound %.0f s)" % (
                plan["connections"], plan["sources"], plan["bound_s"])
        else:
            wait_for_refill(plan, ended.get(port, 0.0))
            counts = prove_net.hold(p["host"], port, plan["connections"], plan["timeout_s"], plan["hold_s"],
                                    sources=p["sources"])
            status, reasons = prove_checks.bound_verdict(plan, counts)
            measured = "%d established, %d reset, %d unanswered" % (counts["established"], counts["reset"],
                                                                    counts["timeout"])
        results.append({"port": port, "check": "bound", "status": status, "reasons": reasons, "plan": plan,
                        "counts": counts})
        rows.append(prove_checks.row(None, BOUND_CHECK, "%s:%d" % (p["host"], port), expected, measured, status,
                                     reasons))


def main():
    module = AnsibleModule(
        argument_spec=dict(host=dict(type="str", required=True),
                           ports=dict(type="list", elements="int", required=True),
                           limit=dict(type="int", required=True),
                           extra=dict(type="int", default=10),
                           timeout=dict(type="float", default=3.0),
                           hold=dict(type="float", default=2.0),
                           sources=dict(type="list", elements="str", default=[]),
                           total=dict(type="int", default=400),
                           rate=dict(type="int", default=0),
                           burst=dict(type="int", default=100)),
        supports_check_mode=True,
    )
    p = module.params
    try:
        the_plan = prove_checks.connlimit_plan(p["limit"], p["extra"], p["hold"], p["timeout"])
    except prove_checks.PlanError as e:
        module.fail_json(msg="refused, nothing was sent: %s" % e)
    if not prove_net.room_for(the_plan["connections"]):
        module.fail_json(msg="refused, nothing was sent: this host's open-file limit is under %d connections"
                         % the_plan["connections"])
    expected = "%d-%d established, %d+ reset" % (the_plan["at_least"], p["limit"], p["extra"])
    results, rows, ended = [], [], {}
    for port in p["ports"]:
        if module.check_mode:
            status, reasons, counts = prove_checks.PLANNED, [], None
            measured = "would open %d connections (bound %.0f s)" % (the_plan["connections"], the_plan["bound_s"])
        else:
            status, reasons, counts = check_port(p["host"], port, the_plan)
            ended[port] = time.monotonic()
            measured = "-" if not counts else "%d established, %d reset, %d unanswered" % (
                counts["established"], counts["reset"], counts["timeout"])
        results.append({"port": port, "status": status, "reasons": reasons, "plan": the_plan, "counts": counts})
        rows.append(prove_checks.row(None, CHECK, "%s:%d" % (p["host"], port), expected, measured, status, reasons))
    if p["sources"]:
        if not prove_net.room_for(p["limit"] + p["extra"] + max(p["total"], p["burst"])):
            module.fail_json(msg="refused, nothing was sent: this host's open-file limit is too low for the "
                                 "many-source check")
        bound_rows(p, module.check_mode, results, rows, ended)
    module.exit_json(changed=False, ports=results, rows=rows)


if __name__ == "__main__":
    main()
