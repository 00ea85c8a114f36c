#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ufw_connlimit
short_description: Limit concurrent TCP connections per source address with ufw, Docker-published ports included
version_added: "0.1.0"
description:
  - Ports the host serves itself (for example nginx as a TCP stream proxy) are limited by one marked
    block of rules inside the C(*filter) section of C(before.rules) (and C(before6.rules) for IPv6),
    placed before that section's C(COMMIT) line. For each port, new TCP connections above O(limit)
    from one source address are rejected with a TCP reset.
  - Traffic to a port published by Docker is DNAT-ed through FORWARD and never passes ufw's INPUT
    chains. The module detects such ports and, per O(docker_published), limits them in a chain of its
    own (C(homelab-edge-docker), matching the original destination port) that a hook loads on every ufw
    start and puts first in Docker's C(DOCKER-USER) chain. C(DOCKER-USER) itself is never declared or
    flushed, so Docker's rules, ufw-docker's block in C(after.rules) and rules of your own there all stay.
    The hook is C(/etc/ufw/homelab-edge.init), called by one marked line in C(/etc/ufw/after.init)
    (ufw's documented hook, see C(man ufw-framework)).
  - Everything else in the files is kept byte for byte. Every new rules file is validated with the real
    C(iptables-restore --test) (C(ip6tables-restore --test)) before any file is written; a file that fails
    validation is never written and ufw is not touched.
  - When ufw is enabled the module runs C(ufw reload) (C(ufw --force enable) does not reload a running
    firewall) and reads the live ruleset back (C(nft list ruleset) on nftables systems, C(iptables -S) on
    legacy ones; C(DOCKER-USER) and the module's chain with C(iptables -S)). If the reload fails, the
    previous files are put back and ufw is reloaded with them; if that fails too, the ruleset that was
    live before is restored with C(iptables-restore). Rules that are not live fail the task.
  - What already limits a listed port is found first - connlimit and hashlimit rules anywhere ufw loads them
    (C(before.rules), C(after.rules), C(user.rules) and their IPv6 twins), live in any iptables chain (C(DOCKER-USER)
    included), and native nft C(ct count) rules in any table - and is taken over or refused, never stacked under.
    Seed 001's hand-applied snippet and rules of its exact shape in C(before.rules) (C(-A ufw-before-input -p tcp
    --dport PORT -m connlimit --connlimit-above N -j REJECT --reject-with tcp-reset), a C(conntrack NEW) match, a
    C(--connlimit-mask 32) or a C(DROP) allowed) are moved into the managed block as comment lines marked C(#<|)
    (with the seed's comment line above them), so one limit per port is live; C(--diff) shows the move, a warning
    names each line, and O(state=absent) puts them back where the block stood. Any other limit on a listed port is
    refused before anything is written, with its file and line (or chain) and the limit in force.
  - Every rule the module writes carries the comment C(homelab.edge.ufw_connlimit); that is how the read-back tells
    its rules from anyone else's. After a change, a limit that is not the module's still live on a listed port fails
    the task with the effective limit (the smallest per port).
  - Beside the per-address limit, two bounds on all sources together, per port (O(total), O(rate)) - what stops a
    flood spread over many addresses, which passes any per-address limit. The order in the chain is per address,
    then the rate, then the total; all three count new connections only. They are installed, verified and removed
    with the per-address rule, in the same block (and the same Docker chain). A user's own total (C(--connlimit-mask
    0)) or rate bound (C(hashlimit) without a mode) of that shape in C(before.rules) is taken over like seed 001's
    rule when the module writes that bound, and refused otherwise.
  - Docker's experimental nftables firewall backend (Docker 29, C(firewall-backend) set to C(nftables) in C(daemon.json))
    has no C(DOCKER-USER) chain. The module detects it and fails with what to do instead of writing rules that
    protect nothing, and returns RV(nftables_rules) - the table that does the same there, for you to load. It does
    not load that table itself, because ufw neither loads nor reverts it, so no commit-confirmed change could cover it.
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
  total:
    description:
      - Concurrent connections allowed per port from all source addresses together (connlimit with
        C(--connlimit-mask 0), one count per port and family); the rest are reset. C(0) - no total bound.
      - It must be above O(limit) (one address alone must not fill it). Half-open connections count (C(SYN_RECV)),
        TIME_WAIT ones do not.
      - The default sits below what the NAS behind the tunnel was measured to hold (seed 001's NAS held 100 at once
        and fell over at 500; the lab's one-core NAS answered every one of about 600 slow connections at once and
        failed 15 % at about 1,200, C(benchmarks/results/nas_wedge-vps-20261205T014858.json)).
    type: int
    default: 400
    version_added: "2.1.0"
  rate:
    description:
      - New connections a second allowed per port from all source addresses together (hashlimit without a mode, one
        token bucket of O(burst)); the rest are reset. C(0) - no rate bound.
      - A SYN flood at this rate can keep up to O(burst) + O(rate) x C(net.netfilter.nf_conntrack_tcp_timeout_syn_recv)
        (60 s by default, read on the host) connections half-open, counted by O(total); the module refuses values
        where that is not below O(total).
      - Off by default (C(0)). Its bucket is shared by every client, so a one-address check of the per-address
        limit (C(homelab.edge.prove)) cannot tell the two apart when O(burst) is not above the limit (the bucket
        alone gives the same answer), and a busy site's own clients spend it.
    type: int
    default: 0
    version_added: "2.1.0"
  burst:
    description: The rate bound's bucket - new connections allowed at once before O(rate) applies.
    type: int
    default: 100
    version_added: "2.1.0"
  state:
    description:
      - C(present) writes the rules, C(absent) removes everything the module wrote - the block in C(before.rules) and
        C(before6.rules), its Docker rules files and C(after.init) hook - reloads ufw, and removes the module's Docker
        chain and its jump from C(DOCKER-USER) live. ufw itself, its rules and anything outside the module's block stay;
        your lines the block took over (marked C(#<|) inside it) go back in its place.
      - Connlimit rules still live on O(ports) afterwards are not the module's; they are named in a warning, not removed.
      - On a host without ufw, C(absent) has nothing to remove and changes nothing.
    type: str
    choices: [present, absent]
    default: present
  ipv6:
    description: Manage the IPv6 files too.
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
      - C(fail) stops with an explanation; C(docker_user) limits it ahead of C(DOCKER-USER);
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
  - homelab.edge.attributes.revert_lock
attributes:
  check_mode:
    support: full
    details: The live ruleset is read back in check mode too; nothing is written or reloaded.
  diff_mode:
    support: partial
    details: The diff shows every file the module writes. The live ruleset that C(ufw reload) builds from them is not part of the diff.
  platform:
    platforms: debian
requirements:
  - ufw (0.36 or later, for after.init), iptables (iptables-restore), nftables (nft) on nftables systems
  - Root on the target (C(become), the site playbook does it)
notes:
  - A rule placed before COMMIT only sees new connections; ufw accepts established ones earlier.
  - With ufw-docker installed, its block re-declares C(DOCKER-USER) on every reload, which flushes every rule
    in it; the hook runs after that and puts the module's jump back in front.
seealso:
  - module: community.general.ufw
"""

EXAMPLES = r"""
- name: At most 100 concurrent connections per client address on 80 and 443
  homelab.edge.ufw_connlimit:
    ports: [80, 443]
    limit: 100

- name: The same where 443 is published by a Docker container (ufw-docker or not)
  homelab.edge.ufw_connlimit:
    ports: [80, 443]
    docker_published: docker_user

- name: Remove the limit
  homelab.edge.ufw_connlimit:
    state: absent
"""

RETURN = r"""
ufw_installed:
  description: False in check mode on a host without ufw (the plan is then the block each rules file gets).
  returned: when ufw is not installed
  type: bool
files:
  description: Per file the module manages, whether it changed and where the backup went.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/ufw/before.rules", "changed": true, "backup": ""}]
live:
  description: Ports with a live connlimit rule, per family, as read back from the ruleset (also in check mode).
  returned: when ufw is enabled (with O(state=absent), what is still live on O(ports))
  type: dict
  sample: {"ipv4": [80, 443], "ipv6": [80, 443]}
docker_chain_removed:
  description: With O(state=absent), the iptables commands whose ruleset had the module's Docker chain (removed live,
    with its jump from DOCKER-USER).
  returned: when O(state=absent) found the chain
  type: list
  elements: str
  sample: [/usr/sbin/iptables, /usr/sbin/ip6tables]
docker_user:
  description: Live state of the Docker path per family (the jump's place in DOCKER-USER, the limited ports,
    the other rules kept in DOCKER-USER).
  returned: when ports are limited ahead of DOCKER-USER and ufw is enabled
  type: dict
docker_ports:
  description: Listed ports that a local Docker container publishes, with the containers.
  returned: always
  type: dict
  sample: {"443": ["traefik"]}
docker_firewall_backend:
  description: Docker's firewall backend (iptables, or nftables where DOCKER-USER does not exist).
  returned: when Docker runs on the host
  type: str
nftables_rules:
  description:
    - Under Docker's nftables firewall backend, the table that limits each client address on the published ports (IPv4
      /32, IPv6 /128; the rest reset), on the forward hook just before Docker's chain. Text for C(nft -f), not loaded.
  returned: when the module refuses Docker's nftables firewall backend
  type: str
  version_added: "2.0.0"
replaced:
  description: Your limits the managed block took over (seed 001's shape), with the file and line they stood on.
  returned: when there were any
  type: list
  elements: dict
  sample: [{"path": "/etc/ufw/before.rules", "line": 75, "ports": [443], "seed": true,
            "rule": "-A ufw-before-input -p tcp --dport 443 -m connlimit --connlimit-above 100 -j REJECT --reject-with tcp-reset"}]
  version_added: "2.0.0"
other_limits:
  description:
    - Limits on O(ports) that are not the module's, live (family, chain, rule, ports, the per-address count C(above)) or,
      when the module refuses, in a file (path, line, rule).
  returned: when ufw is enabled, and when the module refuses
  type: list
  elements: dict
  version_added: "2.0.0"
bounds:
  description:
    - The bounds on all sources together - C(asked) (total, rate, burst), C(syn_recv_timeout) (the host's, seconds),
      C(half_open) (burst + rate x that timeout), C(live) per family and port as the ruleset has them, C(buckets) -
      per family and port with a live rate bound, the new connections its bucket lets through at once now
      (C(tokens), of C(size), and C(full); the kernel's C(/proc/net/ipt_hashlimit)), and C(counted) - per port the
      host serves itself, the connections in the states the total counts now (C(ss), the host's namespace; ports
      Docker publishes are counted in the container's and are left out).
  returned: always, but where ufw is not installed
  type: dict
  sample: {"asked": {"total": 400, "rate": 4, "burst": 100}, "syn_recv_timeout": 60, "half_open": 340,
           "live": {"ipv4": {"443": {"total": 400, "rate": 4, "burst": 100}}},
           "buckets": {"ipv4": {"443": {"tokens": 96, "size": 100, "full": false}}}, "counted": {"443": 12}}
  version_added: "2.1.0"
effective:
  description: Per port, the smallest per-address limit live on it - the one that holds (the module's or another).
  returned: when ufw is enabled, and when the module refuses
  type: dict
  sample: {"80": 200, "443": 100}
  version_added: "2.0.0"
reloaded:
  description: Whether ufw was reloaded.
  returned: always
  type: bool
"""

import json
import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.ufw import connlimit as ufw_connlimit
from ansible_collections.homelab.edge.plugins.module_utils.ufw import total as ufw_total
from ansible_collections.homelab.edge.plugins.module_utils.ufw import access as ufw_access
from ansible_collections.homelab.edge.plugins.module_utils.ufw import revert as ufw_revert
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.host import C_ENV, read_text as read, require_root


class Change(object):
    """One file the module manages: its old and new content (None: absent)."""

    def __init__(self, path, old, new, mode=0o640, check=None):
        self.path, self.old, self.new, self.mode, self.check = path, old, new, mode, check
        self.backup = ""

    @property
    def changed(self):
        """New content, or a script of ours that ufw-init would skip (not executable)."""
        return self.old != self.new or (self.new is not None and self.mode & 0o100
                                        and not os.access(self.path, os.X_OK))


def run(module, argv, data=None, check_rc=True):
    rc, out, err = module.run_command(argv, data=data, environ_update=C_ENV, binary_data=True)
    if check_rc and rc != 0:
        module.fail_json(msg="%s failed (rc=%d): %s" % (" ".join(argv[:2]), rc, (err or out).strip()))
    return rc, out, err


def docker_facts(module):
    """(published TCP ports {port: [containers]}, firewall backend or None)."""
    docker = module.get_bin_path("docker")
    if not docker:
        return {}, None
    rc, info, err = module.run_command([docker, "info", "--format", "{{json .}}"], environ_update=C_ENV)
    info = json.loads(info) if rc == 0 and info.strip().startswith("{") else {}
    if not info.get("ServerVersion"):
        return {}, None  # a docker client without an engine
    backend = ufw_connlimit.firewall_backend(info)
    rc, ids, err = module.run_command([docker, "ps", "-q"], environ_update=C_ENV)
    if rc != 0 or not ids.split():
        return {}, backend
    rc, out, err = module.run_command([docker, "inspect"] + ids.split(), environ_update=C_ENV)
    return (ufw_connlimit.docker_published_tcp_ports(json.loads(out)) if rc == 0 else {}), backend


def docker_ports_to_limit(module, published, backend):
    """The listed ports to limit ahead of DOCKER-USER; fails per docker_published."""
    p = module.params
    clash = dict((port, published[port]) for port in p["ports"] if port in published)
    where = "; ".join("%s: %s" % (k, ", ".join(v)) for k, v in sorted(clash.items()))
    if clash and p["docker_published"] in ("fail", "docker_user") and backend and backend.startswith("nftables"):
        module.fail_json(
            msg="port(s) %s are published by Docker (%s), and Docker runs its nftables firewall backend "
                "(docker info: FirewallBackend %s): it has no DOCKER-USER chain, so rules there protect "
                "nothing. This module does not write nftables tables of its own (ufw neither loads nor reverts "
                "them, so no commit-confirmed change could cover them). Either run Docker with its iptables backend "
                "(\"firewall-backend\": \"iptables\" in /etc/docker/daemon.json), or load the table in "
                "nftables_rules yourself (nft -f FILE, and at boot from /etc/nftables.conf): it limits each "
                "client address on these ports just before Docker's own forward chain. Note that ufw's FORWARD "
                "policy (DROP as shipped) also drops what Docker publishes under that backend."
                % (", ".join(str(x) for x in sorted(clash)), where, backend),
            docker_ports=dict((str(k), v) for k, v in clash.items()), docker_firewall_backend=backend,
            nftables_rules=ufw_connlimit.docker_nft_rules(sorted(clash), p["limit"], p["ipv6"], bounds_asked(p)))
    if clash and p["docker_published"] == "fail":
        module.fail_json(
            msg="port(s) %s are published by Docker (%s): Docker DNATs that traffic through FORWARD, so a "
                "rule in ufw-before-input would protect nothing. Set docker_published=docker_user to limit "
                "them ahead of DOCKER-USER, or run the service with host networking."
                % (", ".join(str(x) for x in sorted(clash)), where),
            docker_ports=dict((str(k), v) for k, v in clash.items()))
    return sorted(clash) if p["docker_published"] == "docker_user" else []


class Found(object):
    """The user's limits on the listed ports in ufw's files: replaced (moved into the block) or refused."""

    def __init__(self):
        self.replaced, self.refused = [], []


def plan(module, docker_ports, found):
    """Every file the module manages, old and new; the user's limits go to `found`."""
    p = module.params
    present = p["state"] == "present"
    families = [4, 6] if p["ipv6"] else [4]
    d = p["rules_dir"]
    changes = []
    for fam in families:
        f = ufw_connlimit.FAMILIES[fam]
        path = os.path.join(d, f["file"])
        old = read(path)
        if old is None:
            module.fail_json(msg="%s does not exist: is ufw installed?" % path)
        input_ports = [x for x in p["ports"] if x not in docker_ports]
        try:
            planned = ufw_connlimit.plan_before_rules(old, fam, input_ports, p["limit"], present, managed=p["ports"],
                                                      bounds=bounds_asked(p))
        except ufw_connlimit.RulesError as e:
            module.fail_json(msg="%s: %s; nothing was written" % (path, e))
        found.replaced += [dict(f, path=path) for f in planned["replaced"]]
        found.refused += [dict(f, path=path) for f in planned["refused"]]
        changes.append(Change(path, old, planned["text"], check=f["restore"]))
        if present:
            # the other files ufw loads: a limit on a listed port there is never moved, only refused
            for other in f["others"]:
                text = read(os.path.join(d, other))
                found.refused += [dict(x, path=os.path.join(d, other)) for x in ufw_connlimit.file_limits(text or "", p["ports"])]
        path = os.path.join(d, f["docker_file"])
        new = (ufw_connlimit.docker_chain_rules(fam, docker_ports, p["limit"], bounds_asked(p))
               if present and docker_ports else None)
        changes.append(Change(path, read(path), new, check=f["restore"]))
    hook = os.path.join(d, ufw_connlimit.HOOK)
    changes.append(Change(hook, read(hook), ufw_connlimit.hook_script(d) if present and docker_ports else None, mode=0o750,
                          check="sh"))
    after_init = os.path.join(d, ufw_connlimit.AFTER_INIT)
    old = read(after_init)
    hooked = present and bool(docker_ports)
    if (hooked and old is not None and not os.access(after_init, os.X_OK)
            and not ufw_connlimit.is_stock_after_init(ufw_connlimit.apply_init_block(old, [], False))):
        module.fail_json(msg="%s is not executable and holds commands of yours: making it executable to call the "
                             "hook would start running them. Make it executable yourself (or empty it) and run "
                             "again; nothing was written." % after_init)
    try:
        new = ufw_connlimit.apply_init_block(old, ufw_connlimit.init_call(d), hooked) if (hooked or old is not None) else None
    except ufw_connlimit.RulesError as e:
        module.fail_json(msg="%s; nothing was written" % e)
    # executable only where it calls the hook: ufw-init runs it then (a user's after.init stays as it is otherwise)
    changes.append(Change(after_init, old, new, mode=0o750 if hooked else 0o640, check="sh"))
    return changes


def validate(module, changes):
    """Every new file checked with the real tool before any is written."""
    for c in changes:
        if not c.changed or c.new is None:
            continue
        tool = module.get_bin_path(c.check, required=True)
        argv = [tool, "-n"] if c.check == "sh" else [tool, "--test", "--noflush"]
        rc, out, err = module.run_command(argv, data=c.new, binary_data=True, environ_update=C_ENV)
        if rc != 0:
            module.fail_json(msg="%s: the new file fails %s: %s; the old file is kept and ufw was not touched"
                                 % (c.path, " ".join([c.check] + argv[1:]), (err or out).strip()))


def write(module, change, backup=False):
    """One file, atomically; scripts stay executable for ufw-init."""
    saved = host.write_text(module, change.path, change.new, backup=backup and change.old is not None,
                            new_mode=change.mode, add_mode=0o110 if change.mode & 0o100 else 0)
    change.backup = saved or ""


def write_all(module, changes, backup):
    for c in changes:
        if c.changed:
            write(module, c, backup)


def ufw_enabled(rules_dir):
    return ufw_access.enabled(read(os.path.join(rules_dir, "ufw.conf")))


def snapshot(module, families):
    """The live ruleset and ufw.conf before anything changes: the last resort."""
    saved = {}
    for fam in families:
        save = module.get_bin_path(ufw_connlimit.FAMILIES[fam]["save"] + "-save")
        if save:
            saved[fam] = module.run_command([save], environ_update=C_ENV)[1]
    return saved


def ufw_reload(module):
    """ufw reload, or enable where a failed reload left ufw disabled (ufw
    then skips a reload: "Firewall not enabled")."""
    ufw = module.get_bin_path("ufw", required=True)
    if ufw_enabled(module.params["rules_dir"]):
        rc, out, err = module.run_command([ufw, "reload"], environ_update=C_ENV)
        return rc == 0 and "Firewall reloaded" in out, (err or out).strip()
    rc, out, err = module.run_command([ufw, "--force", "enable"], environ_update=C_ENV)
    return rc == 0 and "Firewall is active" in out, (err or out).strip()


def reload_or_roll_back(module, changes, families, saved, result):
    """ufw reload; when it fails, the old files again and reload; when that
    fails too, the ruleset that was live before, as it was."""
    ok, why = ufw_reload(module)
    if ok:
        result["reloaded"] = True
        return
    for c in changes:
        if c.changed:
            write(module, Change(c.path, c.new, c.old, c.mode))
    conf = os.path.join(module.params["rules_dir"], "ufw.conf")
    ok_again, why_again = ufw_reload(module)
    if ok_again:
        module.fail_json(msg="ufw reload failed with the new rules (%s); the previous files are back and ufw was "
                             "reloaded with them: the firewall runs as before" % why, **result)
    restored = restore_own_part(module, saved)
    text = read(conf) or ""
    if "ENABLED=no" in text:
        host.write_text(module, conf, text.replace("ENABLED=no", "ENABLED=yes"))
    module.fail_json(msg="ufw reload failed with the new rules (%s) and again with the previous files put back "
                         "(%s): ufw's part of the ruleset that was live before %s (every other chain and table left as "
                         "it is); fix the cause, then run `ufw reload`"
                         % (why, why_again, "was restored" if restored else "could not be restored in full"), **result)


def restore_own_part(module, saved):
    """The last resort: ufw's part of the ruleset saved before the change (ufw_revert's scoped restore, the
    same shell function), every other chain and table left as it is. True when it came back as saved."""
    ok = True
    tmp = tempfile.mkdtemp(prefix="homelab-edge-connlimit-")
    try:
        for fam, rules in saved.items():
            tool = ufw_connlimit.FAMILIES[fam]["save"]
            try:
                scoped, part = ufw_revert.scoped_restore(rules), ufw_revert.own_part(rules)
            except ufw_revert.SnapshotError:
                ok = False
                continue
            with open(os.path.join(tmp, tool + ".scoped"), "w") as f:
                f.write(scoped)
            with open(os.path.join(tmp, tool + ".expected"), "w") as f:
                f.write("".join(x + "\n" for x in sorted(part)))
            with open(os.path.join(tmp, tool + ".expected.order"), "w") as f:
                f.write(ufw_revert.jumps_in_order(rules))
            rc = module.run_command(["sh", "-c", 'PATH=/usr/sbin:/usr/bin:/sbin:/bin\ndir="$1"\n%srestore "$2"'
                                     % ufw_revert.restore_fn(), "restore", tmp, tool], environ_update=C_ENV)[0]
            ok = ok and rc == 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


def verify_live(module, families, input_ports, docker_ports, limit=None, bounds=None):
    """Read the live rules back: (live, docker_user, missing); `bounds`, when given, gets the live bounds per family
    ({"ipv4": {port: {total, rate, burst}}}) and the ports whose bounds are not live as asked."""
    live, docker_user, missing = {}, {}, []
    nft = module.get_bin_path("nft")
    for fam in families:
        f = ufw_connlimit.FAMILIES[fam]
        ipt = module.get_bin_path(f["save"], required=True)
        version = run(module, [ipt, "--version"])[1]
        # per source address (the family's mask) and the number asked, as iptables reads the rules back...
        # a chain ufw has not made (IPV6=no, ufw never enabled) holds no rules: not a failure
        saved = run(module, [ipt, "-w", "-S", f["chain"]], check_rc=False)[1]
        rules = ufw_connlimit.iptables_connlimit_rules(saved, f["chain"], f["mask"])
        have_bounds = ufw_total.live_bounds(saved, f["chain"])
        have = set(port for port, n in rules.items() if limit is None or n == limit)
        if nft and "nf_tables" in version:
            # ...and present in the kernel's nftables ruleset (the seed's check)
            have &= ufw_connlimit.nft_connlimit_ports(run(module, [nft, "list", "ruleset"])[1], fam)
        if docker_ports:
            du = run(module, [ipt, "-w", "-S", "DOCKER-USER"], check_rc=False)[1]
            ours = run(module, [ipt, "-w", "-S", ufw_connlimit.DOCKER_CHAIN], check_rc=False)[1]
            state = ufw_connlimit.docker_user_state(du, ours)
            docker_user["ipv%d" % fam] = state
            if state["jump_first"]:
                have_bounds.update((k, v) for k, v in ufw_total.live_bounds(ours, ufw_connlimit.DOCKER_CHAIN).items()
                                   if k in docker_ports)
                have |= set(state["ports"]) & set(docker_ports)
        live["ipv%d" % fam] = sorted(have)
        missing += ["%s/ipv%d" % (x, fam) for x in sorted(set(input_ports) | set(docker_ports)) if x not in have]
        if bounds is not None:
            bounds["live"]["ipv%d" % fam] = dict((str(k), v) for k, v in sorted(have_bounds.items()))
            bounds["missing"] += ["%s/ipv%d" % (x, fam) for x in ufw_total.bounds_live(
                bounds["asked"], have_bounds, sorted(set(input_ports) | set(docker_ports)))]
            bounds["buckets"]["ipv%d" % fam] = dict(
                (str(port), ufw_total.bucket(read(ufw_total.bucket_path(fam, port)), b["burst"]))
                for port, b in sorted(have_bounds.items()) if b.get("rate"))
    return live, docker_user, missing


def read_limits(module, families, ports):
    """Every live limit on `ports`: `iptables -S` of every chain per family, and native nft rules."""
    found = []
    for fam in families:
        ipt = module.get_bin_path(ufw_connlimit.FAMILIES[fam]["save"])
        if ipt:
            out = run(module, [ipt, "-w", "-S"], check_rc=False)[1]
            found += [dict(x, family="ipv%d" % fam, source="iptables") for x in ufw_connlimit.live_limits(out, ports)]
    nft = module.get_bin_path("nft")
    if nft:
        rc, out, err = run(module, [nft, "list", "ruleset"], check_rc=False)
        if rc == 0:
            found += [dict(x, family="nft", source="nft") for x in ufw_connlimit.nft_limits(out, ports)]
    return found


def theirs(found):
    return [dict((k, v) for k, v in x.items() if k != "ours") for x in found if not x["ours"]]


def refuse_others(module, found, live):
    """Limits on the listed ports that the module neither wrote nor can take over: in ufw's files (not of the seed's
    shape, or not in before.rules) or live outside ufw's chains. One message, before anything is written."""
    outside = [x for x in theirs(live) if x["source"] == "nft" or not x["chain"].startswith("ufw")]
    refused = found.refused + outside
    if not refused:
        return
    ports = sorted(set(p for x in refused for p in x["ports"]))
    module.fail_json(
        msg="port(s) %s already have a connection limit that is not the module's: %s. A second limit would stack "
            "under it, and the smaller one wins (live now, per port: %s). The module takes over only seed 001's "
            "rule and rules of its shape in before.rules (-A ufw-before-input -p tcp --dport PORT -m connlimit "
            "--connlimit-above N -j REJECT --reject-with tcp-reset); remove or reshape these, or leave the port(s) "
            "out of ports; nothing was written."
            % (", ".join(map(str, ports)), "; ".join(ufw_connlimit.describe(x) for x in refused), ufw_connlimit.effective_words(live, ports)),
        other_limits=refused,
        effective=dict((str(k), v) for k, v in ufw_connlimit.effective_limits(live, module.params["ports"]).items()))


def bounds_asked(p):
    """The bounds on all sources together the task asks for (total.py): none with state=absent."""
    if p["state"] != "present":
        return {"total": 0, "rate": 0, "burst": p["burst"]}
    return {"total": p["total"], "rate": p["rate"], "burst": p["burst"]}


def syn_recv_timeout():
    """How long conntrack keeps a half-open connection here: the host's value, the kernel's default where
    nf_conntrack is not loaded yet."""
    text = (read(ufw_total.SYN_RECV_SYSCTL) or "").strip()
    return int(text) if text.isdigit() else ufw_total.SYN_RECV_DEFAULT


def counted(module, ports):
    """{port: connections in the states the total counts} on the ports the host serves itself (ss, this namespace)."""
    ss = module.get_bin_path("ss")
    if not ss or not ports:
        return {}
    rc, out, err = run(module, [ss, "-Htan"], check_rc=False)
    return dict((str(k), v) for k, v in ufw_total.counted_connections(out, ports).items()) if rc == 0 else {}


ARGUMENT_SPEC = dict(
    ports=dict(type="list", elements="int", default=[80, 443]),
    limit=dict(type="int", default=100),
    total=dict(type="int", default=400),
    rate=dict(type="int", default=0),
    burst=dict(type="int", default=100),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    ipv6=dict(type="bool", default=True),
    backup=dict(type="bool", default=False),
    reload=dict(type="bool", default=True),
    docker_published=dict(type="str", choices=["fail", "docker_user", "ignore"], default="fail"),
    rules_dir=dict(type="path", default="/etc/ufw"),
    revert_id=dict(type="str"),
    revert_dir=dict(type="path", default=ufw_revert.STATE_DIR),
)


def start_result(module, changes, published, backend):
    result = dict(changed=any(c.changed for c in changes), files=[], reloaded=False,
                  docker_ports=dict((str(k), v) for k, v in published.items() if k in module.params["ports"]))
    if backend:
        result["docker_firewall_backend"] = backend
    if module._diff:
        result["diff"] = [{"before_header": c.path, "after_header": c.path, "before": c.old or "",
                           "after": c.new or ""} for c in changes if c.changed]
    return result


def write_and_reload(module, changes, families, result):
    """The files, then ufw's reload; a reload that fails puts everything back."""
    reload = module.params["reload"] and ufw_enabled(module.params["rules_dir"])
    saved = snapshot(module, families) if reload else {}
    write_all(module, changes, module.params["backup"])
    if reload:
        reload_or_roll_back(module, changes, families, saved, result)
        time.sleep(0.2)


def check_live(module, families, docker_ports, result):
    """The rules as the kernel has them (reading changes nothing: check mode reports it too)."""
    p = module.params
    input_ports = [x for x in p["ports"] if x not in docker_ports]
    bounds = result["bounds"]
    bounds.update(live={}, missing=[], buckets={})
    result["live"], docker_user, missing = verify_live(module, families, input_ports, docker_ports, p["limit"], bounds)
    bounds["counted"] = counted(module, input_ports)
    if docker_user:
        result["docker_user"] = docker_user
    live = read_limits(module, families, p["ports"])
    result["other_limits"] = theirs(live)
    result["effective"] = dict((str(k), v) for k, v in ufw_connlimit.effective_limits(live, p["ports"]).items())
    enforce = not module.check_mode and (result["changed"] or p["reload"])
    if missing and enforce:
        module.fail_json(msg="the connlimit rules are not live for %s (for Docker ports, the jump to %s must be "
                             "the first rule of DOCKER-USER)" % (", ".join(missing), ufw_connlimit.DOCKER_CHAIN), **result)
    if bounds["missing"] and enforce:
        module.fail_json(msg="the bounds on all sources together (total %(total)d, rate %(rate)d/s burst %(burst)d) "
                             "are not live as asked for %(where)s: the ruleset has %(live)s"
                             % dict(bounds["asked"], where=", ".join(bounds["missing"]), live=bounds["live"]), **result)
    if result["other_limits"] and enforce:
        module.fail_json(msg="a connection limit that is not the module's is live on the listed ports beside its own: "
                             "%s. The smaller one wins: the effective limit per port is %s, not %d. Remove it where "
                             "it is loaded, or leave the port out of ports."
                             % ("; ".join(ufw_connlimit.describe(x) for x in result["other_limits"]),
                                ufw_connlimit.effective_words(live, p["ports"]), p["limit"]), **result)


def not_yet_installed(module):
    """Check mode on a host without ufw: what a run adds once the role has installed it (the block each
    rules file gets), no file read or written."""
    p = module.params
    families = [4, 6] if p["ipv6"] else [4]
    result = dict(changed=True, ufw_installed=False, files=[],
                  msg="ufw is not installed: once it is (the role installs it first), the run adds connlimit %d/IP "
                      "on %s to %s" % (p["limit"], ", ".join(str(x) for x in p["ports"]),
                                       " and ".join(os.path.join(p["rules_dir"], ufw_connlimit.FAMILIES[f]["file"])
                                                    for f in families)))
    if module._diff:
        paths = dict((f, os.path.join(p["rules_dir"], ufw_connlimit.FAMILIES[f]["file"])) for f in families)
        result["diff"] = [{"before_header": "%s (as ufw installs it)" % paths[f], "after_header": paths[f],
                           "before": "", "after": "".join(ln + "\n" for ln in ufw_connlimit.render_block(
                               f, p["ports"], p["limit"], bounds=bounds_asked(p)))}
                          for f in families]
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    present = p["state"] == "present"
    problems = ufw_connlimit.validate(p["ports"], p["limit"]) if present else []
    syn_recv = syn_recv_timeout()
    if present and not problems:
        problems = ufw_total.validate(p["total"], p["rate"], p["burst"], p["limit"], syn_recv)
    if problems:
        module.fail_json(msg="; ".join(problems) + "; nothing was changed")
    require_root(module, "writes %s and reloads ufw" % p["rules_dir"])
    if read(os.path.join(p["rules_dir"], ufw_connlimit.FAMILIES[4]["file"])) is None:
        if not present:
            module.exit_json(changed=False, ufw_installed=False, files=[],
                             msg="ufw is not installed: there is no connlimit block to remove")
        if module.check_mode:
            not_yet_installed(module)
    published, backend = docker_facts(module) if present else ({}, None)
    docker_ports = docker_ports_to_limit(module, published, backend)
    found = Found()
    changes = plan(module, docker_ports, found)
    families = [4, 6] if p["ipv6"] else [4]
    if present:
        refuse_others(module, found, read_limits(module, families, p["ports"]))
    validate(module, changes)
    result = start_result(module, changes, published, backend)
    asked = bounds_asked(p)
    result["bounds"] = {"asked": asked, "syn_recv_timeout": syn_recv,
                        "half_open": ufw_total.half_open(asked["rate"], asked["burst"], syn_recv) if asked["rate"] else 0}
    if found.replaced:
        result["replaced"] = found.replaced
        module.warn("%s: taken over by the module's block (the lines are kept inside it, marked '%s'; state=absent "
                    "puts them back): one limit per port, %d" % ("; ".join(ufw_connlimit.describe(x) for x in found.replaced),
                                                                 ufw_connlimit.KEPT.strip(), p["limit"]))
    chains = [] if present else docker_chain_live(module, families)
    if chains:
        result["changed"] = True
        result["docker_chain_removed"] = chains
    if result["changed"] and not module.check_mode:
        if p["revert_id"]:
            ufw_revert.hold_revert(module, p["revert_dir"], p["revert_id"])
        write_and_reload(module, changes, families, result)
    if chains and not module.check_mode:
        remove_docker_chain(module, chains)
    result["files"] = [{"path": c.path, "changed": c.changed, "backup": c.backup} for c in changes]
    if present and ufw_enabled(p["rules_dir"]):
        check_live(module, families, docker_ports, result)
    elif ufw_enabled(p["rules_dir"]):
        still_live(module, families, result)
    module.exit_json(**result)


def docker_chain_live(module, families):
    """The iptables commands (iptables, ip6tables) whose ruleset has the module's Docker chain."""
    found = []
    for fam in families:
        ipt = module.get_bin_path(ufw_connlimit.FAMILIES[fam]["save"])
        if ipt and run(module, [ipt, "-w", "-S", ufw_connlimit.DOCKER_CHAIN], check_rc=False)[0] == 0:
            found.append(ipt)
    return found


def remove_docker_chain(module, commands):
    """state=absent: the jump from DOCKER-USER and the module's chain, live (the hook that would unload them
    on ufw's stop is gone with the files). Docker's own rules and the user's in DOCKER-USER are not touched."""
    left = []
    for ipt in commands:
        for dummy in range(10):  # every jump of ours, at most ten (a bounded loop)
            if run(module, [ipt, "-w", "-D", "DOCKER-USER", "-j", ufw_connlimit.DOCKER_CHAIN], check_rc=False)[0] != 0:
                break
        run(module, [ipt, "-w", "-F", ufw_connlimit.DOCKER_CHAIN], check_rc=False)
        run(module, [ipt, "-w", "-X", ufw_connlimit.DOCKER_CHAIN], check_rc=False)
        if run(module, [ipt, "-w", "-S", ufw_connlimit.DOCKER_CHAIN], check_rc=False)[0] == 0:
            left.append(ipt)
    if left:
        module.fail_json(msg="the chain %s could not be removed with %s (is a rule of yours jumping to it?): the files "
                             "no longer load it; remove it by hand (%s -D <chain> -j %s; %s -X %s)"
                             % (ufw_connlimit.DOCKER_CHAIN, ", ".join(left), left[0], ufw_connlimit.DOCKER_CHAIN, left[0], ufw_connlimit.DOCKER_CHAIN))


def still_live(module, families, result):
    """state=absent: the module's block is gone from the files; connlimit rules the kernel still has on the
    ports are not the module's (yours, in before.rules outside the block, or another tool's): said, not removed."""
    result["live"] = verify_live(module, families, [], [])[0]
    left = dict((k, [x for x in v if x in module.params["ports"]]) for k, v in result["live"].items())
    left = dict((k, v) for k, v in left.items() if v)
    if left and not module.check_mode:
        module.warn("connlimit rules are still live on %s after the module's block was removed: they are not the "
                    "module's (look in /etc/ufw/before*.rules outside the homelab.edge block, or another tool)"
                    % "; ".join("%s %s" % (k, ", ".join(map(str, v))) for k, v in sorted(left.items())))


if __name__ == "__main__":
    main()
