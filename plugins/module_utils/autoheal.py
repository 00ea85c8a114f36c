# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What autoheal needs from a container to heal it: pure logic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Shell tests that always succeed: a health check like this never turns unhealthy.
_ALWAYS = re.compile(r"^\s*(true|exit\s+0|:)\s*$|\|\|\s*(true|exit\s+0|:)\s*$")


def cannot_fail(test):
    """Whether a Docker health check test can never fail."""
    if not test or test[0] == "NONE":
        return False
    if test[0] == "CMD":
        return test[1:] in (["true"], ["/bin/true"], ["/usr/bin/true"])
    if test[0] == "CMD-SHELL":
        return bool(_ALWAYS.search(" ".join(test[1:])))
    return False


def problems(name, inspect, label):
    """Why autoheal would not heal the container `name` (empty: it would).
    `inspect` is docker inspect's document, or None when it does not exist."""
    if not inspect:
        return ["%s does not exist" % name]
    config = inspect.get("Config") or {}
    out = []
    if label != "all" and (config.get("Labels") or {}).get(label) != "true":
        out.append("%s lacks the label %s=true: autoheal does not watch it" % (name, label))
    test = (config.get("Healthcheck") or {}).get("Test") or ["NONE"]
    if test[0] == "NONE":
        out.append("%s has no health check: Docker never marks it unhealthy, so autoheal never restarts it "
                   "(for Traefik: traefik healthcheck --ping, with ping enabled)" % name)
    elif cannot_fail(test):
        out.append("%s has a health check that cannot fail (%s): a wedged %s stays healthy"
                   % (name, " ".join(test[1:]), name))
    return out


# One healer per host. The compose project the role writes (templates/compose.yml.j2) and its service: what is ours.
OWN_PROJECT = "homelab-edge-autoheal"
OWN_SERVICE = "autoheal"
# willfarrell/autoheal's defaults (its docker-entrypoint), which its successors (tmknight/docker-autoheal,
# kristof-mattei/autoheal-rs) keep: the label it watches and where it finds the Docker socket.
DEFAULT_LABEL = "autoheal"
DEFAULT_SOCKET = "/var/run/docker.sock"
# The name the role's autoheal takes when a container of the user's already holds autoheal_container.
SPARE_SUFFIX = "-homelab-edge"


def _name(doc):
    return (doc.get("Name") or "").lstrip("/")


def _env(doc):
    return dict(e.split("=", 1) for e in (doc.get("Config") or {}).get("Env") or [] if "=" in e)


def _labels(doc):
    return (doc.get("Config") or {}).get("Labels") or {}


def is_ours(doc):
    """Whether a container is the role's own autoheal (by its compose project and service, not its name)."""
    labels = _labels(doc)
    return (labels.get("com.docker.compose.project") == OWN_PROJECT
            and labels.get("com.docker.compose.service") == OWN_SERVICE)


def healer_signs(doc):
    """Why a container looks like an autoheal: its image's name, or autoheal's environment. Its name alone is
    no sign (a user's container may be called autoheal and heal nothing)."""
    image = (doc.get("Config") or {}).get("Image") or doc.get("Image") or ""
    out = []
    if "autoheal" in image.lower():
        out.append("image %s" % image)
    env = _env(doc)
    if "AUTOHEAL_CONTAINER_LABEL" in env:
        out.append("AUTOHEAL_CONTAINER_LABEL=%s" % env["AUTOHEAL_CONTAINER_LABEL"])
    return out


def watched_label(doc):
    """The label a healer watches (set to true on its targets), or `all`."""
    return _env(doc).get("AUTOHEAL_CONTAINER_LABEL") or DEFAULT_LABEL


def docker_access(doc):
    """How a healer reaches the Docker API, in words, or None when it cannot: DOCKER_SOCK or DOCKER_HOST over
    TCP, or the socket it names (DEFAULT_SOCKET when unset) mounted into it."""
    env = _env(doc)
    where = env.get("DOCKER_SOCK") or env.get("DOCKER_HOST") or DEFAULT_SOCKET
    key = "DOCKER_SOCK" if env.get("DOCKER_SOCK") else "DOCKER_HOST" if env.get("DOCKER_HOST") else None
    if where.startswith(("tcp://", "tcps://", "http://", "https://")):
        return "%s=%s" % (key, where)
    path = where[len("unix://"):] if where.startswith("unix://") else where
    for m in doc.get("Mounts") or []:
        if m.get("Destination") == path:
            return "the Docker socket %s mounted at %s" % (m.get("Source") or "?", path)
    return None


def can_see(label, target):
    """Whether a healer watching `label` lists the container `target` (a docker inspect document) when it is
    unhealthy: upstream lists label=<label>=true (all: every container) and skips autoheal=False."""
    labels = _labels(target)
    if labels.get("autoheal") == "False":
        return False
    return label == "all" or labels.get(label) == "true"


def healers(docs):
    """The running healers among docker inspect documents: [{name, ours, signs, label, access}]."""
    out = []
    for doc in docs:
        if not (doc.get("State") or {}).get("Running"):
            continue
        ours = is_ours(doc)
        signs = healer_signs(doc)
        if ours or signs:
            out.append({"name": _name(doc), "ours": ours, "signs": signs, "label": watched_label(doc),
                        "access": docker_access(doc)})
    return out


def spare_name(docs, wanted):
    """The name for the role's autoheal: `wanted`, unless a container that is not ours holds it."""
    taken = [d for d in docs if _name(d) == wanted and not is_ours(d)]
    return wanted + SPARE_SUFFIX if taken else wanted


def _blind_spots(healer, docs, watched):
    """Why `healer` cannot restart the watched containers (empty: it can)."""
    out = []
    if not healer["access"]:
        out.append("%s has no way to the Docker API (no %s mounted, no DOCKER_SOCK or DOCKER_HOST)"
                   % (healer["name"], DEFAULT_SOCKET))
    by_name = dict((_name(d), d) for d in docs)
    for name in watched:
        target = by_name.get(name)
        if target is None:
            out.append("%s does not exist" % name)
        elif not can_see(healer["label"], target):
            out.append("%s does not watch %s: it lists containers labelled %s=true, and %s has %s"
                       % (healer["name"], name, healer["label"], name,
                          "autoheal=False" if _labels(target).get("autoheal") == "False"
                          else "%s=%s" % (healer["label"], _labels(target).get(healer["label"], "(none)"))))
    return out


def plan(docs, watched, label, existing, wanted):
    """What the role does about healers, from docker inspect documents of every container on the host.

    watched: the containers that must be healed (Traefik); label: the label the role's autoheal would watch;
    existing: adopt or refuse a healer that is not ours; wanted: autoheal_container.
    Returns {action: deploy|adopt|refuse, msg, name (ours to deploy under), ours (ours running, or None),
    healer (the adopted one, or None), label (the label the healer in charge watches), access}.
    """
    found = healers(docs)
    ours = [h for h in found if h["ours"]]
    theirs = [h for h in found if not h["ours"]]
    out = {"name": spare_name(docs, wanted), "ours": ours[0]["name"] if ours else None, "healer": None,
           "label": label, "access": None, "others": [h["name"] for h in theirs]}

    def describe(h):
        return "%s (%s)" % (h["name"], ", ".join(h["signs"]))

    if len(theirs) > 1:
        return dict(out, action="refuse", msg=(
            "%d healers already run on this host: %s. Each restarts the same unhealthy containers, and a third "
            "would too. Keep one: remove the others (docker rm -f NAME, and their compose service), then run "
            "again. Nothing was changed." % (len(theirs), "; ".join(describe(h) for h in theirs))))
    if not theirs:
        why = (" (a container of yours holds the name %s; that container heals nothing: no autoheal image, "
               "no AUTOHEAL_CONTAINER_LABEL)" % wanted) if out["name"] != wanted else ""
        return dict(out, action="deploy", msg="no other healer runs here: the role's autoheal runs as %s%s"
                    % (out["name"], why))
    h = theirs[0]
    twice = ("a second autoheal would restart the same containers twice and send every message twice")
    if existing == "refuse":
        return dict(out, action="refuse", msg=(
            "%s already heals containers on this host: %s. Remove it (docker rm -f %s, and its compose service) "
            "and run again to get the role's autoheal, or set autoheal_existing: adopt to keep it. "
            "Nothing was changed." % (describe(h), twice, h["name"])))
    blind = _blind_spots(h, docs, watched)
    if blind:
        fixes = []
        if any(" does not watch " in b for b in blind):
            fixes.append("give %s the label %s=true (or the healer AUTOHEAL_CONTAINER_LABEL=all)"
                         % (", ".join(watched), h["label"]))
        if not h["access"]:
            fixes.append("mount %s into %s" % (DEFAULT_SOCKET, h["name"]))
        return dict(out, action="refuse", msg=(
            "%s already heals containers on this host, and autoheal_existing: adopt keeps it instead of adding a "
            "second (%s); but it cannot heal what it must: %s. %s, or remove it and run again to get the role's "
            "autoheal. Nothing was changed."
            % (describe(h), twice, "; ".join(blind), "; ".join(fixes).capitalize() if fixes else
               "Start what it must heal")))
    return dict(out, action="adopt", healer=h["name"], label=h["label"], access=h["access"], msg=(
        "adopted %s: it watches %s, which %s carries, and reaches Docker through %s. The role runs no autoheal "
        "of its own%s; its restart-loop guard, socket proxy and webhook do not apply to %s."
        % (describe(h), "every container (all)" if h["label"] == "all" else "the label %s=true" % h["label"],
           ", ".join(watched) or "nothing watched", h["access"],
           " (and removes its own, %s)" % out["ours"] if out["ours"] else "", h["name"])))


# A restart loop, as diagnose reads it: this many restarts of one container in its window.
LOOP_RESTARTS = 3


def loop_cause(test, last_output):
    """The likely reason a container's health check keeps failing right after each restart: from its test
    (docker inspect's Healthcheck.Test) and the last check's output."""
    text = " ".join(test or [])
    out = (last_output or "").lower()
    if re.search(r"\bping\s+-c\b|https?://(?!(localhost|127\.|\[::1\]))[a-z0-9.-]+\.[a-z]{2,}", text):
        return ("its health check reaches the internet (%s): it fails whenever the uplink does, and restarting "
                "does not bring the uplink back" % text[:80])
    if "404" in out and "ping" in text:
        return ("its health check gets 404 from /ping: ping is routed on a TLS entrypoint, which answers a "
                "plain-HTTP HEAD /ping with 404, so it can never pass (homelab.edge.traefik_inflight's ping)")
    if not text or text == "NONE":
        return "it has no health check of its own: the restarts are not autoheal's (a restart policy, a crash)"
    return ("its health check keeps failing after each start (%s; last output: %s): a check that cannot pass, "
            "or a start period shorter than its start" % (text[:80], (last_output or "none")[:80]))
