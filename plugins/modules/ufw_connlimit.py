#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ufw_connlimit
short_description: Limit concurrent TCP connections per source address in ufw's before.rules
version_added: "0.1.0"
description:
  - Manages one marked block of rules inside the C(*filter) section of C(/etc/ufw/before.rules)
    (and C(before6.rules) for IPv6), placed before that section's C(COMMIT) line. For each port,
    new TCP connections above O(limit) from one source address are rejected with a TCP reset.
  - Everything else in the files is kept byte for byte. The new file is validated with the real
    C(iptables-restore --test) (C(ip6tables-restore --test)) before it atomically replaces the old
    one; a file that fails validation is never written and ufw is not touched.
  - When ufw is enabled the module runs C(ufw reload) (C(ufw --force enable) does not reload a
    running firewall) and then reads the live ruleset back (C(nft list ruleset) on nftables
    systems, C(iptables -S) on legacy ones). Rules that are not live fail the task.
  - Traffic to a port published by Docker is DNAT-ed through FORWARD and never passes
    C(ufw-before-input). The module detects such ports and, per O(docker_published), limits them in
    Docker's C(DOCKER-USER) chain (matching the original destination port) or fails.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  ports:
    description: TCP ports to limit.
    type: list
    elements: int
    default: [80, 443]
  limit:
    description: Concurrent connections allowed per source address (IPv4 /32, IPv6 /128) and port.
    type: int
    default: 100
  state:
    description: C(present) writes the block, C(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  ipv6:
    description: Manage C(before6.rules) too.
    type: bool
    default: true
  backup:
    description: Keep a timestamped copy of a file before replacing it.
    type: bool
    default: false
  reload:
    description: Run C(ufw reload) after a change when ufw is enabled, then verify the live rules.
    type: bool
    default: true
  docker_published:
    description:
      - What to do with a listed port that a local Docker container publishes.
      - C(fail) stops with an explanation; C(docker_user) limits it in the C(DOCKER-USER) chain;
        C(ignore) writes the INPUT rule anyway (it protects nothing for that port).
    type: str
    choices: [fail, docker_user, ignore]
    default: fail
  rules_dir:
    description: Directory of ufw's rules files.
    type: path
    default: /etc/ufw
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  platform:
    platforms: debian
requirements:
  - ufw, iptables (iptables-restore), nftables (nft) on nftables systems
notes:
  - A rule placed before COMMIT only sees new connections; ufw accepts established ones earlier.
seealso:
  - module: community.general.ufw
"""

EXAMPLES = r"""
- name: At most 100 concurrent connections per client address on 80 and 443
  homelab.edge.ufw_connlimit:
    ports: [80, 443]
    limit: 100

- name: Remove the limit
  homelab.edge.ufw_connlimit:
    state: absent
"""

RETURN = r"""
files:
  description: Per rules file, whether it changed and where the backup went.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/ufw/before.rules", "changed": true, "backup": ""}]
live:
  description: Ports with a live connlimit rule, per family, as read back from the ruleset (also in check mode).
  returned: when ufw is enabled and O(state=present)
  type: dict
  sample: {"ipv4": [80, 443], "ipv6": [80, 443]}
docker_ports:
  description: Listed ports that a local Docker container publishes, with the containers.
  returned: always
  type: dict
  sample: {"443": ["traefik"]}
reloaded:
  description: Whether ufw was reloaded.
  returned: always
  type: bool
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import ufw_connlimit as uc

C_ENV = dict(LANG="C", LC_ALL="C", LC_MESSAGES="C")


def run(module, argv, data=None, check_rc=True):
    rc, out, err = module.run_command(argv, data=data, environ_update=C_ENV, binary_data=True)
    if check_rc and rc != 0:
        module.fail_json(msg="%s failed (rc=%d): %s" % (" ".join(argv[:2]), rc, (err or out).strip()))
    return rc, out, err


def docker_ports(module):
    docker = module.get_bin_path("docker")
    if not docker:
        return {}
    rc, ids, err = module.run_command([docker, "ps", "-q"], environ_update=C_ENV)
    if rc != 0 or not ids.split():
        return {}
    rc, out, err = module.run_command([docker, "inspect"] + ids.split(), environ_update=C_ENV)
    if rc != 0:
        return {}
    return uc.docker_published_tcp_ports(json.loads(out))


def ufw_enabled(module, rules_dir):
    conf = os.path.join(rules_dir, "ufw.conf")
    try:
        with open(conf) as f:
            return any(line.strip() == "ENABLED=yes" for line in f)
    except IOError:
        return False


def verify_live(module, families, want_ports, docker_set):
    """Read the live rules back; fail when any is missing."""
    live, missing = {}, []
    nft = module.get_bin_path("nft")
    for fam in families:
        f = uc.FAMILIES[fam]
        ipt = module.get_bin_path(f["save"], required=True)
        version = run(module, [ipt, "--version"])[1]
        input_ports = [p for p in want_ports if p not in docker_set]
        if nft and "nf_tables" in version:
            ruleset = run(module, [nft, "list", "ruleset"])[1]
            have = uc.nft_connlimit_ports(ruleset, fam)
        else:
            saved = run(module, [ipt, "-S", f["chain"]])[1]
            have = set(uc.iptables_connlimit_rules(saved, f["chain"]))
        if docker_set:
            rc, saved, err = run(module, [ipt, "-S", "DOCKER-USER"], check_rc=False)
            have |= set(uc.iptables_connlimit_rules(saved, "DOCKER-USER")) & docker_set if rc == 0 else set()
        live["ipv%d" % fam] = sorted(have)
        missing += ["%s/ipv%d" % (p, fam) for p in input_ports + sorted(docker_set) if p not in have]
    return live, missing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", default=[80, 443]),
            limit=dict(type="int", default=100),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            ipv6=dict(type="bool", default=True),
            backup=dict(type="bool", default=False),
            reload=dict(type="bool", default=True),
            docker_published=dict(type="str", choices=["fail", "docker_user", "ignore"], default="fail"),
            rules_dir=dict(type="path", default="/etc/ufw"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    present = p["state"] == "present"
    if present:
        problems = uc.validate(p["ports"], p["limit"])
        if problems:
            module.fail_json(msg="; ".join(problems))

    published = docker_ports(module) if present else {}
    clash = dict((port, published[port]) for port in p["ports"] if port in published)
    if clash and p["docker_published"] == "fail":
        module.fail_json(
            msg="port(s) %s are published by Docker (%s): Docker DNATs that traffic through FORWARD, so a "
                "rule in ufw-before-input would protect nothing. Set docker_published=docker_user to limit "
                "them in DOCKER-USER, or run the service with host networking."
                % (", ".join(str(x) for x in sorted(clash)),
                   "; ".join("%s: %s" % (k, ", ".join(v)) for k, v in sorted(clash.items()))),
            docker_ports=dict((str(k), v) for k, v in clash.items()))
    docker_set = set(clash) if p["docker_published"] == "docker_user" else set()

    families = [4, 6] if p["ipv6"] else [4]
    plans, diffs = [], []
    for fam in families:
        path = os.path.join(p["rules_dir"], os.path.basename(uc.FAMILIES[fam]["file"]))
        if not os.path.exists(path):
            module.fail_json(msg="%s does not exist: is ufw installed?" % path)
        with open(path, "rb") as f:
            old = f.read().decode("utf-8")
        block = uc.render_block(fam, p["ports"], p["limit"], docker_set) if present else []
        try:
            new = uc.apply_block(old, block, present)
        except uc.RulesError as e:
            module.fail_json(msg="%s: %s; nothing was written" % (path, e))
        plans.append((fam, path, old, new))
        if old != new:
            diffs.append({"before_header": path, "after_header": path, "before": old, "after": new})

    changed = any(plan[2] != plan[3] for plan in plans)
    result = dict(changed=changed, files=[], reloaded=False,
                  docker_ports=dict((str(k), v) for k, v in clash.items()))
    if module._diff:
        result["diff"] = diffs

    # Validate every new file with the real tool before any is written.
    for fam, path, old, new in plans:
        if old == new:
            continue
        restore = module.get_bin_path(uc.FAMILIES[fam]["restore"], required=True)
        rc, out, err = module.run_command([restore, "--test", "--noflush"], data=new, binary_data=True,
                                          environ_update=C_ENV)
        if rc != 0:
            module.fail_json(msg="%s: the new file fails %s --test: %s; the old file is kept and ufw was not "
                                 "touched" % (path, uc.FAMILIES[fam]["restore"], (err or out).strip()), **result)

    if not module.check_mode:
        for fam, path, old, new in plans:
            entry = {"path": path, "changed": old != new, "backup": ""}
            if old != new:
                if p["backup"]:
                    entry["backup"] = module.backup_local(path)
                st = os.stat(path)
                tmp = os.path.join(os.path.dirname(path), ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
                with open(tmp, "wb") as f:
                    f.write(new.encode("utf-8"))
                os.chmod(tmp, st.st_mode & 0o7777)
                os.chown(tmp, st.st_uid, st.st_gid)
                module.atomic_move(tmp, path, unsafe_writes=False)
            result["files"].append(entry)

    enabled = ufw_enabled(module, p["rules_dir"])
    if changed and enabled and p["reload"] and not module.check_mode:
        ufw = module.get_bin_path("ufw", required=True)
        rc, out, err = module.run_command([ufw, "reload"], environ_update=C_ENV)
        if rc != 0 or "Firewall reloaded" not in out:
            module.fail_json(msg="ufw reload failed: %s" % (err or out).strip(), **result)
        result["reloaded"] = True
        time.sleep(0.2)
    if present and enabled:
        # reading the ruleset changes nothing: check mode reports it too
        live, missing = verify_live(module, families, p["ports"], docker_set)
        result["live"] = live
        if missing and not module.check_mode and (changed or p["reload"]):
            module.fail_json(msg="the connlimit rules are not live for %s (ufw reload may be needed)"
                                 % ", ".join(missing), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
