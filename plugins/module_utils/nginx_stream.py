# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nginx configuration text by position: comments and quoted strings
blanked out, and the brace that closes a block. k3d_serverlb reads the
load balancer's rendered nginx.conf with these (its keeper ships this file
beside its own). The VPS's stream proxy is read as nginx itself loads it,
from `nginx -T`: nginx_stream_dump and nginx_stream_plan.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def blanked(text):
    """The text with comments and quoted strings blanked out (same length),
    so braces and semicolons can be found by position."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n - 1) - i - 1) + c if j < n else " " * (n - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)[:n]


def closing_brace(plain_text, body_start, end=None):
    """Index of the `}` that closes the block whose body starts at
    `body_start` (in blanked() text, before `end`); None when it is not closed."""
    end = len(plain_text) if end is None else end
    depth, i = 1, body_start
    while i < end:
        depth += {"{": 1, "}": -1}.get(plain_text[i], 0)
        if not depth:
            return i
        i += 1
    return None
