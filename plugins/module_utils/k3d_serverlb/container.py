# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: the container, through the Docker SDK. Finding
the load balancers, reading their files and nginx's limits in one exec,
replacing a file atomically, rendering with confd."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
import secrets
import tarfile
import time


TEMPLATE_PATH = "/etc/confd/templates/nginx.tmpl"
VALUES_PATH = "/etc/confd/values.yaml"
NGINX_CONF = "/etc/nginx/nginx.conf"
ROLE_LABEL = "k3d.role"
ROLE_LOADBALANCER = "loadbalancer"
CLUSTER_LABEL = "k3d.cluster"
RENAMED_LEFTOVER = re.compile(r"^(?P<base>.+-serverlb)-[A-Za-z0-9]{5}$")
# `confd -onetime` renders, checks with nginx (the template's check_cmd) and reloads.
CONFD_RENDER = ["confd", "-onetime", "-backend", "file", "-file", VALUES_PATH]


class ApplyError(RuntimeError):
    """Applying to a container failed; the message says why."""


def event_of(event):
    """(container ID, action) of a Docker container event, in either shape:
    Engine 29 (API 1.52) sends only Action and Actor.ID; older engines also
    send the deprecated id and status. (None, None) for anything else."""
    actor = event.get("Actor") or {}
    return (actor.get("ID") or event.get("id") or None), (event.get("Action") or event.get("status") or None)


def is_renamed_leftover(name):
    """k3d renames the old load balancer to <name>-<5 chars> while recreating it."""
    return bool(RENAMED_LEFTOVER.match(name))


def is_load_balancer(container):
    return (container.labels or {}).get(ROLE_LABEL) == ROLE_LOADBALANCER


def wanted(container, names=(), clusters=()):
    """Whether a container is one of the load balancers to fix: named
    explicitly, or discovered (a k3d load balancer of one of `clusters`, or of
    any cluster when empty), never the renamed leftover of a recreate."""
    if names:
        return container.name in names
    if not is_load_balancer(container) or is_renamed_leftover(container.name):
        return False
    return not clusters or container.labels.get(CLUSTER_LABEL) in clusters


def find_load_balancers(client, names=(), clusters=(), not_found=LookupError):
    """[(name, container or None, explicit)], sorted by name."""
    if names:
        found = []
        for name in names:
            try:
                found.append((name, client.containers.get(name), True))
            except not_found:
                found.append((name, None, True))
        return found
    containers = client.containers.list(all=True, filters={"label": ["%s=%s" % (ROLE_LABEL, ROLE_LOADBALANCER)]})
    return [(c.name, c, False) for c in sorted(containers, key=lambda c: c.name) if wanted(c, (), clusters)]


def _exec(container, argv):
    res = container.exec_run(argv, demux=True)
    out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
    return res.exit_code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")


# nginx's master and its current workers (not those of an earlier reload that
# are still draining connections: "worker process is shutting down").
_WORKERS = ("for p in $(pgrep -f 'nginx: worker process'); do "
            "grep -q 'shutting down' /proc/$p/cmdline 2>/dev/null && continue; "
            "awk '/Max open files/ {print $4; exit}' /proc/$p/limits 2>/dev/null || true; done")
# the hard open-file limit of nginx's master: what its workers can get at most
_MASTER_HARD = ("for p in $(pgrep -f 'nginx: master process'); do "
                "awk '/Max open files/ {print $5; exit}' /proc/$p/limits 2>/dev/null || true; done")
_SPLIT = "\x1fhomelab-edge\x1f"


def read_state(container, sleep=time.sleep):
    """Template, values, the rendered nginx.conf and the open-file limits of
    nginx's current workers, in one exec: a no-change run is one round trip."""
    sep = "; printf '%s'; " % _SPLIT.replace("\x1f", "\\037")
    script = "set -e; " + sep.join(["cat %s" % path for path in (TEMPLATE_PATH, VALUES_PATH, NGINX_CONF)]
                                   + [_WORKERS, _MASTER_HARD])
    for attempt in range(3):
        rc, out, err = _exec(container, ["sh", "-c", script])
        parts = out.split(_SPLIT)
        # every part printed is the whole read (`set -e`: a failing cat stops it), whatever exit code the engine
        # reports: it may report none yet. An exec that came back with nothing at all - no output, no error - was
        # lost on its way (seen on Engine 29 under load while nginx reloaded): it is tried again, twice at most.
        if (rc in (0, None) and len(parts) == 5) or (rc not in (0, None) and (out or err)):
            break
        sleep(0.5)
    if rc not in (0, None) or len(parts) != 5:
        raise ApplyError("cannot read the load balancer's files (exit code %s): %s" % (rc, (err or out).strip()[-300:]))
    limits = sorted(set(int(x) for x in parts[3].split() if x.isdigit()))
    hard = [int(x) for x in parts[4].split() if x.isdigit()]
    return {"template": parts[0], "values": parts[1], "conf": parts[2], "worker_limits": limits,
            "hard_limit": min(hard) if hard else None}


def _tar(name, content, mode):
    data = content.encode("utf-8")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def replace_file(container, path, content, mode=0o644):
    """Copy to an unpredictable temporary name in the same directory, then
    rename over `path`: a reader never sees a truncated or missing file."""
    directory, base = path.rsplit("/", 1)
    tmp = ".%s.homelab-edge-%s" % (base, secrets.token_hex(6))
    if not container.put_archive(directory, _tar(tmp, content, mode)):
        raise ApplyError("copying %s into the container failed" % path)
    rc, out, err = _exec(container, ["mv", "-f", "%s/%s" % (directory, tmp), path])
    if rc != 0:
        _exec(container, ["rm", "-f", "%s/%s" % (directory, tmp)])
        raise ApplyError("renaming into %s failed: %s" % (path, (err or out).strip()))


def nginx_running(container):
    return _exec(container, ["pgrep", "-f", "nginx: master process"])[0] == 0


def wait_for_nginx(container, timeout, sleep=time.sleep, clock=time.monotonic):
    """k3d's entrypoint renders three times, 2 s apart, before it starts nginx:
    a load balancer that just started has no nginx for a few seconds."""
    deadline = clock() + timeout
    while not nginx_running(container):
        if clock() >= deadline:
            return False
        sleep(0.5)
    return True


def render(container, timeout):
    """Render nginx.conf with confd once: confd checks the result with nginx
    (the template's check_cmd) and reloads nginx, as its watch would. Raises
    ApplyError with confd's error; nginx then keeps its last good config."""
    argv = ["timeout", str(timeout)] + CONFD_RENDER
    rc, out, err = _exec(container, argv)
    errors = [ln.split(" ERROR ", 1)[-1].strip() for ln in (err + out).splitlines()
              if " ERROR " in ln or "[emerg]" in ln]
    if rc != 0 or errors:
        raise ApplyError("confd rejected the render: %s" % (" / ".join(errors[-3:]) if errors else
                                                            "rc=%s %s" % (rc, (err or out).strip()[-300:])))


def created_hard_limit(container):
    """The hard open-file limit a created container will run with, where its
    HostConfig says (k3d's --runtime-ulimit); None when it is the engine's."""
    for u in ((container.attrs.get("HostConfig") or {}).get("Ulimits") or []):
        if u.get("Name") == "nofile" and u.get("Hard"):
            return int(u["Hard"])
    return None
