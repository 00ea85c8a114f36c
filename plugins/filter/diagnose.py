# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of playbooks/diagnose.yml (documented in the .yml files of their names)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.homelab.edge.plugins.module_utils import diagnose


def diagnose_findings(hosts, window=300):
    return diagnose.diagnose(hosts, int(window))


def diagnose_table(findings):
    return diagnose.table(findings)


class FilterModule(object):
    def filters(self):
        return {"diagnose_findings": diagnose_findings, "diagnose_table": diagnose_table}
