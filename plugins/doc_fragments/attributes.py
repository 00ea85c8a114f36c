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

    # The firewall change modules (ufw_access, ufw_connlimit): made under a revert of ufw_revert.
    REVERT_LOCK = r"""
options:
  revert_id:
    description:
      - The revert (M(homelab.edge.ufw_revert) O(homelab.edge.ufw_revert#module:state=armed)'s C(id)) this change is made
        under. The module then takes the lock that revert's script takes, and changes nothing unless the revert is
        still armed with at least 10 seconds to go. Held until the module ends, the lock makes a revert whose timer
        fires meanwhile wait for the change, then put everything back - a change never lands after its revert.
    type: str
    version_added: "2.0.0"
  revert_dir:
    description: Where the reverts are kept (M(homelab.edge.ufw_revert)'s O(homelab.edge.ufw_revert#module:state_dir)).
    type: path
    default: /var/lib/homelab-edge/ufw-revert
    version_added: "2.0.0"
"""
