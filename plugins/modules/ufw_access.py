#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ufw_access
short_description: Enable ufw without cutting anything that answered before - SSH on any port, WireGuard, whatever listens
version_added: "0.1.0"
description:
  - Finds the way in before ufw is touched - the SSH port of the running session (C($SSH_CONNECTION) of the session
    that runs the module), every port sshd is configured for (C(sshd -T)), and every socket that listens on an
    address other than loopback (C(ss -H -tulpn)) - and what ufw would let in for a NEW connection (its default
    incoming policy and your rules in C(user.rules), first match wins).
  - Policy - nothing that answered before stops answering unless you ask for it by name. A port reachable now that
    enabling ufw would cut gets an allow rule (comment C(homelab.edge)) before ufw is enabled. SSH ports always do.
    Ports named in O(closed) are left to the default policy. With O(keep_listening=false) the module refuses instead
    and lists the ports that would be cut.
  - Port forwards through the host count too - a DNAT rule of yours (a VPS that forwards 80/443 over WireGuard to the
    NAS, with no Docker) goes through FORWARD, whose policy enabling ufw sets to C(DEFAULT_FORWARD_POLICY) (DROP as
    shipped). Each forward no route rule allows gets one (C(ufw route allow proto PROTO to ADDR port PORT), comment
    C(homelab.edge)) before ufw is enabled; with O(keep_listening=false) the module refuses and names them.
  - On a host where ufw is already active nothing of yours changes - your rules, their order, your defaults; only
    the ports in O(allow) that ufw does not already let in get a rule.
  - Refuses, with nothing written, when a rule of yours denies the SSH port of the running session (enabling ufw would
    lock you out), when O(closed) names an SSH port, or when a port is malformed.
  - Ports that Docker publishes (listened on by C(docker-proxy)) are left out - ufw's INPUT rules never see that
    traffic (M(homelab.edge.ufw_connlimit) limits it ahead of C(DOCKER-USER)).
  - Every command that changes ufw is undone when one fails (your rules files and C(ufw.conf) put back as they were).
    Use it with M(homelab.edge.ufw_revert), which restores the firewall by itself unless a new SSH login confirms the
    change - the role C(homelab.edge.vps_connlimit) does both.
author:
  - homelab.edge contributors (@homelab-edge)
options:
  allow:
    description: Ports to allow in any case (the front door), as C(PORT), C(PORT/tcp) or C(PORT/udp).
    type: list
    elements: raw
    default: []
  keep_listening:
    description:
      - C(true) allows every port that listens now and that enabling ufw would cut (except those in O(closed)).
      - C(false) refuses to enable ufw while such ports exist, and lists them.
    type: bool
    default: true
  closed:
    description: Listening ports to leave closed to new connections from outside (C(PORT), C(PORT/tcp), C(PORT/udp)).
    type: list
    elements: raw
    default: []
  enable:
    description: Enable ufw when it is inactive.
    type: bool
    default: true
  ssh_connection:
    description:
      - The session's C(SSH_CONNECTION) (C(client cport server sport)). Found by the module itself from the
        processes it runs under when not given (C(sudo) drops it from the environment).
    type: str
  rules_dir:
    description: Directory of ufw's files.
    type: path
    default: /etc/ufw
  defaults_file:
    description: ufw's defaults (C(DEFAULT_INPUT_POLICY)).
    type: path
    default: /etc/default/ufw
extends_documentation_fragment:
  - homelab.edge.attributes
  - homelab.edge.attributes.revert_lock
attributes:
  check_mode:
    support: full
    details: Reads everything and reports the rules it would add and whether it would enable ufw.
  diff_mode:
    support: full
    details: The diff shows ufw's state and the allow rules before and after.
  platform:
    platforms: debian
requirements:
  - ufw, iproute2 (C(ss)); root on the target (C(become))
seealso:
  - module: homelab.edge.ufw_revert
  - module: homelab.edge.ufw_connlimit
"""

EXAMPLES = r"""
- name: Enable ufw, keeping SSH (any port), WireGuard and every listening port reachable
  homelab.edge.ufw_access:
    allow: [80, 443]

- name: The same, but leave the database that listens on 0.0.0.0:5432 closed
  homelab.edge.ufw_access:
    allow: [80, 443]
    closed: [5432]

- name: What is reachable, what ufw blocks, changing nothing
  homelab.edge.ufw_access:
    enable: false
  check_mode: true
  register: access
"""

RETURN = r"""
forwards:
  description:
    - The port forwards through this host - DNAT rules in your own nat chains (Docker's left out) to another host - as
      C(spec) (what clients reach), C(proto), C(to_addr), C(to_port), C(rule) and C(family) (4 or 6).
  returned: success
  type: list
  elements: dict
  version_added: "2.0.0"
route_added:
  description: The forwards that enabling ufw would have cut, each given a route rule (in check mode, would be).
  returned: success
  type: list
  elements: dict
  version_added: "2.0.0"
ufw_installed:
  description: Whether ufw is installed (check mode plans against its package's defaults when not).
  returned: success
  type: bool
enabled_before:
  description: Whether ufw was active before.
  returned: always
  type: bool
enabled:
  description: Whether ufw is active now (in check mode, would be).
  returned: always
  type: bool
policy:
  description: ufw's default incoming policy (ACCEPT, DROP or REJECT).
  returned: always
  type: str
ssh:
  description: The SSH ports found - C(session) (the running session's port and client, or null) and C(sshd) (from C(sshd -T)).
  returned: always
  type: dict
  sample: {"session": {"spec": "2222/tcp", "client": "198.51.100.7"}, "sshd": ["2222/tcp"]}
listening:
  description: Sockets listening on an address other than loopback, per port.
  returned: always
  type: list
  elements: dict
  sample: [{"spec": "51820/udp", "addresses": ["0.0.0.0"], "processes": ["wireguard-go"], "docker": false}]
added:
  description: The allow rules added (in check mode, that would be added).
  returned: always
  type: list
  elements: str
  sample: ["2222/tcp", "51820/udp"]
must_stay:
  description: Ports a new client reached before the change and must still reach after it (what M(homelab.edge.ufw_revert) confirms).
  returned: always
  type: list
  elements: str
blocked:
  description: Listening ports that ufw blocks for new connections from outside now (in check mode, before the change).
  returned: always
  type: list
  elements: str
blocked_unasked:
  description: The ports of RV(blocked) that nobody closed on purpose (not in O(closed), not cut by a deny rule of yours) - what status and diagnose report.
  returned: always
  type: list
  elements: str
closed:
  description: O(closed), written C(PORT/PROTO).
  returned: always
  type: list
  elements: str
denied_by_rule:
  description: Listening ports a deny rule of yours closes once ufw is enabled (left as you asked).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils.ufw import access as ufw_access
from ansible_collections.homelab.edge.plugins.module_utils.ufw import revert as ufw_revert
from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils.host import C_ENV, read_text as read, require_root


def ancestors_ssh_connection(pid=None):
    """SSH_CONNECTION from the nearest process above us that has it (sudo
    and become drop it from our own environment)."""
    pid = pid or os.getpid()
    for dummy in range(32):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"SSH_CONNECTION="):
                        return item.split(b"=", 1)[1].decode("utf-8", "replace")
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (IOError, OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None


class Access(object):
    """The way in as it is, and what to do about it."""

    def __init__(self, module):
        self.module = module
        p = module.params
        try:
            self.front_door = ufw_access.port_specs(p["allow"], "allow")
            self.closed = ufw_access.port_specs(p["closed"], "closed")
        except ufw_access.AccessError as e:
            module.fail_json(msg="%s; nothing was changed" % e)
        self.files = dict((name, read(os.path.join(p["rules_dir"], name)))
                          for name in ("user.rules", "user6.rules", "ufw.conf"))
        self.enabled_before = ufw_access.enabled(self.files["ufw.conf"])
        self.policy = ufw_access.default_input_policy(read(p["defaults_file"]))
        self.forward_policy = ufw_access.default_forward_policy(read(p["defaults_file"]))
        self.rules = ufw_access.user_rules(self.files["user.rules"])
        self.rules6 = ufw_access.user_rules(self.files["user6.rules"])
        # the port forwards through this host (DNAT in the user's own nat rules, IPv4 and IPv6)
        self.forwards = [dict(f, family=family) for family, tool in ((4, "iptables"), (6, "ip6tables"))
                         if module.get_bin_path(tool, opt_dirs=["/usr/sbin", "/sbin"])
                         for f in ufw_access.dnat_forwards(self.run([tool, "-w", "-t", "nat", "-S"], check=False))]
        self.listen = ufw_access.listening(self.run(["ss", "-H", "-tulpn"]))
        sshd = module.get_bin_path("sshd", opt_dirs=["/usr/sbin"])
        self.sshd = ufw_access.sshd_ports(self.run([sshd, "-T"], check=False)) if sshd else []
        self.session = ufw_access.session(p["ssh_connection"] if p["ssh_connection"] is not None
                                          else ancestors_ssh_connection())

    def run(self, argv, check=True):
        argv = [self.module.get_bin_path(argv[0], required=True, opt_dirs=["/usr/sbin", "/sbin"])] + argv[1:]
        rc, out, err = self.module.run_command(argv, environ_update=C_ENV)
        if check and rc != 0:
            self.module.fail_json(msg="%s failed (rc=%d): %s; nothing was changed" % (" ".join(argv), rc, err.strip()))
        return out if rc == 0 else ""

    def plan(self):
        p = self.module.params
        plan = ufw_access.plan(self.listen, self.sshd, self.session, self.front_door, self.closed, self.enabled_before,
                               self.rules, self.policy, p["keep_listening"])
        ssh = set(self.sshd) | ({self.session["spec"]} if self.session else set())
        refusals = []
        if set(self.closed) & ssh:
            refusals.append("closed names the SSH port(s) %s: closing them would lock out new SSH logins; take them "
                            "out of closed" % ", ".join(sorted(set(self.closed) & ssh, key=ufw_access.sort_key)))
        if plan["ssh_denied"] and (p["enable"] or self.enabled_before):
            refusals.append("a deny rule of yours in %s matches the SSH port(s) %s: with ufw active no new SSH login "
                            "would get in; delete that rule (ufw status numbered, ufw delete N) and run again"
                            % (os.path.join(p["rules_dir"], "user.rules"), ", ".join(plan["ssh_denied"])))
        if plan["would_cut"] and p["enable"] and not self.enabled_before:
            refusals.append("enabling ufw would cut what answers new connections now: %s; list them in allow to "
                            "keep them, in closed to close them on purpose, or set keep_listening: true"
                            % self.who(plan["would_cut"]))
        cut = self.forwards_cut() if p["enable"] else []
        plan["route_allow"] = cut if p["keep_listening"] else []
        if cut and not p["keep_listening"]:
            refusals.append("enabling ufw would cut the port forwards through this host (its FORWARD policy is %s "
                            "in %s): %s; add a route rule for each (ufw route allow proto PROTO to ADDR port PORT), "
                            "or set keep_listening: true"
                            % (self.forward_policy, p["defaults_file"], ", ".join(self.forward_text(f) for f in cut)))
        return plan, refusals

    def forwards_cut(self):
        return [f for f in self.forwards
                if f in ufw_access.forwards_cut([f], self.enabled_before, self.rules if f["family"] == 4 else self.rules6,
                                                self.forward_policy)]

    @staticmethod
    def forward_text(f):
        return "%s -> %s:%s" % (f["spec"], f["to_addr"], f["to_port"])

    @staticmethod
    def route_argv(f):
        return ["route", "allow", "proto", f["proto"], "to", f["to_addr"], "port", f["to_port"]]

    def who(self, specs):
        names = dict((e["spec"], "/".join(e["processes"]) or "?") for e in self.listen)
        return ", ".join("%s (%s)" % (s, names.get(s, "sshd")) for s in specs)

    def state_text(self, enabled, allowed, routed=()):
        lines = ["ufw %s (default incoming: %s)" % ("active" if enabled else "inactive", self.policy)]
        lines += ["allow %s (%s)" % (s, ufw_access.COMMENT) for s in allowed]
        lines += ["route allow %s (%s: forwarded %s)" % (" ".join(self.route_argv(f)[2:]), ufw_access.COMMENT, f["spec"])
                  for f in routed]
        return "\n".join(lines) + "\n"

    def apply(self, allow, enable, routed=()):
        """The allow rules and the route rules of the port forwards, then ufw enabled; the files put back when a
        step fails."""
        ufw = self.module.get_bin_path("ufw", required=True)
        steps = [[ufw, "allow", s, "comment", "%s: %s" % (ufw_access.COMMENT, self.who([s]))] for s in allow]
        steps += [[ufw] + self.route_argv(f) + ["comment", "%s: forwarded %s" % (ufw_access.COMMENT, f["spec"])]
                  for f in routed]
        # ufw keeps the comment; it reads e.g. "homelab.edge: 51820/udp (wireguard-go)"
        if enable:
            steps.append([ufw, "--force", "enable"])
        for argv in steps:
            rc, out, err = self.module.run_command(argv, environ_update=C_ENV)
            if rc != 0:
                self.undo()
                self.module.fail_json(msg="%s failed (rc=%d): %s; your ufw files are back as they were and ufw is "
                                          "%s" % (" ".join(argv[1:3]), rc, (err or out).strip(),
                                                  "active" if self.enabled_before else "inactive"))

    def undo(self):
        ufw = self.module.get_bin_path("ufw", required=True)
        for name, text in self.files.items():
            path = os.path.join(self.module.params["rules_dir"], name)
            if text is not None:
                host.write_text(self.module, path, text)
        self.module.run_command([ufw, "reload"] if self.enabled_before else [ufw, "--force", "disable"],
                                environ_update=C_ENV)


ARGUMENT_SPEC = dict(
    allow=dict(type="list", elements="raw", default=[]),
    keep_listening=dict(type="bool", default=True),
    closed=dict(type="list", elements="raw", default=[]),
    enable=dict(type="bool", default=True),
    ssh_connection=dict(type="str"),
    rules_dir=dict(type="path", default="/etc/ufw"),
    defaults_file=dict(type="path", default="/etc/default/ufw"),
    revert_id=dict(type="str"),
    revert_dir=dict(type="path", default=ufw_revert.STATE_DIR),
)


def ufw_installed(module):
    """Refused without ufw, except in check mode (a plan against ufw as its package installs it)."""
    installed = bool(module.get_bin_path("ufw"))
    if not installed and not module.check_mode:
        module.fail_json(msg="ufw is not installed; install it first (the vps_connlimit role does with "
                             "vps_connlimit_install_packages); nothing was changed")
    if not installed:  # check mode on a host not yet set up: the plan against ufw as its package installs it
        module.warn("ufw is not installed: this plan is against ufw as its package installs it (inactive, no rules, "
                    "incoming denied)")
    return installed


def start_result(module, access, plan, installed):
    """What was found and what the plan does (changed derived from it), with the diff when asked."""
    enable = module.params["enable"] and not access.enabled_before
    enabled = access.enabled_before or module.params["enable"]
    result = dict(changed=bool(plan["allow"]) or bool(plan["route_allow"]) or enable,
                  ufw_installed=installed, forwards=access.forwards, route_added=plan["route_allow"],
                  enabled_before=access.enabled_before, enabled=enabled,
                  policy=access.policy, listening=access.listen, added=plan["allow"], must_stay=plan["must_stay"],
                  blocked=plan["blocked"], blocked_unasked=plan["blocked_unasked"],
                  denied_by_rule=plan["denied_by_rule"], closed=access.closed,
                  ssh={"session": access.session, "sshd": access.sshd})
    if module._diff:
        result["diff"] = {"before_header": "ufw", "after_header": "ufw",
                          "before": access.state_text(access.enabled_before, []),
                          "after": access.state_text(enabled, plan["allow"], plan["route_allow"])}
    return result


def change(module, access, plan):
    """The revert held first (when one is armed), then the rules and ufw enabled."""
    p = module.params
    if p["revert_id"]:
        ufw_revert.hold_revert(module, p["revert_dir"], p["revert_id"])
    access.apply(plan["allow"], p["enable"] and not access.enabled_before, plan["route_allow"])


def verify(module, access, plan, result):
    """ufw's files read back: everything that must stay reachable is, or the files are put back."""
    rules_dir = module.params["rules_dir"]
    after = ufw_access.user_rules(read(os.path.join(rules_dir, "user.rules")))
    after6 = ufw_access.user_rules(read(os.path.join(rules_dir, "user6.rules")))
    lost = [s for s in plan["must_stay"]
            if s not in ufw_access.reachable([s], result["enabled"], after, access.policy, access.session)]
    lost += ["forwarded " + access.forward_text(f) for f in plan["route_allow"]
             if not ufw_access.route_allows(after if f["family"] == 4 else after6, f)]
    if lost:
        access.undo()
        module.fail_json(msg="after the change ufw would still cut %s; your ufw files are back as they were"
                             % ", ".join(lost), **result)
    result.update(ufw_access.blocked(access.listen, result["enabled"], after, access.policy, access.closed,
                                     plan["denied_by_rule"]))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    require_root(module, "reads which process listens where and changes ufw")
    installed = ufw_installed(module)
    access = Access(module)
    plan, refusals = access.plan()
    if refusals:
        module.fail_json(msg="; ".join(refusals) + "; nothing was changed", **plan)
    result = start_result(module, access, plan, installed)
    if result["changed"] and not module.check_mode:
        change(module, access, plan)
        verify(module, access, plan, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
