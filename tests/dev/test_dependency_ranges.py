"""The collections galaxy.yml depends on: the `ansible` package (the bundle) of every supported ansible-core
satisfies galaxy.yml's ranges, so the install works offline on each (tests/support/ansible_bundles.yml, read from
the wheels; `tests/run.sh compat` installs the oldest and the newest and checks them against it); where a version
in range needs a newer ansible-core than one the collection supports, the docs name the versions to install there
first (docs/tested-versions.md); galaxy.yml, ee/requirements.yml, meta/runtime.yml and the lab venv's bundle agree."""
import json
import os
import re
import sys

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .conftest import ROOT

# The first major of each dependency that needs a newer ansible-core than an older one, with what it needs (their
# meta/runtime.yml, read from the ansible 13.0.0 and 14.0.0 wheels: community.docker 5.0.1 and 5.2.0 '>=2.17.0',
# community.general 12.0.1 '>=2.17.0' and 13.0.1 '>=2.18.0').
FIRST_MAJOR_NEEDING = {"community.docker": [("5.0.0", "2.17")],
                       "community.general": [("12.0.0", "2.17"), ("13.0.0", "2.18")]}
DEPENDENCIES = sorted(FIRST_MAJOR_NEEDING)


def load(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return yaml.safe_load(f)


BUNDLES = load("tests", "support", "ansible_bundles.yml")


def galaxy_ranges():
    return dict((name, SpecifierSet(spec)) for name, spec in load("galaxy.yml")["dependencies"].items())


def oldest_core():
    """The oldest ansible-core meta/runtime.yml claims (its requires_ansible is a lower bound)."""
    spec = SpecifierSet(load("meta", "runtime.yml")["requires_ansible"])
    lower = [Version(s.version) for s in spec if s.operator == ">="]
    assert len(lower) == 1, spec
    return lower[0]


def supported_cores():
    """Each supported ansible-core, oldest first, as tests/run.sh's SANITY_CORES lists them."""
    with open(os.path.join(ROOT, "tests", "run.sh")) as f:
        text = f.read()
    cores = re.search(r'^SANITY_CORES="([^"]*)"', text, re.M).group(1).split()
    return [c.split(":")[0] for c in cores]


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


def test_the_table_has_one_bundle_for_each_supported_core():
    assert [b["core"] for b in BUNDLES] == supported_cores()
    assert Version(BUNDLES[0]["core"]) == Version("%d.%d" % oldest_core().release[:2])


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda b: "ansible-%s" % b["ansible"])
@pytest.mark.parametrize("name", DEPENDENCIES)
def test_the_bundle_of_each_supported_core_satisfies_the_ranges(name, bundle):
    """What makes `ansible-galaxy collection install --offline` work on that core with its ansible package."""
    found = bundle[name]
    assert Version(found["version"]) in galaxy_ranges()[name], (bundle["core"], name, found)
    assert Version(bundle["core"]) in SpecifierSet(found["requires_ansible"]), (bundle["core"], name, found)


def readme_pins():
    """{name: SpecifierSet} of the install command the docs give for the older cores (docs/tested-versions.md,
    where README's Supported versions links)."""
    with open(os.path.join(ROOT, "docs", "tested-versions.md")) as f:
        text = f.read()
    line = next(ln for ln in text.splitlines() if ln.startswith("ansible-galaxy collection install 'community."))
    return dict((m.group(1), SpecifierSet(m.group(2))) for m in re.finditer(r"'(community\.\w+):([^']+)'", line))


@pytest.mark.parametrize("name", DEPENDENCIES)
def test_where_a_version_in_range_needs_a_newer_core_the_docs_name_versions_for_the_oldest(name):
    """ansible-galaxy picks the newest version in range from Galaxy, whatever requires_ansible says: on a core
    that version does not support, the docs' command installs versions that do (inside galaxy.yml's range)."""
    needing = [(Version(first), Version(core)) for first, core in FIRST_MAJOR_NEEDING[name]
               if Version(first) in galaxy_ranges()[name] and Version(core) > oldest_core()]
    if not needing:
        return
    pins = readme_pins()
    assert name in pins, "the docs' install line for the older cores does not name %s" % name
    first = min(v for v, dummy in needing)
    assert first not in pins[name] and Version("%d.0.0" % (first.major - 1)) in pins[name], (name, pins[name])
    low = [Version(s.version) for s in pins[name] if s.operator == ">="]
    assert low and all(v in galaxy_ranges()[name] for v in low), (name, pins[name], galaxy_ranges()[name])


def test_the_execution_environment_asks_for_the_same_ranges():
    ee = dict((c["name"], SpecifierSet(c["version"])) for c in load("ee", "requirements.yml")["collections"]
              if "version" in c)
    assert ee == galaxy_ranges()


@pytest.mark.parametrize("name", DEPENDENCIES)
def test_the_lab_venvs_bundle_is_its_cores_row(name):
    found = bundled(name)
    if found is None:
        pytest.skip("no ansible package in this venv (the lab venv has one: requirements-test.txt)")
    from ansible.release import __version__ as core
    row = next(b for b in BUNDLES if core.startswith(b["core"] + "."))
    assert found == (row[name]["version"], row[name]["requires_ansible"]), (core, name, found)


def test_the_docs_table_of_bundles_is_the_table_the_tests_check():
    with open(os.path.join(ROOT, "docs", "tested-versions.md")) as f:
        rows = re.findall(r"^\| (2\.\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", f.read(), re.M)
    assert rows == [(b["core"], b["ansible"], b["community.docker"]["version"], b["community.general"]["version"])
                    for b in BUNDLES]
