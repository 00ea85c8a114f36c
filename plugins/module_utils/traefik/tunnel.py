# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A total for what comes through the tunnel: pure logic, no I/O.

The per-client in-flight limit (inflight.py) holds one address; a flood spread
over many addresses passes it. Requests from the VPS share one count here, and
requests from the LAN never count: they come on different listeners. Traefik
binds routers to entrypoints by name, so the tunnel gets an entrypoint of its
own (`tunnel`, on its own port, published by compose), which the VPS forwards
to, with PROXY protocol trusted from the VPS. Its middlewares run on every
router that serves it, in this order: the user's own of the entrypoint the
tunnel used to arrive on (with the per-client limit), then

- a headers middleware that sets one request header to one value, overwriting
  whatever the client sent (Header.Set), and
- an inFlightReq keyed on that header: every request through the tunnel has
  the same key, so `amount` bounds them together; a client cannot split the
  count by sending its own header (measured on Traefik v2.11 and v3.6).

The LAN's entrypoint keeps its middlewares: LAN requests never meet the total.
What this cannot do, and says: inFlightReq is one limiter per router, so the
total is per router (routers x amount through the tunnel in all; one total
across routers needs multi-layer routing, Traefik 3.6+ and file providers
only); and a router that lists its entrypoints must list the tunnel's too, or
it does not answer through the tunnel (404) - the module names each one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from .text_edit import EditError, ci, lookup

HEADER = "X-Homelab-Edge-Pool"
VALUE = "tunnel"
# what the tunnel's entrypoint takes over from the one the tunnel arrived on before (asDefault, Traefik v3: routers
# without entryPoints join the entrypoints that have it, so the tunnel's must have it where the LAN's does)
COPIED = (("http", "tls"), ("transport",), ("forwardedHeaders",), ("http2",), ("asDefault",))


class TunnelError(EditError):
    """A tunnel total the module cannot set up here; the message says what to do."""


def names(name):
    """The module's two middlewares for the tunnel (beside `name`, the per-client one): {pool, total} as refs."""
    return {"pool": "%s-tunnel-pool@file" % name, "total": "%s-tunnel-total@file" % name}


def middlewares(name, amount):
    """The dynamic-config middlewares of the tunnel's total {name: config} (without @file)."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TunnelError("tunnel_total must be an integer >= 1 (0 turns it off), got %r" % (amount,))
    refs = names(name)
    return {refs["pool"].rpartition("@")[0]: {"headers": {"customRequestHeaders": {HEADER: VALUE}}},
            refs["total"].rpartition("@")[0]: {"inFlightReq": {"amount": amount,
                                                               "sourceCriterion": {"requestHeaderName": HEADER}}}}


def _port(address):
    tail = str(address or "").rpartition(":")[2].partition("/")[0]
    return int(tail) if tail.isdigit() else None


def address(opts):
    return ":%d" % int(opts["tunnel_port"])


def mine(static, flags, opts):
    """True when the static config (parsed file, or flags) has the tunnel's entrypoint as an earlier run wrote it
    (its middlewares name the module's pool)."""
    ep, pool = str(opts.get("tunnel_entrypoint") or "tunnel"), names(opts["name"])["pool"]
    if flags is not None:
        return pool in (flags.get("entrypoints.%s.http.middlewares" % ep.lower()) or "")
    eps = lookup(static, ["entryPoints"]) or {}
    name = ci(eps, ep)
    return name is not None and pool in (lookup(eps, [name, "http", "middlewares"]) or [])


def check_clash(addresses, opts, ours=False):
    """Refuse (before anything is written) a tunnel entrypoint whose name is taken by one of the user's (not the
    module's from an earlier run, `ours`), or whose port one of theirs listens on. `addresses`: {entrypoint: address}
    of the static config."""
    ep, port = opts["tunnel_entrypoint"], int(opts["tunnel_port"])
    have = dict((k.lower(), v) for k, v in addresses.items())
    if ep.lower() in have and not ours and _port(have[ep.lower()]) != port:
        raise TunnelError("an entrypoint named %s exists already, on %s: name the tunnel's another way "
                          "(traefik_inflight_tunnel_entrypoint); nothing was changed" % (ep, have[ep.lower()]))
    taken = sorted(k for k, v in addresses.items() if k.lower() != ep.lower() and _port(v) == port)
    if taken:
        raise TunnelError("the tunnel's entrypoint would listen on port %d, where your entrypoint %s listens: choose "
                          "another traefik_inflight_tunnel_port; nothing was changed" % (port, ", ".join(taken)))


def source_entrypoint(limited):
    """The entrypoint the tunnel arrives on today (the first limited one): the tunnel's copies its TLS settings."""
    if not limited:
        raise TunnelError("the tunnel's total needs an HTTP entrypoint that gets the per-client limit "
                          "(traefik_inflight_entrypoints); nothing was changed")
    return limited[0]


def entrypoint(static, source, mws, opts, trusted):
    """The tunnel's entrypoint as data, from the user's `source` entrypoint in a parsed static config: its address,
    the source's TLS, transport, forwarded-headers and HTTP/2 settings, PROXY protocol trusted from `trusted` (None:
    as the source has it), and the middlewares `mws` (the source's own, the per-client one among them) followed by
    the tunnel's two."""
    src = lookup(static, ["entryPoints", source]) or {}
    out = {"address": address(opts)}
    for path in COPIED:
        value = lookup(src, list(path))
        if value is not None:
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
    refs = names(opts["name"])
    out.setdefault("http", {})["middlewares"] = [m for m in mws if m not in refs.values()] + [refs["pool"], refs["total"]]
    if trusted:
        out["proxyProtocol"] = {"trustedIPs": list(trusted)}
    elif lookup(src, ["proxyProtocol"]) is not None:
        out["proxyProtocol"] = lookup(src, ["proxyProtocol"])
    return out


def static_changes(static, source, mws, opts, trusted):
    """The edits (text_edit ops) that make the tunnel's entrypoint what entrypoint() says: the whole entrypoint when
    it is not there, each differing key when it is (the module's, from an earlier run)."""
    ep = opts["tunnel_entrypoint"]
    want = entrypoint(static, source, mws, opts, trusted)
    eps = lookup(static, ["entryPoints"]) or {}
    name = ci(eps, ep)
    if name is None:
        return [("ensure", ["entryPoints", ep], want)]
    have = eps[name] if isinstance(eps[name], dict) else {}
    changes = []
    for path in [("address",), ("http", "middlewares"), ("proxyProtocol",)] + list(COPIED):
        value = want
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and lookup(have, list(path)) != value:
            changes.append(("set", ["entryPoints", name] + list(path), value))
    return changes


def is_ours(name, opts):
    """True for the tunnel's entrypoint (its settings are the module's, not the user's to keep)."""
    return bool(opts.get("tunnel_total")) and str(name).lower() == str(opts.get("tunnel_entrypoint") or "").lower()


def left_over(static, flags, opts):
    """With the tunnel's total off: the edits that remove the tunnel's entrypoint where an earlier run added it (its
    middlewares name the module's pool), as ops for a file or as flag names to remove."""
    if opts.get("tunnel_total") or not mine(static, flags, opts):
        return []
    ep = str(opts.get("tunnel_entrypoint") or "tunnel")
    if flags is not None:
        return sorted(k for k in flags if k.startswith("entrypoints.%s." % ep.lower()))
    return [("delete", ["entryPoints", ci(lookup(static, ["entryPoints"]), ep)], None)]


def flag_adds(flags, source, mws, opts, trusted):
    """The same for a Traefik configured with flags: {flag: value} to add or replace (lower-cased names)."""
    ep, src = opts["tunnel_entrypoint"].lower(), source.lower()
    add = {"entrypoints.%s.address" % ep: address(opts)}
    copied = tuple("entrypoints.%s.%s" % (src, ".".join(p).lower()) for p in COPIED)
    for key, value in flags.items():
        if key.startswith(copied):
            add["entrypoints.%s.%s" % (ep, key[len("entrypoints.%s." % src):])] = value
    refs = names(opts["name"])
    add["entrypoints.%s.http.middlewares" % ep] = ",".join([m for m in mws if m not in refs.values()]
                                                           + [refs["pool"], refs["total"]])
    if trusted:
        add["entrypoints.%s.proxyprotocol.trustedips" % ep] = ",".join(trusted)
    elif "entrypoints.%s.proxyprotocol.trustedips" % src in flags:
        add["entrypoints.%s.proxyprotocol.trustedips" % ep] = flags["entrypoints.%s.proxyprotocol.trustedips" % src]
    return dict((k, v) for k, v in add.items() if flags.get(k) != v)


def port_spec(opts):
    port = int(opts["tunnel_port"])
    where = opts.get("tunnel_publish_address") or ""
    return "%s%d:%d" % ("%s:" % where if where else "", port, port)


def _published(ports, container_port):
    """True when a compose `ports` list publishes `container_port` (short or long syntax)."""
    for p in ports or []:
        if isinstance(p, dict):
            target = p.get("target")
        else:
            target = str(p).split("/", maxsplit=1)[0].rpartition(":")[2].partition("-")[0]
        if str(target) == str(container_port):
            return True
    return False


def compose_changes(svc, service, opts, network_mode):
    """The compose edit that publishes the tunnel's port (none in the host's network namespace: Traefik listens on the
    host's own port there)."""
    if network_mode == "host":
        return []
    ports = svc.get("ports")
    if ports is not None and not isinstance(ports, list):
        raise TunnelError("the compose service %s has ports that are not a list; nothing was changed" % service)
    if _published(ports, int(opts["tunnel_port"])):
        return []
    return [("append", ["services", service, "ports"], port_spec(opts))]


# ------------------------------------------------------------ read back (Traefik's API)

def _on(router):
    return set(router.get("using") or router.get("entryPoints") or [])


def _base(name, ep):
    """A router's own name: Traefik names its copy for an entrypoint with middlewares <entrypoint>-<name>."""
    return name[len(ep) + 1:] if name.startswith(ep + "-") else name


def routers(api_routers, sources, ep, own_prefix="homelab-edge"):
    """Which of the user's routers answer through the tunnel: {"through": [names], "missing": [names]}: `missing`
    are the routers on the entrypoints the tunnel arrived on before (`sources`) that are not on the tunnel's - through
    it they answer 404 (a router that lists its entrypoints must list the tunnel's too)."""
    through, before = set(), set()
    for r in api_routers or []:
        name = r.get("name") or ""
        if name.endswith("@internal") or name.startswith(own_prefix):
            continue
        if ep in _on(r):
            through.add(_base(name, ep))
        if _on(r) & set(sources):
            before.add(_base(name, next(s for s in sources if s in _on(r))))
    return {"through": sorted(through), "missing": sorted(before - through)}


def check(api_routers, api_middlewares, ep, name, amount):
    """Problems (empty when all is well): the tunnel's two middlewares loaded and enabled, the total with `amount`
    and keyed on the pool header, and every router on the tunnel's entrypoint running both, pool first."""
    refs = names(name)
    problems = []
    mws = dict((m.get("name"), m) for m in api_middlewares or [])
    for ref in (refs["pool"], refs["total"]):
        m = mws.get(ref)
        if m is None:
            problems.append("middleware %s is not loaded" % ref)
        elif m.get("status") != "enabled":
            problems.append("middleware %s is %s: %s" % (ref, m.get("status"), "; ".join(m.get("error") or [])))
    total = (mws.get(refs["total"]) or {}).get("inFlightReq") or {}
    if refs["total"] in mws and (total.get("amount") != amount or
                                 (total.get("sourceCriterion") or {}).get("requestHeaderName") != HEADER):
        problems.append("middleware %s runs %s, not amount %d per %s (not reloaded yet)" % (
            refs["total"], total, amount, HEADER))
    for r in api_routers or []:
        if ep not in _on(r):
            continue
        chain = r.get("middlewares") or []
        if refs["pool"] not in chain or refs["total"] not in chain or chain.index(refs["pool"]) > chain.index(refs["total"]):
            problems.append("router %s does not run %s then %s" % (r.get("name"), refs["pool"], refs["total"]))
    return problems


def access_counts(log_lines, ep):
    """{requests, r429} on the tunnel's entrypoint, from Traefik's JSON access log lines: its 429s are the total's
    (or the per-client limit's, beside it)."""
    out = {"requests": 0, "r429": 0}
    for line in log_lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("entryPointName") == ep:
            out["requests"] += 1
            out["r429"] += record.get("DownstreamStatus") == 429
    return out


def bound_text(amount, through):
    """The tunnel's total in words, the same in the module, status and diagnose."""
    n = len(through)
    return ("%d in flight through the tunnel per router, all clients together: %d router%s (%s), up to %d in all"
            % (amount, n, "" if n == 1 else "s", ", ".join(through) or "none", amount * n))
