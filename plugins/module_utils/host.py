# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module that touches a host shares: commands run in the C
locale (their output is parsed), one way to say "run me as root", one way
to read a file of the host that may be missing and one way to write (or
remove) one, the records a module keeps of what it changed, and the lock a
firewall change holds against its own revert."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import tempfile
import time

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
    None forgets it."""
    if record is not None and not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path), 0o700)
    write_text(module, path, None if record is None else json.dumps(record, indent=1, sort_keys=True) + "\n",
               new_mode=0o600)


def firewall_lock(module, state_dir):
    """The firewall's one lock (the file revert.sh flocks), taken exclusive and held until the module exits: one
    arm, change or revert at a time. Waits ufw_revert.CHANGE_LOCK_WAIT seconds at most, then fails; returns the fd."""
    from ansible_collections.homelab.edge.plugins.module_utils import ufw_revert as ur
    lock = os.path.join(state_dir, ur.LOCK)
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    deadline = time.time() + ur.CHANGE_LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except (IOError, OSError):
            if time.time() > deadline:
                module.fail_json(msg="the firewall lock (%s) is held by another run or a revert for more than %d s: "
                                     "see %s/*/revert.log; nothing was changed" % (lock, ur.CHANGE_LOCK_WAIT, state_dir))
            time.sleep(0.2)


def hold_revert(module, state_dir, rid):
    """The change modules' side of commit-confirmed: take the lock revert.sh takes (flock, held until the
    module exits), then refuse unless revert `rid` is armed with time to go (ufw_revert.armed_problem).
    With the lock held, the revert cannot start until the change is done."""
    from ansible_collections.homelab.edge.plugins.module_utils import ufw_revert as ur
    if not os.path.isdir(state_dir):
        module.fail_json(msg="no revert with id %s: %s does not exist; nothing was changed" % (rid, state_dir))
    fd = firewall_lock(module, state_dir)
    d = os.path.join(state_dir, rid)
    meta = read_text(os.path.join(d, "meta.json"))
    problem = ur.armed_problem(rid, os.listdir(d) if os.path.isdir(d) else [], json.loads(meta) if meta else None,
                               int(time.time()))
    if problem:
        module.fail_json(msg=problem + "; nothing was changed")
    return fd
