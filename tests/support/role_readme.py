#!/usr/bin/env python
"""The options table of each role's README.md, generated from the role's
meta/argument_specs.yml (the one home of its options): the lines between
the BEGIN and END markers. `python tests/support/role_readme.py` rewrites
them; tests/dev/test_role_readme_tables.py fails when a README disagrees."""
import glob
import os
import re
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BEGIN = "<!-- BEGIN options: generated from meta/argument_specs.yml by tests/support/role_readme.py -->"
END = "<!-- END options -->"


def _text(value):
    """Ansible doc markup (C(), O(), M(), V(), I()) as markdown."""
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    value = re.sub(r"\b[COMV]\(([^)]*)\)", r"`\1`", " ".join(str(value).split()))
    value = re.sub(r"\bI\(([^)]*)\)", r"*\1*", value)
    return value.replace("|", "\\|")


def _default(option):
    if "default" not in option:
        return "(required)" if option.get("required") else ""
    return "`%s`" % yaml.safe_dump(option["default"], default_flow_style=True, width=10000).strip().replace(
        "\n...", "").replace("|", "\\|")


def table(role_dir):
    """The options table of a role, as markdown lines."""
    with open(os.path.join(role_dir, "meta", "argument_specs.yml")) as f:
        spec = yaml.safe_load(f)["argument_specs"]["main"]
    rows = ["| option | type | default | what it does |", "|---|---|---|---|"]
    for name, o in sorted(spec.get("options", {}).items()):
        kind = o.get("type", "str") + ("/%s" % o["elements"] if o.get("elements") else "")
        choices = " Choices: %s." % ", ".join("`%s`" % c for c in o["choices"]) if o.get("choices") else ""
        rows.append("| `%s` | %s | %s | %s%s |" % (name, kind, _default(o), _text(o.get("description", "")), choices))
    return rows


def render(readme_text, role_dir):
    """The README with its generated part made anew."""
    lines = readme_text.split("\n")
    start, end = lines.index(BEGIN), lines.index(END)
    return "\n".join(lines[:start + 1] + table(role_dir) + lines[end:])


def main():
    for role_dir in sorted(glob.glob(os.path.join(ROOT, "roles", "*"))):
        path = os.path.join(role_dir, "README.md")
        with open(path) as f:
            text = f.read()
        new = render(text, role_dir)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print("rewrote %s" % os.path.relpath(path, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
