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
    host values with a C(/etc/sysctl.d) drop-in (the C(homelab.edge.tcp_drain) role writes one) and
    container values with compose C(sysctls:) or C(docker run --sysctl).
  - The value a key had before the module first changed it is recorded in O(state_dir), per namespace.
    O(state=absent) sets each recorded key back to that value and forgets the record.
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
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details: Each key is read; nothing is written.
  diff_mode:
    support: full
    details: The live values before and after, per key.
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

- name: The same inside Traefik's network namespace (bridge network)
  homelab.edge.tcp_drain:
    container: traefik
    values:
      net.ipv4.tcp_fin_timeout: 15
"""

RETURN = r"""
keys:
  description:
    - Per key, the value before and after and its C(status) - C(ok) (already so), C(changed) (set), or why it could not
      be read or set - C(missing) (no such key in this namespace), C(read-only) (an unprivileged container's
      /proc/sys), C(not-root) or C(error). Programs match on C(status); the words in RV(skipped) are for people.
  returned: always
  type: dict
  sample: {"net.ipv4.tcp_fin_timeout": {"before": 60, "after": 15, "status": "changed"}}
skipped:
  description: Keys that could not be set, each with the reason in words (O(unsupported=skip)).
  returned: always
  type: list
  elements: str
namespace:
  description: C(host) or C(container:<name>).
  returned: always
  type: str
"""


import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils import tcp_drain as td


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
            if rc != 0:
                module.fail_json(msg="container %s: %s" % (container, (err or out).strip()))
            running, pid = out.split()
            if running != "true" or pid == "0":
                module.fail_json(msg="container %s is not running" % container)
            self.prefix = [nsenter, "-t", pid, "-n", "--"]
            self.where = "container %s" % container

    def read(self, key):
        rc, out, err = self.module.run_command(self.prefix + [self.sysctl, "-n", key], environ_update=host.C_ENV)
        if rc != 0:
            return None, td.classify_error(err or out, self.root)
        return int(out.strip().split()[0]), None

    def write(self, key, value):
        rc, out, err = self.module.run_command(self.prefix + [self.sysctl, "-w", "%s=%d" % (key, value)],
                                               environ_update=host.C_ENV)
        return None if rc == 0 else td.classify_error(err or out, self.root)


def set_key(module, ns, key, want):
    """One key: read, write when it differs (not in check mode), read back.
    Returns (entry, problem, mismatch)."""
    have, why = ns.read(key)
    entry = {"before": have, "after": have, "status": "ok"}
    mismatch = None
    if why is None and have != want:
        entry["status"] = "changed"
        if module.check_mode:
            entry["after"] = want
        else:
            why = ns.write(key, want)
            if why is None:
                entry["after"], why = ns.read(key)
                if why is None and entry["after"] != want:
                    mismatch = "%s: set %d but %s reads %s" % (key, want, ns.where, entry["after"])
    if why is not None:
        entry["status"] = why
        return entry, td.explain(key, why, ns.where), mismatch
    return entry, None, mismatch


def live_diff(namespace, keys):
    text = dict((side, "".join("%s = %s\n" % (k, e[side]) for k, e in sorted(keys.items())
                               if e["status"] in td.APPLIED))
                for side in ("before", "after"))
    return {"before_header": "%s (live)" % namespace, "after_header": "%s (live)" % namespace,
            "before": text["before"], "after": text["after"]}


def record_path(p):
    return os.path.join(p["state_dir"], ("container-%s" % p["container"] if p["container"] else "host") + ".json")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            values=dict(type="dict"),
            container=dict(type="str"),
            unsupported=dict(type="str", choices=["fail", "skip"], default="fail"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            state_dir=dict(type="path", default="/var/lib/homelab-edge/tcp-drain"),
        ),
        required_if=[("state", "present", ["values"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "absent":
        host.require_root(module, "reads its record of the values before and sets them back")
    # the record is root's (a user other than root cannot change a value either: per key, not-root)
    recorded = (host.read_record(record_path(p)) or {}).get("before") or {} if host.is_root() else {}
    values = p["values"] if p["state"] == "present" else recorded
    problems = td.validate(values)
    if problems:
        module.fail_json(msg="; ".join(problems))
    ns = Namespace(module, p["container"])
    result = dict(changed=False, keys={}, skipped=[],
                  namespace="container:%s" % p["container"] if p["container"] else "host")
    cannot, mismatched = [], []
    for key, want in sorted(td.normalize(values).items()):
        entry, problem, mismatch = set_key(module, ns, key, want)
        result["keys"][key] = entry
        result["changed"] = result["changed"] or entry["status"] == "changed"
        cannot += [problem] if problem else []
        mismatched += [mismatch] if mismatch else []
    if module._diff:
        result["diff"] = live_diff(result["namespace"], result["keys"])
    if mismatched:
        module.fail_json(msg="values did not take: %s" % "; ".join(mismatched), **result)
    if cannot and p["unsupported"] == "fail":
        module.fail_json(msg="cannot set: %s" % "; ".join(cannot), **result)
    if not module.check_mode and host.is_root():
        keep = td.remember_before(recorded, result["keys"]) if p["state"] == "present" else {}
        if keep != recorded:
            host.write_record(module, record_path(p), {"before": keep} if keep else None)
    result["skipped"] = cannot
    for text in cannot:
        module.warn("skipped %s" % text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
