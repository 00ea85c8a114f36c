#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tcp_drain
short_description: Set and verify the TCP drain sysctls in a network namespace (host or container)
version_added: "0.1.0"
description:
  - Sets the live values of the drain sysctls (C(net.ipv4.tcp_fin_timeout),
    C(net.ipv4.tcp_abort_on_overflow), conntrack's TCP timers) and reads every one back; a value
    that did not take fails the task and names the key.
  - Every one of these keys is per network namespace. With O(container), the values are written
    into that container's namespace from the host (C(nsenter -n)), which works even when the
    container's own /proc/sys is read-only; host values never reach a container on a bridge network.
  - Values set this way last until the namespace goes away (reboot, container re-creation). Persist
    host values with O(persist) (the C(homelab.edge.tcp_drain) role sets it) and container values with
    compose C(sysctls:) or C(docker run --sysctl).
  - The value a key had before the module first changed it is recorded in O(state_dir), per namespace.
    O(state=absent) sets each recorded key back to that value and forgets the record.
  - With O(persist), the host's values also go into a sysctl.d drop-in, and the module first works out what
    systemd-sysctl will apply at the next boot, in the order C(sysctl.d(5)) documents - every C(.conf) file of
    C(/etc/sysctl.d), C(/run/sysctl.d), C(/usr/local/lib/sysctl.d) and C(/usr/lib/sysctl.d) sorted together by file
    name, a file in C(/etc) replacing a same-named one elsewhere, symlinks followed (Debian and Ubuntu link
    C(/etc/sysctl.d/99-sysctl.conf) to C(/etc/sysctl.conf)), the last assignment of a key winning, an explicit key
    beating a glob, C(-key) unsetting it.
  - When a file read after the drop-in sets a key to another value, the next boot would undo the drop-in. By
    default (O(boot_order=refuse)) the module then fails before it changes anything, naming each such file, line and
    key. O(boot_order=win) writes the drop-in under a name that sorts after them instead (C(99-zzz-), C(zz-) or
    C(zzzz-) before the configured name's stem) and removes the module's drop-in under its other names.
  - The result's RV(boot) shows, per key, the value the next boot applies beside the live one.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  values:
    description: Sysctl keys and integer values. Only the keys listed above are accepted. Required with O(state=present).
    type: dict
  state:
    description: C(present) sets O(values); C(absent) sets every key the module changed back to its value before.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: Where the values before the first change are kept (one JSON file per namespace).
    type: path
    default: /var/lib/homelab-edge/tcp-drain
  container:
    description: Name or ID of a running Docker container whose network namespace to use. Omit for the host.
    type: str
  unsupported:
    description:
      - What to do with a key that cannot be set (the kernel lacks it, or /proc/sys is read-only).
      - C(fail) fails the task; C(skip) reports it per key and goes on.
    type: str
    choices: [fail, skip]
    default: fail
  persist:
    description:
      - The host's sysctl.d drop-in (for example C(/etc/sysctl.d/60-homelab-edge-drain.conf)) that holds the values
        that took, so that boot applies them again. Omit for no drop-in. Not with O(container).
      - With O(state=absent) the module's drop-in is removed under this name and under every name O(boot_order=win)
        may have given it.
    type: path
    version_added: "2.0.0"
  boot_order:
    description:
      - What to do when a file that systemd-sysctl reads after O(persist) sets one of the keys to another value (the
        next boot would apply that value, not this one).
      - C(refuse) fails before anything is changed, naming each such file, line and key.
      - C(win) writes the drop-in under a name that sorts after every such file (shown in diff mode), and removes the
        module's drop-in under the configured name.
    type: str
    choices: [refuse, win]
    default: refuse
    version_added: "2.0.0"
  conntrack_modules_load:
    description:
      - A C(modules-load.d) file to write with C(nf_conntrack) when O(values) has a C(net.netfilter.) key and
        O(persist) is set. Those keys exist only once the module is loaded; C(systemd-sysctl.service) is ordered
        after C(systemd-modules-load.service), so with this file boot loads it before it applies the drop-in (where
        nothing else does, such as Docker loading it later, the key is missing when boot applies it). Removed by
        O(state=absent). Omit to write none.
    type: path
    version_added: "2.0.0"
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Each key is read; nothing is written.
  diff_mode:
    support: full
    details: The live values before and after, per key, and each file written or removed (the drop-in under its
      name, the C(modules-load.d) file).
  platform:
    platforms: linux
requirements:
  - sysctl (procps); nsenter (util-linux) and the docker CLI for O(container)
"""

EXAMPLES = r"""
- name: Shorter FIN_WAIT_2 and reset on a full accept queue, on the host
  homelab.edge.tcp_drain:
    values:
      net.ipv4.tcp_fin_timeout: 15
      net.ipv4.tcp_abort_on_overflow: 1

- name: Persisted in a drop-in that boot applies, after /etc/sysctl.conf if that sets the same keys
  homelab.edge.tcp_drain:
    values:
      net.ipv4.tcp_fin_timeout: 15
      net.netfilter.nf_conntrack_tcp_timeout_time_wait: 30
    persist: /etc/sysctl.d/60-homelab-edge-drain.conf
    boot_order: win
    conntrack_modules_load: /etc/modules-load.d/homelab-edge-conntrack.conf

- name: The same inside Traefik's network namespace (bridge network)
  homelab.edge.tcp_drain:
    container: traefik
    values:
      net.ipv4.tcp_fin_timeout: 15
"""

RETURN = r"""
settings:
  description:
    - Per key, the value before and after and its C(status) - C(ok) (already so), C(changed) (set), or why it could not
      be read or set - C(missing) (no such key in this namespace), C(read-only) (an unprivileged container's
      /proc/sys), C(not-root) or C(error). Programs match on C(status); the words in RV(not_applied) are for people.
  returned: always
  type: dict
  sample: {"net.ipv4.tcp_fin_timeout": {"before": 60, "after": 15, "status": "changed"}}
  version_added: "2.0.0"
not_applied:
  description: Keys that could not be set, each with the reason in words (O(unsupported=skip)).
  returned: always
  type: list
  elements: str
  version_added: "2.0.0"
namespace:
  description: C(host) or C(container:<name>).
  returned: always
  type: str
dropin:
  description: The drop-in's path as written (or, in check mode, as it would be); null without O(persist) or when refused.
  returned: always
  type: str
  sample: /etc/sysctl.d/99-zzz-homelab-edge-drain.conf
  version_added: "2.0.0"
conflicts:
  description:
    - Every assignment that systemd-sysctl reads after the drop-in's configured name and that sets one of the keys
      to another value (C(value) null - it unsets the key), with its file (C(path), and C(link) where that is a
      symlink), C(line) and C(key), and the value asked (C(want)).
  returned: when O(persist) is set
  type: list
  elements: dict
  sample: [{"path": "/etc/sysctl.d/99-sysctl.conf", "link": "../sysctl.conf", "line": 3,
            "key": "net.ipv4.tcp_fin_timeout", "value": "30", "want": 15}]
  version_added: "2.0.0"
boot:
  description:
    - Per key, the value the next boot applies (C(boot), null when no file sets it) beside the live one (C(live)),
      the file and line it comes from (C(from)), and C(status) - C(same) (boot applies the value asked),
      C(differs), C(not-set), or C(module-late) (a C(net.netfilter.) key whose module nothing loads before
      systemd-sysctl runs, so boot cannot apply it). Read from the files as they are when the module returns (in
      check mode, as they are now).
  returned: when O(persist) is set
  type: dict
  sample: {"net.ipv4.tcp_fin_timeout": {"boot": 15, "live": 15, "status": "same",
           "from": "/etc/sysctl.d/60-homelab-edge-drain.conf:4"}}
  version_added: "2.0.0"
boot_summary:
  description: RV(boot) in words, for people (status shows it).
  returned: when O(persist) is set
  type: str
  sample: "tcp_fin_timeout=15 (boot 30 from /etc/sysctl.d/99-sysctl.conf:3)"
  version_added: "2.0.0"
"""


import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import sysctl as tcp_drain_sysctl
from ansible_collections.homelab.edge.plugins.module_utils.tcp_drain import boot as tcp_drain_boot


class Namespace(object):
    """The host's network namespace, or a running container's (entered with nsenter)."""

    def __init__(self, module, container):
        self.module, self.prefix, self.where, self.root = module, [], "the host", host.is_root()
        self.sysctl = module.get_bin_path("sysctl", required=True)
        if container:
            docker = module.get_bin_path("docker", required=True)
            nsenter = module.get_bin_path("nsenter", required=True)
            rc, out, err = module.run_command([docker, "inspect", "-f", "{{.State.Running}} {{.State.Pid}}", container],
                                              environ_update=host.C_ENV)
            running, pid = out.split() if rc == 0 else ("false", "0")
            if running != "true" or pid == "0":
                # a container's values live in its network namespace, which it has only while it runs
                module.fail_json(msg="container %s is not running (%s): it has no network namespace to set. Start it "
                                     "- a run cut off while compose re-created it leaves it so: run the "
                                     "traefik_inflight tag, or docker compose up -d --force-recreate in its project "
                                     "- or take it out of tcp_drain_containers; nothing was changed"
                                     % (container, (err or out).strip() if rc else "docker inspect: not running"))
            self.prefix = [nsenter, "-t", pid, "-n", "--"]
            self.where = "container %s" % container

    def read(self, key):
        rc, out, err = self.module.run_command(self.prefix + [self.sysctl, "-n", key], environ_update=host.C_ENV)
        if rc != 0:
            return None, tcp_drain_sysctl.classify_error(err or out, self.root)
        return int(out.strip().split()[0]), None

    def write(self, key, value):
        rc, out, err = self.module.run_command(self.prefix + [self.sysctl, "-w", "%s=%d" % (key, value)],
                                               environ_update=host.C_ENV)
        return None if rc == 0 else tcp_drain_sysctl.classify_error(err or out, self.root)


def set_key(module, ns, key, want, dry=False):
    """One key: read, write when it differs (not in check mode, not `dry`), read back.
    Returns (entry, problem, mismatch)."""
    have, why = ns.read(key)
    entry = {"before": have, "after": have, "status": "ok"}
    mismatch = None
    if why is None and have != want:
        entry["status"] = "changed"
        if module.check_mode or dry:
            entry["after"] = want
        else:
            why = ns.write(key, want)
            if why is None:
                entry["after"], why = ns.read(key)
                if why is None and entry["after"] != want:
                    mismatch = "%s: set %d but %s reads %s" % (key, want, ns.where, entry["after"])
    if why is not None:
        entry["status"] = why
        return entry, tcp_drain_sysctl.explain(key, why, ns.where), mismatch
    return entry, None, mismatch


def live_diff(namespace, keys):
    text = dict((side, "".join("%s = %s\n" % (k, e[side]) for k, e in sorted(keys.items())
                               if e["status"] in tcp_drain_sysctl.APPLIED))
                for side in ("before", "after"))
    return {"before_header": "%s (live)" % namespace, "after_header": "%s (live)" % namespace,
            "before": text["before"], "after": text["after"]}


def read_conf_files(dirs):
    """Every *.conf entry of `dirs` as tcp_drain_boot takes them: {"path", "text", "link"}; text "" for a symlink
    to /dev/null, None where it cannot be read (a dangling symlink still holds its name)."""
    out = []
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if not name.endswith(".conf") or name.startswith(".") or os.path.isdir(path):
                continue
            link = os.readlink(path) if os.path.islink(path) else None
            if os.path.realpath(path) == os.devnull:
                text = ""
            else:
                try:
                    text = host.read_text(path)
                except (IOError, OSError, UnicodeDecodeError):
                    text = None
            out.append({"path": path, "text": text, "link": link})
    return out


def file_diff(path, before, after):
    return {"before_header": path, "after_header": path, "before": before or "", "after": after or ""}


def put_files(module, wanted):
    """{path: text, or None to remove}: write what differs (not in check mode). Returns (changed, diffs)."""
    changed, diffs = False, []
    for path, text in sorted(wanted.items()):
        before = host.read_text(path)
        if before == text:
            continue
        changed = True
        diffs.append(file_diff(path, before, text))
        if not module.check_mode:
            if text is not None and not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), 0o755)
            host.write_text(module, path, text)
    return changed, diffs


def ours(path):
    """The file at `path` when it is the module's own (it removes no other)."""
    text = host.read_text(path)
    return text if text is not None and tcp_drain_boot.MARK in text and not os.path.islink(path) else None


def boot_files(p, want, keys, planned):
    """The files to write or remove for the next boot: the drop-in (of the keys that took), its other names, the
    modules-load.d entry."""
    netfilter = any(k.startswith("net.netfilter.") for k in want)
    if p["state"] == "absent":
        paths = tcp_drain_boot.candidates(p["persist"]) + ([p["conntrack_modules_load"]] if p["conntrack_modules_load"] else [])
        return dict((path, None) for path in paths if ours(path) is not None)
    took = dict((k, v) for k, v in want.items() if keys.get(k, {}).get("status") in tcp_drain_sysctl.APPLIED)
    reason = None
    if planned["path"] != p["persist"]:
        reason = "Named to be read after %s, which set these keys too (boot_order=win)." % ", ".join(
            sorted(set(tcp_drain_boot.shown(c) for c in planned["conflicts"])))
    wanted = {planned["path"]: tcp_drain_boot.drop_in_text(took, reason)}
    wanted.update((path, None) for path in planned["remove"])
    if p["conntrack_modules_load"]:
        if netfilter:
            wanted[p["conntrack_modules_load"]] = tcp_drain_boot.modules_load_text()
        elif ours(p["conntrack_modules_load"]) is not None:
            wanted[p["conntrack_modules_load"]] = None
    return wanted


def boot_report(want, keys, side):
    """What the next boot applies, read from the files as they are now, beside the live values (`side`: the
    keys' "before" - as they are, in check mode or refused - or "after")."""
    boot = tcp_drain_boot.boot_values(read_conf_files(tcp_drain_boot.SYSCTL_DIRS), want)
    at_boot = tcp_drain_boot.CONNTRACK_MODULE in tcp_drain_boot.modules_loaded(read_conf_files(tcp_drain_boot.MODULES_LOAD_DIRS))
    live = dict((k, e.get(side)) for k, e in keys.items())
    rep = tcp_drain_boot.report(boot, live, want, at_boot)
    return rep, tcp_drain_boot.summary(rep)


def record_path(p):
    return os.path.join(p["state_dir"], ("container-%s" % p["container"] if p["container"] else "host") + ".json")


ARGUMENT_SPEC = dict(
    values=dict(type="dict"),
    container=dict(type="str"),
    unsupported=dict(type="str", choices=["fail", "skip"], default="fail"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    state_dir=dict(type="path", default="/var/lib/homelab-edge/tcp-drain"),
    persist=dict(type="path"),
    boot_order=dict(type="str", choices=list(tcp_drain_boot.BOOT_ORDER), default="refuse"),
    conntrack_modules_load=dict(type="path"),
)


def read_and_plan(module):
    """Step 1: the values wanted (or, for state=absent, recorded), checked; the boot files planned.
    (values wanted, the record's values before, the boot plan or None). Fails before anything is set."""
    p = module.params
    if p["container"] and (p["persist"] or p["conntrack_modules_load"]):
        module.fail_json(msg="persist and conntrack_modules_load are the host's files: a container's namespace is "
                             "not set by boot (set its values at creation: compose sysctls:); nothing was changed")
    if p["state"] == "absent":
        host.require_root(module, "reads its record of the values before and sets them back")
    # the record is root's (a user other than root cannot change a value either: per key, not-root)
    recorded = (host.read_record(record_path(p)) or {}).get("before") or {} if host.is_root() else {}
    values = p["values"] if p["state"] == "present" else recorded
    problems = tcp_drain_sysctl.validate(values)
    if problems:
        module.fail_json(msg="; ".join(problems))
    want_all = tcp_drain_sysctl.normalize(values)
    planned = None
    if p["persist"] and p["state"] == "present":
        planned = tcp_drain_boot.plan(read_conf_files(tcp_drain_boot.SYSCTL_DIRS), want_all, p["persist"], p["boot_order"])
    return want_all, recorded, planned


def change_live(module, want_all, refused, result):
    """Step 2: each live value set (only read when the boot plan is refused). (cannot, mismatched)."""
    ns = Namespace(module, module.params["container"])
    cannot, mismatched = [], []
    for key, want in sorted(want_all.items()):
        entry, problem, mismatch = set_key(module, ns, key, want, dry=refused)
        result["settings"][key] = entry
        result["changed"] = result["changed"] or entry["status"] == "changed"
        cannot += [problem] if problem else []
        mismatched += [mismatch] if mismatch else []
    return cannot, mismatched


def verify(module, want_all, planned, cannot, mismatched, result):
    """Step 3: fail on a refused boot plan, a value that did not take, or one that cannot be set (unless skip)."""
    if planned is not None and planned["refusal"] is not None:
        result["boot"], result["boot_summary"] = boot_report(want_all, result["settings"], "before")
        result["changed"] = False
        module.fail_json(msg=planned["refusal"], **result)
    if mismatched:
        module.fail_json(msg="values did not take: %s" % "; ".join(mismatched), **result)
    if cannot and module.params["unsupported"] == "fail":
        module.fail_json(msg="cannot set: %s" % "; ".join(cannot), **result)


def persist(module, want_all, recorded, planned, result):
    """Step 4: the record of the values before (for state=absent) and the boot files. The diffs of the files."""
    p = module.params
    if not module.check_mode and host.is_root():
        keep = tcp_drain_sysctl.remember_before(recorded, result["settings"]) if p["state"] == "present" else {}
        if keep != recorded:
            host.write_record(module, record_path(p), {"before": keep} if keep else None)
    if not p["persist"]:
        return []
    changed, file_diffs = put_files(module, boot_files(p, want_all, result["settings"], planned))
    result["changed"] = result["changed"] or changed
    result["boot"], result["boot_summary"] = boot_report(want_all, result["settings"],
                                                         "before" if module.check_mode else "after")
    return file_diffs


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=[("state", "present", ["values"])],
                           supports_check_mode=True)
    p = module.params
    want_all, recorded, planned = read_and_plan(module)
    result = dict(changed=False, settings={}, not_applied=[], dropin=None,
                  namespace="container:%s" % p["container"] if p["container"] else "host")
    if planned is not None:
        result.update(conflicts=planned["conflicts"], dropin=planned["path"])
    cannot, mismatched = change_live(module, want_all, planned is not None and planned["refusal"] is not None, result)
    diffs = [live_diff(result["namespace"], result["settings"])]
    verify(module, want_all, planned, cannot, mismatched, result)
    diffs += persist(module, want_all, recorded, planned, result)
    if module._diff:
        result["diff"] = diffs
    result["not_applied"] = cannot
    for text in cannot:
        module.warn("skipped %s" % text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
