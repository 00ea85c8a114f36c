#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k3d_serverlb
short_description: Keep k3d's nginx load balancer from running out of connections on UDP
version_added: "0.1.0"
description:
  - Finds k3d load balancers through the Docker API (label C(k3d.role=loadbalancer)) and patches
    the confd template inside each running container so that UDP servers end a session at the
    first reply (C(proxy_responses 1)), time out after O(udp_timeout) seconds, and share a
    session budget (stream C(limit_conn)) that leaves the rest of the worker's connections to
    TCP (HTTPS, the Kubernetes API). TCP servers keep k3d's C(defaultProxyTimeout).
  - Adds C(worker_rlimit_nofile) to the main context and sets C(settings.workerConnections)
    in C(values.yaml).
  - C(values.yaml) is replaced by rename, never truncated, so confd in watch mode renders the
    new config; the module then waits until C(nginx -T) in the container shows it. A render that
    confd or nginx rejects is rolled back (template and values as before; nginx keeps serving).
  - Renamed leftovers of a recreate (C(<name>-xxxxx)) are ignored. Discovered load balancers that
    are not running are skipped with a warning; one named in O(names) that is not running fails.
  - One failing load balancer does not stop the others; the result says which failed.
author:
  - homelab.edge contributors (@homelab-edge)
requirements:
  - docker (Python SDK) on the host that runs the module
  - A Docker engine with the k3d load balancers
options:
  cluster:
    description: Only the load balancers of these k3d clusters (label C(k3d.cluster)).
    type: list
    elements: str
    default: []
  names:
    description: Explicit container names. When set, discovery by label is not used.
    type: list
    elements: str
    default: []
  udp_timeout:
    description:
      - Seconds of silence after which a UDP session ends (C(proxy_timeout) on UDP servers only).
      - A DNS client gives up after a few seconds (glibc's resolver after 5), so a reply later than
        that has no reader; a shorter hold frees connections faster when the DNS server hangs.
    type: int
    default: 5
  worker_connections:
    description: C(settings.workerConnections) written to values.yaml.
    type: int
    default: 4096
  worker_rlimit_nofile:
    description: Open-file limit of each nginx worker (main context). Should be at least O(worker_connections).
    type: int
    default: 16384
  udp_share:
    description:
      - Percentage of the worker connections that UDP sessions may hold together. Each UDP session
        holds two connections, so the budget is C(worker_connections * udp_share / 200) sessions,
        computed by the template from the live C(workerConnections) (so it follows k3d rewriting it).
    type: int
    default: 50
  budget_log_level:
    description:
      - Level at which nginx logs a UDP session refused by the budget (C(limit_conn_log_level)).
      - k3d's nginx logs at C(notice) and above, so the default C(info) keeps refusals out of the log.
        Under a DNS flood every refused query would otherwise write a line into the container log,
        which Docker stores unrotated by default; in the lab that logging cost more CPU than the
        refusals saved (at 17,000 queries/s, 40,000 lines in 10 s and a quarter of all queries lost).
      - Set C(warn) to see refusals while investigating.
    type: str
    choices: [info, notice, warn, error]
    default: info
  timeout:
    description: Seconds to wait, per load balancer, for C(nginx -T) to show the new settings.
    type: int
    default: 30
  docker_host:
    description: Docker API address. Defaults to the environment (C(DOCKER_HOST)) or the local socket.
    type: str
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  platform:
    platforms: posix
notes:
  - k3d recreates the load balancer from its image on C(cluster edit) and port changes, which loses
    the template patch; the C(homelab.edge.k3d_serverlb) role installs a keeper that re-applies it.
seealso:
  - name: nginx stream proxy module
    description: proxy_responses and proxy_timeout
    link: https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html
"""

EXAMPLES = r"""
- name: Fix every k3d load balancer on this host
  homelab.edge.k3d_serverlb:

- name: Only the core cluster, longer UDP hold, report without changing (check mode)
  homelab.edge.k3d_serverlb:
    cluster: [core]
    udp_timeout: 10
  check_mode: true
  register: lb

- name: Print the seed's --check lines
  ansible.builtin.debug:
    msg: "{{ lb.load_balancers | map(attribute='summary') | list }}"
"""

RETURN = r"""
load_balancers:
  description: One entry per load balancer handled.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Container name., type: str, sample: k3d-core-serverlb}
    cluster: {description: k3d cluster (label k3d.cluster)., type: str, sample: core}
    changed: {description: Whether this load balancer was (or in check mode would be) changed., type: bool}
    failed: {description: Whether this load balancer failed., type: bool}
    msg: {description: Why it failed or was skipped., type: str}
    worker_connections: {description: Live worker_connections., type: int, sample: 4096}
    worker_rlimit_nofile: {description: Live worker_rlimit_nofile (null when unset)., type: int, sample: 16384}
    open_file_limit: {description: Open files an nginx worker really gets., type: int, sample: 16384}
    udp_servers: {description: UDP server blocks., type: int, sample: 2}
    udp_servers_patched: {description: UDP server blocks with proxy_responses 1., type: int, sample: 2}
    udp_ports: {description: Ports of the UDP servers., type: list, elements: str, sample: ["53", "1053"]}
    udp_timeout: {description: Longest UDP proxy_timeout in seconds., type: float, sample: 5}
    udp_session_budget: {description: UDP sessions allowed at once (null when none)., type: int, sample: 1024}
    exhaustion_rate:
      description: New UDP sessions per second that fill every connection if no reply comes
        (connections / (2 x UDP timeout)).
      type: float
      sample: 409.6
    summary: {description: The seed's --check line., type: str}
    warnings: {description: Capacity warnings., type: list, elements: str}
failed_load_balancers:
  description: Names of the load balancers that failed.
  returned: always
  type: list
  elements: str
"""

import traceback
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb as lb

try:
    import docker
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()


def find_containers(client, names, clusters):
    """[(name, container or None, explicit)]; leftovers of a recreate dropped."""
    if names:
        found = []
        for name in names:
            try:
                found.append((name, client.containers.get(name), True))
            except docker.errors.NotFound:
                found.append((name, None, True))
        return found
    filters = {"label": ["k3d.role=loadbalancer"]}
    containers = client.containers.list(all=True, filters=filters)
    out = []
    for c in sorted(containers, key=lambda c: c.name):
        if lb.is_renamed_leftover(c.name):
            continue
        if clusters and c.labels.get("k3d.cluster") not in clusters:
            continue
        out.append((c.name, c, False))
    return out


def diff_entries(name, res):
    entries = []
    for label, path in (("template", lb.TEMPLATE_PATH), ("values", lb.VALUES_PATH)):
        before, after = res[label]
        if before != after:
            entries.append({"before_header": "%s:%s" % (name, path), "after_header": "%s:%s" % (name, path),
                            "before": before, "after": after})
    return entries


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster=dict(type="list", elements="str", default=[]),
            names=dict(type="list", elements="str", default=[]),
            udp_timeout=dict(type="int", default=lb.DEFAULTS["udp_timeout"]),
            worker_connections=dict(type="int", default=lb.DEFAULTS["worker_connections"]),
            worker_rlimit_nofile=dict(type="int", default=lb.DEFAULTS["worker_rlimit_nofile"]),
            udp_share=dict(type="int", default=lb.DEFAULTS["udp_share"]),
            budget_log_level=dict(type="str", default=lb.DEFAULTS["budget_log_level"], choices=list(lb.LOG_LEVELS)),
            timeout=dict(type="int", default=30),
            docker_host=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    want = dict((k, p[k]) for k in lb.DEFAULTS)
    problems = lb.validate_options(**want)
    if p["timeout"] < 1:
        problems.append("timeout must be at least 1 second")
    if problems:
        module.fail_json(msg="; ".join(problems))
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)

    try:
        client = docker.DockerClient(base_url=p["docker_host"]) if p["docker_host"] else docker.from_env()
        client.ping()
        found = find_containers(client, p["names"], p["cluster"])
    except Exception as e:
        module.fail_json(msg="cannot reach the Docker engine: %s" % e)

    def handle(item):
        """One load balancer; never raises, so one failure cannot stop the others."""
        name, container, explicit = item
        entry = {"name": name, "changed": False, "failed": False, "msg": "", "diff": []}
        if container is None:
            entry.update(failed=True, msg="no container named %s" % name)
            return entry
        cluster = container.labels.get("k3d.cluster")
        if container.status != "running" and not explicit:
            entry.update(cluster=cluster, msg="skipped: container is %s" % container.status)
            return entry
        try:
            res = lb.apply(container, want, check_mode=module.check_mode, timeout=p["timeout"])
            entry.update(lb.report(name, cluster, res["facts"], res["open_file_limit"]))
            entry.update(changed=res["changed"], diff=diff_entries(name, res))
            if module.check_mode and res["changed"]:
                entry["msg"] = "would patch (udp ports: %s)" % (", ".join(res["udp_ports"]) or "none")
        except (lb.ShapeError, lb.ApplyError) as e:
            entry.update(cluster=cluster, failed=True, msg="%s: %s" % (name, e))
        except Exception as e:  # the Docker API can fail in many ways; keep going
            entry.update(cluster=cluster, failed=True, msg="%s: %s: %s" % (name, type(e).__name__, e))
        return entry

    # Load balancers are independent: handle them in parallel (each waits for its own render).
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(found)))) as pool:
        results = list(pool.map(handle, found))
    diffs = [d for r in results for d in r.pop("diff")]
    for r in results:
        if r["msg"].startswith("skipped:"):
            module.warn("%s: %s" % (r["name"], r["msg"]))
        for w in r.get("warnings", []):
            module.warn(w)
    failed = [r["name"] for r in results if r["failed"]]
    changed = any(r["changed"] for r in results)

    out = dict(changed=changed, load_balancers=results, failed_load_balancers=failed)
    if module._diff:
        out["diff"] = diffs
    if failed:
        module.fail_json(msg="; ".join(r["msg"] for r in results if r["failed"]), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
