"""Tests of what only the checkout has - the demo (demo/), the test helpers
(tests/support/), Molecule's files - beside tests/unit (`tests/run.sh unit`
runs both). Not shipped (galaxy.yml build_ignore): tests/unit runs from the
tarball alone."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
__import__("conftest")  # tests/unit's: the collection importable as ansible_collections.homelab.edge
