# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Commit-confirmed for the firewall: pure logic.

Arming a revert keeps, in a directory of its own under STATE_DIR, the files
that make the firewall (/etc/ufw, /etc/default/ufw), ufw's state and the
live ruleset, and starts a timer. When the timer fires before the change is
confirmed, revert.sh puts every file back, removes the ones added since,
brings ufw back to the state it had (disabled again where it was off) and
restores the ruleset that was live, exactly. A marker
file says where a revert stands; markers move with rename(2), so a
confirmation and the timer can never both win:

  armed -> confirmed   (the change was confirmed over a new connection)
  armed -> reverting -> reverted   (the timer fired, or a revert now)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

STATE_DIR = "/var/lib/homelab-edge/ufw-revert"
ROOTS = ("/etc/ufw", "/etc/default/ufw")
TIMEOUT_MIN, TIMEOUT_MAX = 10, 3600
UNIT_PREFIX = "homelab-edge-ufw-revert-"
# A pending revert that should have fired this long ago did not run (the
# host restarted, or its timer was killed).
GRACE = 60


def check_timeout(timeout):
    """Problems with a timeout (seconds), [] when it is usable."""
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        return ["timeout must be a whole number of seconds, got %r" % (timeout,)]
    if not TIMEOUT_MIN <= timeout <= TIMEOUT_MAX:
        return ["timeout must be between %d and %d seconds (the time a new SSH login has to confirm the "
                "change before the host restores itself), got %d" % (TIMEOUT_MIN, TIMEOUT_MAX, timeout)]
    return []


def _q(text):
    """Single-quoted for sh."""
    return "'%s'" % text.replace("'", "'\\''")


def script(directory, timeout, was_enabled, roots=ROOTS):
    """revert.sh: waits `timeout` seconds (not with the argument 'now'),
    then reverts unless the change was confirmed meanwhile."""
    return """#!/bin/sh
# homelab.edge.ufw_revert: puts the firewall back as it was when this revert
# was armed, unless the change is confirmed first. "now" reverts at once.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
dir=%(dir)s
[ "${1:-}" = now ] || sleep %(timeout)d
mv "$dir/armed" "$dir/reverting" 2>/dev/null || exit 0
exec >>"$dir/revert.log" 2>&1
echo "revert started at $(date +%%s)"
[ %(enabled)s = yes ] || ufw --force disable
for root in %(roots)s; do
  [ -e "$root" ] && find "$root" -xdev \\( -type f -o -type l \\) -print
done | while IFS= read -r f; do
  grep -qxF "$f" "$dir/files.list" || rm -f "$f"
done
rc=0
tar -C / -xpf "$dir/files.tar" || rc=1
# the ruleset that was live, exactly (the files may hold lines that were
# never loaded); ufw's own start from the files where that fails
iptables-restore <"$dir/iptables.save" || rc=2
[ ! -s "$dir/ip6tables.save" ] || ip6tables-restore <"$dir/ip6tables.save" || rc=2
if [ "$rc" != 0 ] && [ %(enabled)s = yes ]; then
  ufw reload || ufw --force enable
fi
date +%%s >"$dir/reverted_at"
echo "$rc" >"$dir/revert_rc"
mv "$dir/reverting" "$dir/reverted"
echo "revert done at $(date +%%s), rc=$rc"
""" % {"dir": _q(directory), "timeout": timeout, "enabled": "yes" if was_enabled else "no",
       "roots": " ".join(_q(r) for r in roots)}


def systemd_run_argv(systemd_run, unit, timeout, sh, script_path):
    """A transient timer that survives the SSH session ending (logind may
    kill a session's processes): it runs the script with 'now'."""
    return [systemd_run, "--unit", unit, "--on-active=%ds" % timeout, "--timer-property=AccuracySec=1s",
            "--description", "homelab.edge: revert an unconfirmed firewall change", sh, script_path, "now"]


def marker(names):
    """Where a revert stands, from the names in its directory."""
    for m in ("reverting", "reverted", "confirmed", "armed"):
        if m in names:
            return m
    return "unknown"


def describe(meta, where, now, alive=None, reverted_at=None, rc=None):
    """One revert as data: {id, state, armed_at, fires_at, ...}. A pending
    revert whose timer should have fired more than GRACE seconds ago (or
    whose process is gone) is 'missed': its change is on disk, unconfirmed."""
    out = {"id": meta.get("id"), "state": where, "armed_at": meta.get("armed_at"), "fires_at": meta.get("fires_at"),
           "timeout": meta.get("timeout"), "timer": meta.get("timer"), "was_enabled": meta.get("was_enabled")}
    if where == "armed" and ((meta.get("fires_at") or 0) + GRACE < now or alive is False):
        out["state"] = "missed"
    if reverted_at is not None:
        out["reverted_at"] = reverted_at
        out["ok"] = rc == 0
    return out
