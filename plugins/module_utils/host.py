# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module that changes a host shares: commands run in the C
locale (their output is parsed), one way to say "run me as root", and one
way to read a file of the host that may be missing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

C_ENV = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


def require_root(module, what):
    """Fail with what to do when the module does not run as root. `what`
    says what it needs root for."""
    if os.geteuid() != 0:
        module.fail_json(msg="%s must run as root: it %s. Run it with become: true (the homelab.edge site "
                             "playbook does; give the sudo password with --ask-become-pass or "
                             "ansible_become_password)." % (module._name.split(".")[-1], what))


def read_text(path):
    """A file's text (UTF-8), or None when it does not exist."""
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def write_text(module, path, text, backup=False, new_mode=0o644):
    """`text` into `path`: a temporary file in its directory, then an atomic
    rename. An existing file keeps its mode (a new one gets `new_mode`);
    with `backup`, a timestamped copy of it first. Returns the copy's path
    (None without one)."""
    exists = os.path.exists(path)
    saved = module.backup_local(path) if backup and exists else None
    mode = os.stat(path).st_mode & 0o7777 if exists else new_mode
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path))
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8"))
    module.atomic_move(tmp, path, unsafe_writes=False)
    os.chmod(path, mode)
    return saved
