# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/prove.yml (documented in the .yml files of their names)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.homelab.edge.plugins.module_utils.prove import checks as prove_checks


def prove_table(rows):
    return prove_checks.table(rows)


def prove_summary(rows):
    return prove_checks.summary(rows)


class FilterModule(object):
    def filters(self):
        return {"prove_table": prove_table, "prove_summary": prove_summary}
