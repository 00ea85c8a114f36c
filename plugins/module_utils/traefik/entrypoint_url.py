# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where this host reaches an entrypoint of a running Traefik - the URL homelab.edge.prove asks - from what Traefik
itself reads (its static config file in its search order, or its flags: inflight.entrypoint_facts) and from Docker's
view of its container (its network mode, its published ports, its addresses). A Synology NAS is the case in point:
DSM's own nginx holds 80 and 443, the user's Traefik listens on 443 in its container, published on 8443 (or on
:8443 in the host's network). And whether a URL someone gives reaches one of Traefik's entrypoints at all."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.six.moves.urllib.parse import urlsplit

from . import inflight
from .text_edit import EditError, ci

# the candidates of Traefik's search order that exist in its container, one a line (run there: sh -c)
FIND_EXISTING = 'for f in "$@"; do [ -e "$f" ] && echo "$f"; done; true'
ANY_ADDRESS = ("", "0.0.0.0", "::")


def read_entrypoints(inspect, exec_):
    """entrypoint_facts() of a running Traefik as Traefik reads its static config: the first file of its search
    order that exists in the container (read there), else its flags. exec_(*argv) runs a command in the container:
    (rc, out, err). ValueError saying what could not be read."""
    args = inflight.traefik_args(inspect)
    env, workdir = inflight.container_env(inspect)
    rc, found, err = exec_("sh", "-c", FIND_EXISTING, "sh", *inflight.static_candidates(args, env, workdir))
    if rc != 0:
        raise ValueError("Traefik's container could not be read (sh: %s)" % (err or found).strip())
    source = inflight.static_source(args, found.splitlines(), env, workdir)
    if source["mode"] == "env":
        raise ValueError("Traefik takes its static config from its environment (TRAEFIK_* variables), which "
                         "homelab.edge does not read: give the url")
    if source["mode"] == "flags":
        return inflight.entrypoint_facts(None, source["flags"])
    rc, text, err = exec_("cat", source["path"])
    if rc != 0:
        raise ValueError("Traefik's static config %s could not be read in its container: %s"
                         % (source["path"], (err or text).strip()))
    try:
        return inflight.entrypoint_facts(inflight.parse_static(text, source["path"]), None)
    except EditError as e:
        raise ValueError("Traefik's static config %s does not parse: %s" % (source["path"], e))


def _host(address):
    """The address part of an entrypoint address (':443' -> '', '192.168.1.5:443' -> '192.168.1.5')."""
    return str(address or "").strip().partition("/")[0].rpartition(":")[0].strip("[]")


def _url(scheme, host, port):
    return "%s://%s:%s" % (scheme, "[%s]" % host if ":" in host else host, port)


def _networks(inspect):
    return ((inspect.get("NetworkSettings") or {}).get("Networks") or {})


def url_for(entrypoints, name, inspect, scheme="https"):
    """(url, None): where this host reaches entrypoint `name` - in the host's network, the entrypoint's own address
    (127.0.0.1 where it listens on every address); else the port Docker publishes for it on this host, or the
    container's own address on its network where it is not published. (None, why) when there is none."""
    key = ci(entrypoints, name)
    have = ", ".join("%s (%s)" % (n, e.get("address")) for n, e in sorted(entrypoints.items())) or "none"
    if key is None:
        return None, "Traefik has no entrypoint %s (its entrypoints: %s)" % (name, have)
    address = entrypoints[key].get("address")
    port = inflight.port_of(address)
    if not port:
        return None, "Traefik's entrypoint %s (%s) has no TCP port" % (key, address)
    if ((inspect.get("HostConfig") or {}).get("NetworkMode") or "") == "host":
        host = _host(address)
        return _url(scheme, "127.0.0.1" if host in ANY_ADDRESS else host, port), None
    for binding in (((inspect.get("NetworkSettings") or {}).get("Ports") or {}).get("%d/tcp" % port) or []):
        if str(binding.get("HostPort") or "").isdigit():
            host = binding.get("HostIp") or ""
            return _url(scheme, "127.0.0.1" if host in ANY_ADDRESS else host, binding["HostPort"]), None
    for net in sorted(_networks(inspect)):
        if _networks(inspect)[net].get("IPAddress"):
            return _url(scheme, _networks(inspect)[net]["IPAddress"], port), None
    return None, "Traefik's entrypoint %s (%s) is neither published nor on a network this host reaches" % (key, address)


def reaches(url, entrypoints, inspect):
    """None when `url` reaches one of Traefik's TCP entrypoints from this host: a port Docker publishes for one of
    them (on any address of this host, or the one it is bound to), the container's own address on one of its
    networks with an entrypoint's port, or, in the host's network, an entrypoint's own port. Else why not, naming
    where Traefik does listen (another server holds that port: DSM's nginx on 443, say)."""
    u = urlsplit(url)
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return "%s has no valid port" % url
    ports = dict((inflight.port_of(e.get("address")), n) for n, e in entrypoints.items() if inflight.port_of(e.get("address")))
    if not ports:
        return "Traefik has no TCP entrypoint"
    where = []
    if ((inspect.get("HostConfig") or {}).get("NetworkMode") or "") == "host":
        if port in ports:
            return None
        where = ["%s on %d" % (n, p) for p, n in sorted(ports.items())]
    else:
        addresses = [n.get("IPAddress") for n in _networks(inspect).values() if n.get("IPAddress")]
        if u.hostname in addresses:  # the container's own address: its own ports, not the ones published
            if port in ports:
                return None
        published = {} if u.hostname in addresses else ((inspect.get("NetworkSettings") or {}).get("Ports") or {})
        for spec, bindings in sorted(published.items()):
            inner, dummy, proto = spec.partition("/")
            if proto != "tcp" or not inner.isdigit() or int(inner) not in ports:
                continue
            for b in bindings or []:
                host_ip = b.get("HostIp") or ""
                if str(b.get("HostPort")) == str(port) and (host_ip in ANY_ADDRESS or host_ip == u.hostname):
                    return None
                if str(b.get("HostPort") or "").isdigit():
                    where.append("%s (%s in its container) published on %s" % (ports[int(inner)], inner, b["HostPort"]))
        where += ["%s on %s:%d" % (n, a, p) for a in addresses for p, n in sorted(ports.items())]
    return ("%s does not reach Traefik: nothing of Traefik's listens on port %d here (something else may: another "
            "server on the host). Traefik's entrypoints: %s. Give a url of those, or none to have it derived"
            % (url, port, "; ".join(sorted(set(where))) or "none this host reaches"))
