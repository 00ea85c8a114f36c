#!/usr/bin/env python
"""The example inventory's group_vars list every option of the roles that run on
each group (as playbooks/site.yml assigns them), commented out with its default:
the lines between the BEGIN and END markers of inventories/example/group_vars/<group>.yml
are generated from each role's meta/argument_specs.yml (the one home of its
options), leaving out the options the hand-written lines above the markers show
already. `python tests/support/group_vars.py` (or `make group-vars`) rewrites them;
tests/dev/test_group_vars_generated.py fails when a file is stale, and
tests/unit/test_example_inventory.py when a file and the argument specs disagree."""
import os
import re
import sys
import textwrap

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GROUP_VARS = os.path.join(ROOT, "inventories", "example", "group_vars")
BEGIN = "# BEGIN every other option: generated from the roles' meta/argument_specs.yml by tests/support/group_vars.py"
END = "# END every other option"
# a shown option, as tests/unit/test_one_home.py reads it: "# key: value", a trailing "# ..." comment
SHOWN = re.compile(r"^# ([a-z0-9_]+): (.+?)(?:\s+#(.*))?$")
WIDTH = 110


def _role_names(tasks):
    """Roles imported or included by a play's tasks, blocks included."""
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from _role_names(task.get(key))
        for action in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
            if action in task:
                yield task[action]["name"]


def roles_by_group(site=os.path.join(ROOT, "playbooks", "site.yml")):
    """{group: [role, ...]} in the site playbook's order."""
    with open(site) as f:
        plays = yaml.safe_load(f)
    groups = {}
    for play in plays:
        names = [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])]
        names += list(_role_names(play.get("tasks")))
        for name in names:
            role = name.split(".")[-1]
            if role not in groups.setdefault(play["hosts"], []):
                groups[play["hosts"]].append(role)
    return dict((g, r) for g, r in groups.items() if r)


def options(role):
    """The role's options, each with its default as the role has it (defaults/main.yml, where the spec
    leaves a default out: a mapping the spec does not repeat)."""
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as f:
        specs = yaml.safe_load(f)["argument_specs"]["main"]["options"]
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
        defaults = yaml.safe_load(f) or {}
    for key, option in specs.items():
        if key in defaults:
            option["default"] = defaults[key]
    return specs


def value(option):
    """The default as one line of YAML that reads back as the same value."""
    text = yaml.safe_dump(option.get("default"), default_flow_style=True, width=10 ** 6).strip()
    return re.sub(r"\n\.\.\.$", "", text)


def summary(option):
    """The first sentence of the option's description, Ansible's markup (C(), O(), ...) taken out."""
    text = option.get("description", "")
    text = " ".join(text if isinstance(text, list) else [text])
    text = re.sub(r"\b[BCIMOV]\(([^)]*)\)", r"\1", " ".join(text.split()))
    first = re.split(r"(?<=\.)\s+(?=[A-Z(])", text, maxsplit=1)[0]
    if option.get("choices"):
        first += " Choices: %s." % ", ".join(str(c) for c in option["choices"])
    return first


# an example line shows another value and says the default in its comment: "# key: value   # example (default: x)"
EXAMPLE_DEFAULT = re.compile(r"\bexample \(default: (.*)\)$")


def shown_keys(lines):
    """The keys the lines show: with their default, or as an example that says its default (uncommented, a key
    shown twice would be a duplicate key: YAML keeps only the last)."""
    keys = set()
    for line in lines:
        m = SHOWN.match(line.rstrip())
        if m and "_" in m.group(1) and ("example" not in (m.group(3) or "") or EXAMPLE_DEFAULT.search(m.group(3))):
            keys.add(m.group(1))
    return keys


def block(group, hand_written):
    """The generated lines of a group's file: every option of its roles not shown above."""
    shown = shown_keys(hand_written)
    out = [BEGIN]
    for role in roles_by_group()[group]:
        rest = [(k, o) for k, o in options(role).items() if k not in shown]
        if not rest:
            continue
        out += ["", "# == homelab.edge.%s (ansible-doc -t role homelab.edge.%s) ==" % (role, role)]
        for key, option in rest:
            out += ["# " + line for line in textwrap.wrap(summary(option), WIDTH)]
            line = "# %s: %s" % (key, value(option))
            if len(line) <= WIDTH + 10:
                m = SHOWN.match(line)
                assert m and m.group(1) == key and yaml.safe_load(m.group(2)) == option.get("default"), line
                out.append(line)
            else:  # a long list or mapping: one item a line, still YAML once uncommented
                lines = yaml.safe_dump({key: option.get("default")}, default_flow_style=None, width=WIDTH).splitlines()
                assert yaml.safe_load("\n".join(lines)) == {key: option.get("default")}, lines
                out += ["# " + lines[0]] + ["#   " + ln for ln in lines[1:]]
    return out + [END]


def render(text, group):
    """A group's file with its generated part made anew (appended when it has none yet)."""
    lines = text.rstrip("\n").split("\n")
    if BEGIN in lines:
        start, end = lines.index(BEGIN), lines.index(END)
        head, tail = lines[:start], lines[end + 1:]
    else:
        head, tail = lines + [""], []
    return "\n".join(head + block(group, head) + tail) + "\n"


def main():
    rc = 0
    for group in sorted(roles_by_group()):
        path = os.path.join(GROUP_VARS, group + ".yml")
        with open(path) as f:
            text = f.read()
        new = render(text, group)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print("rewrote %s" % os.path.relpath(path, ROOT))
    return rc


if __name__ == "__main__":
    sys.exit(main())
