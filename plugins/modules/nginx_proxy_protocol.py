#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nginx_proxy_protocol
short_description: Send PROXY protocol from an nginx stream proxy to the servers behind it, safely
version_added: "0.1.0"
description:
  - A TCP stream proxy (TLS passthrough) hides every client's address from what is behind it. Traefik sees
    the proxy's address for everyone, so a per-client-IP limit there is one shared bucket. PROXY protocol
    carries the client's address through.
  - Adds one marked line, C(proxy_protocol on;), right after the C(proxy_pass) of each stream server
    (in O(config) or a file it includes inside C(stream {})) that forwards to one of O(upstreams) (an address,
    or an upstream block with such servers). Every other byte of your files stays; C(state=absent) takes
    the lines out again. A stream server that sets C(proxy_protocol) itself is left to you (the task fails).
  - "Order matters: if nginx sends PROXY protocol before the server behind it expects it, TLS breaks for
    everyone. Before it changes anything the module asks each upstream itself: it opens a connection, sends
    a PROXY protocol header and then a TLS handshake (O(tls_ports)) or an HTTP request, and changes nothing
    unless the upstream answers. Traefik accepts both with and without the header from a trusted address, so
    the right order is: Traefik first (C(traefik_inflight_proxy_protocol_trusted_ips)), then this module."
  - The edited files are checked with C(nginx -t) before nginx is reloaded (a file that fails is put back),
    and after the reload a connection through the changed listeners must work; otherwise the previous files
    are put back and nginx is reloaded on them.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  backup:
    description: Keep a timestamped copy of each nginx configuration file before changing it.
    type: bool
    default: false
  upstreams:
    description: Addresses (C(host:port)) of the servers behind the proxy that receive PROXY protocol.
    type: list
    elements: str
    required: true
  state:
    description: C(present) sends PROXY protocol to them, C(absent) stops.
    type: str
    choices: [present, absent]
    default: present
  config:
    description: nginx's main config file.
    type: path
    default: /etc/nginx/nginx.conf
  tls_ports:
    description: Upstream ports that speak TLS (probed with a TLS handshake; the others with an HTTP request).
    type: list
    elements: int
    default: [443]
  probe:
    description: Ask the upstreams (before) and nginx's listeners (after). Turn off only to force a change.
    type: bool
    default: true
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the upstreams are asked too; that they do not accept PROXY protocol yet is a warning then.
  diff_mode:
    support: full
  platform:
    platforms: posix
requirements:
  - nginx with the stream module on the target; root (C(become))
seealso:
  - name: nginx stream proxy_protocol
    description: The directive the module manages.
    link: https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_protocol
"""

EXAMPLES = r"""
- name: PROXY protocol to the NAS's Traefik through the WireGuard tunnel
  homelab.edge.nginx_proxy_protocol:
    upstreams: ["10.8.0.2:443", "10.8.0.2:80"]
"""

RETURN = r"""
changed_servers:
  description: The listen addresses of the stream servers changed (or that would be).
  returned: always
  type: list
  elements: list
files:
  description: The files changed, with their backups.
  returned: always
  type: list
  elements: dict
probes:
  description: Each probe and its answer.
  returned: always
  type: list
  elements: dict
"""

import glob
import os
import socket
import ssl
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream


def config_files(path):
    """[(path, text, inside stream {})]: the main file and what it includes."""
    text = host.read_text(path)
    found = [(path, text, False)]
    prefix = os.path.dirname(path)
    for pattern, in_stream in nginx_stream.includes(text):
        for inc in sorted(glob.glob(pattern if pattern.startswith("/") else os.path.join(prefix, pattern))):
            found.append((inc, host.read_text(inc), in_stream))
    return found


def plan(module, files):
    """[(path, old, new, changed servers)] for the files that change."""
    p = module.params
    upstreams = {}
    for path, text, in_stream in files:
        upstreams.update(nginx_stream.upstream_servers(text, in_stream))
    out, seen = [], 0
    for path, text, in_stream in files:
        try:
            seen += len([s for s in nginx_stream.servers(text, in_stream) if nginx_stream.forwards_to(s, upstreams, p["upstreams"])])
            new, changed = nginx_stream.edit(text, p["upstreams"], p["state"] == "present", in_stream, upstreams)
        except nginx_stream.NginxConfigError as e:
            module.fail_json(msg="%s: %s; nothing was changed" % (path, e))
        if new != text:
            out.append((path, text, new, changed))
    if p["state"] == "present" and not seen:
        module.fail_json(msg="no stream server in %s forwards to %s; nothing was changed"
                             % (", ".join(f[0] for f in files), ", ".join(p["upstreams"])))
    return out


def ask(host, port, tls, proxy, timeout=5.0):
    """(ok, answer): a connection with (or without) a PROXY header, then a
    TLS handshake or an HTTP request."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            if proxy:
                raw.sendall(nginx_stream.proxy_header(server=host if host[0].isdigit() else "10.0.0.1", server_port=port))
            if tls:
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                with ctx.wrap_socket(raw, server_hostname="homelab-edge-probe") as s:
                    return True, "TLS %s" % s.version()
            raw.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            head = raw.recv(64).decode("latin-1")
            status = head.split("\r\n")[0]
            # a server that does not expect PROXY protocol reads its header as a broken request: 400
            return head.startswith("HTTP/") and status.split()[1:2] != ["400"], status or "no answer"
    except (OSError, ssl.SSLError) as e:
        return False, "%s: %s" % (type(e).__name__, e)


def probe_upstreams(module, result):
    """Each upstream must accept PROXY protocol before nginx sends it."""
    p = module.params
    refused = []
    for target in p["upstreams"]:
        host, port = target.rsplit(":", 1)
        ok, answer = ask(host, int(port), int(port) in p["tls_ports"], proxy=True)
        result["probes"].append({"to": target, "proxy_protocol": True, "ok": ok, "answer": answer})
        if not ok:
            refused.append("%s (%s)" % (target, answer))
    if refused:
        msg = ("the server(s) behind the proxy do not accept PROXY protocol from this host yet: %s. Sending it now "
               "would break TLS for everyone: turn it on there first (Traefik: traefik_inflight_proxy_protocol_"
               "trusted_ips on the NAS, its `nas` tag), then run this again" % "; ".join(refused))
        if module.check_mode:
            module.warn(msg)
        else:
            module.fail_json(msg=msg + "; nothing was changed", **result)


def listen_ports(changed):
    ports = set()
    for listens in changed:
        for listen in listens:
            port = listen.split()[0].rsplit(":", 1)[-1].strip("[]")
            if port.isdigit():
                ports.add(int(port))
    return sorted(ports)


def nginx(module, *args):
    binary = module.get_bin_path("nginx", required=True)
    rc, out, err = module.run_command([binary] + list(args), environ_update=host.C_ENV)
    return rc == 0, (err or out).strip()


def restore(module, changes):
    for path, old, new, changed in changes:
        host.write_text(module, path, old)


def apply(module, changes, result):
    """Write, nginx -t, reload, and ask through nginx; undo what fails."""
    for path, old, new, changed in changes:
        result["files"].append({"path": path, "backup": host.write_text(module, path, new, module.params["backup"]) or ""})
    ok, why = nginx(module, "-t", "-c", module.params["config"])
    if not ok:
        restore(module, changes)
        module.fail_json(msg="nginx -t refuses the change (%s); your files are back as they were and nginx was not "
                             "reloaded" % why, **result)
    ok, why = nginx(module, "-s", "reload")
    if not ok:
        restore(module, changes)
        module.fail_json(msg="nginx reload failed (%s); your files are back as they were" % why, **result)
    if module.params["probe"] and module.params["state"] == "present":
        failed = probe_listeners(module, changes, result)
        if failed:
            restore(module, changes)
            nginx(module, "-s", "reload")
            module.fail_json(msg="after the reload, connections through nginx fail (%s): your files are back and "
                                 "nginx was reloaded on them" % "; ".join(failed), **result)


def probe_listeners(module, changes, result):
    """Through nginx itself: each changed listener must still carry TLS (or HTTP)."""
    failed = []
    for port in listen_ports([c for change in changes for c in change[3]]):
        ok, answer = False, ""
        for dummy in range(10):  # the new workers take a moment
            ok, answer = ask("127.0.0.1", port, port in module.params["tls_ports"], proxy=False)
            if ok:
                break
            time.sleep(0.5)
        result["probes"].append({"to": "127.0.0.1:%d" % port, "proxy_protocol": False, "ok": ok, "answer": answer})
        if not ok:
            failed.append("127.0.0.1:%d: %s" % (port, answer))
    return failed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            upstreams=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            config=dict(type="path", default="/etc/nginx/nginx.conf"),
            tls_ports=dict(type="list", elements="int", default=[443]),
            probe=dict(type="bool", default=True),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    bad = [u for u in p["upstreams"] if ":" not in u or not u.rsplit(":", 1)[1].isdigit()]
    if bad:
        module.fail_json(msg="upstreams must be host:port, got %s" % ", ".join(bad))
    if not os.path.exists(p["config"]):
        module.fail_json(msg="%s does not exist: is nginx installed?" % p["config"])
    host.require_root(module, "edits %s and reloads nginx" % p["config"], check_mode_reads=True)
    changes = plan(module, config_files(p["config"]))
    result = dict(changed=bool(changes), changed_servers=[c for change in changes for c in change[3]], files=[],
                  probes=[])
    if module._diff:
        result["diff"] = [{"before_header": path, "after_header": path, "before": old, "after": new}
                          for path, old, new, changed in changes]
    if changes and p["state"] == "present" and p["probe"]:
        probe_upstreams(module, result)
    if changes and not module.check_mode:
        apply(module, changes, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
