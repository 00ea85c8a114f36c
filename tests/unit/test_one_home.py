"""Each fact has one home; everything that repeats it is checked here.

- a role's defaults/main.yml and its meta/argument_specs.yml name the same
  variables with the same defaults;
- k3d_serverlb's numbers live in module_utils' DEFAULTS: the role's
  defaults, its argument_specs and both modules' docs agree with them;
- the example inventory's commented "defaults shown" lines are the defaults
  (a line whose comment says "example" shows a value to use instead).
"""
import ast
import glob
import os
import re

import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb as lb

from .conftest import ROOT

ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")))


def load(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return yaml.safe_load(f)


def module_options(name):
    with open(os.path.join(ROOT, "plugins", "modules", name + ".py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)["options"]
    raise AssertionError("no DOCUMENTATION in %s" % name)


def templated(value):
    return isinstance(value, str) and "{{" in value


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_and_argument_specs_agree(role):
    defaults = load("roles", role, "defaults", "main.yml") or {}
    options = load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(set(defaults) - set(options)) == [], "defaults without an argument spec"
    assert sorted(k for k, o in options.items() if k not in defaults and not o.get("required")) == [], \
        "optional argument specs without a default"
    for key, value in defaults.items():
        if not templated(value) and "default" in options[key]:
            assert options[key]["default"] == value, key


def test_k3d_numbers_have_one_home():
    role = load("roles", "k3d_serverlb", "defaults", "main.yml")
    spec = load("roles", "k3d_serverlb", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    docs = dict((m, module_options(m)) for m in ("k3d_serverlb", "k3d_serverlb_info"))
    for key, value in lb.DEFAULTS.items():
        assert role["k3d_serverlb_" + key] == value, key
        assert spec["k3d_serverlb_" + key]["default"] == value, key
        assert lb.option_spec()[key]["default"] == value, key
        for module, options in docs.items():
            assert options[key]["default"] == value, (module, key)
    assert spec["k3d_serverlb_budget_log_level"]["choices"] == list(lb.LOG_LEVELS)


SHOWN = re.compile(r"^# ([a-z0-9_]+): (.+?)(?:\s+#(.*))?$")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "inventories", "example", "group_vars", "*.yml"))))
def test_the_example_inventory_shows_the_defaults(path):
    defaults = {}
    for role in ROLES:
        defaults.update(load("roles", role, "defaults", "main.yml") or {})
    with open(path) as f:
        shown = [SHOWN.match(line.rstrip()) for line in f]
    shown = [(m.group(1), yaml.safe_load(m.group(2)), "example" in (m.group(3) or ""))
             for m in shown if m and "_" in m.group(1)]
    assert shown
    for key, value, example in shown:
        assert key in defaults, "%s: no role has %s" % (os.path.basename(path), key)
        if not templated(defaults[key]) and not example:
            assert value == defaults[key], "%s: %s is %r, shown as %r" % (
                os.path.basename(path), key, defaults[key], value)


# the role's variable -> the module's option, where the role passes its default through
TRAEFIK_OPTIONS = {"name": "name", "amount": "amount", "source": "source", "ip_depth": "ip_depth",
                   "excluded_ips": "excluded_ips", "header": "header", "entrypoints": "entrypoints",
                   "dynamic_dir_in_container": "dynamic_dir", "http2_max_streams": "http2_max_streams",
                   "client_bound_max": "client_bound_max", "verify": "verify", "verify_timeout": "verify_timeout"}


def test_the_traefik_module_and_role_share_their_defaults():
    role = load("roles", "traefik_inflight", "defaults", "main.yml")
    options = module_options("traefik_inflight")
    for var, option in TRAEFIK_OPTIONS.items():
        assert role["traefik_inflight_" + var] == options[option]["default"], var
    with open(os.path.join(ROOT, "roles", "traefik_inflight", "tasks", "main.yml")) as f:
        tasks = f.read()
    for var, option in TRAEFIK_OPTIONS.items():
        assert "        %s: \"{{ traefik_inflight_%s }}\"" % (option, var) in tasks, var
