# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Commit-confirmed for the firewall: pure logic.

Arming a revert keeps, in a directory of its own under STATE_DIR, the files
that make the firewall (/etc/ufw, /etc/default/ufw), ufw's state and the
part of the live ruleset that a change can touch (OWN: ufw's chains, this
collection's chains, the built-in filter policies and the jumps into those
chains), and starts a timer. When the timer fires before the change is
confirmed, revert.sh puts every file back, removes the ones added since,
brings ufw back to the state it had (disabled again where it was off) and
restores that part of the ruleset as it was live, with --noflush: every other
table and chain (Docker's NAT and chains, fail2ban's, WireGuard's, a rule
the admin typed) stays as it is at revert time. It then compares that part
with the snapshot and falls back to `ufw reload` where they differ. A marker
file says where a revert stands; markers move with rename(2), so a
confirmation and the timer can never both win:

  armed -> confirmed   (the change was confirmed over a new connection)
  armed -> reverting -> reverted   (the timer fired, or a revert now)

A revert cut off half way (the host restarted, the script was killed) stays
`reverting`: describe() calls it 'stalled' once it cannot still be running,
the boot unit finishes it at boot, and the script's 'resume' mode finishes it
on demand (state=reverted).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import fcntl
import json
import os
import re
import socket
import sys
import time

from .. import host
from . import access as ufw_access
from . import connlimit as ufw_connlimit


STATE_DIR = "/var/lib/homelab-edge/ufw-revert"
ROOTS = ("/etc/ufw", "/etc/default/ufw")
TIMEOUT_MIN, TIMEOUT_MAX = 10, 3600
UNIT_PREFIX = "homelab-edge-ufw-revert-"
# A pending revert that should have fired this long ago did not run (the
# host restarted, or its timer was killed).
GRACE = 60
# The lock the change modules (ufw_access, ufw_connlimit with revert_id) and
# revert.sh share, in STATE_DIR: a revert that fires while a change runs waits
# for it, then puts everything back; a change never lands after its revert.
LOCK = "lock"
LOCK_WAIT = 900
# How long a change module waits for a revert that holds the lock before it refuses.
CHANGE_LOCK_WAIT = 120
# A change starts only when its revert has at least this long left.
MIN_LEFT = 10
# What state_dir may be: it is written into revert.sh and the boot unit unquoted.
SAFE_PATH = re.compile(r"^/[A-Za-z0-9/._-]*$")
# Free space a revert's copy needs before it is taken (the copy is small; a full disk is not).
MIN_FREE_BYTES = 16 * 1048576


# The chains a change of this collection can touch (ufw's and its own), the
# built-in chains whose policy and jumps into them are restored, and the one
# jump of ours outside them (first in DOCKER-USER).
OWN = r"(ufw6?-[A-Za-z0-9-]+|homelab-edge-[A-Za-z0-9-]+)"
BUILTIN = ("INPUT", "FORWARD", "OUTPUT")
_OWN_RE = re.compile(r"^%s$" % OWN)
_JUMP_RE = re.compile(r"^-A (%s) -j %s$" % ("|".join(BUILTIN), OWN))
# ours in DOCKER-USER (ufw_connlimit's chain, first); ufw-docker's jumps there belong to after.rules and stay
DOCKER_JUMP = "-A DOCKER-USER -j homelab-edge-docker"


# A host whose filter table was never used (no rules loaded since boot: a fresh VPS, ufw inactive) saves no
# filter table at all; `iptables -S` then shows only these. Such a save stands for this table.
EMPTY_LIVE = "-P FORWARD ACCEPT\n-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n"
EMPTY_FILTER = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"


def with_filter_table(save_text, live):
    """The save, with the never-used filter table written out where the live ruleset shows it is exactly that;
    otherwise unchanged (a save without a filter table is then refused by filter_table)."""
    if "*filter" not in save_text.splitlines() and live == EMPTY_LIVE:
        return save_text + EMPTY_FILTER
    return save_text


class SnapshotError(ValueError):
    """The saved ruleset cannot be trusted to restore from."""


def filter_table(save_text):
    """The lines of the filter table of an iptables-save output (without *filter and COMMIT)."""
    lines, inside, seen = [], False, False
    for line in save_text.splitlines():
        if line == "*filter":
            inside = seen = True
        elif inside and line == "COMMIT":
            inside = False
        elif inside and line and not line.startswith("#"):
            lines.append(line)
    if not seen:
        raise SnapshotError("no filter table in the saved ruleset")
    return lines


def own_part(save_text):
    """The part of the filter table a change can touch, as `iptables -S` prints it: the built-in policies, our
    chains, their rules, the jumps into them from the built-in chains, and ours in DOCKER-USER."""
    out = []
    for line in filter_table(save_text):
        if line.startswith(":"):
            name, policy = line[1:].split(" ", 2)[:2]
            if name in BUILTIN:
                out.append("-P %s %s" % (name, policy))
            elif _OWN_RE.match(name):
                out.append("-N %s" % name)
        elif line.startswith("-A "):
            chain = line.split(" ", 2)[1]
            if _OWN_RE.match(chain) or _JUMP_RE.match(line) or line == DOCKER_JUMP:
                out.append(line)
    return out


def scoped_restore(save_text):
    """iptables-restore --noflush input that puts our chains of `own_part` back: every chain of ours declared
    (iptables-restore flushes a declared user chain, even with --noflush) and filled. The jumps into them are
    revert.sh's: it keeps in place those that were there when armed (so they keep their place among other
    tools' rules), removes the others, and appends the missing ones after this restore, as ufw appends its own;
    ours goes first in DOCKER-USER (declaring DOCKER-USER here would flush it). The built-in policies are
    revert.sh's too (`policies`): put back only where the change itself set them."""
    part = own_part(save_text)
    chains = [":%s - [0:0]" % x.split(" ")[1] for x in part if x.startswith("-N ")]
    rules = [x for x in part if x.startswith("-A ") and not _JUMP_RE.match(x) and x != DOCKER_JUMP]
    return "\n".join(["*filter"] + chains + rules + ["COMMIT", ""])


def policies(save_text):
    """The built-in chains' policies of the save, `-P CHAIN POLICY` lines."""
    return "".join(x + "\n" for x in own_part(save_text) if x.startswith("-P "))


def scratch_restore(save_text):
    """iptables-restore input for an empty network namespace: our chains as `scoped_restore` has them, with every
    other chain they jump to declared empty (so the restore is accepted there and `nft` shows what it makes)."""
    scoped = scoped_restore(save_text)
    chains = set(x[1:].split(" ", 1)[0] for x in filter_table(save_text) if x.startswith(":"))
    declared = set(re.findall(r"^:(\S+)", scoped, re.M))
    wanted = sorted((set(re.findall(r" -[jg] (\S+)", scoped)) & chains) - declared)
    return scoped.replace("*filter\n", "*filter\n" + "".join(":%s - [0:0]\n" % c for c in wanted), 1)


# `nft list table` as iptables-nft makes it: the table each family's filter table is
NFT_TABLE = {"iptables": "ip filter", "ip6tables": "ip6 filter"}
_NFT_COUNTER = re.compile(r"counter packets \d+ bytes \d+")
_NFT_HANDLE = re.compile(r"\s*# handle \d+$")


def nft_chains(text):
    """`nft list table` output -> {chain: [its lines]}, counters' values and handles left out (they differ
    between a live chain and the same rules restored)."""
    chains, current, depth = {}, None, 0
    for raw in text.splitlines():
        line = _NFT_HANDLE.sub("", raw.strip())
        if depth == 1 and line.startswith("chain ") and line.endswith("{"):
            current = line[len("chain "):-1].strip().strip('"')
            chains[current] = []
        elif current is not None and depth == 2 and line and line != "}":
            chains[current].append(_NFT_COUNTER.sub("counter", line))
        depth += line.count("{") - line.count("}") if not line.startswith("#") else 0
        if depth < 2:
            current = None
    return chains


def unfaithful(live, restored):
    """Our chains whose rules, as nft shows them live, do not come back from the save (`nft_chains` of each):
    [(chain, the live rule, what the restore makes of it or None)], the first difference of each chain."""
    out = []
    for chain in sorted(set(live) | set(restored)):
        if not _OWN_RE.match(chain):
            continue
        have, back = live.get(chain, []), restored.get(chain, [])
        for i in range(max(len(have), len(back))):
            a = have[i] if i < len(have) else None
            b = back[i] if i < len(back) else None
            if a != b:
                out.append((chain, a, b))
                break
    return out


def jumps_in_order(save_text):
    """Our jumps from the built-in chains, in the order the save has them (revert.sh appends the missing ones so)."""
    return "".join(x + "\n" for x in own_part(save_text) if _JUMP_RE.match(x))


def own_lines_cmd(tool):
    """sh: the lines of `own_part`, as the live ruleset has them now, sorted (revert.sh compares them)."""
    return ("%s -w -S 2>/dev/null | grep -E '^-P (%s) |^-N %s$|^-A %s |^-A (%s) -j %s$|^%s$' | LC_ALL=C sort"
            % (tool, "|".join(BUILTIN), OWN, OWN, "|".join(BUILTIN), OWN, DOCKER_JUMP))


def armed_problem(rid, names, meta, now, min_left=MIN_LEFT):
    """Why a change must not start under revert `rid` (its directory holds `names`, its meta.json `meta`):
    None when it is armed with at least `min_left` seconds to go."""
    if meta is None:
        return "no revert with id %s: arm one first (homelab.edge.ufw_revert state=armed)" % rid
    where = marker(names)
    if where != "armed":
        return ("the revert %s is %s, not armed: the change would land without a way back; arm a new one" % (rid, where))
    left = (meta.get("fires_at") or 0) - now
    if left < min_left:
        return ("the revert %s fires in %d s, less than the %d s a change needs: arm a new one with a longer timeout"
                % (rid, left, min_left))
    return None


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


def restore_fn():
    """sh: restore TOOL - our part of TOOL's ruleset back from $dir/TOOL.scoped, checked against
    $dir/TOOL.expected (exit 0 only when equal). The revert script and ufw_connlimit's last resort share it."""
    values = dict(builtin="|".join(BUILTIN), own=OWN, docker_jump=DOCKER_JUMP, docker_chain=DOCKER_JUMP.split()[-1],
                  own_lines=own_lines_cmd('"$t"'), policy_fn=policy_fn())
    return """restore() {
  t=$1
  [ -s "$dir/$t.scoped" ] || return 0
  command -v "$t" >/dev/null 2>&1 || return 1
  # our jumps as they are now: those that were there when armed stay where they are (among other tools'
  # rules); the others go. Our chains are then flushed, and deleted where nothing jumps to them any more.
  "$t" -w -S 2>/dev/null | grep -E '^-A (%(builtin)s) -j %(own)s$|^-A DOCKER-USER -j homelab-edge-[A-Za-z0-9-]+$' \\
    | head -n 1000 | while read -r rule; do
      grep -qxF -- "$rule" "$dir/$t.expected" || "$t" -w -D ${rule#-A }
    done
  chains=$("$t" -w -S 2>/dev/null | sed -n -E 's/^-N %(own)s$/\\1/p')
  for c in $chains; do "$t" -w -F "$c"; done
  for c in $chains; do "$t" -w -X "$c" 2>/dev/null; done
  "$t-restore" -w --noflush <"$dir/$t.scoped" || return 1
  # the built-in policies as armed, each only where the change set it: ufw's setting for that chain, or
  # whether ufw runs, differs from the armed one (a policy Docker or a WireGuard guide set meanwhile stays);
  # with no record of ufw's settings (ufw_connlimit's last resort), all of them
  grep -E '^-P (%(builtin)s) [A-Z]+$' "$dir/$t.policies" 2>/dev/null | while read -r p c pol; do
    if [ ! -s "$dir/ufw.policy" ] || policy_set_by_change "$c"; then "$t" -w -P "$c" "$pol" || exit 1; fi
  done || return 1
  # the jumps that were there when armed and are missing now, appended in their armed order
  grep -E '^-A (%(builtin)s) -j ' "$dir/$t.expected.order" 2>/dev/null | while read -r rule; do
    "$t" -w -C ${rule#-A } 2>/dev/null || "$t" -w $rule
  done
  if grep -qxF -- '%(docker_jump)s' "$dir/$t.expected" && ! "$t" -w -C DOCKER-USER -j %(docker_chain)s 2>/dev/null; then
    "$t" -w -N DOCKER-USER 2>/dev/null
    "$t" -w -I DOCKER-USER 1 -j %(docker_chain)s || return 1
  fi
  %(own_lines)s | grep -v '^-P ' >"$dir/$t.after"
  grep -v '^-P ' "$dir/$t.expected" | cmp -s - "$dir/$t.after"
}
%(policy_fn)s""" % values


# What sets ufw's policies on the built-in chains: whether ufw runs, and its default policy for each chain.
POLICY_FILES = ("/etc/ufw/ufw.conf", "/etc/default/ufw")
POLICY_KEYS = r"^(ENABLED|DEFAULT_(%s)_POLICY)=" % "|".join(BUILTIN)


def policy_conf_cmd(files=POLICY_FILES):
    """sh: ufw's settings that decide the built-in policies, one KEY=VALUE a line, sorted."""
    return ("grep -hE '%s' %s 2>/dev/null | tr -d '\"' | LC_ALL=C sort"
            % (POLICY_KEYS, " ".join(_q(f) for f in files)))


def policy_fn():
    """sh: policy_set_by_change CHAIN - true when ufw's settings for CHAIN (whether ufw runs, its default policy
    there) are not what they were when armed ($dir/ufw.policy) - read from $now_policy, taken before the files
    are put back."""
    return """policy_set_by_change() {
  for k in ENABLED DEFAULT_$1_POLICY; do
    [ "$(grep "^$k=" "$dir/ufw.policy")" = "$(printf '%s\\n' "${now_policy:-}" | grep "^$k=")" ] || return 0
  done
  return 1
}
"""


# The bans others add through ufw inside the window (fail2ban's `banaction = ufw`: `ufw insert 1 deny|reject from
# ADDR`): a rule of ufw's user rules that denies or rejects one source. A revert keeps those added since it was
# armed - in the files and live - and puts back everything else.
def bans_fn():
    """sh: bans FILE ARMED_COPY - the blocks (tuple line and its rules) of FILE that ban a source and are not in
    ARMED_COPY; keep_bans FILE BLOCKS - those blocks put back into FILE, first after `### RULES ###`, as
    `ufw insert 1` puts them; ban_live TOOL BLOCKS - their rules inserted first in the live chains."""
    return r"""bans() {
  awk 'NR == FNR { if ($0 ~ /^### tuple ###/) armed[$0] = 1; next }
       /^### tuple ###/ { keep = !($0 in armed) && $4 ~ /^(deny|reject)/ && $9 != "0.0.0.0/0" && $9 != "::/0" && $9 != "any" }
       /^$/ || /^### (END )?RULES ###/ { keep = 0 }
       keep { print }' "$2" "$1" 2>/dev/null
}
keep_bans() {
  [ -s "$2" ] && [ -f "$1" ] || return 0
  awk -v blocks="$2" '{ print }
    /^### RULES ###$/ && !done {
      while ((getline l < blocks) > 0) { if (l ~ /^### tuple ###/ && n++) print ""; print l }
      print ""; done = 1
    }' "$1" >"$1.homelab-edge" && cat "$1.homelab-edge" >"$1" && rm -f "$1.homelab-edge"
}
ban_live() {
  [ -s "$2" ] && command -v "$1" >/dev/null 2>&1 || return 0
  tool=$1
  grep '^-A ' "$2" | while read -r rule; do
    spec=${rule#-A }
    "$tool" -w -C $spec 2>/dev/null || "$tool" -w -I "${spec%% *}" 1 ${spec#* }
  done
}
"""


# Under each root, what a revert leaves as it is at revert time: the application profiles packages install
# (a change of ufw never writes them; a package installed inside the window keeps its profile).
KEEP_UNDER = ("applications.d",)
# ufw's user rules, where bans through ufw live (revert.sh keeps those added inside the window)
USER_RULES = (("iptables", "user.rules"), ("ip6tables", "user6.rules"))


def script(directory, timeout, was_enabled, roots=ROOTS):
    """revert.sh: waits `timeout` seconds (not with the argument 'now'),
    then reverts unless the change was confirmed meanwhile."""
    keep = " ".join("-e %s" % _q("/%s/" % k) for k in KEEP_UNDER)
    excludes = " ".join("--exclude=%s" % _q("%s/%s" % (r.lstrip("/"), k)) for r in roots for k in KEEP_UNDER)
    ufw_root = roots[0]
    return """#!/bin/sh
# homelab.edge.ufw_revert: puts the firewall back as it was when this revert
# was armed, unless the change is confirmed first. "now" reverts at once.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
dir=%(dir)s
mode=${1:-wait}
case $mode in now|boot|resume) ;; *) sleep %(timeout)d ;; esac
# the lock the change modules hold while they change the firewall: a change
# still running finishes first, then this puts it all back
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$(dirname "$dir")/%(lock)s"
  flock -w %(lock_wait)d 9 || echo "the lock was not free within %(lock_wait)d s: reverting anyway" >>"$dir/revert.log"
fi
# the armed marker taken, or (boot, resume) a revert that was cut off half way: it is finished
if mv "$dir/armed" "$dir/reverting" 2>/dev/null; then
  touch "$dir/reverting"
elif { [ "$mode" != boot ] && [ "$mode" != resume ]; } || [ ! -e "$dir/reverting" ]; then
  exit 0
fi
exec >>"$dir/revert.log" 2>&1
echo "revert started at $(date +%%s) ($mode)"
%(policy_fn)s%(bans_fn)s# ufw's settings as the change left them (whether a built-in policy is the change's), before anything moves
now_policy=$(%(policy_conf)s)
# the bans added through ufw since armed (fail2ban's ufw action), taken before the files come back
for f in user.rules user6.rules; do
  [ -e "$dir/bans.$f" ] || { tar -xOf "$dir/files.tar" %(ufw_rel)s/$f 2>/dev/null >"$dir/armed.$f"
    bans %(ufw_root)s/$f "$dir/armed.$f" >"$dir/bans.$f"; }
done
# every file as armed; files added since are removed, but for what others keep there (application profiles)
put_files_back() {
  for root in %(roots)s; do
    [ -e "$root" ] && find "$root" -xdev \\( -type f -o -type l \\) -print
  done | grep -v -F %(keep)s | while IFS= read -r f; do
    grep -qxF "$f" "$dir/files.list" || rm -f "$f"
  done
  tar -C / -xpf "$dir/files.tar" %(excludes)s || return 1
  for f in user.rules user6.rules; do keep_bans %(ufw_root)s/$f "$dir/bans.$f"; done
}
if [ "$mode" = boot ]; then
  # at boot, before ufw starts: the files as they were armed (ufw.conf says
  # whether ufw starts), and ufw loads them; there is no ruleset to restore yet
  rc=0
  put_files_back || rc=1
  date +%%s >"$dir/reverted_at"
  echo "$rc" >"$dir/revert_rc"
  mv "$dir/reverting" "$dir/reverted"
  echo "revert done at boot at $(date +%%s), rc=$rc"
  exit 0
fi
[ %(enabled)s = yes ] || ufw --force disable
# our part of the ruleset back as it was live when armed (the files may hold
# lines that were never loaded): our jumps and chains as they are now removed,
# the armed ones restored with --noflush; every other chain and table stays
%(restore_fn)src=0
put_files_back || rc=1
restore iptables || rc=2
restore ip6tables || rc=2
if [ %(enabled)s = yes ]; then
  ban_live iptables "$dir/bans.user.rules"
  ban_live ip6tables "$dir/bans.user6.rules"
fi
# where our part did not come back as it was: ufw's own start from the files (the bans are in them)
if [ "$rc" != 0 ] && [ %(enabled)s = yes ]; then
  ufw reload || ufw --force enable
fi
date +%%s >"$dir/reverted_at"
echo "$rc" >"$dir/revert_rc"
mv "$dir/reverting" "$dir/reverted"
echo "revert done at $(date +%%s), rc=$rc"
""" % {"dir": _q(directory), "timeout": timeout, "enabled": "yes" if was_enabled else "no",
       "roots": " ".join(_q(r) for r in roots), "restore_fn": restore_fn(), "lock": LOCK, "lock_wait": LOCK_WAIT,
       "policy_fn": policy_fn(), "bans_fn": bans_fn(), "policy_conf": policy_conf_cmd(
           (ufw_root + "/ufw.conf",) + tuple(r for r in roots if r.endswith("default/ufw"))),
       "ufw_root": _q(ufw_root), "ufw_rel": _q(ufw_root.lstrip("/")), "keep": keep, "excludes": excludes}


BOOT_UNIT = "homelab-edge-ufw-revert-boot.service"


def boot_unit(state_dir=STATE_DIR):
    """A persistent unit that reverts, at boot and before ufw.service loads the rules, every change still armed
    (the host restarted inside the window: the transient timer is gone, the unconfirmed files are not), and
    finishes every revert that a restart cut off half way."""
    return """[Unit]
Description=homelab.edge: revert a firewall change left unconfirmed by a restart, before ufw starts
DefaultDependencies=no
After=local-fs.target
Before=ufw.service network-pre.target
Wants=network-pre.target
ConditionPathIsDirectory=%(dir)s

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'for d in %(dir)s/*/; do if [ -e "$${d}armed" ] || [ -e "$${d}reverting" ]; then /bin/sh "$${d}revert.sh" boot; fi; done; exit 0'

[Install]
WantedBy=sysinit.target
""" % {"dir": state_dir}


# ------------------------------------------------------------ a boot path without systemd
# ufw's own start (ufw-init start: at boot by ufw's init script, and by `ufw enable`) runs /etc/ufw/before.init
# start before it loads the rules files and after.init start at its end, when they are executable. A block of
# ours in each calls STATE_DIR/boot.sh, which reverts a change still armed whose timer is gone - another boot
# (the boot id differs from the arm's), or a detached timer whose process no longer runs - before ufw loads the
# files; `ufw enable` or `ufw reload` inside the window, with the timer alive, does nothing.
HOOK_BEGIN = "# BEGIN homelab.edge.ufw_revert"
HOOK_END = "# END homelab.edge.ufw_revert"
HOOKS = (("before.init", "before"), ("after.init", "after"))
BOOT_SCRIPT = "boot.sh"
UFW_INIT = ("/usr/lib/ufw/ufw-init", "/lib/ufw/ufw-init")


def init_hook(text, state_dir, stage, present=True):
    """ufw's before.init (stage before) or after.init (stage after) with our block placed before any command of
    the user's (and their `set -e`), or taken out - the same marked-block edit as ufw_connlimit's call in
    after.init, with markers of its own (uc.RulesError where ours are damaged)."""
    path = "%s/%s" % (state_dir, BOOT_SCRIPT)
    block = [HOOK_BEGIN, "# a firewall change a restart left unconfirmed is reverted here (nothing when none is armed)",
             '[ "${1:-}" = start ] && [ -f %s ] && /bin/sh %s %s "$PPID" || true' % (path, path, stage), HOOK_END]
    return ufw_connlimit.apply_init_block(text, block, present, HOOK_BEGIN, HOOK_END, "%s.init" % stage)


def boot_script(state_dir=STATE_DIR, ufw_init=UFW_INIT):
    """STATE_DIR/boot.sh, run by the hooks in before.init and after.init (see above)."""
    return """#!/bin/sh
# homelab.edge.ufw_revert: run by ufw's before.init and after.init at each start of ufw.
# before: each change still armed whose timer is gone (another boot, or its process no longer runs) is
#   reverted - its files as armed - before ufw loads the rules files.
# after: where a revert ran in this start, ufw is started again from the files as armed (their settings were
#   read before the revert), or stopped where it was off when armed.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
state=%(state)s
stage=${1:-} start=${2:-}
ufw_init=
for f in %(ufw_init)s; do [ -x "$f" ] && { ufw_init=$f; break; }; done
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
case $stage in
before)
  for d in "$state"/*/; do
    { [ -e "${d}armed" ] || [ -e "${d}reverting" ]; } || continue
    gone=no
    [ "$(cat "${d}boot_id" 2>/dev/null)" = "$boot" ] || gone=yes
    pid=$(cat "${d}pid" 2>/dev/null)
    if [ -n "$pid" ] && ! tr '\\000' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "${d}revert.sh"; then
      gone=yes
    fi
    [ "$gone" = yes ] || continue
    /bin/sh "${d}revert.sh" boot
    echo "$start $(cat "${d}was_enabled" 2>/dev/null || echo yes)" >"$state/after-start"
  done ;;
after)
  [ -f "$state/after-start" ] || exit 0
  read -r who enabled <"$state/after-start"
  rm -f "$state/after-start"
  [ "$who" = "$start" ] && [ -n "$ufw_init" ] || exit 0
  if [ "$enabled" = yes ]; then "$ufw_init" force-reload; else "$ufw_init" force-stop; fi ;;
esac
exit 0
""" % {"state": _q(state_dir), "ufw_init": " ".join(_q(x) for x in ufw_init)}


def no_boot_path_problem(refused=True):
    """Why a revert cannot be armed on a host with neither systemd nor ufw's own start (refused: the arm's
    refusal; otherwise what a plan found)."""
    return ("this host runs no systemd and has no ufw-init (%s), so nothing would revert an unconfirmed change at "
            "the next boot: a restart inside the window would keep it. Install ufw first (the role does, before it "
            "arms), or make the change where systemd runs%s"
            % (" or ".join(UFW_INIT), "; no revert was armed and nothing was changed" if refused else ""))


def kills_user_processes(texts):
    """Whether logind kills a session's processes when it ends (KillUserProcesses=, the last setting of
    logind.conf and its drop-ins in `texts`, in the order logind reads them; systemd's default is no)."""
    value = "no"
    for text in texts:
        section = None
        for line in (text or "").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Login]" and line.startswith("KillUserProcesses="):
                value = line.split("=", 1)[1].strip().lower()
    return value in ("yes", "true", "1", "on")


def unfaithful_problem(fam, found):
    """Why a snapshot with rules iptables cannot save as they are must not be armed (`unfaithful`'s result)."""
    chain, rule, made = found[0]
    return ("%s: %s holds a rule that %s-save cannot print as it is - `%s` comes back from the save as %s - so a "
            "revert would put back something else than your rule (a set lookup, an anonymous set or another native "
            "nft expression in one of ufw's chains). Move such rules to an nft table of your own (table inet ...), "
            "or let ufw make them; no revert was armed and nothing was changed"
            % (fam, chain, fam, rule or "(nothing)", "`%s`" % made if made else "nothing"))


def systemd_run_argv(systemd_run, unit, timeout, sh, script_path):
    """A transient timer that survives the SSH session ending (logind may
    kill a session's processes): it runs the script with 'now'."""
    return [systemd_run, "--unit", unit, "--collect", "--on-active=%ds" % timeout, "--timer-property=AccuracySec=1s",
            "--description", "homelab.edge: revert an unconfirmed firewall change", sh, script_path, "now"]


# the states of a revert that still needs something: a confirmation, a revert, or its end
PENDING = ("armed", "missed", "stalled")


def marker(names):
    """Where a revert stands, from the names in its directory."""
    for m in ("reverting", "reverted", "confirmed", "armed"):
        if m in names:
            return m
    return "unknown"


# a revert script runs at most LOCK_WAIT seconds for the lock, then a few for the restore
STALL = LOCK_WAIT + 120


def describe(meta, where, now, alive=None, reverted_at=None, rc=None, reverting_since=None, booted_at=None):
    """One revert as data: {id, state, armed_at, fires_at, ...}. A pending
    revert whose timer should have fired more than GRACE seconds ago (or
    whose process is gone) is 'missed': its change is on disk, unconfirmed.
    A revert 'reverting' since before the host booted, or for longer than
    any revert runs (STALL, counted from its start or its due time), is
    'stalled': cut off half way, its files part restored."""
    out = {"id": meta.get("id"), "state": where, "armed_at": meta.get("armed_at"), "fires_at": meta.get("fires_at"),
           "timeout": meta.get("timeout"), "timer": meta.get("timer"), "was_enabled": meta.get("was_enabled")}
    if where == "armed" and ((meta.get("fires_at") or 0) + GRACE < now or alive is False):
        out["state"] = "missed"
    if where == "reverting" and reverting_since is not None and (
            (booted_at is not None and reverting_since < booted_at)
            or max(reverting_since, meta.get("fires_at") or 0) + STALL < now):
        out["state"] = "stalled"
    if reverted_at is not None:
        out["reverted_at"] = reverted_at
        out["ok"] = rc == 0
    return out


# ------------------------------------------------------------ the new login
# A confirmation proves that the way in still works only when it arrives over a NEW path from outside: an SSH
# login that started after the revert was armed, from an address other than loopback (ufw always accepts
# loopback, so a login through an `ssh -L` tunnel, sslh or a jump through the host itself proves nothing).
# The module finds its login by walking up from its own process to the sshd that holds the connection.

SSHD_COMMS = ("sshd", "sshd-session")  # OpenSSH 9.8 and later run each connection as sshd-session
TCP_ESTABLISHED = "01"


def parse_stat(text):
    """/proc/PID/stat -> (comm, ppid, start in clock ticks since boot). comm may hold spaces and ')'."""
    head, dummy, rest = text.rpartition(")")
    fields = rest.split()  # fields[0] is the state (field 3 of proc(5)), so field N is fields[N - 3]
    return head.partition("(")[2], int(fields[1]), int(fields[19])


def _address(hexaddr):
    """An address of /proc/net/tcp{,6} (32-bit words in the host's byte order) as text; an
    IPv4-mapped IPv6 address as IPv4."""
    order = -1 if sys.byteorder == "little" else 1
    raw = b"".join(binascii.unhexlify(hexaddr[i:i + 8])[::order] for i in range(0, len(hexaddr), 8))
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def tcp_sockets(text):
    """/proc/net/tcp or /proc/net/tcp6 -> {inode: {local, local_port, peer, peer_port, state}}."""
    found = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        (laddr, lport), (raddr, rport) = f[1].split(":"), f[2].split(":")
        found[int(f[9])] = {"local": _address(laddr), "local_port": int(lport, 16), "peer": _address(raddr),
                            "peer_port": int(rport, 16), "state": f[3]}
    return found


def ssh_login(chain, sockets):
    """The SSH login a process runs in, from its chain of ancestors ([{pid, comm, start (seconds since boot),
    sockets: [inode]}], itself first) and the host's TCP sockets: {pid, started, peer, port} of the sshd
    process that holds an established connection (the oldest such process in the chain: the connection's
    own monitor, not the listener), or None when no sshd in the chain holds one."""
    login = None
    for proc in chain:
        if proc["comm"] not in SSHD_COMMS:
            continue
        for inode in proc["sockets"]:
            s = sockets.get(inode)
            if s and s["state"] == TCP_ESTABLISHED and (login is None or proc["start"] < login["started"]):
                login = {"pid": proc["pid"], "started": proc["start"], "peer": s["peer"], "port": s["local_port"],
                         "local": s["local"]}
    return login


def new_login_problem(login, armed_start, same_boot=True):
    """Why this login proves no new way in from outside (None when it does). armed_start: when the process that
    armed the revert started, on the clock of /proc/PID/stat (seconds since boot: the same clock as the login's,
    also where lxcfs rewrites /proc/uptime); same_boot: the host has not restarted since (after a restart every
    login is newer than the arm)."""
    if login is None:
        return ("this confirmation did not arrive over SSH (a local, docker or aws_ssm connection, or a login "
                "whose sshd could not be read), so nothing shows that a new login from outside still works")
    if same_boot and login["started"] <= armed_start:
        return ("the login that confirms is older than the revert (it started %.0f s before the revert was armed): "
                "a reused connection is ESTABLISHED traffic, which any firewall lets through; run the meta task "
                "reset_connection before the confirmation (and no ControlPersist shared with another process)"
                % (armed_start - login["started"]))
    if ufw_access.is_loopback(login["peer"]) or login["peer"] == login.get("local"):
        return ("the login came from %s, this host itself (an ssh -L tunnel, sslh, or a jump through the host): "
                "ufw always lets the host's own traffic in (it arrives on lo), so it proves nothing about the way in "
                "from outside" % login["peer"])
    return None


def firewall_lock(module, state_dir):
    """The firewall's one lock (the file revert.sh flocks), taken exclusive and held until the module exits: one
    arm, change or revert at a time. Waits CHANGE_LOCK_WAIT seconds at most, then fails; returns the fd."""
    lock = os.path.join(state_dir, LOCK)
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    deadline = time.time() + CHANGE_LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except (IOError, OSError):
            if time.time() > deadline:
                module.fail_json(msg="the firewall lock (%s) is held by another run or a revert for more than %d s: "
                                     "see %s/*/revert.log; nothing was changed" % (lock, CHANGE_LOCK_WAIT, state_dir))
            time.sleep(0.2)


def hold_revert(module, state_dir, rid):
    """The change modules' side of commit-confirmed: take the lock revert.sh takes (flock, held until the
    module exits), then refuse unless revert `rid` is armed with time to go (armed_problem).
    With the lock held, the revert cannot start until the change is done."""
    if not os.path.isdir(state_dir):
        module.fail_json(msg="no revert with id %s: %s does not exist; nothing was changed" % (rid, state_dir))
    fd = firewall_lock(module, state_dir)
    d = os.path.join(state_dir, rid)
    meta = host.read_text(os.path.join(d, "meta.json"))
    problem = armed_problem(rid, os.listdir(d) if os.path.isdir(d) else [], json.loads(meta) if meta else None,
                            int(time.time()))
    if problem:
        module.fail_json(msg=problem + "; nothing was changed")
    return fd
