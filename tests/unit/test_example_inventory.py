"""The example inventory's group_vars (inventories/example/group_vars/<group>.yml)
show every option of the roles that playbooks/site.yml runs on that group, once,
commented out with its default - no option missing, none that no longer exists.
tests/support/group_vars.py (in the repository) writes the generated part."""
import glob
import os
import re

import pytest
import yaml

from .conftest import ROOT

GROUP_VARS = os.path.join(ROOT, "inventories", "example", "group_vars")
# "# key: value", optionally "# a comment" after it; "# key:" alone is followed by "#   " lines (a list, a mapping)
SHOWN = re.compile(r"^# ([a-z0-9_]+):(?: (.+?))?(?:\s+#(.*))?$")
# an example: another value, the default said in its comment ("# key: value   # example (default: x)")
EXAMPLE_DEFAULT = re.compile(r"\bexample \(default: (.*)\)$")


def task_roles(tasks):
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from task_roles(task.get(key))
        for action, args in task.items():
            if action.split(".")[-1] in ("import_role", "include_role"):
                yield args["name"]


def roles_by_group():
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as f:
        plays = yaml.safe_load(f)
    groups = {}
    for play in plays:
        names = [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])] + list(task_roles(play.get("tasks")))
        if names:
            groups.setdefault(play["hosts"], set()).update(n.split(".")[-1] for n in names)
    return groups


def argument_specs(role):
    """The role's options, each with its default as the role has it (defaults/main.yml where it has one)."""
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
        specs = yaml.safe_load(f)["argument_specs"]["main"]["options"]
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
        defaults = yaml.safe_load(f) or {}
    for key, option in specs.items():
        if key in defaults:
            option["default"] = defaults[key]
    return specs


def shown(path):
    """[(key, value, example)] of the commented-out options in a group_vars file."""
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f]
    found = []
    for i, line in enumerate(lines):
        m = SHOWN.match(line.rstrip())
        if not m or "_" not in m.group(1):
            continue
        if m.group(2) is None:
            rest = []
            for more in lines[i + 1:]:
                if not more.startswith("#   "):
                    break
                rest.append(more[2:])
            value = yaml.safe_load("\n".join(rest))
        else:
            value = yaml.safe_load(m.group(2))
        found.append((m.group(1), value, "example" in (m.group(3) or "")))
        said = EXAMPLE_DEFAULT.search(m.group(3) or "")
        if said:  # the default an example line says it replaces
            found.append((m.group(1), yaml.safe_load(said.group(1)), "said"))
    return found


def test_site_serves_groups_and_each_has_its_group_vars():
    groups = roles_by_group()
    assert set(groups) == {"k3d_hosts", "nas", "vps"}, groups
    files = set(os.path.basename(p)[:-len(".yml")] for p in glob.glob(os.path.join(GROUP_VARS, "*.yml")))
    assert files == set(groups)


@pytest.mark.parametrize("group", sorted(roles_by_group()))
def test_group_vars_show_every_option_of_the_groups_roles_with_its_default(group):
    specs = {}
    for role in roles_by_group()[group]:
        specs.update(argument_specs(role))
    found = shown(os.path.join(GROUP_VARS, group + ".yml"))
    defaults = [key for key, dummy, example in found if example in (False, "said")]
    assert sorted(set(specs) - set(defaults)) == [], "options of %s's roles the file does not show" % group
    assert sorted(set(f[0] for f in found) - set(specs)) == [], "shown, but no role on %s has them" % group
    for key, value, example in found:
        if example in (False, "said"):
            assert value == specs[key].get("default"), "%s: shown as %r, its default is %r" % (
                key, value, specs[key].get("default"))


@pytest.mark.parametrize("group", sorted(roles_by_group()))
def test_no_option_is_shown_twice(group):
    """Each option on one line (or one block of lines): uncommenting every line a user wants must not give a
    duplicate key, of which YAML keeps only the last (ansible-core warns, and the first value is lost). An example
    value replaces the default's line and says the default in its comment."""
    keys = [key for key, dummy, example in shown(os.path.join(GROUP_VARS, group + ".yml")) if example != "said"]
    assert sorted(k for k in set(keys) if keys.count(k) > 1) == [], "shown twice in %s.yml" % group


def test_the_duplicate_check_sees_a_key_shown_twice(tmp_path):
    path = tmp_path / "g.yml"
    path.write_text("# k3d_serverlb_udp_ports: {53: dns}\n# k3d_serverlb_udp_ports: {53: dns, 1053: dns}   # example\n")
    keys = [key for key, dummy, example in shown(str(path)) if example != "said"]
    assert keys == ["k3d_serverlb_udp_ports", "k3d_serverlb_udp_ports"]
