#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nginx_proxy_protocol
short_description: Send PROXY protocol from an nginx stream proxy to the servers behind it, safely
version_added: "0.1.0"
description:
  - A TCP stream proxy (TLS passthrough) hides every client's address from what is behind it. Traefik sees
    the proxy's address for everyone, so a per-client-IP limit there is one shared bucket. PROXY protocol
    carries the client's address through.
  - "Reads the configuration as nginx loads it: C(nginx -T -c config) prints every file nginx reads, in its
    order, and the module places each file where its C(include) stands (one-line blocks, globs, symlinks,
    C(conf.d) and C(streams-enabled) layouts alike). Where C(nginx -T) fails, the module refuses with nginx's
    own message and writes nothing."
  - "Adds one marked line, C(proxy_protocol on;), after the C(proxy_pass) of each stream server whose every
    possible target is one of O(upstreams): an address; an C(upstream) block whose servers are all listed
    (C(backup) and C(down) ones included); or a variable whose every value, through C(set) and C(map) (or
    C(geo), C(split_clients)), is a listed address or such a block. Every other byte of your files stays;
    C(state=absent) takes the lines out again."
  - "Edited: TCP servers as above, in the file that holds the server (a symlink's target: the link stays a
    link), including servers whose listener itself has C(proxy_protocol) (a load balancer in front of the VPS),
    listen on a specific (public) address, or forward to TLS on another port."
  - "Never edited: UDP servers (C(listen ... udp)): nginx would put the header in front of the first datagram,
    which breaks QUIC (HTTP/3); the module says so, naming the port, and takes out a line an earlier version
    put there. Servers that forward elsewhere, or to a variable nginx knows only per connection (for example
    C($ssl_preread_server_name) itself), are left alone with a warning for the latter."
  - "Refused, before anything is written (the task fails, one message per server, saying what to do): a server
    to a listed upstream that can also reach an unlisted server (an upstream block's backup, a map value, a
    C(set) value, or a variable known only per connection); a server that listens on TCP and UDP at once; a
    server that sets C(proxy_protocol off;) itself. A server whose own line (or the stream block's) already sets
    C(proxy_protocol on;) is adopted as it is (and left by C(state=absent))."
  - "Order matters: if nginx sends PROXY protocol before the server behind it expects it, TLS breaks for
    everyone. Before it changes anything the module asks each listed upstream a changed server forwards to: it
    sends a PROXY protocol header and then a TLS handshake, and plain HTTP if that fails; it changes nothing
    unless one of them is answered. What answered is what the check after the change speaks. Traefik accepts
    both with and without the header from a trusted address, so the right order is: Traefik first
    (C(traefik_inflight_proxy_protocol_trusted_ips)), then this module."
  - "The check goes where clients go: a connection to each changed listener's own address (the wildcard at
    127.0.0.1 or ::1, a specific address at itself; C(unix:) listeners are not checked, with a warning), with a
    PROXY header of a made-up client when the listener itself has C(proxy_protocol), and a server name from
    an SNI C(map) that routes to a listed upstream. It must work before the change (else nothing is written)
    and after the reload."
  - "Never leaves nginx broken: each file is written by a temporary file and a rename at its real path; before
    the first write the original bytes of every file are kept in a journal under C(/var/backups/homelab-edge/nginx/),
    so a run cut off between two writes is rolled back by the next run (which says what it found and did).
    After any failure (C(nginx -t), the reload, the check) every file is put back byte for byte, C(nginx -t) is
    run again, and nginx is reloaded on the old files; if C(nginx -t) still fails then, the task says so loudly.
    Backups (O(backup)) go under C(/var/backups/homelab-edge/nginx/) too, never beside the config, where an
    C(include) could load them."
author:
  - homelab.edge contributors (@homelab-edge)
options:
  backup:
    description:
      - Keep a timestamped copy of each nginx configuration file before changing it, under
        C(/var/backups/homelab-edge/nginx/) followed by the file's real path (never in a directory nginx includes).
    type: bool
    default: false
  upstreams:
    description: Addresses (C(host:port)) of the servers behind the proxy that receive PROXY protocol.
    type: list
    elements: str
    required: true
  state:
    description: C(present) sends PROXY protocol to them, C(absent) stops (takes out every line the module added).
    type: str
    choices: [present, absent]
    default: present
  config:
    description: nginx's main config file (C(nginx -T -c) reads it and everything it includes).
    type: path
    default: /etc/nginx/nginx.conf
  tls_ports:
    description:
      - Deprecated and ignored; it will be removed in 3.0.0. The module asks each upstream whether it speaks TLS
        (a TLS handshake first, plain HTTP after it) and checks through nginx with what it answered.
    type: list
    elements: int
  probe:
    description:
      - Ask the upstreams and nginx's listeners (before the change and after the reload). C(false) skips every
        check, with a warning that names what was not checked; only for an upstream that speaks neither TLS nor
        HTTP (SSH, a game server) or a listener that cannot be reached from the VPS itself.
    type: bool
    default: true
extends_documentation_fragment:
  - homelab.edge.attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode the upstreams and listeners are asked too; that they do not answer is a warning then.
      - A journal of a run that was cut off is reported, not rolled back.
  diff_mode:
    support: full
  platform:
    platforms: posix
requirements:
  - nginx with the stream module on the target; root (C(become))
seealso:
  - name: nginx stream proxy_protocol
    description: The directive the module manages.
    link: https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_protocol
  - name: nginx -T
    description: How the module reads the configuration.
    link: https://nginx.org/en/docs/switches.html
"""

EXAMPLES = r"""
- name: PROXY protocol to the NAS's Traefik through the WireGuard tunnel
  homelab.edge.nginx_proxy_protocol:
    upstreams: ["10.8.0.2:443", "10.8.0.2:80"]

- name: To a game server that speaks neither TLS nor HTTP (nothing can be checked there)
  homelab.edge.nginx_proxy_protocol:
    upstreams: ["100.101.102.103:25565"]
    probe: false
"""

RETURN = r"""
changed_servers:
  description: The listens of each stream server changed (or that would be).
  returned: always
  type: list
  elements: list
servers:
  description:
    - Each stream server as nginx loads it (C(file), C(line), C(listen), C(proxy_pass), the C(targets) it can
      reach, the variables known only per connection in C(unknown)), its C(outcome) and C(why).
    - "C(outcome): C(add) (gets the line), C(has) (has it), C(remove) (it comes out), C(udp) (UDP: never),
      C(theirs) (sends PROXY protocol by your own line), C(refused), C(unknown) (a target known only per
      connection), C(other) (forwards elsewhere), C(no_proxy_pass)."
  returned: when nginx -T could be read
  type: list
  elements: dict
files:
  description: The files changed (C(path) as nginx includes it, C(real_path) written), with their backups.
  returned: always
  type: list
  elements: dict
probes:
  description: Each connection made (to an upstream, or through a listener before and after the change) and its answer.
  returned: always
  type: list
  elements: dict
journal:
  description: What the run found of a run that was cut off, and what it did (null when there was none).
  returned: always
  type: dict
"""

import datetime
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.edge.plugins.module_utils import host
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_dump as dump
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_plan as plan_
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_probe as probe_

STATE_DIR = "/var/backups/homelab-edge/nginx"
RELOAD_TIMEOUT = 15.0
ENCODING = ("utf-8", "surrogateescape")  # every byte of the user's files, whatever their encoding


class Failed(Exception):
    """A step failed; the message says why (the caller undoes what was written)."""


def text_of(data):
    return data.decode(*ENCODING) if isinstance(data, bytes) else data


def journal_path():
    return os.path.join(STATE_DIR, "journal.json")


# ---- read

def nginx(module, *args):
    """(rc, stdout, stderr) of nginx with these arguments, every byte kept."""
    binary = module.get_bin_path("nginx", required=True)
    rc, out, err = module.run_command([binary] + list(args), environ_update=host.C_ENV, encoding=None)
    return rc, text_of(out), text_of(err)


def nginx_test(module):
    rc, out, err = nginx(module, "-t", "-c", module.params["config"])
    return rc == 0, (err or out).strip()


def read_config(module):
    """The configuration as nginx loads it (nginx -T), or a refusal with nginx's own words."""
    config = module.params["config"]
    rc, out, err = nginx(module, "-T", "-c", config)
    if rc != 0:
        why = (err or out).strip()
        copies = plan_.backup_copies(why)
        hint = ("; %s looks like a backup copy (Ansible's, or an earlier homelab.edge's) in a directory nginx "
                "includes, where nginx loads it as configuration: move it out (to %s), then run this again"
                % (" and ".join(copies), STATE_DIR)) if copies else ""
        module.fail_json(msg="nginx -T -c %s fails, so nginx itself cannot load your configuration as it is: %s. Fix "
                             "that first (nginx -t says the same)%s; nothing was changed." % (config, why, hint))
    try:
        conf = dump.load(out)
    except dump.DumpError as e:
        module.fail_json(msg="nginx -T -c %s printed what homelab.edge cannot follow: %s; nothing was changed."
                             % (config, e))
    inside = [p for p in conf.files if p.startswith(STATE_DIR + "/")]
    if inside:
        module.fail_json(msg="nginx loads %s, under %s, where homelab.edge keeps its journal and backups: take that "
                             "include out; nothing was changed." % (", ".join(inside), STATE_DIR))
    return conf


def current_files(module, conf, edits):
    """[{path, real, old, new}] of the files to change: the bytes on disk,
    which must be what nginx read (else the run stops: the file changed
    under it)."""
    out = []
    for path in sorted(edits):
        real = os.path.realpath(path)
        with open(real, "rb") as f:
            old = f.read().decode(*ENCODING)
        if old != conf.files[path]:
            module.fail_json(msg="%s changed while homelab.edge read it (its bytes differ from what nginx -T printed): "
                                 "run this again; nothing was changed." % path)
        out.append({"path": path, "real": real, "old": old, "new": plan_.apply_edits(old, edits[path])})
    return [f for f in out if f["new"] != f["old"]]


# ---- write, and the journal that makes a cut-off run undoable

def temp_prefix(path):
    """The name of write_bytes' temporary file beside `path`: a dot name, which no include glob loads."""
    return ".%s.homelab-edge." % os.path.basename(path)


def write_bytes(path, text):
    """`text` into the real file `path`: a temporary file beside it (a dot
    name no include glob loads), then a rename over it; its mode and owner
    kept. A symlink to it stays a link (the caller passes the real path)."""
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=temp_prefix(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode(*ENCODING))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
        if hasattr(os, "chown"):
            os.chown(tmp, st.st_uid, st.st_gid)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_private(path, data):
    """A file of homelab.edge's own (journal, backup), root's only."""
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path), 0o700)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".homelab-edge.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def backup(real, old):
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
    path = os.path.join(STATE_DIR, real.lstrip("/")) + ".%s~" % stamp
    write_private(path, old.encode(*ENCODING))
    return path


def write_journal(module, files, step):
    record = {"config": module.params["config"], "pid": os.getpid(), "step": step,
              "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "files": [{"path": f["path"], "real": f["real"], "old": f["old"].encode(*ENCODING).hex(),
                         "new": f["new"].encode(*ENCODING).hex()} for f in files]}
    write_private(journal_path(), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("ascii"))


def drop_journal():
    if os.path.exists(journal_path()):
        os.remove(journal_path())


def restore(files):
    """Every file back to its bytes before the run; [paths that could not be]."""
    failed = []
    for f in files:
        try:
            with open(f["real"], "rb") as fh:
                now = fh.read().decode(*ENCODING)
            if now != f["old"]:
                write_bytes(f["real"], f["old"])
        except (IOError, OSError) as e:
            failed.append("%s (%s)" % (f["real"], e))
    return failed


def read_bytes(path):
    """A file's text, every byte kept; None when it is missing."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(*ENCODING)
    except (IOError, OSError):
        return None


def recover(module, result):
    """A journal left by a run that was cut off: its files back to their
    bytes before it, where they still hold what it wrote, and nginx -t.
    True when files were put back (nginx is then reloaded on them)."""
    if not os.path.exists(journal_path()):
        return False
    try:
        with open(journal_path()) as f:
            record = json.load(f)
    except ValueError:
        record = {}
    files = [{"path": f["path"], "real": f["real"], "old": bytes.fromhex(f["old"]).decode(*ENCODING),
              "new": bytes.fromhex(f["new"]).decode(*ENCODING)} for f in record.get("files", [])]
    found = "found the journal of a run that was cut off (started %s, pid %s, %d file(s))" % (
        record.get("started", "?"), record.get("pid", "?"), len(files))
    for f in files:  # a temporary file the cut-off run had not renamed yet (a dot name: never loaded)
        folder = os.path.dirname(f["real"])
        prefix = temp_prefix(f["real"])
        for name in os.listdir(folder) if os.path.isdir(folder) and not module.check_mode else []:
            if name.startswith(prefix):
                os.remove(os.path.join(folder, name))
    put_back = [f for f in files if read_bytes(f["real"]) == f["new"]]
    theirs = [f["real"] for f in files if read_bytes(f["real"]) not in (f["new"], f["old"])]
    result["journal"] = {"found": found, "restored": [f["real"] for f in put_back], "left": theirs}
    if module.check_mode:
        module.warn("%s: a run without check mode puts back %s" % (
            found, ", ".join(f["real"] for f in put_back) or "nothing (no file holds what it wrote)"))
        return False
    failed = restore(put_back)
    if failed:
        module.fail_json(msg="%s: could not put back %s; the journal stays at %s"
                             % (found, ", ".join(failed), journal_path()), **result)
    ok, why = nginx_test(module)
    if not ok:
        module.fail_json(msg="LOUD: %s; its files are back as they were before it (%s), but nginx -t still fails: %s. "
                             "nginx keeps running what it loaded last; do not reload or restart it before you fix "
                             "that. The journal stays at %s" % (found, ", ".join(result["journal"]["restored"]) or
                                                                "none needed it", why, journal_path()), **result)
    drop_journal()
    module.warn("%s: %s%s; nginx -t passes" % (
        found, "put back " + ", ".join(result["journal"]["restored"]) if put_back else "no file held what it wrote",
        "; left %s as it is (changed by someone else since)" % ", ".join(theirs) if theirs else ""))
    result["changed"] = bool(put_back)
    return bool(put_back)


# ---- reload, and knowing it happened

def pid_file(module, conf):
    pids = [d for d in dump.children(conf.top) if d.name == "pid" and d.args]
    if pids:
        return pids[-1].args[0]
    rc, out, err = nginx(module, "-V")
    for word in (err + " " + out).split():
        if word.startswith("--pid-path="):
            return word.split("=", 1)[1]
    return "/run/nginx.pid"


def workers(master):
    """{pid: cmdline} of the master's children."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != master:
                continue
            with open("/proc/%s/cmdline" % name, "rb") as f:
                out[int(name)] = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (IOError, OSError, IndexError, ValueError):
            continue
    return out


def reload(module, conf):
    """nginx -s reload, then wait until its master runs new workers (its old ones gone or
    shutting down): nginx then serves from the files as they are."""
    path = pid_file(module, conf)
    try:
        with open(path) as f:
            master = int(f.read().split()[0])
        os.kill(master, 0)
    except (IOError, OSError, ValueError, IndexError) as e:
        raise Failed("nginx is not running (no master process at %s: %s): start it, then run this again" % (path, e))
    before = workers(master)
    rc, out, err = nginx(module, "-c", module.params["config"], "-s", "reload")
    if rc != 0:
        raise Failed("nginx -s reload failed: %s" % (err or out).strip())
    deadline = time.time() + RELOAD_TIMEOUT
    while time.time() < deadline:
        now = workers(master)
        fresh = [p for p in now if p not in before]
        if fresh and all(p in fresh or "shutting down" in cmd for p, cmd in now.items()):
            return
        time.sleep(0.1)
    raise Failed("nginx kept its old workers %.0f s after the reload: it could not apply the new configuration "
                 "(its error log says why)" % RELOAD_TIMEOUT)


# ---- checks

def refuse_unless_checking(module, msg, result):
    """A check before any change failed: in check mode a warning (the run goes on to show its plan), else the
    run ends here, nothing changed."""
    if module.check_mode:
        module.warn(msg)
    else:
        module.fail_json(msg=msg + "; nothing was changed.", **result)


def ask_upstreams(module, plan, result):
    """What each listed upstream a changed server forwards to speaks with a PROXY header: {address: kind}."""
    kinds, refused = {}, []
    for address, sni in plan.upstreams_to_ask():
        kind, answer = probe_.ask_upstream(address, sni)
        result["probes"].append({"to": address, "step": "upstream, with a PROXY header", "ok": kind is not None,
                                 "speaks": kind, "answer": answer})
        if kind is None:
            refused.append("%s: %s" % (address, answer))
        kinds[address] = kind
    if refused:
        msg = ("the server(s) behind the proxy do not accept PROXY protocol from this host yet: %s. Sending it now "
               "would break their connections: turn it on there first (Traefik: traefik_inflight_proxy_protocol_"
               "trusted_ips on the NAS, its `nas` tag), or, for a server that speaks neither TLS nor HTTP, run with "
               "probe: false (vps_proxy_protocol_probe), then run this again" % "; ".join(refused))
        refuse_unless_checking(module, msg, result)
    return kinds


def through_nginx(module, checks, kinds, step, result):
    """Each check through nginx's listeners: [failures]."""
    failed = []
    for c in checks:
        kind = next((kinds[t] for t in c["targets"] if kinds.get(t)), None)
        if kind is None:
            continue
        ok, answer = probe_.through_listener(c, kind)
        result["probes"].append({"to": "%s:%s" % (c["host"], c["port"]), "listen": c["listen"], "step": step,
                                 "speaks": kind, "proxy_protocol_header": c["proxy_protocol"], "sni": c["sni"],
                                 "ok": ok, "answer": answer})
        if ok is None:
            if step == "before":
                module.warn("%s: the listen %s is not checked: %s" % (c["server"], c["listen"], answer))
        elif not ok:
            failed.append("%s (listen %s) at %s:%s: %s" % (c["server"], c["listen"], c["host"], c["port"], answer))
    return failed


def check_before(module, plan, result):
    """The upstreams accept the header, and each changed listener works as it is: {upstream: kind}."""
    checks, skipped = plan.checks()
    for s in skipped:
        module.warn(s)
    kinds = ask_upstreams(module, plan, result)
    failed = through_nginx(module, checks, kinds, "before", result)
    if failed:
        msg = ("the check through nginx fails before any change: %s. homelab.edge connects where clients do (the "
               "listener's own address) and speaks what the upstream answered; a check that fails now cannot tell "
               "whether the change works. Make the listener answer from this host, or run with probe: false "
               "(vps_proxy_protocol_probe) to change it unchecked" % "; ".join(failed))
        refuse_unless_checking(module, msg, result)
    return checks, kinds


# ---- apply, and undo

def undo(module, conf, files, reloaded, why, result):
    """Every file back byte for byte, nginx -t, nginx reloaded on them if it ran the new ones; then fail."""
    failed = restore(files)
    ok, test = nginx_test(module)
    if failed or not ok:
        module.fail_json(msg="LOUD: %s; putting your files back %s, and nginx -t %s. nginx keeps running what it "
                             "loaded last; do not reload or restart it before you fix that. The original bytes are "
                             "in %s" % (why, "failed for " + ", ".join(failed) if failed else "worked",
                                        "fails: " + test if not ok else "passes", journal_path()), **result)
    note = ""
    if reloaded:
        try:
            reload(module, conf)
            note = " and nginx was reloaded on them"
        except Failed as e:
            note = ", but reloading nginx on them failed (%s): run nginx -s reload" % e
    drop_journal()
    module.fail_json(msg="%s: your files are back byte for byte%s; nginx -t passes" % (why, note), **result)


def apply(module, conf, files, checks, kinds, result):
    """Journal, backups, write, nginx -t, reload, check through nginx; undo what fails."""
    write_journal(module, files, "writing")
    reloaded = False
    try:
        for f in files:
            entry = {"path": f["path"], "real_path": f["real"], "backup": ""}
            if module.params["backup"]:
                entry["backup"] = backup(f["real"], f["old"])
            result["files"].append(entry)
        for f in files:
            write_bytes(f["real"], f["new"])
        ok, why = nginx_test(module)
        if not ok:
            raise Failed("nginx -t refuses the change (%s)" % why)
        reloaded = True
        reload(module, conf)
        if module.params["probe"] and checks:
            failed = through_nginx(module, checks, kinds, "after", result)
            if failed:
                raise Failed("after the reload, connections through nginx fail (%s)" % "; ".join(failed))
    except Failed as e:
        undo(module, conf, files, reloaded, str(e), result)
    except (IOError, OSError) as e:
        undo(module, conf, files, reloaded, "writing the files failed (%s)" % e, result)
    drop_journal()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            upstreams=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            config=dict(type="path", default="/etc/nginx/nginx.conf"),
            tls_ports=dict(type="list", elements="int"),
            probe=dict(type="bool", default=True),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    bad = [u for u in p["upstreams"] if ":" not in u or not u.rsplit(":", 1)[1].isdigit()]
    if bad:
        module.fail_json(msg="upstreams must be host:port, got %s" % ", ".join(bad))
    if p["tls_ports"] is not None:
        module.deprecate("tls_ports is ignored: the module asks each upstream whether it speaks TLS or plain HTTP",
                         version="3.0.0", collection_name="homelab.edge")
    if not os.path.exists(p["config"]):
        module.fail_json(msg="%s does not exist: is nginx installed?" % p["config"])
    host.require_root(module, "edits nginx's configuration and reloads nginx", check_mode_reads=True)
    present = p["state"] == "present"
    result = dict(changed=False, changed_servers=[], servers=[], files=[], probes=[], journal=None)
    recovered = recover(module, result)
    conf = read_config(module)
    if recovered:
        try:
            reload(module, conf)
        except Failed as e:
            module.warn("reloading nginx on the files put back failed: %s" % e)
    plan = plan_.Plan(conf, p["upstreams"], present)
    result["servers"] = [s.result() for s in plan.servers]
    if plan.refusals:
        module.fail_json(msg="%d stream server(s) refused: %s; nothing was changed." % (
            len(plan.refusals), " | ".join(plan.refusals)), **result)
    why = plan.nothing_forwards()
    if why:
        module.fail_json(msg=why + "; nothing was changed.", **result)
    for w in plan.warnings:
        module.warn(w)
    files = current_files(module, conf, plan.edits())
    result.update(changed=bool(files) or result["changed"], changed_servers=plan.changed_servers() if files else [])
    if module._diff:
        result["diff"] = [{"before_header": f["path"] + ("" if f["real"] == f["path"] else " (-> %s)" % f["real"]),
                           "after_header": f["path"] + ("" if f["real"] == f["path"] else " (-> %s)" % f["real"]),
                           "before": f["old"], "after": f["new"]} for f in files]
    checks, kinds = [], {}
    if files and present:
        if p["probe"]:
            checks, kinds = check_before(module, plan, result)
        else:
            module.warn("probe: false: not checked that %s accept PROXY protocol, nor that connections through %s work "
                        "after the change" % (", ".join(a for a, sni in plan.upstreams_to_ask()),
                                              ", ".join(s.where() for s in plan.of(plan_.ADD))))
    if files and not module.check_mode:
        apply(module, conf, files, checks, kinds, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
