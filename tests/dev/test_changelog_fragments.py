"""Every changelog fragment is one YAML mapping of the sections changelogs/config.yaml names (or trivial) to
lists of strings: antsibull-changelog and ansible-test's yamllint refuse anything else, and they run only in the
slow `sanity` and `publish` steps (a plain scalar holding ": " broke both once)."""
import glob
import os

import pytest
import yaml

from .conftest import ROOT

FRAGMENTS = sorted(glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.y*ml")))


def sections():
    """The list sections changelogs/config.yaml names, its trivial one among them (release_summary is a string)."""
    with open(os.path.join(ROOT, "changelogs", "config.yaml")) as f:
        config = yaml.safe_load(f)
    return {name for name, dummy in config["sections"]} | {config.get("trivial_section_name", "trivial")}


LISTS = sections()


@pytest.mark.parametrize("path", FRAGMENTS, ids=os.path.basename)
def test_fragment_is_a_mapping_of_known_sections_to_strings(path):
    with open(path) as f:
        fragment = yaml.safe_load(f)
    assert isinstance(fragment, dict) and fragment, fragment
    assert isinstance(fragment.pop("release_summary", ""), str), "release_summary is one string"
    assert sorted(set(fragment) - LISTS) == [], "unknown sections"
    for name, entries in fragment.items():
        assert isinstance(entries, list) and entries and all(isinstance(e, str) and e.strip() for e in entries), name
