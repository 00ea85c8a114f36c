# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module that touches a host shares: commands run in the C
locale (their output is parsed), one way to say "run me as root", one way
to read a file of the host that may be missing and one way to write (or
remove) one, and the records a module keeps of what it changed (the firewall's
lock, which a change holds against its own revert, is ufw/revert.py's)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import tempfile

C_ENV = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


def is_root():
    return os.geteuid() == 0


def require_root(module, what, check_mode_reads=False):
    """Fail with what to do when the module does not run as root. `what`
    says what it needs root for. With `check_mode_reads`, check mode (which
    only reads) may run as another user."""
    if not is_root() and not (check_mode_reads and module.check_mode):
        module.fail_json(msg="%s must run as root: it %s. Run it with become: true (the homelab.edge site "
                             "playbook does; give the sudo password with --ask-become-pass or "
                             "ansible_become_password)." % (module._name.split(".")[-1], what))


def read_text(path, default=None):
    """A file's text (UTF-8), or `default` when it does not exist (or, in
    /proc, its process has gone). Any other error is raised."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (IOError, OSError) as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ESRCH):
            return default
        raise


def write_text(module, path, text, backup=False, new_mode=0o644, add_mode=0):
    """`text` into `path`: a temporary file in its directory, then an atomic
    rename; `text` None removes the file. An existing file keeps its mode
    plus the bits in `add_mode` (a new one gets `new_mode`); with `backup`,
    a timestamped copy of it first. Returns the copy's path (None without
    one)."""
    exists = os.path.exists(path)
    saved = module.backup_local(path) if backup and exists else None
    if text is None:
        if exists:
            os.remove(path)
        return saved
    mode = (os.stat(path).st_mode & 0o7777 | add_mode) if exists else new_mode
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path))
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8"))
    module.atomic_move(tmp, path, unsafe_writes=False)
    os.chmod(path, mode)
    return saved


def read_record(path):
    """A record a module keeps for itself (JSON), or None when there is none."""
    text = read_text(path)
    return json.loads(text) if text else None


def write_record(module, path, record):
    """Keep `record` as JSON, root's only (a 0700 directory, a 0600 file);
    None forgets it, and with the last record its directories (see
    forget_dirs)."""
    if record is not None and not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path), 0o700)
    write_text(module, path, None if record is None else json.dumps(record, indent=1, sort_keys=True) + "\n",
               new_mode=0o600)
    if record is None:
        forget_dirs(os.path.dirname(path))


OURS = "homelab-edge"


def forget_dirs(path):
    """Remove `path` and the directories above it while they are empty, up to and including the nearest one named
    homelab-edge (/var/lib/homelab-edge/tcp-drain, then /var/lib/homelab-edge). A directory that no homelab-edge
    directory holds (a record directory of the user's choosing) is left alone, empty or not."""
    parts = path.rstrip("/").split("/")
    if OURS not in parts:
        return
    top = "/".join(parts[:len(parts) - parts[::-1].index(OURS)])
    while len(path) >= len(top) and os.path.isdir(path) and not os.listdir(path):
        try:
            os.rmdir(path)
        except OSError:  # something was put there meanwhile: it stays
            return
        path = os.path.dirname(path)
