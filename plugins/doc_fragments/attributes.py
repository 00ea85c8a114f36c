# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The descriptions only: each module says itself how far it supports them.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
"""

    # Modules that only read (the *_info modules, host_signals).
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
"""
