"""The generated part of each inventories/example/group_vars file is the one
tests/support/group_vars.py writes from the roles' meta/argument_specs.yml
(tests/unit/test_example_inventory.py checks the files against the specs, from the tarball too)."""
import os
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import group_vars  # noqa: E402


def test_the_generator_reads_the_groups_of_the_site_playbook():
    assert group_vars.roles_by_group() == {
        "k3d_hosts": ["k3d_serverlb"], "nas": ["tcp_drain", "traefik_inflight", "autoheal"],
        "vps": ["tcp_drain", "vps_connlimit", "vps_proxy_protocol"]}


@pytest.mark.parametrize("group", sorted(group_vars.roles_by_group()))
def test_group_vars_are_generated_from_the_argument_specs(group):
    with open(os.path.join(group_vars.GROUP_VARS, group + ".yml")) as f:
        text = f.read()
    assert group_vars.render(text, group) == text, \
        "inventories/example/group_vars/%s.yml is stale: run python tests/support/group_vars.py" % group
