# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: its capacity math. How many UDP sessions fit,
how fast a flood of sessions fills the connections, and the fix that fits
under an open-file limit nginx cannot raise. Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def capped_want(want, hard_limit):
    """The fix that fits under an open-file limit nginx cannot raise.

    nginx's master has no CAP_SYS_RESOURCE in the container: its workers get
    at most the container's hard limit, whatever worker_rlimit_nofile asks.
    The UDP parts (proxy_responses 1, the short timeout, the budget) need no
    open files and stay whole; worker_rlimit_nofile is the hard limit and
    worker_connections fits under it (nginx warns above). Returns (want, cap):
    cap is None when the limit is high enough (or unknown)."""
    if not hard_limit or hard_limit >= want["worker_rlimit_nofile"]:
        return want, None
    fitted = dict(want, worker_rlimit_nofile=hard_limit,
                  worker_connections=min(want["worker_connections"], hard_limit), cap=hard_limit)
    return fitted, hard_limit


def cap_remedy(name, cluster, want, cap):
    """What a capped load balancer costs and how to lift the cap, for people."""
    budget = udp_budget(cap, want["udp_share"])
    return ("%s: fixed with a cap (%d open files): the container's hard open-file limit is %d, which nginx cannot "
            "raise to %d (no CAP_SYS_RESOURCE), so worker_connections is %d instead of %d. DNS is fixed "
            "(proxy_responses 1, %d s timeout, a budget of %d sessions); TCP (HTTPS, the API) keeps %d connections "
            "beside it. To lift the cap, give the load balancer more open files: create the cluster with "
            "`k3d cluster create %s --runtime-ulimit nofile=%d:%d`, or set dockerd's \"default-ulimits\": "
            "{\"nofile\": {\"Name\": \"nofile\", \"Soft\": %d, \"Hard\": %d}} in /etc/docker/daemon.json, "
            "restart dockerd and recreate the load balancer (for example `k3d cluster edit %s --port-add ...`)."
            % (name, cap, cap, want["worker_rlimit_nofile"], min(want["worker_connections"], cap),
               want["worker_connections"], want["udp_timeout"], budget,
               max(0, min(want["worker_connections"], cap) - 2 * budget), cluster or "<cluster>",
               want["worker_rlimit_nofile"], want["worker_rlimit_nofile"], want["worker_rlimit_nofile"],
               want["worker_rlimit_nofile"], cluster or "<cluster>"))


# nginx gives every connection a file descriptor of its own (a TCP session's two sides, a UDP session's upstream
# socket): a worker holds at most as many connections as it may open files, and above that it only warns
# ("worker_connections exceed open file resource limit")
FILES_PER_CONNECTION = 1


def connections_held(worker_connections, open_files):
    """The connections a worker can really hold: worker_connections, or fewer where its open-file limit allows
    fewer."""
    return min(worker_connections, open_files // FILES_PER_CONNECTION)


def beyond_open_files(worker_connections, open_files):
    """True when worker_connections asks for more connections than the open-file limit lets a worker hold."""
    return worker_connections > connections_held(worker_connections, open_files)


def udp_budget(worker_connections, udp_share):
    """UDP sessions allowed at once: each holds two connections, so the UDP
    servers together may use udp_share percent of the worker's connections."""
    return max(1, worker_connections * udp_share // 200)


def exhaustion_rate(connections, udp_timeout):
    """New UDP sessions per second that fill `connections` when no reply ever
    ends a session (each holds 2 connections for udp_timeout seconds)."""
    return round(connections / (2.0 * udp_timeout), 2)
