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

from ansible_collections.homelab.edge.plugins.module_utils import diagnose
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import sysctl as tcp_drain_sysctl

from .conftest import ROOT

ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "roles", "*")))


def load(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return yaml.safe_load(f)


def _doc(path, target):
    """The YAML of the string assigned to `target` in a file (at the top, or in a class)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == target:
            return yaml.safe_load(node.value.value)
    raise AssertionError("no %s in %s" % (target, path))


def module_options(name):
    """A module's options as ansible-doc shows them: its own and its doc fragments' (homelab.edge.FILE[.VAR])."""
    doc = _doc(os.path.join(ROOT, "plugins", "modules", name + ".py"), "DOCUMENTATION")
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        parts = fragment.split(".")[2:]
        path = os.path.join(ROOT, "plugins", "doc_fragments", parts[0] + ".py")
        options.update(_doc(path, parts[1].upper() if len(parts) > 1 else "DOCUMENTATION").get("options") or {})
    options.update(doc["options"])
    return options


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
    docs = dict((m, module_options(m)) for m in ("k3d_serverlb", "k3d_serverlb_info", "prove_k3d_serverlb"))
    for key, value in k3d_fix.DEFAULTS.items():
        assert role["k3d_serverlb_" + key] == value, key
        assert spec["k3d_serverlb_" + key]["default"] == value, key
        assert k3d_fix.option_spec()[key]["default"] == value, key
        for module, options in docs.items():
            assert options[key]["default"] == value, (module, key)
    assert spec["k3d_serverlb_budget_log_level"]["choices"] == list(k3d_fix.LOG_LEVELS)


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


PASSED = re.compile(r"^\{\{\s*([a-z0-9_]+)(?:\s*\|\s*(?:int|bool))?\s*\}\}$")


def module_calls(node):
    """(module, args) of every homelab.edge module call in a task file's tree."""
    if isinstance(node, list):
        for item in node:
            yield from module_calls(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key.startswith("homelab.edge.") and isinstance(value, dict):
                yield key.split(".")[-1], value
            elif key in ("block", "rescue", "always"):
                yield from module_calls(value)


def passed_through():
    """(role, task file, module, option, role variable) wherever a role hands
    one of its variables to a module option unchanged."""
    for role in ROLES:
        defaults = load("roles", role, "defaults", "main.yml") or {}
        for path in sorted(glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml"))):
            with open(path) as f:
                tree = yaml.safe_load(f)
            for module, args in module_calls(tree):
                for option, value in args.items():
                    m = PASSED.match(value) if isinstance(value, str) else None
                    if m and m.group(1) in defaults:
                        yield role, os.path.basename(path), module, option, m.group(1)


# Where the role's default differs from the module's on purpose: (module, option) -> why.
ON_PURPOSE = {
    ("traefik_inflight", "autoheal_label"): "the module adds no label unless asked; the role's Traefik is watched",
    ("traefik_inflight", "sysctls"): "the module adds none unless asked; the role's are the drain numbers (below)",
    ("ufw_connlimit", "backup"): "modules follow Ansible's backup: false; the roles keep a copy of the user's file",
    ("nginx_proxy_protocol", "backup"): "modules follow Ansible's backup: false; the roles keep a copy",
}


def test_a_role_and_the_module_it_calls_share_each_default_they_share():
    checked, differ = 0, []
    for role, path, module, option, var in passed_through():
        spec = module_options(module)[option]
        default = load("roles", role, "defaults", "main.yml")[var]
        if "default" not in spec or templated(default) or (module, option) in ON_PURPOSE:
            continue
        if default != spec["default"]:
            differ.append("%s/%s: %s is %r, %s's %s defaults to %r" % (
                role, path, var, default, module, option, spec["default"]))
        checked += 1
    assert differ == [], "\n".join(differ)
    assert checked >= 12


def test_the_drain_numbers_have_one_home():
    drain = load("roles", "tcp_drain", "defaults", "main.yml")
    assert drain["tcp_drain_fin_timeout"] == tcp_drain_sysctl.RECOMMENDED[tcp_drain_sysctl.FIN_TIMEOUT]
    assert drain["tcp_drain_abort_on_overflow"] == tcp_drain_sysctl.RECOMMENDED[tcp_drain_sysctl.ABORT_ON_OVERFLOW]
    assert drain["tcp_drain_conntrack_time_wait"] == tcp_drain_sysctl.RECOMMENDED[tcp_drain_sysctl.CT_TIME_WAIT]
    traefik = load("roles", "traefik_inflight", "defaults", "main.yml")["traefik_inflight_sysctls"]
    assert traefik == dict((k, tcp_drain_sysctl.RECOMMENDED[k]) for k in (tcp_drain_sysctl.FIN_TIMEOUT, tcp_drain_sysctl.ABORT_ON_OVERFLOW))
    assert diagnose.DRAIN_WANT == traefik
    spec = load("roles", "traefik_inflight", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert "tcp_fin_timeout %d, tcp_abort_on_overflow %d" % (traefik[tcp_drain_sysctl.FIN_TIMEOUT], traefik[tcp_drain_sysctl.ABORT_ON_OVERFLOW]) \
        in spec["traefik_inflight_sysctls"]["description"]
    with open(os.path.join(ROOT, "roles", "tcp_drain", "vars", "main.yml")) as f:
        values = f.read()
    for key in tcp_drain_sysctl.RECOMMENDED:
        assert key in values, "tcp_drain's values (main, status and diagnose) miss %s" % key


def test_the_render_timeout_and_the_keeper_config_have_one_home():
    role = load("roles", "k3d_serverlb", "defaults", "main.yml")
    spec = load("roles", "k3d_serverlb", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert role["k3d_serverlb_render_timeout"] == spec["k3d_serverlb_render_timeout"]["default"] == k3d_fix.RENDER_TIMEOUT
    assert module_options("k3d_serverlb")["render_timeout"]["default"] == k3d_fix.RENDER_TIMEOUT
    assert role["k3d_serverlb_keeper_config"] == spec["k3d_serverlb_keeper_config"]["default"] == k3d_fix.KEEPER_CONFIG
    # the demo and Molecule's clean-up (not shipped): tests/dev/test_one_home.py
    literal = re.compile(r"render_timeout=\d|/etc/homelab-edge/k3d-serverlb\.json")
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "roles", "*", "files", "*.py")):
        with open(path) as f:
            text = f.read()
        found = [m.group(0) for m in literal.finditer(text)]
        if path.endswith(os.path.join("module_utils", "k3d_serverlb", "fix.py")):
            assert found == [k3d_fix.KEEPER_CONFIG], found  # its one home
        else:
            assert found == [], "%s repeats %s" % (path, found)
