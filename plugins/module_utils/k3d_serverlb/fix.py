# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fix k3d's load balancer ("serverlb") for UDP: the fix's options and
states, and applying it to a container (plan, apply, handle). Each other
part has a file of its own in this package (k3d_serverlb/):

- template.py   patching k3d's confd template
- config.py     reading values.yaml and the rendered nginx.conf
- capacity.py   the capacity math (budget, exhaustion, the cap)
- container.py  the container through the Docker SDK
- signals.py    what a running load balancer shows (diagnose)
- metrics.py    the keeper's metrics (Prometheus text)
- profiles.py   the UDP profile of each port

No Ansible imports, and the files import each other (and ../nginx_stream.py)
relatively: the same files serve the modules and the host keeper that
re-applies the fix when k3d recreates a load balancer (the role installs
them beside it as module_utils/, named in roles/k3d_serverlb/vars/main.yml).

What the fix changes, all inside k3d's confd template (values.yaml is k3d's
and is never written here, so nothing k3d writes there can be lost):
- UDP servers get a profile per port (profiles.py): dns ports
  (53 and those the user names) end a session at the first reply
  (proxy_responses 1) and time out after udp_timeout seconds; every other
  UDP port (stream: WireGuard, QUIC, ...) keeps its sessions until
  udp_stream_timeout (k3d's own timeout by default); all of them share a
  session budget (limit_conn);
- worker_connections is at least worker_connections, whatever k3d writes into
  values.yaml (k3d rewrites it to 1024 + ports x servers when servers come
  and go), and the budget is computed from that same number;
- worker_rlimit_nofile, so the connections are real.
Renders go through `confd -onetime` in the container: confd checks the result
with nginx and reloads it, exactly as its watch would, but without depending
on a file event.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import tarfile
import time

from . import capacity as k3d_capacity
from . import config as k3d_config
from . import container as k3d_container
from . import profiles as k3d_profiles
from . import template as k3d_template


# The fix's options and their defaults: the one home of these numbers (the
# module's argument spec, the role's defaults and the docs are checked against it).
DEFAULTS = dict(
    udp_timeout=5,
    worker_connections=4096,
    worker_rlimit_nofile=16384,
    udp_share=50,
    budget_log_level="info",
    # UDP profile per port (k3d_profiles): 53 is dns unless named; an unnamed port is stream
    udp_ports={"53": "dns"},  # a string key: Ansible's docs and JSON allow no other
    # seconds of silence that end a stream session; 0: k3d's own defaultProxyTimeout (600 s unless set)
    udp_stream_timeout=0,
)
# nginx's limit_conn_log_level values. k3d's nginx logs at notice and above.
LOG_LEVELS = ("info", "notice", "warn", "error")
# Seconds per load balancer to wait for nginx, one render and its new workers.
RENDER_TIMEOUT = 30
# Where the role writes the keeper's configuration (and the keeper reads it).
KEEPER_CONFIG = "/etc/homelab-edge/k3d-serverlb.json"


def option_spec():
    """The fix's options as an Ansible argument spec (the modules share it)."""
    spec = dict((key, dict(type="int", default=default)) for key, default in DEFAULTS.items())
    spec["budget_log_level"] = dict(type="str", default=DEFAULTS["budget_log_level"], choices=list(LOG_LEVELS))
    spec["udp_ports"] = dict(type="dict", default=dict(DEFAULTS["udp_ports"]))
    return spec


# The three states every part reports (module, keeper, status, diagnose):
# the words for people, the codes for data.
STATES = {"fixed": "fixed", "capped": "fixed with a cap", "not_fixed": "not fixed",
          # state=absent: the fix removed, k3d's own template and limits back
          "removed": "k3d's own (fix removed)"}


def state_text(state, cap=None):
    """'fixed', 'fixed with a cap (1024 open files)' or 'not fixed'."""
    text = STATES[state]
    return "%s (%d open files)" % (text, cap) if state == "capped" and cap else text


def validate_options(udp_timeout, worker_connections, worker_rlimit_nofile, udp_share, budget_log_level,
                     udp_ports=None, udp_stream_timeout=0):
    """Return a list of problems with the options (empty when valid)."""
    problems = k3d_profiles.problems(udp_ports)
    if not 0 <= udp_stream_timeout <= 86400:
        problems.append("udp_stream_timeout must be between 0 (k3d's own timeout) and 86400 seconds, got %r"
                        % (udp_stream_timeout,))
    if budget_log_level not in LOG_LEVELS:
        problems.append("budget_log_level must be one of %s, got %r" % (", ".join(LOG_LEVELS), budget_log_level))
    if not 1 <= udp_timeout <= 600:
        problems.append("udp_timeout must be between 1 and 600 seconds, got %r" % (udp_timeout,))
    if not 64 <= worker_connections <= 1048576:
        problems.append("worker_connections must be between 64 and 1048576, got %r" % (worker_connections,))
    if not 1024 <= worker_rlimit_nofile <= 1048576:
        problems.append("worker_rlimit_nofile must be between 1024 and 1048576, got %r" % (worker_rlimit_nofile,))
    if not 1 <= udp_share <= 90:
        problems.append("udp_share must be a percentage between 1 and 90, got %r" % (udp_share,))
    if k3d_capacity.beyond_open_files(worker_connections, worker_rlimit_nofile):
        problems.append("worker_connections (%r) must not exceed worker_rlimit_nofile (%r): each connection needs "
                        "an open file, and nginx only warns about it" % (worker_connections, worker_rlimit_nofile))
    return problems


def wait_settled(container, want, timeout, sleep=time.sleep, clock=time.monotonic):
    """After a reload nginx starts new workers and lets the old ones drain:
    poll until the rendered file and the current workers carry `want`."""
    deadline = clock() + timeout
    while True:
        state = k3d_container.read_state(container)
        missing = plan(state, want)[2]
        if not missing:
            return state
        if clock() >= deadline:
            raise k3d_container.ApplyError("after the render: %s" % "; ".join(missing))
        sleep(0.3)


def plan(state, want):
    """The desired template and why a render is needed (empty: nothing to do)."""
    new_template = k3d_template.patch_template(state["template"], want)
    facts = k3d_config.parse_live(state["conf"])
    reasons = []
    if new_template != state["template"]:
        reasons.append("template not patched")
    reasons += k3d_config.shortfalls(facts, want)
    if state["worker_limits"] and state["worker_limits"] != [want["worker_rlimit_nofile"]]:
        reasons.append("nginx workers run with open-file limit %s" % ",".join(map(str, state["worker_limits"])))
    return new_template, facts, reasons


def _read_running(container, render_timeout):
    """The state of a load balancer that runs nginx (ApplyError when it does not)."""
    container.reload()
    if container.status != "running":
        raise k3d_container.ApplyError("container is %s, not running" % container.status)
    if not k3d_container.wait_for_nginx(container, render_timeout):
        raise k3d_container.ApplyError("nginx is not running in the container (waited %ds)" % render_timeout)
    return k3d_container.read_state(container)


def apply(container, want, check_mode=False, render_timeout=RENDER_TIMEOUT):
    """Bring one running load balancer to `want`, or to as much of it as fits
    under an open-file limit nginx cannot raise (capped_want).

    Decides from the files and from what nginx runs: a patched template whose
    render never went live is rendered again. Returns dict(changed, reasons,
    template=(before, after), facts, open_file_limit, cap). A render
    confd or nginx rejects puts the template back, renders the old one and
    raises ApplyError."""
    state = _read_running(container, render_timeout)
    want, cap = k3d_capacity.capped_want(want, state["hard_limit"])
    new_template, facts, reasons = plan(state, want)
    result = {"changed": bool(reasons), "reasons": reasons, "template": (state["template"], new_template),
              "facts": facts, "open_file_limit": max(state["worker_limits"] or [0]) or None,
              "udp_ports": k3d_config.udp_ports(k3d_config.parse_values(state["values"])), "cap": cap}
    if check_mode or not reasons:
        return result
    after = _change(container, state["template"], new_template, render_timeout,
                    lambda: wait_settled(container, want, render_timeout))
    result["facts"] = k3d_config.parse_live(after["conf"])
    result["open_file_limit"] = max(after["worker_limits"] or [0]) or None
    return result


def _change(container, template, new_template, render_timeout, settled):
    """The new template in place (where it differs), rendered, and settled() - the state once nginx runs it. A
    failure puts the old template back, renders it and raises ApplyError saying both."""
    if new_template != template:
        k3d_container.replace_file(container, k3d_container.TEMPLATE_PATH, new_template)
    try:
        k3d_container.render(container, render_timeout)
        return settled()
    except k3d_container.ApplyError as e:
        undone = _roll_back(container, template, new_template, render_timeout)
        raise k3d_container.ApplyError("%s; %s" % (e, undone))


def _wait_unfixed(container, timeout, sleep, clock):
    """After the undo's render: poll until nginx runs none of the fix."""
    deadline = clock() + timeout
    while True:
        after = k3d_container.read_state(container)
        left = _live_fix(after["conf"])
        if not left:
            return after
        if clock() >= deadline:
            raise k3d_container.ApplyError("after the render: %s" % "; ".join(left))
        sleep(0.3)


def _roll_back(container, template, new_template, render_timeout):
    if template == new_template:
        return "the template was not changed"
    try:
        k3d_container.replace_file(container, k3d_container.TEMPLATE_PATH, template)
        k3d_container.render(container, render_timeout)
        return "template rolled back and rendered"
    except k3d_container.ApplyError as e:
        return "template rolled back; rendering it failed too: %s" % e


def _live_fix(conf):
    """What of the fix nginx still runs (empty: none of it)."""
    facts = k3d_config.parse_live(conf)
    left = []
    if k3d_template.ZONE in conf:
        left.append("nginx runs the UDP session budget")
    if any(s["proxy_responses"] == "1" for s in facts["udp_servers"]):
        left.append("nginx runs proxy_responses 1 on UDP servers")
    if facts["worker_rlimit_nofile"] is not None:
        left.append("nginx runs worker_rlimit_nofile %s" % facts["worker_rlimit_nofile"])
    return left


def remove(container, check_mode=False, render_timeout=RENDER_TIMEOUT, sleep=time.sleep, clock=time.monotonic):
    """state=absent: k3d's own template back (unpatch_template), rendered, and
    checked in what nginx runs. Same shape of result as apply(); a render
    confd or nginx rejects puts the patched template back and raises
    ApplyError."""
    state = _read_running(container, render_timeout)
    new_template = k3d_template.unpatch_template(state["template"])
    reasons = (["template patched by homelab.edge"] if new_template != state["template"] else []) \
        + _live_fix(state["conf"])
    result = {"changed": bool(reasons), "reasons": reasons, "template": (state["template"], new_template),
              "facts": k3d_config.parse_live(state["conf"]), "open_file_limit": max(state["worker_limits"] or [0]) or None,
              "cap": None}
    if check_mode or not reasons:
        return result
    after = _change(container, state["template"], new_template, render_timeout,
                    lambda: _wait_unfixed(container, render_timeout, sleep, clock))
    result["facts"] = k3d_config.parse_live(after["conf"])
    result["open_file_limit"] = max(after["worker_limits"] or [0]) or None
    return result


def patch_created(container, want):
    """Patch the template of a load balancer that is created but not started
    yet (k3d creates, copies values.yaml in, then starts): its first render is
    then already fixed (capped where the container's ulimit says so). Uses the
    archive API, which works on stopped containers. Returns True when it wrote."""
    want = k3d_capacity.capped_want(want, k3d_container.created_hard_limit(container))[0]
    stream, stat = container.get_archive(k3d_container.TEMPLATE_PATH)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.getmembers()[0]
        template = tar.extractfile(member).read().decode("utf-8")
    new = k3d_template.patch_template(template, want)
    if new == template:
        return False
    if not container.put_archive(k3d_container.TEMPLATE_PATH.rsplit("/", 1)[0],
                                 k3d_container._tar(k3d_container.TEMPLATE_PATH.rsplit("/", 1)[1], new, stat.get("mode", 0o644) & 0o777)):
        raise k3d_container.ApplyError("copying the template into the container failed")
    return True


def render_is_stale(container):
    """Whether nginx.conf lacks what values.yaml asks for (an upstream or a
    node). confd's watch can miss k3d's copy of values.yaml (Docker replaces
    the file by remove then create), leaving k3d's change unrendered."""
    state = k3d_container.read_state(container)
    wanted_upstreams = k3d_config.upstreams_from_values(k3d_config.parse_values(state["values"]))
    return wanted_upstreams != k3d_config.parse_live(state["conf"])["upstreams"]


def handle(container, name, explicit, want, check_mode=False, render_timeout=RENDER_TIMEOUT, require_full_fix=False,
           absent=False):
    """One load balancer, as the module and the keeper report it: its state
    (fixed, capped, not_fixed; with absent: removed; STATES has the words).
    Never raises: one failing load balancer cannot stop the others. A capped
    one is a failure only with require_full_fix."""
    entry = {"name": name, "cluster": None, "changed": False, "failed": False, "msg": "", "reasons": [],
             "diff": [], "state": "not_fixed", "state_text": STATES["not_fixed"], "open_file_cap": None}
    if container is None:
        entry.update(failed=True, msg="no container named %s" % name)
        return entry
    entry["cluster"] = (container.labels or {}).get(k3d_container.CLUSTER_LABEL)
    if container.status != "running" and not explicit:
        entry["msg"] = "skipped: container is %s" % container.status
        return entry
    try:
        if absent:
            res = remove(container, check_mode=check_mode, render_timeout=render_timeout)
        else:
            res = apply(container, want, check_mode=check_mode, render_timeout=render_timeout)
    except (k3d_template.ShapeError, k3d_container.ApplyError) as e:
        entry.update(failed=True, msg="%s: %s" % (name, e))
        return entry
    except Exception as e:  # deliberate: the Docker API fails in many ways, and one LB must not stop the rest
        entry.update(failed=True, msg="%s: %s: %s" % (name, type(e).__name__, e))
        return entry
    entry.update(k3d_config.report(name, entry["cluster"], res["facts"], res["open_file_limit"], want))
    entry.update(changed=res["changed"], reasons=res["reasons"], open_file_cap=res["cap"])
    before, after = res["template"]
    if before != after:
        header = "%s:%s" % (name, k3d_container.TEMPLATE_PATH)
        entry["diff"] = [{"before_header": header, "after_header": header, "before": before, "after": after}]
    if check_mode and res["changed"]:
        entry["msg"] = "would %s: %s" % ("remove the fix" if absent else "fix", "; ".join(res["reasons"]))
        return entry
    if absent:
        entry.update(state="removed", state_text=STATES["removed"], warnings=[])
        return entry
    entry["state"] = "capped" if res["cap"] else "fixed"
    entry["state_text"] = state_text(entry["state"], res["cap"])
    if res["cap"]:
        entry["warnings"].append(k3d_capacity.cap_remedy(name, entry["cluster"], want, res["cap"]))
        if require_full_fix:
            entry.update(failed=True, msg="%s (require_full_fix)" % entry["warnings"][-1])
    return entry
