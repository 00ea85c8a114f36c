#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: prove_autoheal
short_description: Prove on the NAS that autoheal heals a wedged Traefik, and time the outage (for homelab.edge.prove)
version_added: "2.0.0"
description:
  - B(Costs an outage) - Traefik answers nothing from the wedge until it is healed. Run it only when you accept that
    (homelab.edge.prove runs it only with C(prove_wedge=true)).
  - Wedges Traefik (O(wedge)) - C(stop), as seed 001's was, alive and running but answering nothing, by stopping
    its processes (SIGSTOP through the engine); or C(entrypoint), alive but dark only where users come in, by
    dropping TCP to the entrypoint's port inside Traefik's own network namespace (C(nsenter) and C(iptables) on the
    host; one rule with the comment C(homelab-edge-prove)) while its other listeners (ping, metrics) answer - what a
    health check that asks ping only does not see. Then probes O(url) twice a second until Traefik answers again
    from a restarted container that is healthy. Proved when that happens within O(timeout); the result says how long
    the outage lasted.
  - Only Traefik can satisfy it - O(url) must reach one of Traefik's entrypoints (derived from Traefik's own config
    and its container's published ports, or checked against them), and an answer there while Traefik is still
    wedged and not restarted ends the check failed (something else answers at O(url), DSM's nginx on 443 say) - the
    wedge is then ended at once.
  - When it is not healed within O(timeout), the module ends the wedge itself (SIGCONT, or the rule removed) and says
    so - it never leaves Traefik wedged. A restart ends the C(entrypoint) wedge too (a new network namespace).
  - B(Refuses), before the wedge, when autoheal could not see or heal it - the autoheal container is not running,
    Traefik lacks the label autoheal watches (its C(AUTOHEAL_CONTAINER_LABEL)), has no health check or one that cannot
    fail, is not healthy now, or does not answer at O(url) now.
  - In check mode it reads and returns what it would do and its bound, without wedging anything.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  container:
    description: The Traefik container.
    type: str
    default: traefik
  autoheal_container:
    description: The autoheal container.
    type: str
    default: autoheal
  url:
    description:
      - Where this host reaches Traefik's O(entrypoint). Any HTTP answer counts (a 404 for an unknown host too).
      - Default (empty) - derived from Traefik's own config (its static config file or flags) and its container's
        published ports - on a Synology NAS, where DSM's nginx holds 443 and Traefik's 443 is published on 8443,
        C(https://127.0.0.1:8443); C(https) where the entrypoint answers TLS, else C(http).
      - A url given is refused, before the wedge, when it does not reach one of Traefik's entrypoints.
    type: str
    default: ""
  entrypoint:
    description: The entrypoint of Traefik's whose url is derived (where O(url) is empty).
    type: str
    default: websecure
    version_added: "2.1.0"
  timeout:
    description: Seconds from the wedge to a healed Traefik (at most 600).
    type: int
    default: 180
  wedge:
    description:
      - C(stop) - every listener silent (SIGSTOP); C(entrypoint) - only the entrypoint behind O(url) dark (the port
        O(url) reaches, as Traefik listens on it in its own namespace, from the container's published ports).
      - C(entrypoint) is refused for a Traefik in the host's network namespace (the rule would be the host's own
        firewall) and where C(nsenter) or C(iptables) is missing.
    type: str
    choices: [stop, entrypoint]
    default: stop
    version_added: "2.0.0"
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Reads and plans; wedges nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: homelab.edge.traefik_inflight
"""

EXAMPLES = r"""
- name: Wedge Traefik and time until autoheal has it serving again (an outage of its own)
  homelab.edge.prove_autoheal:
    container: traefik
  register: proof
"""

RETURN = r"""
rows:
  description: The row for the prove table (host, check, target, expected, measured, status, reasons).
  returned: always
  type: list
  elements: dict
outage_s:
  description: Seconds from the wedge until Traefik answered again (null when it did not in time).
  returned: when run
  type: float
healthy_s:
  description: Seconds from the wedge until the restarted container was healthy (null when not in time).
  returned: when run
  type: float
resumed:
  description: The module ended the wedge of a Traefik that was not healed in time (SIGCONT, or the rule removed).
  returned: when run
  type: bool
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import autoheal
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.prove import checks as prove_checks
from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net
from ansible_collections.homelab.edge.plugins.module_utils.traefik import entrypoint_url

CHECK = "autoheal on a wedge"
MAX_TIMEOUT_S = 600


def inspect(module, docker, name):
    rc, out, err = module.run_command([docker, "inspect", name], environ_update=host.C_ENV)
    return json.loads(out)[0] if rc == 0 else None


def answers(where):
    """Any HTTP answer from (host, port, tls) within 2 s."""
    host_, port, tls = where
    return isinstance(prove_net.http_status(host_, port, tls, host_, "/", 2), int)


def watch_label(autoheal_inspect):
    """The label autoheal watches (its AUTOHEAL_CONTAINER_LABEL; C(all): every container)."""
    for item in (autoheal_inspect.get("Config") or {}).get("Env") or []:
        key, dummy, value = item.partition("=")
        if key == "AUTOHEAL_CONTAINER_LABEL" and value:
            return value
    return "autoheal"


def refusal(traefik, autoheal_inspect, url_answers, name, autoheal_name):
    """Why the wedge must not be made (autoheal could not see or heal it), or None."""
    if traefik is None or not traefik["State"].get("Running"):
        return "%s is not running" % name
    if autoheal_inspect is None or not autoheal_inspect["State"].get("Running"):
        return "the autoheal container %s is not running (homelab.edge.autoheal)" % autoheal_name
    unseen = autoheal.problems(name, traefik, watch_label(autoheal_inspect))
    if unseen:
        return "; ".join(unseen)
    health = (traefik["State"].get("Health") or {}).get("Status")
    if health != "healthy":
        return "%s is %s now, not healthy: wait for it, or see why" % (name, health or "without a health status")
    if not url_answers:
        return "Traefik does not answer at the url now"
    return None


ARGUMENT_SPEC = dict(container=dict(type="str", default="traefik"),
                     autoheal_container=dict(type="str", default="autoheal"),
                     url=dict(type="str", default=""),
                     entrypoint=dict(type="str", default="websecure"),
                     timeout=dict(type="int", default=180),
                     wedge=dict(type="str", choices=["stop", "entrypoint"], default="stop"))
RULE_COMMENT = "homelab-edge-prove"


def inner_port(traefik, port):
    """The port Traefik listens on in its own namespace for `port` of this host (its published ports), or None
    (not published; in the host's namespace it is the same port, but that wedge is refused)."""
    for spec, bindings in ((traefik.get("NetworkSettings") or {}).get("Ports") or {}).items():
        inner, dummy, proto = spec.partition("/")
        if proto == "tcp" and any(str(b.get("HostPort")) == str(port) for b in bindings or []):
            return int(inner)
    return None


def rule(pid, port, op):
    """The iptables command, run in Traefik's network namespace, that adds (-I) or removes (-D) the wedge."""
    return ["nsenter", "-t", str(pid), "-n", "iptables", "-w", op, "INPUT", "-p", "tcp", "--dport", str(port),
            "-m", "comment", "--comment", RULE_COMMENT, "-j", "DROP"]


def done(module, status, reasons, measured="-", **extra):
    """The one exit: the prove table's row and the data behind it."""
    p = module.params
    expected = "serving again, restarted and healthy, within %d s" % p["timeout"]
    target = "%s (%s)" % (p["container"], p["url"]) if p["url"] else p["container"]
    module.exit_json(changed=False, rows=[prove_checks.row(None, CHECK, target, expected, measured, status, reasons)],
                     **extra)


def read_and_plan(module, docker):
    """Steps 1-2: the timeout checked, Traefik and autoheal read, the url checked against Traefik's entrypoints (or
    derived from them); refused when autoheal could not see or heal the wedge. (Traefik's inspect, where it
    answers)."""
    p = module.params
    if not 1 <= p["timeout"] <= MAX_TIMEOUT_S:
        done(module, prove_checks.REFUSED, ["the timeout is %d; it must be between 1 and %d" % (p["timeout"], MAX_TIMEOUT_S)])
    where = endpoint(module) if p["url"] else None
    traefik = inspect(module, docker, p["container"])
    running = traefik is not None and bool(traefik["State"].get("Running"))
    if running:
        where = traefik_url(module, docker, traefik)
    why = refusal(traefik, inspect(module, docker, p["autoheal_container"]), running and answers(where),
                  p["container"], p["autoheal_container"])
    if why:
        done(module, prove_checks.REFUSED, [why])
    return traefik, where


def endpoint(module):
    try:
        return prove_net.endpoint(module.params["url"])
    except ValueError as e:
        done(module, prove_checks.REFUSED, [str(e)])


def traefik_url(module, docker, traefik):
    """Where this host reaches Traefik's entrypoint, from its own config and its published ports: the url given,
    checked; else derived (https where it answers TLS now, else http). Refused when neither works."""
    p = module.params
    try:
        entrypoints = entrypoint_url.read_entrypoints(traefik, lambda *argv: module.run_command(
            [docker, "exec", p["container"]] + list(argv), environ_update=host.C_ENV))
    except ValueError as e:
        done(module, prove_checks.REFUSED, [str(e)])
    if p["url"]:
        why = entrypoint_url.reaches(p["url"], entrypoints, traefik)
        if why:
            done(module, prove_checks.REFUSED, [why])
        return endpoint(module)
    for scheme in ("https", "http"):
        p["url"], why = entrypoint_url.url_for(entrypoints, p["entrypoint"], traefik, scheme)
        if why:
            done(module, prove_checks.REFUSED, ["%s: give the url" % why])
        if answers(endpoint(module)):
            break
    return endpoint(module)


def entrypoint_port(module, traefik, where):
    """For wedge=entrypoint: the port to drop inside Traefik's namespace; refused where it cannot be made."""
    if (traefik.get("HostConfig") or {}).get("NetworkMode") == "host":
        done(module, prove_checks.REFUSED, ["%s shares the host's network namespace (network_mode: host): the "
                                            "entrypoint wedge would be a rule in the host's own firewall; use "
                                            "wedge=stop" % module.params["container"]])
    missing = [b for b in ("nsenter", "iptables") if not module.get_bin_path(b)]
    if missing:
        done(module, prove_checks.REFUSED, ["the entrypoint wedge needs %s on this host; use wedge=stop"
                                            % " and ".join(missing)])
    port = inner_port(traefik, where[1])
    if port is None:
        done(module, prove_checks.REFUSED, ["%s publishes no TCP port %d (the url's): name the url users reach"
                                            % (module.params["container"], where[1])])
    return port


def wedge(module, docker, traefik, port):
    """Step 3: Traefik's processes stopped (SIGSTOP through the engine), or its entrypoint's port dropped."""
    if module.params["wedge"] == "entrypoint":
        rc, out, err = module.run_command(rule(traefik["State"]["Pid"], port, "-I"))
    else:
        rc, out, err = module.run_command([docker, "kill", "-s", "STOP", module.params["container"]],
                                          environ_update=host.C_ENV)
    if rc != 0:
        done(module, prove_checks.FAILED, ["the wedge could not be made: %s" % (err or out).strip()])


class NotTraefik(Exception):
    """An answer at the url while Traefik was still wedged and not restarted: another server answers there."""


def watch(module, docker, started, where, t0):
    """Step 4: seconds from the wedge until a restarted Traefik answers, and until it is healthy (None: not in
    time). NotTraefik when the url answers while Traefik is still wedged (asked first, then Traefik's start time
    read: an answer from a Traefik restarted in between is not taken for another server's)."""
    p = module.params
    outage = healthy = None
    while time.monotonic() - t0 < p["timeout"] and (outage is None or healthy is None):
        answered = answers(where) if outage is None else True
        now = inspect(module, docker, p["container"]) or {"State": {}}
        restarted = now["State"].get("StartedAt") not in (None, started)
        if answered and not restarted:
            raise NotTraefik()
        if outage is None and restarted and answered:
            outage = round(time.monotonic() - t0, 1)
        if healthy is None and restarted and (now["State"].get("Health") or {}).get("Status") == "healthy":
            healthy = round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return outage, healthy


def resume_if_still_wedged(module, docker, started, port):
    """Not healed in time: the wedge ended (SIGCONT, or the rule removed), never left so. Whether it was."""
    now = inspect(module, docker, module.params["container"]) or {"State": {}}
    if now["State"].get("StartedAt") != started:
        return False
    if module.params["wedge"] == "entrypoint":
        return module.run_command(rule(now["State"]["Pid"], port, "-D"))[0] == 0
    return module.run_command([docker, "kill", "-s", "CONT", module.params["container"]],
                              environ_update=host.C_ENV)[0] == 0


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    docker = module.get_bin_path("docker", required=True)
    traefik, where = read_and_plan(module, docker)
    port = entrypoint_port(module, traefik, where) if p["wedge"] == "entrypoint" else None
    how = "SIGSTOP" if port is None else "TCP to its port %d dropped in its namespace" % port
    if module.check_mode:
        done(module, prove_checks.PLANNED, [], "would wedge %s (%s) and wait up to %d s" % (p["container"], how, p["timeout"]))
    started = traefik["State"]["StartedAt"]
    t0 = time.monotonic()
    wedge(module, docker, traefik, port)
    try:
        outage, healthy = watch(module, docker, started, where, t0)
    except NotTraefik:
        resumed = resume_if_still_wedged(module, docker, started, port)
        done(module, prove_checks.FAILED, ["%s answered while %s was wedged and not restarted: that is another server, "
                                           "not Traefik (give the url of Traefik's entrypoint, or none to have it "
                                           "derived)%s" % (p["url"], p["container"], "; the wedge ended at once"
                                                           if resumed else "")], resumed=resumed)
    if outage is None or healthy is None:
        resumed = resume_if_still_wedged(module, docker, started, port)
        ended = "; Traefik resumed (SIGCONT)" if port is None else "; the wedge's rule removed"
        done(module, prove_checks.FAILED, ["not healed within %d s%s" % (p["timeout"], ended if resumed else "")],
             "served again after %s s, healthy after %s s" % (outage, healthy), outage_s=outage, healthy_s=healthy,
             resumed=resumed)
    done(module, prove_checks.PROVED, [], "outage %s s: served again after %s s, healthy after %s s"
         % (outage, outage, healthy), outage_s=outage, healthy_s=healthy, resumed=False)


if __name__ == "__main__":
    main()
