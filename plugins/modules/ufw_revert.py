#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ufw_revert
short_description: Commit-confirmed for the firewall - the host restores ufw by itself unless a new login confirms the change
version_added: "0.1.0"
description:
  - Like Debian's C(iptables-apply) or Junos C(commit confirmed), for ufw. O(state=armed) keeps a copy of the files
    that make the firewall (C(/etc/ufw), C(/etc/default/ufw)), whether ufw is active, and the live ruleset, and starts a
    timer on the host. Make the change, open a NEW connection (in a play, run the meta task C(reset_connection)
    first, because the multiplexed SSH connection is ESTABLISHED traffic that any firewall lets through), and run
    O(state=confirmed) over it. Confirmed in time, the timer is cancelled. Not confirmed within O(timeout) seconds - the controller lost
    its way in, or went away - the host puts every file back, removes the files added since, brings ufw back to
    the state it had (disabled again where it was off), and restores ufw's part of the ruleset as it was live when
    armed.
  - The revert touches only what a change of ufw can touch - ufw's chains (C(ufw-*), C(ufw6-*)), this collection's
    (C(homelab-edge-*)) and the jumps into those chains - with C(iptables-restore --noflush). Every other table and
    chain (Docker's NAT and chains, fail2ban's own chains, WireGuard's, a rule you typed into C(DOCKER-USER), a
    native nft table) is left as it is at revert time. Afterwards that part is compared with the snapshot; where it
    differs, C(ufw reload) from the restored files.
  - What others did inside the window is kept. A ban made through ufw (fail2ban's C(banaction = ufw), C(ufw insert 1
    deny|reject from ADDR)) - a deny or reject rule of one source added to C(user.rules) or C(user6.rules) since the
    arm - is put back into the restored files and live. Files under C(/etc/ufw/applications.d) (a package's
    application profile) are neither removed nor replaced. A built-in chain's policy (Docker's C(-P FORWARD DROP), a
    WireGuard guide's C(-P FORWARD ACCEPT)) is put back only where the change set it - ufw's default policy for that
    chain, or whether ufw runs, differs from the arm's. Every other file under C(/etc/ufw) and C(/etc/default/ufw)
    comes back as armed; files added there since are removed.
  - The snapshot is checked when armed, or nothing is armed and nothing is written - the save's exit code, a filter
    table in it, C(iptables-restore --test) of the part to restore, that part equal to the live ruleset's, and,
    with iptables-nft, the save loaded into a scratch network namespace (C(unshare -n)) making the same rules in
    ufw's chains as C(nft list table) shows live (counters and handles aside). A native nft rule in one of ufw's
    chains - a set lookup, an anonymous set - prints lossily through iptables (C(ip saddr @blocked drop) as C(-j
    DROP)); the arm is refused naming it. At least 16 MiB must be free where the reverts are kept.
  - The timer is a transient systemd timer (C(systemd-run)) where systemd runs, otherwise a detached process in a
    session of its own; either way it does not depend on the SSH session or the controller. Where systemd runs but
    C(systemd-run) fails and logind kills a session's processes (C(KillUserProcesses=yes)), the arm is refused.
  - O(state=confirmed) proves a NEW way in from outside before it confirms - it finds the SSH login it runs in (the
    sshd process above it and that process's connection) and refuses one that started before the revert was armed (a
    reused connection), one from loopback (an C(ssh -L) tunnel, sslh, a jump through the host itself, which ufw always lets
    loopback in) and a confirmation that arrives over no SSH login at all (C(ansible_connection) C(local), C(docker),
    C(aws_ssm)). Refused, it reverts at once and fails saying why. O(require_new_login=false) confirms without that
    proof, for a way in you checked yourself.
  - O(state=confirmed) also checks, with the rules as they now are, that every port in O(must_stay) still lets a new
    client in (for example the WireGuard port the NAS's tunnel uses); when one does not, it reverts at once and fails
    naming it.
  - O(state=reverted) reverts at once (a change that failed before its confirmation). O(state=query) only reads -
    pending reverts and the recent ones.
  - Where systemd runs, arming also installs and enables C(homelab-edge-ufw-revert-boot.service), a unit that runs at
    boot before C(ufw.service) (no default dependencies) and reverts any change still armed - the files as they
    were armed, which ufw then loads - so a restart inside the window (what a locked-out admin does from the
    provider's panel) never keeps an unconfirmed change. It does nothing when no revert is armed.
  - Without systemd, arming puts a block of its own at the top of ufw's C(/etc/ufw/before.init) and
    C(after.init) (made executable; ufw's own start runs them) that calls C(boot.sh) in O(state_dir). At every start
    of ufw - the boot's included - a change still armed whose timer is gone (another boot, or the timer's process no
    longer runs) is reverted before ufw loads its files, and ufw is started again from them (or stopped, where it
    was off when armed). C(ufw enable) or C(ufw reload) inside the window, with the timer alive, does nothing. The
    block stays in place (it does nothing when no revert is armed). A host with neither systemd nor ufw's
    C(ufw-init) is refused.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  state:
    description: What to do with the revert.
    type: str
    choices: [armed, confirmed, reverted, query]
    default: query
  id:
    description: The revert to confirm or revert, as returned by O(state=armed).
    type: str
  timeout:
    description: Seconds the change has to be confirmed, with O(state=armed) (10 to 3600).
    type: int
    default: 120
  must_stay:
    description: With O(state=confirmed), ports (C(PORT/tcp), C(PORT/udp)) that must still let a new client in.
    type: list
    elements: str
    default: []
  require_new_login:
    description:
      - With O(state=confirmed), confirm only over an SSH login that started after the revert was armed, from an address
        other than loopback; otherwise revert at once and fail.
      - V(false) confirms on your word - for a connection that cannot prove it (C(local), C(docker), C(aws_ssm), or a
        C(become_method) that starts the module outside the login, such as C(machinectl)) when you checked the way in
        from outside by other means. The result then warns that nothing proved it.
    type: bool
    default: true
    version_added: "2.0.0"
  state_dir:
    description: Where the reverts are kept on the host.
    type: path
    default: /var/lib/homelab-edge/ufw-revert
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: O(state=armed) reports what it would keep and changes nothing; O(state=query) only reads.
  diff_mode:
    support: none
  platform:
    platforms: debian
requirements:
  - ufw, tar, sh, awk, and systemd-run or setsid on the target; root (C(become)); with iptables-nft, nft and unshare
notes:
  - A revert whose timer is gone without a boot path running it (the boot unit disabled, the hook taken out of
    before.init) is C(missed); O(state=query) reports it, and the next O(state=armed) refuses until it is settled.
seealso:
  - module: homelab.edge.ufw_access
  - module: homelab.edge.ufw_connlimit
"""

EXAMPLES = r"""
- name: Arm the revert
  homelab.edge.ufw_revert:
    state: armed
    timeout: 120
  register: revert

- name: The change
  community.general.ufw:
    state: enabled

- name: Drop the multiplexed connection, so the next task logs in anew
  ansible.builtin.meta: reset_connection

- name: Confirm over the new connection (unreachable - the host restores itself)
  homelab.edge.ufw_revert:
    state: confirmed
    id: "{{ revert.id }}"
  ignore_unreachable: true
"""

RETURN = r"""
id:
  description: The revert's id (O(state=armed)), or the one acted on.
  returned: when a revert was armed, confirmed or reverted
  type: str
fires_at:
  description: When the revert fires unless confirmed (Unix time).
  returned: with O(state=armed)
  type: int
timer:
  description: What runs the revert (C(systemd-run) or C(detached)).
  returned: with O(state=armed)
  type: str
boot_path:
  description: What reverts a change left armed by a restart - C(systemd) (the boot unit) or C(ufw-init) (the hook in
    ufw's before.init).
  returned: with O(state=armed)
  type: str
  version_added: "2.0.0"
unfaithful:
  description: When the arm was refused for a rule iptables cannot save as it is - [chain, the rule as nft shows it,
    what a restore of the save makes of it].
  returned: when the arm was refused so
  type: list
  elements: list
  version_added: "2.0.0"
login:
  description: The SSH login that confirmed (or was refused) - pid of its sshd, C(started) (seconds since boot), C(peer)
    (the client's address as the host sees it), C(port) (the host's), or none when the confirmation arrived over no
    SSH login.
  returned: with O(state=confirmed)
  type: dict
  version_added: "2.0.0"
outcome:
  description: C(confirmed), or C(reverted) (C(state=reverted), a port in O(must_stay) cut, or no new login).
  returned: with O(state=confirmed) and O(state=reverted)
  type: str
cut:
  description: Ports of O(must_stay) that no longer let a new client in.
  returned: with O(state=confirmed)
  type: list
  elements: str
reverts:
  description: Every revert kept on the host, newest first - id, state (armed, missed, confirmed, reverting, stalled,
    reverted), armed_at, fires_at, reverted_at, ok. C(stalled) - a revert cut off half way (the host restarted, its
    script was killed); O(state=reverted) with its id finishes it.
  returned: always
  type: list
  elements: dict
pending:
  description: The reverts still armed, missed or stalled.
  returned: always
  type: list
  elements: dict
"""

import json
import os
import shutil
import signal
import tarfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.ufw import access as ufw_access
from ansible_collections.homelab.edge.plugins.module_utils.ufw import connlimit as ufw_connlimit
from ansible_collections.homelab.edge.plugins.module_utils.ufw import revert as ufw_revert
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.host import C_ENV, read_text as read, require_root

KEEP = 10  # reverts kept for query, newest first


def uptime():
    """Seconds since boot (where lxcfs runs, the container's: use own_start() to compare with start times)."""
    return float(read("/proc/uptime").split()[0])


def own_start():
    """When this process started, on the clock of /proc/PID/stat (seconds since boot)."""
    return ufw_revert.parse_stat(read("/proc/self/stat"))[2] / float(os.sysconf("SC_CLK_TCK"))


def boot_id():
    return (read("/proc/sys/kernel/random/boot_id", "") or "").strip() or None


def login_chain():
    """This process and its ancestors ({pid, comm, start, sockets}: sockets only of sshd processes), and the
    host's TCP sockets: what module_utils' ssh_login reads."""
    tick, chain, pid = float(os.sysconf("SC_CLK_TCK")), [], os.getpid()
    while pid > 1 and len(chain) < 64:
        try:
            comm, ppid, start = ufw_revert.parse_stat(read("/proc/%d/stat" % pid, ""))
        except (IOError, OSError, ValueError, IndexError):
            break
        sockets = []
        if comm in ufw_revert.SSHD_COMMS:
            try:
                links = [os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)]
            except OSError:
                links = []
            sockets = [int(ln[8:-1]) for ln in links if ln.startswith("socket:[")]
        chain.append({"pid": pid, "comm": comm, "start": start / tick, "sockets": sockets})
        pid = ppid
    tables = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        tables.update(ufw_revert.tcp_sockets(read(name, "")))
    return chain, tables


def logind_conf():
    """logind.conf and its drop-ins, in the order logind reads them (the drop-ins sorted by name, /etc first)."""
    dropins = {}
    for d in ("/usr/lib/systemd/logind.conf.d", "/run/systemd/logind.conf.d", "/etc/systemd/logind.conf.d"):
        if os.path.isdir(d):
            dropins.update((n, os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".conf"))
    return [read("/etc/systemd/logind.conf", "")] + [read(dropins[n], "") for n in sorted(dropins)]


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    stat = read("/proc/%d/stat" % pid, "")
    return ") Z " not in stat  # a zombie is gone


class Reverts(object):
    def __init__(self, module):
        self.module = module
        self.dir = module.params["state_dir"]

    def path(self, rid, *names):
        return os.path.join(self.dir, rid, *names)

    def write(self, rid, name, text):
        host.write_text(self.module, self.path(rid, name), text, new_mode=0o600)

    def ids(self):
        if not os.path.isdir(self.dir):
            return []
        found = [d for d in os.listdir(self.dir) if os.path.isfile(self.path(d, "meta.json"))]
        return sorted(found, key=lambda d: json.loads(read(self.path(d, "meta.json"), "{}")).get("armed_at", 0),
                      reverse=True)

    def describe(self, rid):
        meta = json.loads(read(self.path(rid, "meta.json"), "{}"))
        where = ufw_revert.marker(os.listdir(self.path(rid)))
        # a pid is this revert's timer only while that process runs its script (a restart reuses pids)
        pid_alive = (alive(meta["pid"]) and self.is_revert(meta)) if meta.get("pid") else None
        at, rc = read(self.path(rid, "reverted_at")), read(self.path(rid, "revert_rc"))
        since = booted_at = None
        if where == "reverting":  # the marker's time and the boot's only matter to a revert under way
            try:
                since = os.stat(self.path(rid, "reverting")).st_mtime
            except OSError:
                pass
            booted_at = time.time() - uptime()
        return ufw_revert.describe(meta, where, int(time.time()), pid_alive, int(at) if at else None,
                                   int(rc) if rc and rc.strip().isdigit() else None, reverting_since=since,
                                   booted_at=booted_at)

    def all(self):
        return [self.describe(r) for r in self.ids()]

    def exit(self, **kw):
        reverts = self.all()
        self.module.exit_json(reverts=reverts, pending=[r for r in reverts if r["state"] in ufw_revert.PENDING], **kw)

    def fail(self, msg, **kw):
        reverts = self.all()
        self.module.fail_json(msg=msg, reverts=reverts,
                              pending=[r for r in reverts if r["state"] in ufw_revert.PENDING], **kw)

    # ---------------------------------------------------------------- armed
    def arm(self):
        p = self.module.params
        problems = ufw_revert.check_timeout(p["timeout"])
        if problems:
            self.module.fail_json(msg="; ".join(problems) + "; nothing was changed")
        if not self.module.check_mode:
            # the lock first, then the look at what is pending: a second run arming at the same moment waits for
            # this one, then finds its revert pending and refuses (the look and the armed marker are one step)
            if not os.path.isdir(self.dir):
                os.makedirs(self.dir, 0o700)
            self.lock = ufw_revert.firewall_lock(self.module, self.dir)
        for r in self.all():
            if r["state"] == "stalled":
                self.fail("a revert of the change armed at %s was cut off half way (id %s: the host restarted, or "
                          "its script was killed), so the firewall is partly put back. Finish it with "
                          "homelab.edge.ufw_revert state=reverted id=%s; nothing was changed"
                          % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["armed_at"] or 0)), r["id"], r["id"]))
            if r["state"] in ("armed", "missed", "reverting"):
                self.fail("a revert armed at %s is %s (id %s%s): its copy is the firewall before a change that was "
                          "never confirmed. %s; nothing was changed"
                          % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["armed_at"] or 0)),
                             "still pending" if r["state"] != "missed" else "past its time and never ran",
                             r["id"], ", it fires at %s" % time.strftime("%H:%M:%S", time.localtime(r["fires_at"]))
                             if r["state"] == "armed" else "",
                             "Wait for it" if r["state"] != "missed" else
                             "Put that firewall back with homelab.edge.ufw_revert state=reverted id=%s, or keep the "
                             "firewall as it is with state=confirmed id=%s" % (r["id"], r["id"])))
        was_enabled = ufw_access.enabled(read("/etc/ufw/ufw.conf"))
        boot_path = self.boot_path()
        if boot_path is None and self.module.check_mode:
            # a plan before ufw is installed (the role checks first, then installs, then arms): the real arm decides
            self.module.warn("as the host is now, " + ufw_revert.no_boot_path_problem(refused=False))
        elif boot_path is None:
            self.fail(ufw_revert.no_boot_path_problem())
        hooks = self.hooks() if boot_path == "ufw-init" else {}
        if self.module.check_mode:
            self.exit(changed=True, was_enabled=was_enabled, timeout=p["timeout"], boot_path=boot_path)
        self.check_space()
        # every check of the snapshot before anything is written: a refusal leaves the host as it was
        saved = dict((fam, self.snapshot(fam)) for fam in ("iptables", "ip6tables"))
        policy_conf = self.module.run_command(["sh", "-c", ufw_revert.policy_conf_cmd()], environ_update=C_ENV)[1]
        now = int(time.time())
        rid = "%d-%d" % (now, os.getpid())
        d = self.path(rid)
        os.makedirs(d, 0o700)
        if hooks:  # before the copy of /etc/ufw, so that a revert keeps the hook
            self.install_hook(hooks)
        names = []
        with tarfile.open(self.path(rid, "files.tar"), "w") as tar:
            for root in ufw_revert.ROOTS:
                if os.path.lexists(root):
                    tar.add(root, arcname=root.lstrip("/"))
                    names += self.files_under(root)
        self.write(rid, "files.list", "".join(n + "\n" for n in names))
        for fam, files in saved.items():
            for suffix, text in sorted((files or {}).items()):
                self.write(rid, fam + suffix, text)
        self.write(rid, "ufw.policy", policy_conf)
        self.write(rid, "boot_id", boot_id() + "\n")
        self.write(rid, "was_enabled", "yes\n" if was_enabled else "no\n")
        script = self.path(rid, "revert.sh")
        host.write_text(self.module, script, ufw_revert.script(d, p["timeout"], was_enabled), new_mode=0o700)
        # the deadline counts from here, after the snapshot; meta.json comes before the timer
        meta = {"id": rid, "armed_at": now, "fires_at": int(time.time()) + p["timeout"], "timeout": p["timeout"],
                "was_enabled": was_enabled, "armed_start": own_start(), "boot_id": boot_id(), "boot_path": boot_path}
        self.write(rid, "meta.json", json.dumps(meta))
        # the boot unit before the armed marker: nothing after the marker but the timer can fail
        if boot_path == "systemd":
            meta["boot_unit"] = self.boot_unit()
        self.write(rid, "armed", "")
        meta.update(self.start_timer(rid, script, p["timeout"]))
        self.write(rid, "meta.json", json.dumps(meta))
        self.prune()
        self.exit(changed=True, id=rid, fires_at=meta["fires_at"], timer=meta["timer"], was_enabled=was_enabled,
                  boot_path=boot_path)

    def check_space(self):
        """Enough room for the copy before anything is written (a full disk would leave a broken one)."""
        where = os.path.abspath(self.dir)
        while not os.path.isdir(where):
            where = os.path.dirname(where)
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
        if free < ufw_revert.MIN_FREE_BYTES:
            self.fail("%s has %d MiB free; a revert's copy of /etc/ufw and the ruleset needs at least %d MiB: free "
                      "some space first; nothing was changed" % (where, free // 1048576, ufw_revert.MIN_FREE_BYTES // 1048576))

    def snapshot(self, fam):
        """The saved ruleset, validated, as {suffix: text} of the files kept: the save's exit code, a filter table,
        the scoped restore accepted by `<fam>-restore --test`, our part of the save equal to our part of the live
        ruleset, and (iptables-nft) our chains as nft shows them equal to what the restore makes of the save in a
        scratch network namespace (iptables prints set lookups and other native nft rules lossily, -S and -save
        alike). Any doubt: the arm is refused, before anything is written."""
        save, restore = self.module.get_bin_path(fam + "-save"), self.module.get_bin_path(fam + "-restore")
        if not save or not restore:
            return None

        def refuse(why):
            self.fail("the %s snapshot cannot be trusted to restore from (%s): no revert was armed and nothing was "
                      "changed" % (fam, why))
        rc, out, err = self.module.run_command([save], environ_update=C_ENV)
        if rc != 0:
            refuse("%s exited with %d: %s" % (save, rc, (err or out).strip()[-300:]))
        tool = self.module.get_bin_path(fam, required=True)
        rc, live, e = self.module.run_command(["sh", "-c", ufw_revert.own_lines_cmd(tool)], environ_update=C_ENV)
        out = ufw_revert.with_filter_table(out, live)
        try:
            scoped = ufw_revert.scoped_restore(out)
        except ufw_revert.SnapshotError as e:
            refuse(str(e))
        rc, o, e = self.module.run_command([restore, "-w", "--test", "--noflush"], data=scoped, environ_update=C_ENV)
        if rc != 0:
            refuse("%s --test refuses its own part: %s" % (restore, (e or o).strip()[-300:]))
        saved = "".join(x + "\n" for x in sorted(ufw_revert.own_part(out)))
        if live != saved:
            refuse("the save does not read back as the live ruleset for ufw's chains")
        self.check_faithful(fam, tool, restore, out)
        return {".save": out, ".scoped": scoped, ".expected": live, ".expected.order": ufw_revert.jumps_in_order(out),
                ".policies": ufw_revert.policies(out)}

    def check_faithful(self, fam, tool, restore, save_text):
        """Where iptables is iptables-nft and nft shows our chains: the save loaded into a scratch network
        namespace must make the same rules there (nft's view, no counters or handles); otherwise refuse."""
        nft = self.module.get_bin_path("nft")
        version = self.module.run_command([tool, "-V"], environ_update=C_ENV)[1]
        if not nft or "nf_tables" not in version:
            return
        rc, live, err = self.module.run_command([nft, "list", "table"] + ufw_revert.NFT_TABLE[fam].split(),
                                                environ_update=C_ENV)
        if rc != 0:  # no such table: nothing of ours is in nft's hands
            return
        unshare = self.module.get_bin_path("unshare")
        if not unshare:
            self.fail("%s: cannot check that the snapshot restores ufw's chains as they are (no unshare for a scratch "
                      "network namespace): install util-linux; no revert was armed and nothing was changed" % fam)
        rc, back, err = self.module.run_command(
            [unshare, "-n", "sh", "-c", '"$1" -w || exit 1; "$2" list table $3 2>/dev/null; exit 0', "scratch", restore, nft,
             ufw_revert.NFT_TABLE[fam]],
            data=ufw_revert.scratch_restore(save_text), environ_update=C_ENV)
        if rc != 0:
            self.fail("%s: cannot check that the snapshot restores ufw's chains as they are (loading it into a scratch "
                      "network namespace failed: %s); no revert was armed and nothing was changed"
                      % (fam, (err or back).strip()[-300:]))
        found = ufw_revert.unfaithful(ufw_revert.nft_chains(live), ufw_revert.nft_chains(back))
        if found:
            self.fail(ufw_revert.unfaithful_problem(fam, found), unfaithful=[list(x) for x in found])

    @staticmethod
    def files_under(root):
        if not os.path.isdir(root) or os.path.islink(root):
            return [root]
        out = []
        for base, dirs, files in os.walk(root):
            out += [os.path.join(base, f) for f in files]
            out += [os.path.join(base, x) for x in dirs if os.path.islink(os.path.join(base, x))]
        return sorted(out)

    def boot_path(self):
        """What reverts a change left armed by a restart: systemd's boot unit, ufw's own start (before.init), or
        None (neither can)."""
        if self.module.get_bin_path("systemctl") and os.path.isdir("/run/systemd/system"):
            return "systemd"
        if any(os.access(x, os.X_OK) for x in ufw_revert.UFW_INIT) and os.path.isdir(ufw_revert.ROOTS[0]):
            return "ufw-init"
        return None

    def hooks(self):
        """Without systemd: ufw's before.init and after.init as they will be with our block, {path: (now, then)},
        planned before anything is written; refused for a file that is not executable and holds commands of the
        user's (making it executable would start running them) or whose block's markers are damaged."""
        out = {}
        for name, stage in ufw_revert.HOOKS:
            path = os.path.join(ufw_revert.ROOTS[0], name)
            text = read(path)
            if text is not None and not os.access(path, os.X_OK) and not ufw_connlimit.is_stock_after_init(text, name):
                self.fail("%s is not executable and holds commands of yours: making it executable to call the "
                          "revert's boot hook would start running them. Make it executable yourself (or empty "
                          "it) and run again; no revert was armed and nothing was changed" % path)
            try:
                out[path] = (text, ufw_revert.init_hook(text, self.dir, stage))
            except ufw_connlimit.RulesError as e:
                self.fail("%s; no revert was armed and nothing was changed" % e)
        return out

    def install_hook(self, hooks):
        """boot.sh in the state directory and the planned init scripts (executable: ufw runs them only so). Once
        in place, each arm finds them as they are."""
        boot, text = os.path.join(self.dir, ufw_revert.BOOT_SCRIPT), ufw_revert.boot_script(self.dir)
        if read(boot) != text:
            host.write_text(self.module, boot, text, new_mode=0o700)
        for path, (old, new) in sorted(hooks.items()):
            if new != old or not os.stat(path).st_mode & 0o100:
                host.write_text(self.module, path, new, new_mode=0o750, add_mode=0o110)

    def boot_unit(self):
        """Where systemd runs: the persistent unit that reverts a change still armed at boot, before ufw.service
        (installed once, enabled). Without systemd a restart inside the window leaves the revert "missed" and the
        next run refuses until it is settled. Returns whether the unit is in place."""
        systemctl = self.module.get_bin_path("systemctl")
        if not systemctl or not os.path.isdir("/run/systemd/system"):
            return False
        path = os.path.join("/etc/systemd/system", ufw_revert.BOOT_UNIT)
        text = ufw_revert.boot_unit(self.dir)
        if read(path) != text:
            host.write_text(self.module, path, text)
            self.module.run_command([systemctl, "daemon-reload"], environ_update=C_ENV)
        rc, out, err = self.module.run_command([systemctl, "enable", ufw_revert.BOOT_UNIT], environ_update=C_ENV)
        if rc != 0:
            self.module.warn("the boot-time revert unit could not be enabled (%s): a restart inside the window keeps "
                             "the unconfirmed change until the revert is settled" % (err or out).strip())
        return rc == 0

    def start_timer(self, rid, script, timeout):
        sh = self.module.get_bin_path("sh", required=True)
        systemd_run = self.module.get_bin_path("systemd-run")
        if systemd_run and os.path.isdir("/run/systemd/system"):
            unit = ufw_revert.UNIT_PREFIX + rid
            rc, out, err = self.module.run_command(ufw_revert.systemd_run_argv(systemd_run, unit, timeout, sh, script),
                                                   environ_update=C_ENV)
            if rc == 0:
                return {"timer": "systemd-run", "unit": unit}
            if ufw_revert.kills_user_processes(logind_conf()):
                shutil.rmtree(self.path(rid), ignore_errors=True)
                self.module.fail_json(msg="systemd-run failed (%s), and logind here kills a session's processes when "
                                          "it ends (KillUserProcesses=yes): a revert timer started from this SSH "
                                          "session would die with it. Fix systemd-run, then run again; no revert was "
                                          "armed and nothing was changed" % (err or out).strip())
            self.module.warn("systemd-run failed (%s): the revert runs as a detached process instead" % err.strip())
        # a session of its own (no SIGHUP when SSH goes), nothing of ours held open
        pidfile = self.path(rid, "pid")
        setsid = self.module.get_bin_path("setsid", required=True)
        rc, out, err = self.module.run_command(
            [setsid, "-f", sh, "-c", 'echo $$ >"$1"; exec "$2" "$3" </dev/null >/dev/null 2>&1', "revert",
             pidfile, sh, script], environ_update=C_ENV, cwd="/")
        deadline = time.time() + 5
        while rc == 0 and not (read(pidfile) or "").strip() and time.time() < deadline:
            time.sleep(0.05)
        pid = (read(pidfile) or "").strip()
        if rc != 0 or not pid.isdigit():
            shutil.rmtree(self.path(rid), ignore_errors=True)
            self.module.fail_json(msg="the revert's timer did not start (%s); nothing was changed" % (err or out).strip())
        return {"timer": "detached", "pid": int(pid)}

    def prune(self):
        for rid in self.ids()[KEEP:]:
            if ufw_revert.marker(os.listdir(self.path(rid))) in ("confirmed", "reverted"):
                shutil.rmtree(self.path(rid), ignore_errors=True)

    # ---------------------------------------------------------------- settle
    def known(self, rid):
        if not rid or not os.path.isfile(self.path(rid, "meta.json")):
            self.fail("no revert with id %r in %s: arm one first (state=armed)" % (rid, self.dir))
        return json.loads(read(self.path(rid, "meta.json")))

    def stop_timer(self, meta):
        if meta.get("unit"):
            self.module.run_command(["systemctl", "stop", meta["unit"] + ".timer"], environ_update=C_ENV)
        elif meta.get("pid") and alive(meta["pid"]) and self.is_revert(meta):
            try:
                os.killpg(meta["pid"], signal.SIGTERM)
            except OSError:
                pass

    def is_revert(self, meta):
        """Whether the recorded pid is still this revert's script (a pid can be reused after a restart)."""
        cmdline = read("/proc/%d/cmdline" % meta["pid"], "") or ""
        return self.path(meta["id"], "revert.sh") in cmdline.replace("\0", " ")

    def revert_now(self, rid):
        """Run the revert at once, here, then stop its timer (the script takes the armed marker first, so a
        timer firing meanwhile finds nothing to do); the outcome as data."""
        meta = self.known(rid)
        stalled = self.describe(rid)["state"] == "stalled"
        if stalled:  # the script as this release writes it (one armed by an earlier release has no resume mode)
            host.write_text(self.module, self.path(rid, "revert.sh"),
                            ufw_revert.script(self.path(rid), meta["timeout"], meta["was_enabled"]), new_mode=0o700)
        self.module.run_command([self.module.get_bin_path("sh", required=True), self.path(rid, "revert.sh"),
                                 "resume" if stalled else "now"], environ_update=C_ENV)
        self.stop_timer(meta)
        done = self.describe(rid)
        if stalled and done["state"] != "reverted":
            self.fail("the revert %s was cut off half way and could not be finished (%s): see %s"
                      % (rid, done["state"], self.path(rid, "revert.log")), id=rid, outcome=done["state"])
        return done

    def put_back(self, rid, meta):
        """Revert at once (a confirmation that failed); what became of ufw, in words for the failure."""
        done = self.revert_now(rid)
        if done.get("ok"):
            return "ufw %s" % ("reloaded" if meta["was_enabled"] else "disabled again")
        return "see %s" % self.path(rid, "revert.log")

    def confirm(self):
        p = self.module.params
        rid = p["id"]
        meta = self.known(rid)
        where = self.describe(rid)["state"]
        if where == "stalled":
            self.fail("the revert %s was cut off half way (the host restarted, or its script was killed), so the "
                      "firewall is partly put back; it cannot be confirmed. Finish it with state=reverted id=%s, then "
                      "make the change again" % (rid, rid), id=rid)
        if where in ("reverting", "reverted"):
            self.fail("too late: the revert %s already ran (its %d s were up), so the firewall is as it was before the "
                      "change; raise the timeout if a new login takes longer" % (rid, meta["timeout"]), id=rid)
        if where == "confirmed":
            self.exit(changed=False, id=rid, outcome="confirmed", cut=[])
        login = ufw_revert.ssh_login(*login_chain())
        if p["require_new_login"]:
            armed_start = meta.get("armed_start")
            if armed_start is None:  # armed by an earlier release: its Unix time on the boot clock
                armed_start = meta["armed_at"] - (time.time() - uptime())
            problem = ufw_revert.new_login_problem(login, armed_start, same_boot=meta.get("boot_id") in (None, boot_id()))
            if problem:
                self.fail("not confirmed: %s. The firewall was put back as it was (%s). Confirm over a new SSH login "
                          "from outside, or set require_new_login=false once you checked the way in yourself"
                          % (problem, self.put_back(rid, meta)), id=rid, outcome="reverted", cut=[], login=login)
        else:
            self.module.warn("require_new_login=false: the change to the firewall is confirmed with nothing that shows "
                             "a new login from outside still works")
        cut = self.cut(p["must_stay"])
        if cut:
            self.fail("the change cut %s, which let new clients in before it: the firewall was put back as it was "
                      "(%s)" % (", ".join(cut), self.put_back(rid, meta)), id=rid, outcome="reverted", cut=cut,
                      login=login)
        try:
            os.rename(self.path(rid, "armed"), self.path(rid, "confirmed"))
        except OSError:
            self.fail("too late: the revert %s started while confirming; the firewall is as it was before the change"
                      % rid, id=rid)
        self.stop_timer(meta)
        for name in ("files.tar", "iptables.save", "ip6tables.save", "iptables.scoped", "ip6tables.scoped"):
            if os.path.exists(self.path(rid, name)):
                os.remove(self.path(rid, name))
        self.exit(changed=True, id=rid, outcome="confirmed", cut=[], login=login)

    def cut(self, must_stay):
        """Ports of must_stay that the rules as they are now let no new client into."""
        try:
            specs = ufw_access.port_specs(must_stay, "must_stay")
        except ufw_access.AccessError as e:
            self.fail(str(e))
        enabled = ufw_access.enabled(read("/etc/ufw/ufw.conf"))
        rules = ufw_access.user_rules(read("/etc/ufw/user.rules", ""))
        policy = ufw_access.default_input_policy(read("/etc/default/ufw", ""))
        return [s for s in specs if s not in ufw_access.reachable([s], enabled, rules, policy)]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["armed", "confirmed", "reverted", "query"], default="query"),
            id=dict(type="str"),
            timeout=dict(type="int", default=120),
            must_stay=dict(type="list", elements="str", default=[]),
            require_new_login=dict(type="bool", default=True),
            state_dir=dict(type="path", default=ufw_revert.STATE_DIR),
        ),
        required_if=[("state", "confirmed", ["id"]), ("state", "reverted", ["id"])],
        supports_check_mode=True,
    )
    if not ufw_revert.SAFE_PATH.match(module.params["state_dir"]):
        module.fail_json(msg="state_dir %r: use an absolute path of letters, digits, '/', '.', '_' and '-' only (it "
                             "goes into a shell script and a systemd unit); nothing was changed" % module.params["state_dir"])
    state_dir = module.params["state_dir"]
    if os.path.isdir(state_dir) and not os.access(state_dir, os.R_OK | os.X_OK):   # root's only: said, not a traceback
        require_root(module, "reads the firewall reverts kept in %s" % state_dir)
    reverts = Reverts(module)
    state = module.params["state"]
    if state == "query":
        reverts.exit(changed=False)
    require_root(module, "keeps a copy of /etc/ufw and restores it")
    if state == "armed":
        reverts.arm()
    if module.check_mode:
        reverts.exit(changed=True, id=module.params["id"])
    if state == "confirmed":
        reverts.confirm()
    done = reverts.revert_now(module.params["id"])
    reverts.exit(changed=done["state"] == "reverted", id=module.params["id"], outcome=done["state"])


if __name__ == "__main__":
    main()
