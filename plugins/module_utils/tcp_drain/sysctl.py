# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain sysctls: which keys, what they mean, and how to read sysctl's answers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

FIN_TIMEOUT = "net.ipv4.tcp_fin_timeout"
ABORT_ON_OVERFLOW = "net.ipv4.tcp_abort_on_overflow"
CT_TIME_WAIT = "net.netfilter.nf_conntrack_tcp_timeout_time_wait"
CT_FIN_WAIT = "net.netfilter.nf_conntrack_tcp_timeout_fin_wait"

# The kernel's own values, and the ones homelab.edge sets by default (the
# tcp_drain role's defaults and traefik_inflight's container sysctls; the
# one-home test holds them to these).
KERNEL_DEFAULTS = {FIN_TIMEOUT: 60, ABORT_ON_OVERFLOW: 0, CT_TIME_WAIT: 120, CT_FIN_WAIT: 120}
RECOMMENDED = {FIN_TIMEOUT: 15, ABORT_ON_OVERFLOW: 1, CT_TIME_WAIT: 30}
# Keys where a higher value drains faster (the others are timers: lower is faster).
HIGHER_IS_FASTER = (ABORT_ON_OVERFLOW,)

# Every key the collection manages, with what it governs. All are per network
# namespace: a container on a bridge network has its own copy.
KEYS = {
    FIN_TIMEOUT: "seconds an orphaned socket stays in FIN_WAIT_2 (kernel default %d); TIME_WAIT is fixed at 60 s"
                 % KERNEL_DEFAULTS[FIN_TIMEOUT],
    ABORT_ON_OVERFLOW: "1: answer a full accept queue with a reset instead of dropping the final ACK (default %d)"
                       % KERNEL_DEFAULTS[ABORT_ON_OVERFLOW],
    CT_TIME_WAIT: "seconds conntrack keeps a TIME_WAIT entry (default %d: the seed's '120 s')"
                  % KERNEL_DEFAULTS[CT_TIME_WAIT],
    CT_FIN_WAIT: "seconds conntrack keeps a FIN_WAIT entry (default %d)" % KERNEL_DEFAULTS[CT_FIN_WAIT],
}

# What a key's status in the module's result means: set, or why not.
APPLIED = ("ok", "changed")


def slower(live, want):
    """{key: live value} of the keys in `want` whose live value drains
    slower than the wanted one (unreadable keys are left out)."""
    return dict((k, v) for k, v in (live or {}).items()
                if v is not None and k in want and
                (v < want[k] if k in HIGHER_IS_FASTER else v > want[k]))


RANGES = {FIN_TIMEOUT: (1, 600), ABORT_ON_OVERFLOW: (0, 1), CT_TIME_WAIT: (1, 3600), CT_FIN_WAIT: (1, 3600)}


def remember_before(recorded, keys):
    """The values to put back with state=absent: what was recorded, plus the
    value before of each key the module just changed for the first time."""
    out = dict(recorded or {})
    for key, entry in keys.items():
        if entry["status"] == "changed" and key not in out and entry["before"] is not None:
            out[key] = entry["before"]
    return out


def validate(values):
    """Problems with a {key: value} mapping (unknown keys, non-integers, ranges)."""
    problems = []
    for key in sorted(values):
        value = values[key]
        if key not in KEYS:
            problems.append("unknown key %s (supported: %s)" % (key, ", ".join(sorted(KEYS))))
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value).strip())
            except ValueError:
                problems.append("%s must be an integer, got %r" % (key, values[key]))
                continue
        lo, hi = RANGES[key]
        if not lo <= value <= hi:
            problems.append("%s must be between %d and %d, got %d" % (key, lo, hi, value))
    return problems


def normalize(values):
    return dict((k, int(str(v).strip())) for k, v in values.items())


def classify_error(stderr, root=True):
    """Why sysctl could not read or write a key: 'missing', 'not-root' (a
    write refused to a user other than root), 'read-only' or 'error'."""
    text = stderr.lower()
    if "no such file" in text or "cannot stat" in text or "unknown key" in text:
        return "missing"
    if not root and "permission denied" in text:
        return "not-root"
    if "read-only" in text or "permission denied" in text or "operation not permitted" in text:
        return "read-only"
    return "error"


def explain(key, reason, where):
    if reason == "missing":
        hint = ("the kernel has no such key in %s (for net.netfilter.* the nf_conntrack module must be "
                "loaded)" % where)
    elif reason == "read-only":
        hint = ("%s has a read-only /proc/sys (an unprivileged container): set it at container creation "
                "(compose 'sysctls:' or docker run --sysctl) or apply it from the host with the "
                "containers option" % where)
    elif reason == "not-root":
        hint = "only root may write it in %s: run the task with become: true" % where
    else:
        hint = "sysctl failed in %s" % where
    return "%s: %s" % (key, hint)
