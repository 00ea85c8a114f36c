# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the roles' alert rules (documented in runbook_url.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The docs as published: galaxy.yml's repository, its main branch (tests/dev/test_one_home.py holds them together).
DOCS_URL = "https://github.com/homelab-edge/homelab.edge/blob/main/docs/"


def runbook_url(section):
    """A docs page, or one of its sections (`page.md#anchor`, the anchor as GitHub links a heading), as an alert's
    runbook_url."""
    return DOCS_URL + section


class FilterModule(object):
    def filters(self):
        return {"runbook_url": runbook_url}
