"""Every role has a README.md (Galaxy refuses a collection without them)
whose options table is the one generated from meta/argument_specs.yml, and
which says what the role changes on the host and how to undo it."""
import glob
import os
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import role_readme  # noqa: E402

ROLES = sorted(glob.glob(os.path.join(ROOT, "roles", "*")))


@pytest.mark.parametrize("role_dir", ROLES, ids=os.path.basename)
def test_readme_options_are_the_argument_specs(role_dir):
    with open(os.path.join(role_dir, "README.md")) as f:
        text = f.read()
    assert role_readme.render(text, role_dir) == text, \
        "the options table is stale: run python tests/support/role_readme.py"


@pytest.mark.parametrize("role_dir", ROLES, ids=os.path.basename)
def test_readme_has_every_section(role_dir):
    with open(os.path.join(role_dir, "README.md")) as f:
        text = f.read()
    name = os.path.basename(role_dir)
    assert text.startswith("# homelab.edge.%s\n" % name)
    for heading in ("## Example", "## Options", "## What it changes on the host", "## Undo"):
        assert "\n%s\n" % heading in text, heading
