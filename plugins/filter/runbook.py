# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the roles' alert rules (documented in runbook_url.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The README as published: galaxy.yml's repository, its main branch (tests/unit/test_one_home.py holds them together).
README_URL = "https://github.com/homelab-edge/homelab.edge/blob/main/README.md"


def runbook_url(anchor):
    """The README's section `anchor` (a heading as GitHub links it) as an alert's runbook_url."""
    return "%s#%s" % (README_URL, anchor)


class FilterModule(object):
    def filters(self):
        return {"runbook_url": runbook_url}
