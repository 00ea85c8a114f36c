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
    the confd template inside each running container so that every UDP server gets the profile of
    its port (O(udp_ports)) - C(dns) ports end a session at the first reply (C(proxy_responses 1))
    and time out after O(udp_timeout) seconds; C(stream) ports (WireGuard, QUIC, game servers) keep
    every datagram and time out after O(udp_stream_timeout) - and all UDP servers share a
    session budget (stream C(limit_conn)) that leaves the rest of the worker's connections to
    TCP (HTTPS, the Kubernetes API). TCP servers keep k3d's C(defaultProxyTimeout).
  - The template also keeps C(worker_connections) at no less than O(worker_connections), whatever
    k3d writes into C(values.yaml) (k3d rewrites it to 1024 + ports x servers whenever a server
    node is added or deleted), computes the budget from that same number, and sets
    C(worker_rlimit_nofile).
  - C(values.yaml) belongs to k3d and is never written. The module renders with
    C(confd -onetime) inside the container, which checks the result with nginx and reloads it; it
    then reads the rendered C(nginx.conf) and the open-file limit of nginx's current workers. The
    decision to render comes from the template and from what nginx runs, so a patched template
    whose render never went live is rendered again. A render that confd or nginx rejects is rolled
    back (the template as before, rendered again; nginx keeps serving meanwhile).
  - Renamed leftovers of a recreate (C(<name>-xxxxx)) are ignored. Discovered load balancers that
    are not running are skipped with a warning; one named in O(names) that is not running fails.
  - Load balancers are handled in parallel; one failing does not stop the others.
author:
  - homelab.edge contributors (@homelab-edge)
requirements:
  - docker (Python SDK) on the host that runs the module
  - A Docker engine with the k3d load balancers, reachable by the user the module runs as
    (root, or a member of the docker group)
options:
  clusters:
    description: Only the load balancers of these k3d clusters (label C(k3d.cluster)). Empty means all.
    type: list
    elements: str
    default: []
    aliases: [cluster]
  names:
    description: Explicit container names. When set, discovery by label is not used.
    type: list
    elements: str
    default: []
  udp_ports:
    description:
      - 'The UDP profile of each port, port -> C(dns) or C(stream), for example C({53: dns, 1053: dns, 51820: stream}).'
      - C(dns) - a session ends at the first reply (C(proxy_responses 1)) or after O(udp_timeout) seconds of silence -
        for DNS and other protocols with one reply per request.
      - C(stream) - no reply limit (no C(proxy_responses)); a session ends after O(udp_stream_timeout) seconds of
        silence - for WireGuard, QUIC (HTTP/3), game servers, syslog or SNMP with a reply stream. With C(dns) on such a
        port, everything the server sends after its first reply is dropped.
      - Port 53 is C(dns) unless named here. A UDP port of a load balancer that is not named gets C(stream), with a
        warning that names it. Both profiles count against the UDP session budget (O(udp_share)).
      - The result shows each UDP port with its profile (RV(load_balancers[].udp_profiles)).
    type: dict
    default: {"53": dns}
    version_added: "2.0.0"
  udp_stream_timeout:
    description:
      - Seconds of silence after which a session on a C(stream) UDP port ends (up to 86400).
      - C(0) keeps k3d's own timeout (C(settings.defaultProxyTimeout), 600 s unless set), as TCP has it.
    type: int
    default: 0
    version_added: "2.0.0"
  udp_timeout:
    description:
      - Seconds of silence after which a session on a C(dns) UDP port ends (C(proxy_timeout) on those servers only).
      - A DNS client gives up after a few seconds (glibc's resolver after 5), so a reply later than
        that has no reader; a shorter hold frees connections faster when the DNS server hangs.
    type: int
    default: 5
  worker_connections:
    description:
      - The least C(worker_connections) nginx gets. The template takes the larger of this and
        C(settings.workerConnections) from k3d's C(values.yaml).
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
        computed by the template from the connections it renders.
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
  render_timeout:
    description:
      - Seconds, per load balancer, to wait for nginx to run (a load balancer that just started
        renders three times, 2 s apart, before it starts nginx), for one C(confd -onetime) render,
        and for nginx's new workers to carry the settings.
    type: int
    default: 30
    aliases: [timeout]
  require_full_fix:
    description:
      - A load balancer whose container caps open files below O(worker_rlimit_nofile) (nginx cannot raise its
        hard limit, as with C(k3d cluster create --runtime-ulimit nofile=1024:1024) or dockerd's C(default-ulimits); a
        stock Docker 29 with containerd 2 gives soft 1024 but hard 524288, which is no cap) still gets the whole
        DNS fix -
        C(proxy_responses 1), the short timeout and the session budget - with C(worker_connections) fitted under
        the cap. It is reported as C(fixed with a cap), with a warning naming the limit, what it costs and the
        remedy.
      - C(true) makes such a load balancer a failure (for example in CI), after it was fixed as far as it can be.
    type: bool
    default: false
  state:
    description:
      - C(present) applies the fix.
      - C(absent) removes it (the undo). Each load balancer's confd template becomes k3d's own again (the managed
        blocks back to k3d's C(worker_connections) and C(proxy_timeout) lines, the session zone and
        C(worker_rlimit_nofile) gone), is rendered, and nginx is checked to run none of the fix; C(worker_connections)
        is then what k3d writes into C(values.yaml). A template without the fix is not touched. Stop the keeper first
        (the role does), or it patches the load balancers again.
    type: str
    choices: [present, absent]
    default: present
    version_added: "1.0.0"
  docker_host:
    description: Docker API address. Defaults to the environment (C(DOCKER_HOST)) or the local socket.
    type: str
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: partial
    details: The diff shows the confd template. The C(nginx.conf) that confd renders from it is not part of the diff.
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

- name: DNS on 53 and 1053, WireGuard on 51820 keeps every datagram
  homelab.edge.k3d_serverlb:
    udp_ports: {53: dns, 1053: dns, 51820: stream}
    udp_stream_timeout: 180

- name: Only the core cluster, longer UDP hold, report without changing (check mode)
  homelab.edge.k3d_serverlb:
    clusters: [core]
    udp_timeout: 10
  check_mode: true
  register: lb

- name: Remove the fix (k3d's own template and limits back)
  homelab.edge.k3d_serverlb:
    state: absent

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
    reasons: {description: What was (or would be) fixed., type: list, elements: str}
    failed: {description: Whether this load balancer failed., type: bool}
    msg: {description: Why it failed or was skipped., type: str}
    worker_connections: {description: Rendered worker_connections., type: int, sample: 4096}
    worker_rlimit_nofile: {description: Rendered worker_rlimit_nofile (null when unset)., type: int, sample: 16384}
    open_file_limit: {description: Open files an nginx worker really gets., type: int, sample: 16384}
    udp_servers: {description: UDP server blocks., type: int, sample: 2}
    udp_servers_patched: {description: UDP server blocks with proxy_responses 1 (the C(dns) ones once fixed)., type: int, sample: 2}
    udp_ports: {description: Ports of the UDP servers., type: list, elements: str, sample: ["53", "1053"]}
    udp_profiles:
      description:
        - Each UDP server with its profile - C(port), C(profile) (C(dns) or C(stream), from O(udp_ports)), C(declared)
          (false - not named, stream by default), C(live) (what nginx runs - C(dns) when a reply ends the session),
          C(proxy_timeout) (seconds) and C(text) (the same in words).
      type: list
      elements: dict
      sample: [{port: "51820", profile: stream, declared: true, live: stream, proxy_timeout: 600,
                text: "51820/udp stream: sessions stay open (every datagram delivered) until 600 s of silence"}]
      version_added: "2.0.0"
    udp_profiles_text: {description: The profiles in words (status shows it)., type: str}
    udp_dns_unfixed: {description: C(dns) ports whose sessions nginx does not end at the first reply., type: list, elements: str}
    udp_stream_cut: {description: C(stream) ports where nginx ends a session at the first reply (tunnels lose datagrams)., type: list, elements: str}
    udp_ports_undeclared: {description: UDP ports not named in O(udp_ports) (stream by default; a warning names them)., type: list, elements: str}
    udp_timeout: {description: Longest proxy_timeout of the C(dns) UDP ports in seconds (null without any)., type: float, sample: 5}
    udp_session_budget: {description: UDP sessions allowed at once (null when none)., type: int, sample: 1024}
    exhaustion_rate:
      description: New UDP sessions per second that fill every connection if no reply comes
        (connections / (2 x UDP timeout)).
      type: float
      sample: 409.6
    summary: {description: The seed's --check line., type: str}
    state:
      description: C(fixed), C(capped) (fixed with a cap on open files) or C(not_fixed) (also what check mode reports
        for a load balancer it would change); with O(state=absent), C(removed) once the fix is gone.
      type: str
      sample: capped
    state_text: {description: The state in words (status and diagnose use the same)., type: str, sample: fixed with a cap (1024 open files)}
    open_file_cap: {description: The open-file limit nginx could not raise (null when none)., type: int, sample: 1024}
    warnings: {description: "Capacity warnings, and the UDP ports without a declared profile.", type: list, elements: str}
failed_load_balancers:
  description: Names of the load balancers that failed.
  returned: always
  type: list
  elements: str
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.docker_engine import connect, docker


def argument_spec():
    return dict(k3d_fix.option_spec(),
                clusters=dict(type="list", elements="str", default=[], aliases=["cluster"]),
                names=dict(type="list", elements="str", default=[]),
                render_timeout=dict(type="int", default=k3d_fix.RENDER_TIMEOUT, aliases=["timeout"]),
                require_full_fix=dict(type="bool", default=False),
                state=dict(type="str", default="present", choices=["present", "absent"]),
                docker_host=dict(type="str"))


def wanted_settings(module):
    want = dict((k, module.params[k]) for k in k3d_fix.DEFAULTS)
    problems = k3d_fix.validate_options(**want)
    if module.params["render_timeout"] < 1:
        problems.append("render_timeout must be at least 1 second")
    if problems:
        module.fail_json(msg="; ".join(problems))
    return want


def fix_all(module, client, want):
    """Each load balancer in parallel (each waits for its own render)."""
    found = k3d_container.find_load_balancers(client, module.params["names"], module.params["clusters"],
                                              not_found=docker.errors.NotFound)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(found)))) as pool:
        return list(pool.map(lambda item: k3d_fix.handle(item[1], item[0], item[2], want, module.check_mode,
                                                         module.params["render_timeout"],
                                                         module.params["require_full_fix"],
                                                         module.params["state"] == "absent"), found))


def finish(module, results):
    diffs = [d for r in results for d in r.pop("diff")]
    for r in results:
        if r["msg"].startswith("skipped:"):
            module.warn("%s: %s" % (r["name"], r["msg"]))
        for w in r.get("warnings", []):
            module.warn(w)
    failed = [r["name"] for r in results if r["failed"]]
    out = dict(changed=any(r["changed"] for r in results), load_balancers=results, failed_load_balancers=failed)
    if module._diff:
        out["diff"] = diffs
    if failed:
        module.fail_json(msg="; ".join(r["msg"] for r in results if r["failed"]), **out)
    module.exit_json(**out)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    want = wanted_settings(module)
    client = connect(module, module.params["docker_host"])
    finish(module, fix_all(module, client, want))


if __name__ == "__main__":
    main()
