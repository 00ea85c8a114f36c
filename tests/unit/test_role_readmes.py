"""Every role has a README.md (Galaxy refuses a collection without them)
which says what the role changes on the host and how to undo it. Its options
table is the one generated from meta/argument_specs.yml: tests/dev checks that
(the generator, tests/support/role_readme.py, is not shipped)."""
import glob
import os

import pytest

from .conftest import ROOT

ROLES = sorted(glob.glob(os.path.join(ROOT, "roles", "*")))


@pytest.mark.parametrize("role_dir", ROLES, ids=os.path.basename)
def test_readme_has_every_section(role_dir):
    with open(os.path.join(role_dir, "README.md")) as f:
        text = f.read()
    name = os.path.basename(role_dir)
    assert text.startswith("# homelab.edge.%s\n" % name)
    for heading in ("## Example", "## Options", "## What it changes on the host", "## Undo"):
        assert "\n%s\n" % heading in text, heading
