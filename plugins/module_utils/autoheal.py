# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What autoheal needs from a container to heal it: pure logic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Shell tests that always succeed: a health check like this never turns unhealthy.
_ALWAYS = re.compile(r"^\s*(true|exit\s+0|:)\s*$|\|\|\s*(true|exit\s+0|:)\s*$")


def cannot_fail(test):
    """Whether a Docker health check test can never fail."""
    if not test or test[0] == "NONE":
        return False
    if test[0] == "CMD":
        return test[1:] in (["true"], ["/bin/true"], ["/usr/bin/true"])
    if test[0] == "CMD-SHELL":
        return bool(_ALWAYS.search(" ".join(test[1:])))
    return False


def problems(name, inspect, label):
    """Why autoheal would not heal the container `name` (empty: it would).
    `inspect` is docker inspect's document, or None when it does not exist."""
    if not inspect:
        return ["%s does not exist" % name]
    config = inspect.get("Config") or {}
    out = []
    if label != "all" and (config.get("Labels") or {}).get(label) != "true":
        out.append("%s lacks the label %s=true: autoheal does not watch it" % (name, label))
    test = (config.get("Healthcheck") or {}).get("Test") or ["NONE"]
    if test[0] == "NONE":
        out.append("%s has no health check: Docker never marks it unhealthy, so autoheal never restarts it "
                   "(for Traefik: traefik healthcheck --ping, with ping enabled)" % name)
    elif cannot_fail(test):
        out.append("%s has a health check that cannot fail (%s): a wedged %s stays healthy"
                   % (name, " ".join(test[1:]), name))
    return out
