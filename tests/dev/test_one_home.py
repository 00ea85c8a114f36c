"""The one-home checks of tests/unit/test_one_home.py on what only the
checkout has: Molecule's clean-up removes the keeper's config where the
module writes it, and the demo repeats neither it nor the render timeout."""
import os
import re

from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb as lb

from .conftest import ROOT


def test_the_demo_and_molecule_take_the_keeper_config_and_render_timeout_from_their_home():
    with open(os.path.join(ROOT, "molecule", "default", "destroy.yml")) as f:
        assert lb.KEEPER_CONFIG in f.read()
    literal = re.compile(r"render_timeout=\d|/etc/homelab-edge/k3d-serverlb\.json")
    with open(os.path.join(ROOT, "demo", "demo.py")) as f:
        found = [m.group(0) for m in literal.finditer(f.read())]
    assert found == [], "demo/demo.py repeats %s" % found
