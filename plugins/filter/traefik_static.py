# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: traefik_static
short_description: Add the file provider directory, an entrypoint middleware and ping to a Traefik static config
version_added: "0.1.0"
description:
  - Returns the static config with C(providers.file.directory) set (and C(filename) removed), the
    middleware reference appended to each named entrypoint's C(http.middlewares), and C(ping) enabled.
    Every other key is kept. Fails when an entrypoint is not defined.
author: homelab.edge contributors (@homelab-edge)
positional: middleware_ref, entrypoints, directory
options:
  _input:
    description: The static config (a dict).
    type: dict
    required: true
  middleware_ref:
    description: Middleware reference, for example C(inflight-limit@file).
    type: str
    required: true
  entrypoints:
    description: Entrypoint names.
    type: list
    elements: str
    required: true
  directory:
    description: Directory of the file provider, as Traefik sees it.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Merge
  ansible.builtin.set_fact:
    static: "{{ current | homelab.edge.traefik_static('inflight-limit@file', ['websecure'], '/etc/traefik/dynamic') }}"
"""

RETURN = r"""
_value:
  description: The new static config.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.edge.plugins.module_utils import traefik


def traefik_static(static, middleware_ref, entrypoints, directory):
    try:
        return traefik.merge_static(static, middleware_ref, entrypoints, directory)
    except traefik.TraefikConfigError as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self):
        return {
            "traefik_static": traefik_static,
        }
