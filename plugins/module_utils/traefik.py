# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Traefik's inFlightReq middleware and the static config it needs: pure logic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

SOURCES = ("ip", "host", "header")


class TraefikConfigError(ValueError):
    pass


def inflight_middleware(name, amount, source="ip", depth=0, excluded_ips=None, header=""):
    """The dynamic-config document with one inFlightReq middleware.

    Traefik groups by request Host when no sourceCriterion is given; this
    always writes one explicitly (per client IP by default)."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TraefikConfigError("amount must be an integer >= 1, got %r" % (amount,))
    if source not in SOURCES:
        raise TraefikConfigError("source must be one of %s, got %r" % (", ".join(SOURCES), source))
    if source == "ip":
        if not isinstance(depth, int) or depth < 0:
            raise TraefikConfigError("depth must be an integer >= 0, got %r" % (depth,))
        strategy = {"depth": depth}
        if excluded_ips:
            strategy["excludedIPs"] = list(excluded_ips)
        criterion = {"ipStrategy": strategy}
    elif source == "host":
        criterion = {"requestHost": True}
    else:
        if not header:
            raise TraefikConfigError("source 'header' needs a header name")
        criterion = {"requestHeaderName": header}
    return {"http": {"middlewares": {name: {"inFlightReq": {"amount": amount, "sourceCriterion": criterion}}}}}


def merge_static(static, middleware_ref, entrypoints, directory):
    """Return the static config with the file provider on `directory`, the
    middleware on each entrypoint, and ping enabled. Other keys are kept.

    Raises TraefikConfigError when an entrypoint is not defined."""
    out = copy.deepcopy(static or {})
    eps = out.get("entryPoints") or {}
    missing = [e for e in entrypoints if e not in eps]
    if missing:
        raise TraefikConfigError("entrypoint(s) %s not defined in the static config (defined: %s)"
                                 % (", ".join(missing), ", ".join(sorted(eps)) or "none"))
    for name in entrypoints:
        ep = eps[name] = dict(eps[name] or {})
        http = ep["http"] = dict(ep.get("http") or {})
        mws = list(http.get("middlewares") or [])
        if middleware_ref not in mws:
            mws.append(middleware_ref)
        http["middlewares"] = mws
    out["entryPoints"] = eps
    providers = out["providers"] = dict(out.get("providers") or {})
    fp = dict(providers.get("file") or {})
    fp.pop("filename", None)  # exclusive with directory; a single bind-mounted file misses atomic replaces
    fp["directory"] = directory
    fp.setdefault("watch", True)
    providers["file"] = fp
    if not out.get("ping"):
        out["ping"] = {}
    return out
