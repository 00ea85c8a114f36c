"""The roles' Prometheus rule files as the roles write them (their templates
with the roles' defaults), for promtool: `python prometheus_rules.py DIR`
renders every one into DIR as <role>.rules.yml."""
import glob
import os
import sys

import jinja2
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "filter"))
import runbook  # noqa: E402  (the collection's filter, as the template module finds it by its FQCN)


def roles():
    return sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                  for p in glob.glob(os.path.join(ROOT, "roles", "*", "templates", "prometheus-rules.yml.j2")))


# What the roles write as a NAS's play sets them (rules that are written only for some settings
# are then present for promtool): tcp_drain's counters of Traefik's own namespace, on a host booted by systemd.
# Traefik's metrics on (the Traefik alerts need them; TraefikNotScraped is written only then).
AS_ON_A_NAS = {"tcp_drain": {"tcp_drain_containers": ["traefik"], "ansible_facts": {"service_mgr": "systemd"}},
               "traefik_inflight": {"traefik_inflight_metrics": True}}
# The role vars (vars/main.yml) a rules template reads, in the order they are defined there.
DERIVED = {"tcp_drain": ["tcp_drain_counters_wanted", "tcp_drain_counters_written"]}


def to_bool(value):
    """Ansible's `bool` filter for the values these templates give it."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes", "on", "1")


def render(role, overrides=None):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
        values = yaml.safe_load(f)
    values.update(AS_ON_A_NAS.get(role, {}))
    values.update(overrides or {}, ansible_managed="Managed by homelab.edge")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["homelab.edge.runbook_url"] = runbook.runbook_url
    env.filters["bool"] = to_bool
    if DERIVED.get(role):
        with open(os.path.join(ROOT, "roles", role, "vars", "main.yml")) as f:
            role_vars = yaml.safe_load(f)
        for name in DERIVED[role]:
            values[name] = env.from_string(role_vars[name]).render(values)
    with open(os.path.join(ROOT, "roles", role, "templates", "prometheus-rules.yml.j2")) as f:
        return env.from_string(f.read()).render(values)


def main(out):
    os.makedirs(out, exist_ok=True)
    for role in roles():
        with open(os.path.join(out, "%s.rules.yml" % role), "w") as f:
            f.write(render(role))
        print(os.path.join(out, "%s.rules.yml" % role))


if __name__ == "__main__":
    main(sys.argv[1])
