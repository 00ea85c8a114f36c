# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the traefik_inflight role: the thin Ansible side of
module_utils/traefik.py (each documented in the .yml file of its name)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.edge.plugins.module_utils import traefik

try:
    import yaml
except ImportError:  # the controller always has PyYAML (ansible-core needs it)
    yaml = None


def traefik_facts(inspect, version_output, default_files):
    """What the running container says about its Traefik."""
    args = traefik.traefik_args(inspect)
    major, version = traefik.parse_version(version_output)
    config = inspect.get("Config") or {}
    state = inspect.get("State") or {}
    health = (config.get("Healthcheck") or {}).get("Test") or ["NONE"]
    return {"name": inspect.get("Name", "").lstrip("/"), "running": bool(state.get("Running")), "pid": state.get("Pid"),
            "version": version, "major": major, "args": args, "source": traefik.static_source(args, default_files),
            "mounts": inspect.get("Mounts") or [], "compose": traefik.compose_labels(inspect),
            "healthcheck": health[0] != "NONE", "labels": config.get("Labels") or {}}


def traefik_static_host_path(facts):
    """The static config file on the host (None when Traefik takes flags)."""
    src = facts["source"]
    if src["mode"] != "file":
        return None
    where = traefik.host_path(src["path"], facts["mounts"])
    return where["host"] if where else None


def traefik_locate(facts, static_text, options):
    return traefik.locate(facts, static_text, options)


def traefik_plan(facts, where, static_text, compose_text, dynamic_texts, options):
    return traefik.plan(facts, where, static_text, compose_text, dynamic_texts or {}, options)


def _plain(value):
    """Ansible's own string and container types as plain Python (PyYAML's
    safe dumper knows only those)."""
    if isinstance(value, dict):
        return dict((_plain(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    return str(value)


def traefik_dynamic(options):
    """The role's dynamic file, as YAML text."""
    o = _plain(options)
    doc = traefik.dynamic_document(o["name"], int(o["amount"]), o.get("source", "ip"), int(o.get("depth", 0)),
                                   o.get("excluded_ips") or [], o.get("header", ""), api=bool(o.get("verify_api", True)))
    return ("# Managed by homelab.edge (traefik_inflight): edit the inventory, not this file.\n"
            + yaml.safe_dump(doc, default_flow_style=False, sort_keys=True))


def traefik_api_problems(api_output, plan, before_output=""):
    """What Traefik's API shows amiss after a change (empty: all is well).
    `api_output`: its routers and its middlewares as JSON, one after the
    other with a line "--" between; `before_output`: its routers before the
    change (empty when the API was not there yet)."""
    routers, dummy, middlewares = (api_output or "").partition("\n--\n")
    try:
        routers, middlewares = json.loads(routers), json.loads(middlewares)
    except ValueError:
        return ["Traefik does not answer on its API (%s)" % (api_output or "no output").strip()[:200]]
    try:
        baseline = [r["name"] for r in json.loads(before_output)] if before_output and before_output.strip() else []
    except (ValueError, KeyError, TypeError):
        baseline = []
    expected = set(plan["expected_routers"]) | set(baseline)
    expected = set(r for r in expected if not r.startswith(traefik.API_ROUTER + "@"))
    return traefik.check_api(routers, middlewares, expected, plan["entrypoints"], plan["middleware_ref"],
                             plan.get("amount"))


def traefik_client_share(log_lines):
    """[the address most access-log requests come from, its share, requests read, blind]."""
    top, share, total = traefik.client_share(log_lines or [])
    return [top, share, total, traefik.is_blind(total, share)]


def _clear_errors(fn):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except traefik.TraefikConfigError as e:
            raise AnsibleFilterError(str(e))
    call.__name__ = fn.__name__
    return call


class FilterModule(object):
    def filters(self):
        return dict((f.__name__, _clear_errors(f)) for f in (
            traefik_facts, traefik_static_host_path, traefik_locate, traefik_plan, traefik_dynamic,
            traefik_api_problems, traefik_client_share))
