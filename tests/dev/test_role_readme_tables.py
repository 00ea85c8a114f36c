"""Every role's README.md options table is the one tests/support/role_readme.py
generates from the role's meta/argument_specs.yml (tests/unit/test_role_readmes.py
checks the rest of each README, from the tarball too)."""
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
