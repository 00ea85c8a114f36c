"""The collections galaxy.yml depends on install on every ansible-core the collection supports, and the ones the lab
tests with are inside the ranges: galaxy.yml, ee/requirements.yml, meta/runtime.yml and the collections the ansible
package of requirements-test.txt bundles (what Molecule, lint and compat run with) are four homes of one fact."""
import json
import os
import sys

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .conftest import ROOT

# The first major of each dependency that drops an ansible-core homelab.edge supports, with what it needs (their
# meta/runtime.yml, read from the ansible 13.0.0 and 14.0.0 wheels: community.docker 5.0.1 and 5.2.0 '>=2.17.0',
# community.general 12.0.1 '>=2.17.0' and 13.0.1 '>=2.18.0').
FIRST_MAJOR_NEEDING = {"community.docker": ("5.0.0", "2.17"), "community.general": ("12.0.0", "2.17")}


def load(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return yaml.safe_load(f)


def galaxy_ranges():
    return dict((name, SpecifierSet(spec)) for name, spec in load("galaxy.yml")["dependencies"].items())


def oldest_core():
    """The oldest ansible-core meta/runtime.yml claims (its requires_ansible is a lower bound)."""
    spec = SpecifierSet(load("meta", "runtime.yml")["requires_ansible"])
    lower = [Version(s.version) for s in spec if s.operator == ">="]
    assert len(lower) == 1, spec
    return lower[0]


def bundled(name):
    """(version, requires_ansible) of a collection as the test venv's ansible package bundles it, or None."""
    # the ansible package's collections, in site-packages (tests/unit's conftest shadows the namespace package)
    for base in sys.path:
        d = os.path.join(base, "ansible_collections", *name.split("."))
        if os.path.exists(os.path.join(d, "MANIFEST.json")):
            with open(os.path.join(d, "MANIFEST.json")) as f:
                version = json.load(f)["collection_info"]["version"]
            with open(os.path.join(d, "meta", "runtime.yml")) as f:
                return version, yaml.safe_load(f)["requires_ansible"]
    return None


@pytest.mark.parametrize("name", sorted(FIRST_MAJOR_NEEDING))
def test_no_version_in_range_needs_a_newer_core_than_the_oldest_supported(name):
    first, needs = FIRST_MAJOR_NEEDING[name]
    allowed = galaxy_ranges()[name]
    if Version(needs) > oldest_core():
        assert Version(first) not in allowed, "%s %s needs ansible-core %s, newer than %s" % (
            name, first, needs, oldest_core())


def test_the_execution_environment_asks_for_the_same_ranges():
    ee = dict((c["name"], SpecifierSet(c["version"])) for c in load("ee", "requirements.yml")["collections"]
              if "version" in c)
    assert ee == galaxy_ranges()


@pytest.mark.parametrize("name", sorted(FIRST_MAJOR_NEEDING))
def test_the_tested_version_is_in_range_and_supports_the_oldest_core(name):
    found = bundled(name)
    if found is None:
        pytest.skip("no ansible package in this venv (the lab venv has one: requirements-test.txt)")
    version, requires = found
    assert Version(version) in galaxy_ranges()[name], (name, version)
    assert oldest_core() in SpecifierSet(requires), (name, version, requires)
