#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: prove_inflight
short_description: Prove on the NAS that Traefik holds one client to its in-flight limit (for homelab.edge.prove)
version_added: "2.0.0"
description:
  - Adds a temporary slow route to Traefik - a small backend container on Traefik's network and a router with a
    unique host name on O(entrypoint), in a file of its own in the file provider's directory - and waits until Traefik
    serves it. The route gets the limit the way every route on the entrypoint does (the entrypoint's middleware).
  - Only Traefik can be measured - the route's answers carry a header with the route's own name (a C(headers)
    middleware of the route), and the route counts as served only once an answer has it; another server on the
    host (DSM's nginx on 443, say) never does, whatever it answers.
  - Then sends O(amount) + O(extra) slow requests at once from this host to O(url) and counts the answers. Proved when
    at most O(amount) were answered 200 and at least O(extra) were answered 429, nothing else.
  - Removes the route's file and the backend container afterwards on every path (a failure, a timeout), and says
    what it could not remove (RV(left_behind)).
  - The file provider's directory is where M(homelab.edge.traefik_inflight) wrote the middleware (its record in
    O(state_dir)), unless O(dynamic_dir) is given.
  - In check mode it reads and returns the plan (the route's name, the requests, the bound in time) without adding
    anything or sending a request.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  container:
    description: The Traefik container.
    type: str
    default: traefik
  name:
    description: The middleware's name (M(homelab.edge.traefik_inflight)'s O(homelab.edge.traefik_inflight#module:name)).
    type: str
    default: inflight-limit
  amount:
    description: The in-flight limit per client, as set.
    type: int
    required: true
  extra:
    description: Requests over the limit; each must be answered 429. O(amount) + O(extra) is at most 2000.
    type: int
    default: 10
  entrypoint:
    description: The limited entrypoint the temporary router goes on.
    type: str
    default: websecure
  url:
    description:
      - Where this host reaches O(entrypoint), C(https://HOST:PORT) (the temporary route uses TLS exactly when the url
        is C(https://)).
      - Default (empty) - derived from Traefik's own config (its static config file or flags) and its container's
        published ports - on a Synology NAS, where DSM's nginx holds 443 and Traefik's 443 is published on 8443,
        C(https://127.0.0.1:8443).
      - A url given is refused, before anything is added, when it does not reach one of Traefik's entrypoints.
    type: str
    default: ""
  timeout:
    description: Seconds each request may take in all (at most 60), and to wait for Traefik to serve the new route.
    type: int
    default: 20
  backend_image:
    description: The backend's image. It must answer O(backend_path) slowly (longer than the requests take to send).
    type: str
    default: traefik/whoami:v1.10
  backend_command:
    description: The backend's command (empty - the image's own).
    type: list
    elements: str
    default: []
  backend_port:
    description: The port the backend listens on in its container.
    type: int
    default: 80
  backend_path:
    description: The slow path (whoami holds a request C(?wait=) long).
    type: str
    default: /?wait=3s
  dynamic_dir:
    description: The file provider's directory on the host. Default - read from M(homelab.edge.traefik_inflight)'s record.
    type: path
  state_dir:
    description: Where M(homelab.edge.traefik_inflight) keeps its records.
    type: path
    default: /var/lib/homelab-edge/traefik-inflight
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Reads and plans; adds no route and sends no request.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Traefik sees every request from the address this host reaches it from. When that address is in the middleware's
    excluded IPs, nothing is limited and the check fails.
seealso:
  - module: homelab.edge.traefik_inflight
"""

EXAMPLES = r"""
- name: Prove Traefik answers 429 beyond 400 requests in flight from one client
  homelab.edge.prove_inflight:
    container: traefik
    amount: 400
  register: proof
"""

RETURN = r"""
rows:
  description: The row for the prove table (host, check, target, expected, measured, status, reasons).
  returned: always
  type: list
  elements: dict
plan:
  description: "route (the temporary router's and container's name), hostname, requests, dynamic_file, bound_s."
  returned: always
  type: dict
answers:
  description: "Answers by status: C(200), C(429), or what went wrong (C(timeout), C(unfinished), ...)."
  returned: when run
  type: dict
left_behind:
  description: What could not be removed afterwards (a file, a container); empty when everything is gone.
  returned: always
  type: list
  elements: str
"""

import json
import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.prove import checks as prove_checks
from ansible_collections.homelab.edge.plugins.module_utils.prove import net as prove_net
from ansible_collections.homelab.edge.plugins.module_utils.traefik import entrypoint_url
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight

CHECK = "Traefik in-flight limit"
LABEL = "homelab.edge.prove"
# the header the temporary route's answers carry (its value: the route's name): Traefik's, never another server's
MARK = "X-Homelab-Edge-Prove"


class Docker(object):
    def __init__(self, module):
        self.module = module
        self.bin = module.get_bin_path("docker", required=True)

    def run(self, *argv):
        return self.module.run_command([self.bin] + list(argv), environ_update=host.C_ENV)

    def exec_(self, container):
        return lambda *argv: self.run("exec", container, *argv)


def read(module, docker, p):
    """Step 1: Traefik running, the network the backend joins, the directory
    the route's file goes into, where this host reaches the entrypoint (the url
    given, checked against Traefik's entrypoints, or derived from them: refused
    when neither works). (facts, None) or (None, why not)."""
    rc, out, err = docker.run("inspect", p["container"])
    if rc != 0:
        return None, "%s: %s" % (p["container"], (err or out).strip())
    info = json.loads(out)[0]
    if not (info.get("State") or {}).get("Running"):
        return None, "%s is not running" % p["container"]
    networks = sorted(((info.get("NetworkSettings") or {}).get("Networks") or {}).keys())
    networks = [n for n in networks if n not in ("host", "none")]
    if not networks:
        return None, "%s is on no network a backend container can join" % p["container"]
    directory = p["dynamic_dir"] or traefik_inflight.record_dynamic_dir(
        host.read_record(os.path.join(p["state_dir"], "%s.json" % p["container"])), p["name"])
    if not directory:
        return None, ("no record of homelab.edge.traefik_inflight for %s in %s: the limit was not applied by this "
                      "collection here (run homelab.edge.site --tags nas), or give dynamic_dir"
                      % (p["container"], p["state_dir"]))
    if not os.path.isdir(directory):
        return None, "the file provider's directory %s is not there" % directory
    try:  # where this host reaches the entrypoint: Traefik's own config, the ports Docker publishes for it
        entrypoints = entrypoint_url.read_entrypoints(info, docker.exec_(p["container"]))
    except ValueError as e:
        done(module, prove_checks.REFUSED, [str(e)])
    if p["url"]:
        why = entrypoint_url.reaches(p["url"], entrypoints, info)
    else:
        p["url"], why = entrypoint_url.url_for(entrypoints, p["entrypoint"], info)
        why = why and "%s: give the url" % why
    if why:
        done(module, prove_checks.REFUSED, [why])
    return {"network": networks[0], "dir": directory}, None


def route_text(name, hostname, entrypoint, tls, backend_url):
    """The route's dynamic file: the router (the entrypoint's middleware comes first, as on every router there), a
    headers middleware that marks its answers (MARK: the route's name) and the backend's service."""
    return json.dumps({"http": {
        "routers": {name: dict({"rule": "Host(`%s`)" % hostname, "entryPoints": [entrypoint], "service": name,
                                "middlewares": [name + "-mark"]}, **({"tls": {}} if tls else {}))},
        "middlewares": {name + "-mark": {"headers": {"customResponseHeaders": {MARK: name}}}},
        "services": {name: {"loadBalancer": {"servers": [{"url": backend_url}]}}}}}, indent=2) + "\n"


def add_route(module, docker, facts, the_plan, p):
    """Step 3a: the backend container, then the route's file (JSON is YAML)."""
    rc, out, err = docker.run("run", "-d", "--name", the_plan["route"], "--network", facts["network"], "--label",
                              "%s=1" % LABEL, p["backend_image"], *p["backend_command"])
    if rc != 0:
        raise RuntimeError("the backend container did not start: %s" % (err or out).strip())
    rc, out, err = docker.run("inspect", "-f", "{{(index .NetworkSettings.Networks \"%s\").IPAddress}}"
                              % facts["network"], the_plan["route"])
    address = out.strip()
    if rc != 0 or not address:
        raise RuntimeError("the backend container has no address on %s" % facts["network"])
    backend = "http://%s:%d" % (address, p["backend_port"])
    host.write_text(module, the_plan["dynamic_file"], route_text(the_plan["route"], the_plan["hostname"],
                                                                 p["entrypoint"], the_plan["tls"], backend))


def remove_route(module, docker, the_plan):
    """Step 5 (every path): the file, then the container. What is left."""
    left = []
    try:
        host.write_text(module, the_plan["dynamic_file"], None)
    except OSError as e:
        left.append("%s (%s)" % (the_plan["dynamic_file"], e))
    docker.run("rm", "-f", "-v", the_plan["route"])
    rc, out, err = docker.run("ps", "-aq", "--filter", "name=^/%s$" % the_plan["route"])
    if out.strip():
        left.append("container %s" % the_plan["route"])
    return left


def served(the_plan, timeout):
    """Step 3b: seconds until Traefik answers the new route 200 with the route's mark (None: not in time). An
    answer without the mark is not the route's: another server, or Traefik without the route yet."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        status, headers = prove_net.http_head(the_plan["address"], the_plan["port"], the_plan["tls"],
                                              the_plan["hostname"], "/", 2)
        if status == 200 and headers.get(MARK.lower()) == the_plan["route"]:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return None


ARGUMENT_SPEC = dict(container=dict(type="str", default="traefik"),
                     name=dict(type="str", default="inflight-limit"),
                     amount=dict(type="int", required=True),
                     extra=dict(type="int", default=10),
                     entrypoint=dict(type="str", default="websecure"),
                     url=dict(type="str", default=""),
                     timeout=dict(type="int", default=20),
                     backend_image=dict(type="str", default="traefik/whoami:v1.10"),
                     backend_command=dict(type="list", elements="str", default=[]),
                     backend_port=dict(type="int", default=80),
                     backend_path=dict(type="str", default="/?wait=3s"),
                     dynamic_dir=dict(type="path"),
                     state_dir=dict(type="path", default=traefik_inflight.STATE_DIR))


def done(module, status, reasons, measured="-", **extra):
    """The one exit: the prove table's row and the data behind it."""
    p = module.params
    target = "%s (%s)" % (p["container"], p["url"] or "entrypoint %s" % p["entrypoint"])
    expected = "at most %d answered 200, %d+ answered 429" % (p["amount"], p["extra"])
    module.exit_json(changed=False, rows=[prove_checks.row(None, CHECK, target, expected, measured, status, reasons)],
                     **dict({"plan": None, "left_behind": []}, **extra))


def plan(module):
    """Step 2a, before anything is read: the load's numbers, refused when they cannot work; a url given, refused
    when malformed."""
    p = module.params
    try:
        the_plan = prove_checks.inflight_plan(p["amount"], p["extra"], p["timeout"])
    except prove_checks.PlanError as e:
        done(module, prove_checks.REFUSED, [str(e)])
    return the_plan


def where(module):
    """Step 2b, once the url is known (given, or derived by read()): (address, port, tls); refused when malformed."""
    try:
        return prove_net.endpoint(module.params["url"])
    except ValueError as e:
        done(module, prove_checks.REFUSED, [str(e)])


def name_route(the_plan, endpoint, facts):
    """Step 2b: the temporary route's names, its file, and where its requests go."""
    address, port, tls = endpoint
    route = "homelab-edge-prove-%s" % uuid.uuid4().hex[:8]
    the_plan.update(route=route, hostname="%s.prove.invalid" % route, tls=tls, address=address, port=port,
                    dynamic_file=os.path.join(facts["dir"], route + ".yml"), network=facts["network"])


def load(module, docker, facts, the_plan):
    """Steps 3-5: the route added, served, the requests sent at once, the route removed on every path.
    (answers or None, reasons, left behind)."""
    p = module.params
    answers, left, reasons = None, [], []
    try:
        add_route(module, docker, facts, the_plan, p)
        if served(the_plan, p["timeout"]) is None:
            reasons.append("Traefik did not serve the temporary route within %d s (no answer with its mark at %s: is "
                           "that Traefik's entrypoint %s?)" % (p["timeout"], p["url"], p["entrypoint"]))
        else:
            answers = prove_net.at_once(the_plan["requests"], lambda: prove_net.http_status(
                the_plan["address"], the_plan["port"], the_plan["tls"], the_plan["hostname"], p["backend_path"],
                p["timeout"]), p["timeout"])
    except (RuntimeError, OSError) as e:
        reasons.append(str(e))
    finally:
        left = remove_route(module, docker, the_plan)
    if left:
        reasons.append("left behind: %s" % ", ".join(left))
    return answers, reasons, left


def verify(module, the_plan, answers, reasons, left):
    """Step 6: the answers against the limit."""
    if answers is None:
        done(module, prove_checks.FAILED, reasons, plan=the_plan, left_behind=left)
    status, why = prove_checks.inflight_verdict(the_plan, answers)
    measured = "%d answered 200, %d answered 429%s" % (
        answers.get("200", 0), answers.get("429", 0),
        "".join(", %d %s" % (n, k) for k, n in sorted(answers.items()) if k not in ("200", "429")))
    done(module, prove_checks.FAILED if reasons else status, why + reasons, measured, plan=the_plan, answers=answers,
         left_behind=left)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    the_plan = plan(module)
    if module.params["url"]:
        where(module)
    docker = Docker(module)
    facts, why = read(module, docker, module.params)
    if why:
        done(module, prove_checks.SKIPPED, [why])
    name_route(the_plan, where(module), facts)
    if module.check_mode:
        done(module, prove_checks.PLANNED, [], "would add route %s and send %d requests at once (bound %d s)"
             % (the_plan["route"], the_plan["requests"], the_plan["bound_s"]), plan=the_plan)
    answers, reasons, left = load(module, docker, facts, the_plan)
    verify(module, the_plan, answers, reasons, left)


if __name__ == "__main__":
    main()
