# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the autoheal role (documented in autoheal_problems.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.homelab.edge.plugins.module_utils import autoheal


def autoheal_problems(results, label):
    """Problems over the results of a docker_container_info loop."""
    out = []
    for r in results:
        out += autoheal.problems(r["item"], r.get("container") if r.get("exists") else None, label)
    return out


def autoheal_plan(docs, watched, label, existing, wanted):
    """One healer per host: deploy the role's autoheal, adopt the one already running, or refuse."""
    return autoheal.plan(docs or [], watched, label, existing, wanted)


class FilterModule(object):
    def filters(self):
        return {"autoheal_problems": autoheal_problems, "autoheal_plan": autoheal_plan}
