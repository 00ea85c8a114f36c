# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the traefik_inflight role's status and diagnose tasks: the
thin Ansible side of module_utils/traefik_inflight.py (each documented in the .yml
file of its name). The change itself is the traefik_inflight module."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import tunnel as traefik_tunnel


def _api(api_output):
    """(routers, middlewares) from Traefik's API answers (routers, a line
    "--", middlewares), or None when Traefik did not answer."""
    routers, dummy, middlewares = (api_output or "").partition("\n--\n")
    try:
        return json.loads(routers), json.loads(middlewares)
    except ValueError:
        return None


def traefik_api_argv(container):
    """The command that reads Traefik's API inside its container: routers, a
    line "--", middlewares (the module's own read, for status and diagnose).
    Bounded: a wedged Traefik accepts the connection and never answers."""
    url = "http://127.0.0.1:%d/api/http/" % traefik_inflight.API_PORT
    get = "timeout %d wget -q -O - %s" % (traefik_inflight.API_TIMEOUT, url)
    return ["docker", "exec", container, "sh", "-c", "%srouters && echo && echo -- && %smiddlewares" % (get, get)]


def traefik_api_problems(api_output, plan):
    """What Traefik's API shows amiss (empty: all is well)."""
    api = _api(api_output)
    if api is None:
        return ["Traefik does not answer on its API (%s)" % (api_output or "no output").strip()[:200]]
    return traefik_inflight.check_api(api[0], api[1], set(plan.get("expected_routers") or []), plan["entrypoints"],
                                      plan["middleware_ref"], plan.get("amount"))


def traefik_client_bound(api_output, entrypoints, middleware_ref, amount, bound_max=0):
    """What one client can hold in flight: {routers, names, amount, bound,
    max, within, text} (routers 0 when Traefik did not answer)."""
    api = _api(api_output)
    return traefik_inflight.client_bound(api[0] if api else [], entrypoints, middleware_ref, int(amount), bound_max)


def traefik_tunnel_total(api_output, entrypoints, name, tunnel_entrypoint, amount):
    """The tunnel's total as Traefik's API shows it: {through, missing, problems, text} (problems says when
    Traefik did not answer)."""
    api = _api(api_output)
    if api is None:
        return {"through": [], "missing": [], "text": "",
                "problems": ["Traefik does not answer on its API (%s)" % (api_output or "no output").strip()[:200]]}
    out = traefik_tunnel.routers(api[0], entrypoints, tunnel_entrypoint)
    out["problems"] = traefik_tunnel.check(api[0], api[1], tunnel_entrypoint, name, int(amount))
    out["text"] = traefik_tunnel.bound_text(int(amount), out["through"])
    return out


def traefik_client_share(log_lines):
    """[the address most access-log requests come from, its share, requests read, blind]."""
    top, share, total = traefik_inflight.client_share(log_lines or [])
    return [top, share, total, traefik_inflight.is_blind(total, share)]


def traefik_health_test(static, entrypoints, entrypoint="", through="entrypoint", config_file="/etc/traefik/traefik.yml"):
    """The health check test the traefik_inflight module writes, for a
    Traefik the role deploys from `static` (its static config as data)."""
    opts = {"healthcheck": True, "entrypoints": entrypoints, "healthcheck_entrypoint": entrypoint or None,
            "healthcheck_through": through}
    target = traefik_inflight.health_target(traefik_inflight.entrypoint_facts(static, None), {}, opts)
    if target:
        return ["CMD-SHELL", target["command"]]
    return ["CMD", "traefik", "healthcheck", "--ping", "--configFile=%s" % config_file]


class FilterModule(object):
    def filters(self):
        return dict((f.__name__, f) for f in (traefik_api_argv, traefik_api_problems, traefik_client_bound,
                                              traefik_client_share, traefik_health_test, traefik_tunnel_total))
