#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: traefik_inflight
short_description: Put a per-client in-flight limit (inFlightReq) on every router of a running Traefik, in place
version_added: "1.0.0"
description:
  - Reads the running Traefik container (C(docker inspect)) to learn where its static config comes from (a YAML or
    TOML file, or command-line flags in a compose file), its mounts, its compose project and its version, then plans
    every change before making one.
  - Writes an inFlightReq middleware (per client IP by default) to a file of its own in Traefik's file provider
    directory and attaches it to the chosen entrypoints in the static config, so every router there runs it - the
    routers of the file provider and of the Docker provider (labels) alike.
  - The user's files are edited line by line in their own format and style; every other byte (comments, order,
    quoting, line endings) is kept, and each edit is parsed back and compared with the intended result before
    anything is written. A compose file is validated with C(docker compose config) before it is written.
  - Where Traefik has no file provider directory it can see (the Docker provider with labels and C(traefik.yml)
    mounted as a single file, the commonest compose setup), the module adds a directory mount beside the static
    config to the compose service and a file provider on it. The middleware then lives in a file the module owns,
    changed live without a restart, and its name C(<name>@file) does not depend on which provider serves a route.
    A single provider file (C(providers.file.filename)) is moved into such a directory and a link left at its place.
  - Traefik is restarted when its static config changed, and re-created from its compose file (same project name,
    files and env files) when the compose file changed. A change of the middleware alone is picked up live.
  - After a change it asks Traefik's own API (an entrypoint on 127.0.0.1 inside Traefik's network namespace) that
    every router that was there before, every router of the user's dynamic files and of container labels, is there
    and enabled and runs the middleware with the new amount. When not, everything is put back as it was, Traefik is
    restarted or re-created on the old files, and the task fails saying why.
  - A value of the user's where the module would set its own is kept and reported (RV(user_values), and a warning
    where it differs) - an C(http2.maxConcurrentStreams), ping, PROXY protocol trusted addresses, an inFlightReq
    of theirs on a limited entrypoint (the module's limit is then not added there) - unless
    O(override_user_values) is set; a replaced value shows in C(--diff). The user's inFlightReq or rateLimit on
    routers (their dynamic files, container labels) and rateLimit on entrypoints are never changed; they are
    reported with what holds beside the module's limit.
  - An entrypoint that serves only TCP routers of the user's (TLS passthrough, a database) does not get the limit
    (it counts HTTP requests); a warning names it. When every entrypoint named is such, the task fails.
  - A Traefik in the host's network namespace (C(network_mode=host)) gets ping on an entrypoint of the module's on a
    free loopback port (RV(ping); never the host's 8080), and no C(net.*) compose sysctls (the runtime refuses them
    there; the host's own are the job of the C(tcp_drain) role). Its API entrypoint is then on the host's own loopback
    (127.0.0.1:9099, refused when taken there); a warning says so.
  - inFlightReq is one limiter per router. A client's real bound is O(amount) x the routers on the limited
    entrypoints; the module returns it (RV(client_bound)) and warns when it exceeds O(client_bound_max).
  - Each change is recorded in O(state_dir) - the user's original of every file it wrote, what it wrote, the
    directories it created, the moved provider file. O(state=absent) puts every file back byte for byte, removes
    what it created, moves the provider file back and restarts or re-creates Traefik on them. A file changed since
    the module wrote it is not overwritten - the task fails before writing anything and says which file.
  - The record is written once the files are, before Traefik is restarted and checked, marked in flight. A run cut
    off there (the controller killed, the connection lost) leaves the user's originals for O(state=absent); the next
    run says so (RV(found)) and restarts or re-creates Traefik on the files as that run would have, then checks it.
    Cut off while compose re-creates Traefik, no container may run under its name; the next run re-creates it with
    C(docker compose up -d --force-recreate) first, saying so. Cut off while it writes the files (a moment), the files are partly
    changed and not yet recorded.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  backup:
    description: Keep a timestamped copy of each of the user's files (static config, compose, provider file) before replacing it.
    type: bool
    default: false
  container:
    description: The running Traefik container (name or ID).
    type: str
    required: true
  name:
    description: The middleware's name (referenced as C(<name>@file)).
    type: str
    default: inflight-limit
  amount:
    description: Simultaneous in-flight requests per group (per client IP by default) and per router.
    type: int
    default: 400
  source:
    description:
      - How requests are grouped. C(ip) the client address, C(host) the request Host (Traefik's own default when no
        criterion is given), C(header) a request header.
    type: str
    choices: [ip, host, header]
    default: ip
  ip_depth:
    description: ipStrategy depth (0 the connection's address; behind the VPS with PROXY protocol, the client's).
    type: int
    default: 0
  excluded_ips:
    description: ipStrategy excludedIPs.
    type: list
    elements: str
    default: []
  header:
    description: The request header for O(source=header).
    type: str
    default: ""
  entrypoints:
    description: Entrypoints whose routers all get the middleware; each must exist in the static config.
    type: list
    elements: str
    default: [websecure]
  dynamic_dir:
    description:
      - The directory the middleware file goes to, as Traefik sees it. Empty - the file provider's directory; with a
        single provider file, a C(dynamic) directory beside it; with none, a C(dynamic) directory beside the static
        config (mounted by the module when Traefik runs from a compose file).
    type: str
    default: ""
  http2_max_streams:
    description:
      - C(http2.maxConcurrentStreams) on the limited entrypoints - the requests one HTTP/2 connection carries at
        once (Traefik's default 250). With a per-IP connection limit in front (the VPS's 100), it bounds one client's
        requests across all routers to connections x streams. 0 leaves Traefik's setting as it is.
      - The default is measured (the collection's benchmarks/bench_traefik_h2_streams.py) - the smallest value whose page
        of 60 requests over one connection stays within 2x of Traefik's default.
    type: int
    default: 32
  client_bound_max:
    description:
      - Warn when a client's bound (O(amount) x the routers on the limited entrypoints) exceeds this.
        0 means 2 x O(amount).
    type: int
    default: 0
  proxy_protocol_trusted_ips:
    description:
      - PROXY protocol on every TCP entrypoint of the user's, trusted from these addresses (the VPS's tunnel
        address). Addresses the user's config trusts already are kept (with O(override_user_values), replaced by
        these); ones the module added on an earlier run and no longer listed are removed (its record in
        O(state_dir) says which). Unset leaves the entrypoints as they are; an empty list removes what the module
        added (and, with O(override_user_values), the user's PROXY protocol trust too).
    type: list
    elements: str
  autoheal_label:
    description: A compose-managed Traefik gets this label set to C(true) (what autoheal watches). Empty - no label.
    type: str
    default: ""
  healthcheck:
    description:
      - A compose-managed Traefik without a health check gets the module's, with these timings (C(interval),
        C(timeout), C(retries), C(start_period)). Unset - none (the user's own is still reviewed).
      - The module's check asks through the user's entrypoint (O(healthcheck_through)) - one HTTP(S) request from
        inside Traefik's network namespace per interval (busybox C(wget), as in the official image), any HTTP status
        counting as alive - so a stall of that entrypoint alone (a full backlog, a dead accept loop, out of file
        descriptors) makes Traefik unhealthy, which C(traefik healthcheck --ping) on Traefik's side entrypoint does
        not see. The request is tried on the running Traefik first; where it gets no HTTP answer, the check asks
        ping instead and a warning says why.
      - The user's own health check is kept and reviewed (RV(healthcheck)); what would make it miss a wedge or
        restart a Traefik that serves (ping in plain HTTP on a TLS entrypoint, a host outside Traefik, ping only,
        unhealthy while Traefik answers) is a warning. O(healthcheck_replace) replaces it.
    type: dict
  healthcheck_through:
    description:
      - C(entrypoint) - the module's health check asks through O(healthcheck_entrypoint); C(ping) - it asks
        C(traefik healthcheck --ping), as before 2.0.0.
    type: str
    choices: [entrypoint, ping]
    default: entrypoint
    version_added: "2.0.0"
  healthcheck_entrypoint:
    description:
      - The entrypoint the health check asks through. Default - the first of O(entrypoints) with a TCP port.
      - HTTPS where the entrypoint or a router of the user's on it uses TLS (the certificate is not checked);
        the request goes to the entrypoint's own address, or to 127.0.0.1 where it listens on every address.
      - Its cost - one request per interval on the path C(/homelab-edge-health) with the user agent
        C(homelab-edge-health), from 127.0.0.1 (its own bucket of the per-client limit); Traefik answers it 404
        unless a router of the user's matches every path, then that router's service answers it.
    type: str
    version_added: "2.0.0"
  healthcheck_replace:
    description:
      - Replace the user's own health check with the module's (shown in C(--diff); O(state=absent) puts theirs back).
    type: bool
    default: false
    version_added: "2.0.0"
  sysctls:
    description:
      - Namespaced sysctls a compose-managed Traefik gets where missing (its own network namespace).
      - A Traefik with C(network_mode=host) gets no C(net.*) ones (the runtime refuses them in the host's namespace;
        a warning says so).
    type: dict
    default: {}
  tunnel_total:
    description:
      - Requests in flight allowed per router from everything that comes through the tunnel together (all client
        addresses of the VPS's forwards share one count); the rest are answered 429 at once. C(0) - no tunnel total.
      - What stops a flood spread over many addresses at Traefik - the per-client limit (O(amount)) holds one
        address only. Requests from the LAN never count - the tunnel gets an entrypoint of its own (O(tunnel_entrypoint)
        on O(tunnel_port), published by compose), which the VPS must forward to instead of the LAN's entrypoint.
      - The tunnel's entrypoint copies the TLS, transport, forwarded-headers and HTTP/2 settings and the middlewares of
        the first of O(entrypoints) (the per-client limit among them), trusts PROXY protocol from
        O(proxy_protocol_trusted_ips), and adds two middlewares of the module's, in this order - a headers middleware
        that overwrites the request header C(X-Homelab-Edge-Pool) with one value, and an inFlightReq keyed on it (a
        client cannot split the count by sending the header itself).
      - A router that lists its entrypoints answers through the tunnel only when it lists O(tunnel_entrypoint) too
        (routers without entryPoints join it by themselves); the module names the others (RV(tunnel)) and warns. Like
        every inFlightReq, the total is one per router - RV(tunnel) says the total in all.
      - Needs Traefik run from a compose file (the port is published there) unless it shares the host's network.
    type: int
    default: 0
    version_added: "2.1.0"
  tunnel_entrypoint:
    description: The name of the tunnel's entrypoint (routers that list their entrypoints name it).
    type: str
    default: tunnel
    version_added: "2.1.0"
  tunnel_port:
    description: The port of the tunnel's entrypoint, in Traefik's network namespace and published on the host.
    type: int
    default: 10443
    version_added: "2.1.0"
  tunnel_publish_address:
    description: The host address compose publishes O(tunnel_port) on (the NAS's tunnel address, say). Empty - every address.
    type: str
    default: ""
    version_added: "2.1.0"
  override_user_values:
    description:
      - Replace the user's own values where the module would set its own (C(http2.maxConcurrentStreams), PROXY
        protocol trusted addresses, an inFlightReq of theirs on a limited entrypoint) instead of keeping them. Each
        is listed in RV(user_values) either way, and the replacement shows in C(--diff).
      - The user's ping and their middlewares on routers are kept either way.
    type: bool
    default: false
    version_added: "2.0.0"
  verify:
    description: After a change, ask Traefik's API (the module adds an entrypoint on 127.0.0.1 and a router to
      C(api@internal) on it) and roll back when a router is gone or disabled or does not run the middleware.
    type: bool
    default: true
  verify_timeout:
    description: Seconds to wait for Traefik to answer with every router after a change.
    type: int
    default: 60
  metrics_port:
    description:
      - Turn on Traefik's Prometheus metrics on an entrypoint of their own, C(homelab-edge-metrics), on this port
        in Traefik's network namespace (all its interfaces; not published), with entrypoint and router labels.
        inFlightReq's 429s count there (C(code="429")). C(0) leaves metrics as they are.
      - A static config that has C(metrics) already (or C(--metrics.*) flags) is kept as it is.
      - Refused when one of the user's entrypoints listens on that port.
    type: int
    default: 0
  traefik_version:
    description:
      - The Traefik version the container runs (C(3), C(3.6) or C(3.6.12)), for a Traefik that does not say it
        (a build from source without its version reports C(dev)). Used only then; where C(traefik version) reports
        one, it counts, and a O(traefik_version) of another major version is refused.
      - Unset - what C(traefik version) reports, else the image's C(org.opencontainers.image.version) label
        (the official image has it); with neither, the task fails and names this option.
    type: str
  state:
    description:
      - C(present) puts the limit in place; C(absent) undoes every change the module recorded for O(container).
      - With C(absent) only O(container) and O(state_dir) are used.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: Where the module keeps its record of what it wrote (one JSON file per container, root only).
    type: path
    default: /var/lib/homelab-edge/traefik-inflight
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Reads and plans everything; writes nothing, restarts nothing.
  diff_mode:
    support: full
    details: Each file that changes (static config, compose file, the middleware file), before and after.
  platform:
    platforms: linux
requirements:
  - the docker CLI with compose v2 on the host; PyYAML; Python 3.11 or tomli for a TOML static config
notes:
  - Traefik's API is read with C(timeout) and C(wget) inside the container (the official image has both).
  - Warns when the user's Traefik is too old for the engine - Traefik v2 before 2.11.31 asks Docker for API 1.24,
    which Docker 29 refuses (its Docker provider then routes no container).
seealso:
  - module: homelab.edge.ufw_connlimit
"""

EXAMPLES = r"""
- name: 400 requests in flight per client IP, on every router of websecure
  homelab.edge.traefik_inflight:
    container: traefik
    amount: 400

- name: The same, with autoheal's label, a ping health check and HTTP/2 streams bounded
  homelab.edge.traefik_inflight:
    container: traefik
    autoheal_label: autoheal
    healthcheck: {interval: 30s, timeout: 5s, retries: 3, start_period: 20s}
    http2_max_streams: 32
"""

RETURN = r"""
found:
  description: What an earlier run cut off left to finish - it changed the files and was cut off before Traefik was
    restarted (or re-created) on them and checked (the controller killed, the connection lost); this run finishes it.
  returned: when an earlier run was cut off so
  type: str
  version_added: "2.1.0"
record:
  description: With O(state=absent), the record the undo was read from.
  returned: state is absent
  type: str
  sample: /var/lib/homelab-edge/traefik-inflight/traefik.json
version:
  description: The Traefik version the plan is for, and where it was read (C(traefik version), C(traefik_version),
    or the image's label).
  returned: state is present
  type: dict
  sample: {"version": "3.6.12", "major": 3, "source": "traefik version"}
mode:
  description: Where Traefik takes its static config from, C(file) or C(flags).
  returned: state is present
  type: str
static:
  description: The static config file on the host (null with flags).
  returned: state is present
  type: str
format:
  description: C(yaml) or C(toml) (null with flags).
  returned: state is present
  type: str
compose:
  description: The compose file Traefik was started from (null with docker run).
  returned: state is present
  type: str
middleware:
  description: The middleware file on the host.
  returned: state is present
  type: str
middleware_ref:
  description: The middleware as routers name it.
  returned: state is present
  type: str
  sample: inflight-limit@file
provider:
  description: The file provider as found (C(kind) directory, filename or none; C(dir), C(dir_host); C(mount) when the module adds one).
  returned: state is present
  type: dict
restart:
  description: Traefik was (or, in check mode, would be) restarted.
  returned: state is present
  type: bool
recreate:
  description: Traefik was (or would be) re-created from its compose file.
  returned: state is present
  type: bool
files:
  description: The files changed (or that would change); with O(state=absent), the files put back.
  returned: success
  type: list
  elements: str
expected_routers:
  description: Routers that must be there after the change (the user's dynamic files, container labels, and what the API showed before).
  returned: state is present
  type: list
  elements: str
client_bound:
  description: What one client can hold in flight - C(amount) x C(routers) on the limited entrypoints (empty when not read).
  returned: state is present
  type: dict
  sample: {"routers": 2, "names": ["auth@file", "site@file"], "amount": 400, "bound": 800, "max": 800, "within": true,
           "text": "800 in flight per client: 400 per router x 2 routers (auth@file, site@file)"}
entrypoints:
  description: The entrypoints that get the module's limit - those named, less the ones that serve only TCP routers
    and the ones where the user's own inFlightReq is kept.
  returned: state is present
  version_added: "2.0.0"
  type: list
  elements: str
user_values:
  description:
    - Values of the user's where the module would set its own - C(setting), C(yours), C(ours), C(kept) (false when
      O(override_user_values) replaced it), C(effective) (what holds, in words) and C(text) (all of it in words).
  returned: state is present
  version_added: "2.0.0"
  type: list
  elements: dict
  sample: [{"setting": "entryPoints.websecure.http2.maxConcurrentStreams", "yours": "100", "ours": 32, "kept": true,
            "effective": "100 requests at once per HTTP/2 connection (yours)",
            "text": "entryPoints.websecure.http2.maxConcurrentStreams: yours (100) kept, the role's would be 32; 100
                     requests at once per HTTP/2 connection (yours)"}]
ping:
  description: Where ping (the health check's) listens - C(entrypoint), C(address), C(by) (C(you) or C(homelab.edge)).
  returned: state is present
  version_added: "2.0.0"
  type: dict
  sample: {"entrypoint": "homelab-edge-ping", "address": "127.0.0.1:9098", "by": "homelab.edge"}
healthcheck:
  description:
    - The container's health check - C(by) (C(homelab.edge), C(you), or null for none), C(test) (as one line),
      C(through) (the entrypoint the module's asks through, C(ping), or null for the user's), C(problems) (the
      review of the user's - C(problem) one of C(outside), C(never_passes), C(ping_only), C(fails) - and its
      C(text)), C(replaced) (the user's replaced - O(healthcheck_replace)).
  returned: state is present
  type: dict
  version_added: "2.0.0"
  sample: {"by": "homelab.edge", "through": "websecure", "replaced": false, "problems": [],
           "test": "wget -q -S -O /dev/null -U homelab-edge-health --no-check-certificate
                    https://127.0.0.1:443/homelab-edge-health 2>&1 | grep -q '^ *HTTP/'"}
network_mode:
  description: The container's network mode (C(host) - Traefik shares the host's network namespace).
  returned: state is present
  version_added: "2.0.0"
  type: str
problems:
  description: What Traefik's API shows amiss (after a change, before the rollback; otherwise as read now).
  returned: always
  type: list
  elements: str
tunnel:
  description:
    - With O(tunnel_total), the tunnel's entrypoint - C(entrypoint), C(port), C(published) (the compose port), C(total),
      C(header), C(middlewares) - and, read from Traefik's API, C(through) (the routers that answer through it),
      C(missing) (routers on the entrypoint the tunnel arrived on before that do not list the tunnel's) and C(text)
      (the total in words).
  returned: when O(tunnel_total) is set
  type: dict
  version_added: "2.1.0"
"""

import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.traefik import entrypoint_url
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import tunnel as traefik_tunnel
from ansible_collections.homelab.edge.plugins.module_utils import undo_record
from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError


STATE_DIR = traefik_inflight.STATE_DIR
# What of the compose project a re-creation needs (kept in the record).
COMPOSE_KEYS = ("project", "project_dir", "files", "env_files", "service")


class Docker(object):
    """The docker CLI of the host, for one container."""

    def __init__(self, module, container):
        self.module = module
        self.bin = module.get_bin_path("docker", required=True)
        self.container = container

    def run(self, argv, cwd=None, data=None):
        return self.module.run_command([self.bin] + argv, environ_update=host.C_ENV, cwd=cwd, data=data,
                                       binary_data=data is not None)

    def inspect(self, what):
        """The container's `docker inspect`, None when there is no such
        container; EditError with the engine's own words for anything else
        (the engine down, no permission on its socket)."""
        rc, out, err = self.run(["inspect", what])
        if rc == 0:
            return json.loads(out)[0]
        if traefik_inflight.NO_SUCH_CONTAINER.search(err or out or ""):
            return None
        raise EditError("docker inspect %s failed: %s; nothing was changed" % (what, (err or out).strip()))

    def exec_(self, *argv):
        return self.run(["exec", self.container] + list(argv))

    def running_labels(self):
        rc, out, err = self.run(["ps", "-q"])
        ids = out.split()
        if rc != 0 or not ids:
            return []
        rc, out, err = self.run(["inspect"] + ids)
        return [(c.get("Config") or {}).get("Labels") or {} for c in json.loads(out)] if rc == 0 else []

    def api(self):
        """(routers, middlewares) from Traefik's API, or None."""
        answers = []
        for what in ("routers", "middlewares"):
            rc, out, err = self.exec_("timeout", str(traefik_inflight.API_TIMEOUT), "wget", "-q", "-O", "-",
                                      "http://127.0.0.1:%d/api/http/%s" % (traefik_inflight.API_PORT, what))
            try:
                answers.append(json.loads(out) if rc == 0 else None)
            except ValueError:
                answers.append(None)
        return None if None in answers else tuple(answers)

    def compose(self, plan, *argv, **kwargs):
        c = plan["compose"]
        args = ["compose", "--project-name", c["project"], "--project-directory", c["project_dir"]]
        for f in c["files"]:
            args += ["-f", f]
        for e in c["env_files"]:
            args += ["--env-file", e]
        return self.run(args + list(argv), cwd=c["project_dir"], data=kwargs.get("data"))


def options(p):
    """The module's options as traefik.py's functions take them."""
    return {"name": p["name"], "amount": p["amount"], "source": p["source"], "depth": p["ip_depth"],
            "excluded_ips": p["excluded_ips"], "header": p["header"], "entrypoints": p["entrypoints"],
            "dynamic_dir": p["dynamic_dir"], "verify_api": p["verify"],
            "proxy_protocol_trusted_ips": p["proxy_protocol_trusted_ips"], "autoheal_label": p["autoheal_label"],
            "healthcheck": p["healthcheck"], "healthcheck_through": p["healthcheck_through"],
            "healthcheck_entrypoint": p["healthcheck_entrypoint"], "healthcheck_replace": p["healthcheck_replace"],
            "sysctls": p["sysctls"], "http2_max_streams": p["http2_max_streams"],
            "metrics_port": p["metrics_port"], "override_user_values": p["override_user_values"],
            "tunnel_total": p["tunnel_total"], "tunnel_entrypoint": p["tunnel_entrypoint"], "tunnel_port": p["tunnel_port"],
            "tunnel_publish_address": p["tunnel_publish_address"]}


def read_dynamic(provider, own):
    """The user's dynamic files {host path: text} (the module's own left out)."""
    texts = {}
    directory = provider["dir_host"]
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if path != own and name.lower().endswith(traefik_inflight.DYNAMIC_SUFFIXES) and os.path.isfile(path):
                texts[path] = host.read_text(path)
    if provider["kind"] == "filename":
        texts[provider["file_host"]] = host.read_text(provider["file_host"])
    return texts


def read_and_plan(module, docker, opts):
    """Everything read and planned; nothing written. EditError when the module cannot work here."""
    container = module.params["container"]
    inspect = docker.inspect(container)
    if not inspect or not (inspect.get("State") or {}).get("Running"):
        raise EditError("No running container named %s: set container (traefik_inflight_container in the role) to "
                        "your Traefik's container name, or traefik_inflight_deploy: true to deploy one" % container)
    rc, version, err = docker.exec_("traefik", "version")
    if rc != 0:
        raise EditError("%s does not answer `traefik version` (%s): is it Traefik?" % (container, (err or version).strip()))
    env, workdir = traefik_inflight.container_env(inspect)
    candidates = traefik_inflight.static_candidates(traefik_inflight.traefik_args(inspect), env, workdir)
    # as Traefik does: whatever exists there (os.Stat), file or not
    rc, found, err = docker.exec_("sh", "-c", entrypoint_url.FIND_EXISTING, "sh",
                                  *candidates)
    facts = traefik_inflight.container_facts(inspect, version, found.splitlines(), module.params["traefik_version"])
    static_path = None
    if facts["source"]["mode"] == "file":
        where = traefik_inflight.host_path(facts["source"]["path"], facts["mounts"])
        static_path = where["host"] if where else None
    static_text = host.read_text(static_path) if static_path else ""
    if static_path and static_text is None:
        raise EditError("%s reads %s, which is %s on the host: it is not there"
                        % (container, facts["source"]["path"], static_path))
    where = traefik_inflight.locate(facts, static_text, opts)
    if facts["network_mode"] == "host":
        # Traefik shares the host's network namespace: what listens there already (its /proc/net is the host's)
        rc, out, err = docker.exec_("sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true")
        if rc != 0 or "local_address" not in out:
            raise EditError("%s shares the host's network namespace (network_mode: host), and the ports the host "
                            "listens on could not be read in it (cat /proc/net/tcp: %s): the role's ping and API "
                            "need free ones there; nothing was changed" % (container, (err or out).strip() or "no output"))
        opts = dict(opts, listening=sorted(traefik_inflight.listening_ports(out)))
    compose_text = None
    if facts["compose"]:
        if not facts["compose"]["files"] or host.read_text(facts["compose"]["files"][0]) is None:
            raise EditError("%s was started by compose from %s, which is not there any more; nothing was changed"
                            % (container, ", ".join(facts["compose"]["files"]) or "a file compose did not record"))
        compose_text = host.read_text(facts["compose"]["files"][0])
    own = traefik_inflight.middleware_file(where["provider"]["dir_host"], opts["name"])
    dynamic = read_dynamic(where["provider"], own)
    containers = docker.running_labels() if where.get("docker") else []
    eps, target = traefik_inflight.health_plan(facts, where, static_text, dynamic, opts, containers)
    if target and opts.get("healthcheck"):
        target["answered"] = docker.exec_("timeout", str(traefik_inflight.API_TIMEOUT), "sh", "-c", target["command"])[0] == 0
        if not target["answered"]:
            rc, out, err = docker.exec_("timeout", str(traefik_inflight.API_TIMEOUT), "sh", "-c", target["request"] + " 2>&1")
            target["output"] = " ".join((out or err or "no answer within %d s" % traefik_inflight.API_TIMEOUT).split())[:200]
    opts = dict(opts, entrypoint_facts=eps, health=target)
    plan = traefik_inflight.plan(facts, where, static_text, compose_text, dynamic, opts, containers)
    rc, min_api, err = docker.run(["version", "--format", "{{.Server.MinAPIVersion}}"])
    warning = traefik_inflight.engine_api_warning(facts["version"], bool(where.get("docker")), min_api.strip() if rc == 0 else "")
    if warning:
        plan["warnings"].append(warning)
    plan["middleware"] = {"path": own, "old": host.read_text(own), "new": traefik_inflight.dynamic_text(opts)}
    return facts, plan


def file_changes(plan):
    """[(path, old, new)] of what changes (old None: a new file)."""
    out = []
    for key in ("static", "compose", "middleware"):
        f = plan.get(key)
        if f and f["old"] != f["new"]:
            out.append((f["path"], f["old"], f["new"]))
    return out


def diff(plan, changes):
    provider = plan["provider"]
    out = [{"before_header": path if old is not None else "/dev/null", "after_header": path,
            "before": old or "", "after": new} for path, old, new in changes]
    if provider["kind"] == "filename" and not os.path.islink(provider["file_host"]):
        moved = os.path.join(provider["dir_host"], os.path.basename(provider["file_host"]))
        out.append({"before_header": provider["file_host"], "after_header": "%s (moved; a link stays)" % moved,
                    "before": "", "after": ""})
    return out


def validate_compose(docker, plan):
    """The new compose file, checked by compose itself (read from stdin, in
    its project directory with its env files) before it is written."""
    c = plan["compose"]
    checked = dict(plan, compose=dict(c, files=["-"] + c["files"][1:]))
    rc, out, err = docker.compose(checked, "config", "-q", data=c["new"])
    if rc != 0:
        raise EditError("the edited compose file %s fails `docker compose config`: %s; nothing was written"
                        % (c["path"], (err or out).strip()))


class Change(object):
    """The change made step by step, each step undone in reverse on failure."""

    def __init__(self, module, docker, plan):
        self.module, self.docker, self.plan = module, docker, plan
        self.undo = []
        self.dirs, self.moved = [], None  # for the undo record
        self.previous = None  # the record before this change (put back with the files on a roll-back)

    def make_dir(self, path):
        top = path
        while not os.path.exists(os.path.dirname(top)):
            top = os.path.dirname(top)
        if not os.path.isdir(path):
            os.makedirs(path, 0o755)
            self.undo.append(lambda: shutil.rmtree(top))
            made = path
            while True:
                self.dirs.append(made)
                if made == top:
                    break
                made = os.path.dirname(made)

    def write(self, path, old, new):
        host.write_text(self.module, path, new, self.module.params["backup"])
        if old is None:
            self.undo.append(lambda: os.path.exists(path) and os.remove(path))
        else:
            self.undo.append(lambda: host.write_text(self.module, path, old))

    def move_provider_file(self):
        provider = self.plan["provider"]
        src = provider["file_host"]
        if os.path.islink(src):
            return
        dest = os.path.join(provider["dir_host"], os.path.basename(src))
        if os.path.exists(dest):
            raise EditError("%s is there already: the role would move %s onto it; nothing was changed" % (dest, src))
        os.rename(src, dest)
        os.symlink(os.path.relpath(dest, os.path.dirname(src)), src)
        self.moved = {"src": src, "dest": dest}

        def back():
            os.remove(src)
            os.rename(dest, src)
        self.undo.append(back)

    def rollback(self):
        for step in reversed(self.undo):
            try:
                step()
            except OSError as e:
                self.module.warn("rollback step failed: %s" % e)
        self.undo = []


def restart(module, docker, plan):
    """Re-create from compose (compose changed) or restart (static config changed)."""
    if plan["recreate"]:
        rc, out, err = docker.compose(plan, "up", "-d", "--no-deps", plan["compose"]["service"])
        what = "docker compose up"
    elif plan["restart"]:
        rc, out, err = docker.run(["restart", docker.container])
        what = "docker restart"
    else:
        return
    if rc != 0:
        raise EditError("%s failed: %s" % (what, (err or out).strip()))


def wait_api(docker, plan, expected, timeout):
    """Problems Traefik's API still shows at the end (empty: all is well), and
    the last answer. Traefik runs the middleware exactly as written before
    anything else counts: until it reloaded the file, its answers are old."""
    deadline = time.time() + timeout
    while True:
        api = docker.api()
        problems = (traefik_inflight.check_api(api[0], api[1], expected, plan["entrypoints"], plan["middleware_ref"],
                                               plan["amount"], plan["inflight"]) + tunnel_problems(api, plan) if api else
                    ["Traefik does not answer on its API"])
        if not problems or time.time() >= deadline:
            return problems, api
        time.sleep(2)


def tunnel_problems(api, plan):
    """What the API shows amiss about the tunnel's total (none asked: nothing)."""
    t = plan.get("tunnel")
    return traefik_tunnel.check(api[0], api[1], t["entrypoint"], plan["middleware_ref"].rpartition("@")[0],
                                t["total"]) if t else []


def tunnel_report(module, api, plan, result):
    """The tunnel's entrypoint and, as Traefik's API shows them, the routers through it and those missing it."""
    t = plan.get("tunnel")
    if not t:
        return
    result["tunnel"] = dict(t)
    if api:
        seen = traefik_tunnel.routers(api[0], plan["entrypoints"], t["entrypoint"])
        result["tunnel"].update(seen, text=traefik_tunnel.bound_text(t["total"], seen["through"]))
        if seen["missing"]:
            module.warn("router(s) %s list their entrypoints without %s: through the tunnel they answer 404. Add %s to "
                        "their entryPoints (a label: traefik.http.routers.NAME.entrypoints=%s,%s) before the VPS forwards "
                        "to port %d" % (", ".join(seen["missing"]), t["entrypoint"], t["entrypoint"],
                                        ",".join(plan["entrypoints"]), t["entrypoint"], t["port"]))


def bound(api, plan, limit):
    return traefik_inflight.client_bound(api[0], plan["entrypoints"], plan["middleware_ref"], plan["amount"], limit) if api else {}


ARGUMENT_SPEC = dict(
    container=dict(type="str", required=True),
    name=dict(type="str", default="inflight-limit"),
    amount=dict(type="int", default=400),
    source=dict(type="str", choices=list(traefik_inflight.SOURCES), default="ip"),
    ip_depth=dict(type="int", default=0),
    excluded_ips=dict(type="list", elements="str", default=[]),
    header=dict(type="str", default=""),
    entrypoints=dict(type="list", elements="str", default=["websecure"]),
    dynamic_dir=dict(type="str", default=""),
    http2_max_streams=dict(type="int", default=32),
    metrics_port=dict(type="int", default=0),
    client_bound_max=dict(type="int", default=0),
    proxy_protocol_trusted_ips=dict(type="list", elements="str"),
    autoheal_label=dict(type="str", default=""),
    healthcheck=dict(type="dict"),
    healthcheck_through=dict(type="str", choices=["entrypoint", "ping"], default="entrypoint"),
    healthcheck_entrypoint=dict(type="str"),
    healthcheck_replace=dict(type="bool", default=False),
    sysctls=dict(type="dict", default={}),
    verify=dict(type="bool", default=True),
    verify_timeout=dict(type="int", default=60),
    backup=dict(type="bool", default=False),
    override_user_values=dict(type="bool", default=False),
    tunnel_total=dict(type="int", default=0),
    tunnel_entrypoint=dict(type="str", default="tunnel"),
    tunnel_port=dict(type="int", default=10443),
    tunnel_publish_address=dict(type="str", default=""),
    traefik_version=dict(type="str"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    state_dir=dict(type="path", default=STATE_DIR),
)


def read(module, docker):
    """Step 1, read and plan: everything known, nothing written. Fails the
    task (one message, nothing changed) when the module cannot work here."""
    p = module.params
    try:
        inflight = traefik_inflight.inflight_middleware(p["name"], p["amount"], p["source"], p["ip_depth"], p["excluded_ips"],
                                                        p["header"])["http"]["middlewares"][p["name"]]["inFlightReq"]
        if not p["entrypoints"]:
            raise EditError("entrypoints is empty: name at least one entrypoint to limit")
        if p["http2_max_streams"] < 0:
            raise EditError("http2_max_streams must be >= 0 (0 leaves Traefik's own), got %d" % p["http2_max_streams"])
        extra = (host.read_record(record_path(module)) or {}).get("extra", {})
        opts = dict(options(p), trusted_added_before=extra.get("trusted_added"), written_before=extra.get("written"))
        facts, plan = read_and_plan(module, docker, opts)
        plan["inflight"] = inflight
        if plan["compose"] and plan["recreate"]:
            validate_compose(docker, plan)
    except EditError as e:
        module.fail_json(msg=str(e), problems=[])
    for warning in plan.get("warnings", []):
        module.warn(warning)
    return facts, plan


def planned(module, docker, facts, plan):
    """The result as planned (what changes, the diff) and the routers that
    must be there after it (the plan's and what Traefik's API shows now)."""
    provider = plan["provider"]
    changes = file_changes(plan)
    plan["moves"] = provider["kind"] == "filename" and not os.path.islink(provider["file_host"])
    result = dict(changed=bool(changes) or plan["moves"] or not os.path.isdir(provider["dir_host"]),
                  version={"version": facts["version"], "major": facts["major"], "source": facts["version_source"]},
                  mode=plan["mode"], static=(plan["static"] or {}).get("path"),
                  format=traefik_inflight.static_format(plan["static"]["path"]) if plan["static"] else None,
                  compose=(plan["compose"] or {}).get("path"), middleware=plan["middleware"]["path"],
                  middleware_ref=plan["middleware_ref"], provider=provider, restart=plan["restart"],
                  recreate=plan["recreate"], files=[c[0] for c in changes], client_bound={}, problems=[],
                  entrypoints=plan["entrypoints"], user_values=plan["user_values"], ping=plan["ping"],
                  network_mode=plan["network_mode"], healthcheck=plan["healthcheck"])
    if module._diff:
        result["diff"] = diff(plan, changes)
    before = docker.api() if module.params["verify"] else None
    baseline = set(r["name"] for r in before[0]) if before else set()
    expected = set(r for r in set(plan["expected_routers"]) | baseline if not r.startswith(traefik_inflight.API_ROUTER + "@"))
    result["expected_routers"] = sorted(expected)
    return changes, result, before, expected


def change(module, docker, plan, changes):
    """Step 2, change: the directory, the moved provider file, each file, the
    restart or re-creation; each step recorded for its undo. The record is
    written before the restart, marked in flight: a run cut off while Traefik
    restarts (or while it is checked) leaves the user's originals for the undo,
    and the next run finishes the restart (resume)."""
    made = Change(module, docker, plan)
    made.previous = host.read_record(record_path(module))
    try:
        made.make_dir(plan["provider"]["dir_host"])
        if plan["moves"]:
            made.move_provider_file()
        for path, old, new in changes:
            made.write(path, old, new)
        remember(module, plan, changes, made, in_flight=True)
        restart(module, docker, plan)
    except (EditError, OSError) as e:
        return made, ["the change failed: %s" % e]
    return made, []


def verify(module, docker, plan, expected):
    """Step 3, verify: Traefik's API shows every expected router, enabled and
    running the middleware as written. (problems, the API's last answer)."""
    if not module.params["verify"]:
        return [], None
    return wait_api(docker, plan, expected, module.params["verify_timeout"])


def roll_back(module, docker, plan, made, problems, result):
    """Step 4, undo on failure: every step in reverse, Traefik restarted on
    the user's files; the task fails saying why."""
    result["problems"] = problems
    made.rollback()
    host.write_record(module, record_path(module), made.previous)
    try:
        restart(module, docker, plan)
    except EditError as e:
        problems.append("and putting it back failed too: %s" % e)
    module.fail_json(msg="The change was rolled back: your previous static config, compose file and dynamic files "
                         "are in place again and Traefik was restarted on them. Why: %s" % "; ".join(problems),
                     **result)


def remember(module, plan, changes, made, in_flight=False):
    """What was written over the user's files, for state=absent; in_flight: before the restart and the check (what
    to restart is kept for the next run)."""
    extra = {"restart": True} if plan["restart"] or plan["recreate"] else {}
    extra["trusted_added"] = plan["trusted_added"]  # a later run drops the ones no longer wanted
    extra["written"] = plan["written"]  # values of the role's, not the user's, on a later run
    extra["user_values"] = plan["user_values"]  # what of the user's was kept (or replaced), as last planned
    if plan["recreate"]:
        extra["compose"] = dict((k, plan["compose"][k]) for k in COMPOSE_KEYS)
    # from the record before this change, once in flight and once at the end (not from the one in flight: its
    # "written" is this change's, and the file's text before it would read as changed by someone else)
    record = undo_record.remember(made.previous, changes, made.dirs, made.moved, extra)
    record["extra"].pop("in_flight", None)
    if in_flight:
        record["extra"]["in_flight"] = {"at": int(time.time()), "files": [c[0] for c in changes],
                                        "restart": bool(plan["restart"]), "recreate": bool(plan["recreate"])}
    host.write_record(module, record_path(module), record)


def recover(module, docker):
    """A run cut off while compose re-created Traefik can leave no container running under its name (compose renames
    the old one before it creates the new one). With that run's record in flight and its compose project recorded,
    compose brings Traefik up again first - said in a warning - and this run goes on from there."""
    extra = (host.read_record(record_path(module)) or {}).get("extra") or {}
    if not (extra.get("in_flight") or {}).get("recreate") or not extra.get("compose"):
        return
    try:
        inspect = docker.inspect(module.params["container"])
    except EditError as e:
        module.fail_json(msg=str(e))
    if inspect and (inspect.get("State") or {}).get("Running"):
        return
    c = extra["compose"]
    what = "found %s not running after a run cut off at %s while compose re-created it" % (
        module.params["container"], time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(extra["in_flight"]["at"])))
    if module.check_mode:
        module.warn("%s: a run would bring it up with docker compose up -d in %s" % (what, c["project_dir"]))
        return
    # forced: compose renamed the old container (<id>_<name>) before it was cut off; started again, it would keep
    # that name (measured, compose 2.40); re-created, it gets its own back
    rc, out, err = docker.compose({"compose": c}, "up", "-d", "--no-deps", "--force-recreate", c["service"])
    if rc != 0:
        module.fail_json(msg="%s, and docker compose up -d --force-recreate in %s failed: %s; nothing else was changed"
                             % (what, c["project_dir"], (err or out).strip()))
    module.warn("%s: re-created it with docker compose up -d --force-recreate in %s" % (what, c["project_dir"]))


def resume(module, plan, result):
    """A run cut off after it changed the files and before Traefik was restarted on them and checked (its record still
    in flight): said (RV(found)), and this run restarts or re-creates Traefik as that one would have, then checks."""
    flight = ((host.read_record(record_path(module)) or {}).get("extra") or {}).get("in_flight")
    if not flight:
        return
    plan["recreate"] = plan["recreate"] or (flight["recreate"] and bool(plan["compose"]))
    plan["restart"] = plan["restart"] or flight["restart"]
    result.update(changed=True, restart=plan["restart"], recreate=plan["recreate"], found=(
        "a run cut off at %s, after it changed %s and before Traefik was %s on them and checked: %s"
        % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(flight["at"])), ", ".join(flight["files"]) or "no file",
           "re-created" if plan["recreate"] else "restarted" if plan["restart"] else "reloading them",
           "a run would finish that" if module.check_mode else "this run finishes that")))
    module.warn("found " + result["found"])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    host.require_root(module, "reads Traefik's container through Docker and writes Traefik's files")
    docker = Docker(module, p["container"])
    recover(module, docker)
    if p["state"] == "absent":
        undo(module, docker)
    facts, plan = read(module, docker)
    changes, result, before, expected = planned(module, docker, facts, plan)
    resume(module, plan, result)
    if module.check_mode or not result["changed"]:
        if before and not module.check_mode:
            result["problems"] = traefik_inflight.check_api(before[0], before[1], expected, plan["entrypoints"],
                                                            plan["middleware_ref"], plan["amount"]) + tunnel_problems(before, plan)
        result["client_bound"] = bound(before, plan, p["client_bound_max"])
        tunnel_report(module, before, plan, result)
        finish(module, result)
    made, problems = change(module, docker, plan, changes)
    api = None
    if not problems:
        problems, api = verify(module, docker, plan, expected)
    if problems:
        roll_back(module, docker, plan, made, problems, result)
    remember(module, plan, changes, made)
    result["client_bound"] = bound(api, plan, p["client_bound_max"])
    tunnel_report(module, api, plan, result)
    finish(module, result)


def record_path(module):
    return os.path.join(module.params["state_dir"], "%s.json" % module.params["container"])


def undo(module, docker):
    """state=absent: every file the module wrote put back as it was before
    the first run, what it created removed, the provider file moved back,
    Traefik restarted on them. Refused, before anything is written, for a
    file changed since the module wrote it."""
    record = host.read_record(record_path(module))
    result = dict(changed=False, files=[], record=record_path(module))
    if not record:
        module.exit_json(msg="no record of a change by homelab.edge.traefik_inflight to %s in %s: nothing to undo"
                             % (module.params["container"], module.params["state_dir"]), **result)
    current = dict((path, host.read_text(path)) for path in record.get("files") or {})
    steps, changed_since = undo_record.undo_plan(record, current)
    if changed_since:
        module.fail_json(msg="%s changed since homelab.edge.traefik_inflight wrote %s: putting back the original "
                             "would lose that change, so nothing was changed. Take the role's lines out by hand (the "
                             "original and what the role wrote are in %s), then delete that record."
                             % (", ".join(changed_since), "it" if len(changed_since) == 1 else "them",
                                record_path(module)), **result)
    moved = record.get("moved")
    unmove = bool(moved and os.path.islink(moved["src"]) and os.path.exists(moved["dest"]))
    dirs = [d for d in sorted(record.get("dirs") or [], key=len, reverse=True) if os.path.isdir(d)]
    result.update(changed=bool(steps or unmove or dirs), files=[path for op, path, text in steps])
    if module._diff:
        result["diff"] = undo_record.undo_diff(steps, current)
    if module.check_mode:
        module.exit_json(**result)
    for op, path, text in steps:
        host.write_text(module, path, text)  # a "remove" step's text is None
    if unmove:
        os.remove(moved["src"])
        os.rename(moved["dest"], moved["src"])
    for d in dirs:
        if os.listdir(d):
            module.warn("%s was created by homelab.edge and holds files of someone else's now: it stays" % d)
        else:
            os.rmdir(d)
    extra = record.get("extra") or {}
    try:
        if extra.get("compose"):
            restart(module, docker, {"compose": extra["compose"], "recreate": True})
        elif extra.get("restart"):
            restart(module, docker, {"compose": None, "recreate": False, "restart": True})
    except EditError as e:
        module.fail_json(msg="your files are back as they were before homelab.edge, but restarting Traefik on them "
                             "failed: %s" % e, **result)
    host.write_record(module, record_path(module), None)
    module.exit_json(**result)


def finish(module, result):
    b = result["client_bound"]
    if b and not b["within"]:
        module.warn(b["text"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
