# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Traefik on the NAS: pure logic.

- the inFlightReq middleware (and the one router the role adds to read
  Traefik's own API from inside its network namespace);
- where a running Traefik takes its static config from (a file, or
  command-line flags) and where its files are on the host (its mounts);
- the minimal change to the user's static config, compose file or flags,
  made as line edits to their text (every other byte kept, comments
  included) and checked against the intended result with a YAML parser;
- what Traefik's API says about routers and middlewares after a change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import posixpath
import os
import re
import shlex

from . import toml_text
from . import tunnel
from . import yaml_text
from .text_edit import EditError, ci, lookup

SOURCES = ("ip", "host", "header")
# Traefik's API, for the role to read after a change: an entrypoint on the
# loopback of Traefik's own network namespace (unreachable from outside it)
# and one router to api@internal on it.
# Where the module keeps what it wrote over the user's files (state=absent undoes it).
STATE_DIR = "/var/lib/homelab-edge/traefik-inflight"
API_ENTRYPOINT = "homelab-edge-api"
API_PORT = 9099
API_ROUTER = "homelab-edge-api"
# Seconds one read of that API may take (a wedged Traefik accepts and never answers;
# `timeout` bounds it: the official image's busybox and Debian's coreutils have it).
API_TIMEOUT = 5
# Prometheus metrics on an entrypoint of their own (traefik_inflight_metrics): on
# every interface of Traefik's network namespace, so Prometheus on the host or a
# Docker network reaches it; never published. The entrypoint and router labels
# carry inFlightReq's 429s (code="429").
METRICS_ENTRYPOINT = "homelab-edge-metrics"
METRICS = {"entryPoint": METRICS_ENTRYPOINT, "addEntryPointsLabels": True, "addRoutersLabels": True}
# Ping of a Traefik that shares the host's network namespace (network_mode: host): an entrypoint of its
# own on the host's loopback, on the first of these ports nothing listens on (never Traefik's default
# :8080, which would be the host's own 8080).
PING_ENTRYPOINT = "homelab-edge-ping"
PING_PORTS = tuple(range(9098, 9090, -1)) + tuple(range(9180, 9200))
# Entrypoints of the role's own: never the user's, never limited or trusted.
OWN_ENTRYPOINTS = (API_ENTRYPOINT, METRICS_ENTRYPOINT, PING_ENTRYPOINT, "traefik")
# The middlewares of the user's that limit what the role limits (lower-cased type -> Traefik's spelling).
LIMITERS = {"inflightreq": "inFlightReq", "ratelimit": "rateLimit"}
# What the runtime refuses in the host's network namespace (moby: "sysctl ... not allowed in host network namespace").
HOST_REFUSED_SYSCTLS = ("net.",)
# Where Traefik looks for its static config file, in its own order (v2.11 and
# v3.6 alike: pkg/cli/loader_file.go, paerser's file finder): an explicit
# --configFile first (when it exists), then each base path with each extension;
# every path expanded as os.ExpandEnv does (an unset variable is empty, so
# "$XDG_CONFIG_HOME/traefik" is "/traefik"), "./" being the working directory.
# The first that exists is the static config, and every flag and TRAEFIK_*
# variable is then ignored; with none, any argument makes the flags the config,
# and only without arguments do the environment variables count.
STATIC_BASES = ("/etc/traefik/traefik", "$XDG_CONFIG_HOME/traefik", "$HOME/.config/traefik", "./traefik")
STATIC_EXTENSIONS = ("toml", "yaml", "yml")
# Only these two spellings name the file (paerser matches the key exactly, with one or two dashes).
CONFIGFILE_FLAGS = ("configFile", "configfile")
DYNAMIC_SUFFIXES = (".yml", ".yaml", ".toml")
# ping, api.insecure and metrics without an entryPoint of their own make Traefik
# create this entrypoint where the user has none of that name (static_config.go,
# SetEffectiveConfiguration, v2.0 to v3.6).
IMPLICIT_ENTRYPOINT, IMPLICIT_ADDRESS = "traefik", ":8080"
# With no entrypoint of the user's, Traefik opens this one itself (v2.0 to v3.6).
IMPLICIT_HTTP = ("the config defines no entrypoint, so Traefik listens on its implicit entrypoint http (:80), which "
                 "takes no middleware until it is defined: define it %s, and name the entrypoints to limit in "
                 "traefik_inflight_entrypoints; nothing was changed")
# What the docker CLI says for a container that is not there (and nothing else).
NO_SUCH_CONTAINER = re.compile(r"No such (object|container)", re.I)
# Set by swarm on a service's task containers.
SWARM_SERVICE_LABEL = "com.docker.swarm.service.name"
# The least Traefik version of each setting the module writes, read from Traefik's
# source at each release tag (the first vX.Y.0 whose static config has the field):
# key -> (version, what it is, essential). Below an essential one the change is
# refused; others are left out with a warning that names the version.
MIN_VERSIONS = {
    "entrypoint_middlewares": ((2, 2, 0), "entryPoints.<name>.http.middlewares (pkg/config/static/entrypoints.go, v2.2.0)",
                               True),
    "inflightreq": ((2, 0, 0), "the inFlightReq middleware (v2.0.0)", True),
    "http2_max_streams": ((2, 8, 0), "entryPoints.<name>.http2.maxConcurrentStreams (entrypoints.go, v2.8.0)", False),
    "metrics_routers_labels": ((2, 5, 0), "metrics.prometheus.addRoutersLabels (pkg/types/metrics.go, v2.5.0)",
                               False),
}
BOM = "\ufeff"


class TraefikConfigError(EditError):
    """Input or a config the role cannot change safely; the message says what to do."""


# ------------------------------------------------------------ middleware

def middleware_file(dir_host, name):
    """The dynamic file the module writes the middleware into, on the host."""
    return os.path.join(dir_host, name + ".yml")


def record_dynamic_dir(record, name):
    """The file provider's directory on the host, as the module's record (of
    its container) shows it: where it wrote the middleware. None without one."""
    for path in sorted((record or {}).get("files") or {}):
        if os.path.basename(path) == name + ".yml":
            return os.path.dirname(path)
    return None


def inflight_middleware(name, amount, source="ip", depth=0, excluded_ips=None, header=""):
    """The dynamic-config document with one inFlightReq middleware.

    Traefik groups by request Host when no sourceCriterion is given; this
    always writes one explicitly (per client IP by default)."""
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TraefikConfigError("amount must be an integer >= 1, got %r" % (amount,))
    if source not in SOURCES:
        raise TraefikConfigError("source must be one of %s, got %r" % (", ".join(SOURCES), source))
    if source == "ip":
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise TraefikConfigError("depth must be an integer >= 0, got %r" % (depth,))
        strategy = {"depth": depth}
        if excluded_ips:
            strategy["excludedIPs"] = list(excluded_ips)
        criterion = {"ipStrategy": strategy}
    elif source == "host":
        criterion = {"requestHost": True}
    else:
        if not header:
            raise TraefikConfigError("source 'header' needs a header name")
        criterion = {"requestHeaderName": header}
    return {"http": {"middlewares": {name: {"inFlightReq": {"amount": amount, "sourceCriterion": criterion}}}}}


def dynamic_document(name, amount, source="ip", depth=0, excluded_ips=None, header="", api=True):
    """The role's dynamic file: the middleware, and the API router."""
    doc = inflight_middleware(name, amount, source, depth, excluded_ips, header)
    if api:
        doc["http"]["routers"] = {API_ROUTER: {"rule": "PathPrefix(`/api`)", "entryPoints": [API_ENTRYPOINT],
                                               "service": "api@internal"}}
    return doc


# ------------------------------------------------------------- container

def traefik_args(inspect):
    """The arguments Traefik runs with, from `docker inspect`: every word from
    the first flag on (the official image's entrypoint passes arguments that
    start with '-' to traefik; a flag's value may be the next word, as
    Traefik's parser takes it: --configFile /etc/traefik/custom.yml)."""
    config = inspect.get("Config") or {}
    argv = [str(a) for a in list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])]
    first = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    return argv[first:]


def parse_flags(args):
    """{lower-cased flag name: value} ('--ping' alone is 'true')."""
    flags, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            key, sep, value = a[2:].partition("=")
            if not sep:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is not None and not nxt.startswith("-"):
                    value, i = nxt, i + 1
                else:
                    value = "true"
            flags[key.lower()] = value
        i += 1
    return flags


def configfile_flag(args):
    """The value of --configFile/--configfile (the last one given), or None."""
    value, i = None, 0
    while i < len(args):
        key, sep, rest = args[i].lstrip("-").partition("=")
        if args[i].startswith("-") and key in CONFIGFILE_FLAGS:
            if sep:
                value = rest
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                value, i = args[i + 1], i + 1
        i += 1
    return value


def expand_env(text, env):
    """os.ExpandEnv: $NAME and ${NAME}, an unset name expanding to ''."""
    return re.sub(r"\$\{([^}]*)\}|\$([A-Za-z0-9_]+)", lambda m: env.get(m.group(1) or m.group(2), ""), text)


def container_env(inspect):
    """(environment, working directory) Traefik runs with, from `docker
    inspect`: Docker sets HOME when the image does not (root's /root)."""
    config = inspect.get("Config") or {}
    env = dict(e.partition("=")[::2] for e in config.get("Env") or [])
    if "HOME" not in env:
        user = str(config.get("User") or "").partition(":")[0]
        env["HOME"] = "/root" if user in ("", "root", "0") else "/"
    return env, config.get("WorkingDir") or "/"


def static_candidates(args, env, workdir):
    """Every path Traefik tries for its static config, in its order, as
    absolute paths in the container."""
    paths = []
    given = configfile_flag(args)
    if given and given.strip():
        paths.append(given)
    paths += ["%s.%s" % (base, ext) for base in STATIC_BASES for ext in STATIC_EXTENSIONS]
    out = []
    for path in paths:
        path = posixpath.normpath(posixpath.join(workdir, expand_env(path, env)))
        if path not in out:
            out.append(path)
    return out


def static_source(args, existing_files=(), env=None, workdir="/"):
    """Where Traefik takes its static config from, as Traefik decides: the
    first of static_candidates() that exists (an explicit --configFile that
    does not falls back to the search); else the flags (any argument);
    else the environment. `existing_files` are the candidates that exist in
    the container. A file found makes Traefik ignore every flag: those are
    returned as `ignored`."""
    flags = parse_flags(args)
    for path in static_candidates(args, env or {"HOME": "/root"}, workdir):
        if path in existing_files:
            ignored = sorted(k for k in flags if k not in ("configfile",))
            return {"mode": "file", "path": path, "ignored": ignored}
    if args:
        return {"mode": "flags", "flags": flags}
    return {"mode": "env"}


def host_path(container_path, mounts):
    """The host path behind a path in the container (its longest mount).
    Returns dict(host, destination, rw, type) or None when the path is not
    on a mount (it lives in the container's own layer and would not survive
    a re-creation)."""
    best = None
    for m in mounts or []:
        dest = m.get("Destination", "").rstrip("/") or "/"
        if container_path == dest or container_path.startswith(dest + "/"):
            if best is None or len(dest) > len(best["destination"]):
                rest = container_path[len(dest):].lstrip("/")
                best = {"host": posixpath.join(m.get("Source", ""), rest) if rest else m.get("Source", ""),
                        "destination": dest, "rw": bool(m.get("RW", True)), "type": m.get("Type", "bind"),
                        "whole_mount": container_path == dest}
    return best


VERSION_RE = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?$")
# The label the official Traefik image carries ("v3.6.12"), and OCI's generally.
IMAGE_VERSION_LABEL = "org.opencontainers.image.version"


def parse_version(output):
    """'Version: 3.6.12' (from `traefik version`) -> (3, '3.6.12'), or None
    when the binary does not say (a build without a version reports 'dev')."""
    m = re.search(r"(?m)^Version:\s+v?(\d+)\.(\d+)\.(\d+)\S*\s*$", output or "")
    return (int(m.group(1)), "%s.%s.%s" % m.groups()) if m else None


def given_version(text):
    """'3', '3.6', 'v3.6.12' -> (3, '3.6.12' as given, without a 'v'), or None."""
    m = VERSION_RE.match((text or "").strip())
    return (int(m.group(1)), ".".join(g for g in m.groups() if g is not None)) if m else None


def version_tuple(version):
    """'3.6.12' -> (3, 6, 12); '3' -> (3, 0, 0): the least release it can be."""
    parts = [int(p) for p in str(version).split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def supports(version, key):
    """Whether Traefik `version` ('2.11.30', or '2' as the user gave it) has the setting MIN_VERSIONS[key]."""
    return version_tuple(version) >= MIN_VERSIONS[key][0]


def gate(version, key):
    """None when `version` has the setting; else the warning (or, for an
    essential one, the TraefikConfigError) that names the version it needs."""
    if supports(version, key):
        return None
    least, what, essential = MIN_VERSIONS[key]
    words = "%s needs Traefik %s or later; this one is %s" % (what, ".".join(map(str, least)), version)
    if essential:
        raise TraefikConfigError("%s (give the full version in traefik_version if it is newer): upgrade Traefik; "
                                 "nothing was changed" % words)
    return words + ": left out"


def allowed(version, key, warnings):
    """Whether to write the optional setting MIN_VERSIONS[key] for Traefik
    `version`; when not, gate()'s warning goes into `warnings`."""
    words = gate(version, key)
    if words:
        warnings.append(words)
    return not words


# Traefik v2's Docker provider asks the engine for API 1.24 up to 2.11.30 (traefik#12253); Docker 29
# refuses clients below its minimum API (1.44 in 29.0, moby#51186): "client version 1.24 is too old".
DOCKER_API_OF_OLD_V2 = (1, 24)
V2_NEGOTIATES_FROM = (2, 11, 31)


def engine_api_warning(version, uses_docker_provider, engine_min_api):
    """A warning when the user's Traefik talks to Docker below the engine's
    minimum API (its Docker provider then finds no containers), else None.
    engine_min_api: the engine's MinAPIVersion ('1.44'), or '' when unknown."""
    if not uses_docker_provider or not engine_min_api:
        return None
    try:
        least = tuple(int(p) for p in engine_min_api.split(".")[:2])
    except ValueError:
        return None
    if version_tuple(version)[0] == 2 and version_tuple(version) < V2_NEGOTIATES_FROM and least > DOCKER_API_OF_OLD_V2:
        old_api, fixed_in = "%d.%d" % DOCKER_API_OF_OLD_V2, ".".join(map(str, V2_NEGOTIATES_FROM))
        return ("Traefik %s's Docker provider asks the engine for API %s, below this engine's minimum %s (Docker 29 "
                "and later): it fails with \"client version 1.24 is too old\" and routes no container; upgrade "
                "Traefik to %s or later" % (version, old_api, engine_min_api, fixed_in))
    return None


def traefik_version(version_output, labels, given=None):
    """{major, version, source} of the Traefik a container runs: what the
    binary reports; where it does not (a build that says 'dev'), the version
    the user gave (option traefik_version), else the image's version label.
    TraefikConfigError saying what to do when none of them tells."""
    reported = parse_version(version_output)
    if given and not given_version(given):
        raise TraefikConfigError("traefik_version %r is not a version: give the one Traefik runs, e.g. 3 or 3.6.12"
                                 % given)
    if reported:
        if given and given_version(given)[0] != reported[0]:
            raise TraefikConfigError("traefik_version says %s, but `traefik version` reports %s: remove "
                                     "traefik_version (it is only for a Traefik that does not say its version) or "
                                     "correct it; nothing was changed" % (given, reported[1]))
        return {"major": reported[0], "version": reported[1], "source": "traefik version"}
    if given:
        major, version = given_version(given)
        return {"major": major, "version": version, "source": "traefik_version"}
    label = given_version((labels or {}).get(IMAGE_VERSION_LABEL))
    if label:
        return {"major": label[0], "version": label[1], "source": "image label %s" % IMAGE_VERSION_LABEL}
    said = " ".join((version_output or "").split()[:4]) or "nothing"
    raise TraefikConfigError("cannot tell which Traefik version runs: `traefik version` says %r (a build without "
                             "a version, or not Traefik), and the image has no %s label. Set traefik_version "
                             "(traefik_inflight_traefik_version in the role) to the version it runs, e.g. 3 or "
                             "3.6.12; nothing was changed" % (said, IMAGE_VERSION_LABEL))


def compose_labels(inspect):
    """The compose project that made the container, or None (docker run):
    its name, service, directory, files and env files (compose records the
    env files it read; none recorded means the project's .env)."""
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    if "com.docker.compose.project" not in labels:
        return None

    def listed(key):
        return [f for f in labels.get(key, "").split(",") if f]
    return {"project": labels["com.docker.compose.project"], "service": labels.get("com.docker.compose.service"),
            "working_dir": labels.get("com.docker.compose.project.working_dir"),
            "files": listed("com.docker.compose.project.config_files"),
            "env_files": listed("com.docker.compose.project.environment_file")}


def container_facts(inspect, version_output, existing_files, given_version=None):
    """What the running container says about its Traefik (existing_files: which
    of static_candidates() exist in it; given_version: the user's word for a
    Traefik that does not report its version)."""
    args = traefik_args(inspect)
    env, workdir = container_env(inspect)
    config = inspect.get("Config") or {}
    found = traefik_version(version_output, config.get("Labels"), given_version)
    major, version = found["major"], found["version"]
    state = inspect.get("State") or {}
    health = (config.get("Healthcheck") or {}).get("Test") or ["NONE"]
    return {"name": inspect.get("Name", "").lstrip("/"), "running": bool(state.get("Running")), "pid": state.get("Pid"),
            "version": version, "major": major, "version_source": found["source"], "args": args,
            "source": static_source(args, existing_files, env, workdir), "workdir": workdir,
            "mounts": inspect.get("Mounts") or [], "compose": compose_labels(inspect),
            "healthcheck": health[0] != "NONE", "labels": config.get("Labels") or {},
            "health": {"test": health if health[0] != "NONE" else None,
                       "status": (state.get("Health") or {}).get("Status"),
                       "output": ((state.get("Health") or {}).get("Log") or [{}])[-1].get("Output")},
            "network_mode": (inspect.get("HostConfig") or {}).get("NetworkMode") or "default"}


def static_format(path):
    """toml or yaml, as Traefik reads a static config file (by its suffix)."""
    return "toml" if path.lower().endswith(".toml") else "yaml"


def parse_static(text, path):
    """A static config file's data ({} when empty). A byte-order mark is
    skipped, as Traefik's TOML and YAML parsers do."""
    text = (text or "")[1:] if (text or "").startswith(BOM) else text
    if static_format(path) == "toml":
        return toml_text.parse(text or "", path)
    return yaml_text.parse(text or "", path)


def edit_static(text, changes, path):
    """The static config's new text: `changes` made as line edits in its own format."""
    if not changes:
        return text
    if text.startswith(BOM):  # kept as it was
        return BOM + edit_static(text[1:], changes, path)
    if static_format(path) == "toml":
        return toml_text.edit_toml(text, changes, path)
    return yaml_text.edit_yaml(text, changes, path)


def dynamic_text(opts):
    """The role's dynamic file, as YAML text."""
    doc = dynamic_document(opts["name"], int(opts["amount"]), opts.get("source", "ip"), int(opts.get("depth", 0)),
                           opts.get("excluded_ips") or [], opts.get("header", ""), api=bool(opts.get("verify_api", True)))
    if opts.get("tunnel_total"):
        doc["http"]["middlewares"].update(tunnel.middlewares(opts["name"], int(opts["tunnel_total"])))
    return ("# Managed by homelab.edge (traefik_inflight): edit the inventory, not this file.\n"
            + yaml_text.yaml.safe_dump(doc, default_flow_style=False, sort_keys=True))


# ------------------------------------------------------------ the change

def port_of(address):
    """The TCP port an entrypoint address binds (':8080', '0.0.0.0:8080/tcp',
    '[::]:8080'); None for a UDP entrypoint or no port."""
    if is_udp(address):
        return None
    port = str(address or "").strip().partition("/")[0].rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def is_udp(address):
    return str(address or "").strip().lower().endswith("/udp")


def names_implicit(addresses):
    """Whether the user's entrypoints ({name: address}) include one named as
    Traefik's default (then Traefik opens none of its own on :8080)."""
    return any(e.lower() == IMPLICIT_ENTRYPOINT for e in addresses)


def check_metrics_port(port, addresses, opts=None):
    """Refuse a metrics port one of the user's entrypoints ({name: address}) listens on, or one of
    the other listeners Traefik will have: the role's API entrypoint, and Traefik's default entrypoint
    `traefik` (:8080, opened for ping and the dashboard where no entrypoint of that name is the user's);
    in the host's network namespace, any port something on the host listens on."""
    opts = opts or {}
    taken = sorted(e for e, address in addresses.items() if e != METRICS_ENTRYPOINT and port_of(address) == int(port))
    if opts.get("host_network") and METRICS_ENTRYPOINT not in addresses and int(port) in (opts.get("listening") or ()):
        raise TraefikConfigError("metrics port %d is taken on the host, whose network namespace Traefik shares "
                                 "(network_mode: host): choose another (traefik_inflight_metrics_port); nothing was "
                                 "changed" % int(port))
    if int(port) == API_PORT and API_ENTRYPOINT not in taken:
        taken.append(API_ENTRYPOINT + " (the role's API)")
    if int(port) == port_of(IMPLICIT_ADDRESS) and not names_implicit(addresses):
        taken.append("%s (Traefik's default, %s)" % (IMPLICIT_ENTRYPOINT, IMPLICIT_ADDRESS))
    if taken:
        raise TraefikConfigError("metrics port %d is the port of entrypoint %s: choose another "
                                 "(traefik_inflight_metrics_port)" % (port, ", ".join(taken)))


def trusted_merge(have, wanted, added_before=None):
    """An entrypoint's PROXY protocol trust: (the new list, what it adds, what
    it drops). The user's own addresses are kept; of the ones the role added
    on an earlier run (added_before), those no longer wanted go."""
    stale = [t for t in added_before or [] if t not in wanted]
    keep = [t for t in have if t not in stale]
    added = [t for t in wanted if t not in keep]
    return keep + added, added, [t for t in have if t in stale]


def trusted_added(static, flags, wanted, added_before=None):
    """The addresses the role itself puts into (or keeps in) the trust of the
    user's entrypoints: the ones their configs did not have, for the record
    that lets a later run drop them when they are no longer wanted."""
    if wanted is None:  # left as it is: so is the record
        return list(added_before or [])
    if not wanted:
        return []
    if flags is not None:
        lists = [[t for t in v.split(",") if t] for k, v in flags.items()
                 if k.startswith("entrypoints.") and k.endswith(".proxyprotocol.trustedips")]
    else:
        eps = lookup(static or {}, ["entryPoints"]) or {}
        lists = [lookup(eps, [e, "proxyProtocol", "trustedIPs"]) or [] for e in eps if e not in OWN_ENTRYPOINTS]
    theirs = set(t for lst in lists for t in lst if t not in (added_before or []))
    return [t for t in wanted if t not in theirs]


def own_entrypoints(addresses, opts, adds_ping):
    """Where the module's own listeners go, clear of the user's entrypoints
    ({name: address}): {"ping": the entrypoint ping gets (None: Traefik's
    default), "ping_address": the address of one the module adds}. The API
    entrypoint's port taken by one of theirs (or, in the host's network
    namespace, by anything on the host), or ping's default entrypoint
    (Traefik creates `traefik` on :8080 where none has that name) on a port of
    theirs with no API entrypoint to put it on, is refused naming the clash;
    nothing is written before. In the host's network namespace
    (opts["host_network"]) ping gets an entrypoint of its own on the first free
    loopback port of PING_PORTS (opts["listening"]: the host's listening ports)."""
    users = dict((e, a) for e, a in addresses.items() if e not in (API_ENTRYPOINT, METRICS_ENTRYPOINT, PING_ENTRYPOINT))
    verify = opts.get("verify_api", True)
    host = bool(opts.get("host_network"))
    listening = set(opts.get("listening") or ())
    if verify and API_ENTRYPOINT not in addresses:
        taken = sorted(e for e, a in users.items() if port_of(a) == API_PORT)
        if taken:
            raise TraefikConfigError("the role's API entrypoint %s listens on 127.0.0.1:%d, the port of your entrypoint "
                                     "%s: move yours to another port, or set traefik_inflight_verify: false; nothing "
                                     "was changed" % (API_ENTRYPOINT, API_PORT, ", ".join(taken)))
        if host and API_PORT in listening:
            raise TraefikConfigError(
                "Traefik shares the host's network namespace (network_mode: host), where something listens on port "
                "%d already: the role's API entrypoint %s needs 127.0.0.1:%d. Free that port on the host, or set "
                "traefik_inflight_verify: false; nothing was changed" % (API_PORT, API_ENTRYPOINT, API_PORT))
    out = {"ping": None, "ping_address": None}
    if adds_ping and host:
        taken = listening | set(port_of(a) for a in addresses.values()) | set([API_PORT, port_of(IMPLICIT_ADDRESS)])
        if opts.get("metrics_port"):
            taken.add(int(opts["metrics_port"]))
        port = free_loopback_port(taken)
        if port is None:
            raise TraefikConfigError(
                "Traefik shares the host's network namespace (network_mode: host): ping (the health check's) needs "
                "a loopback port of its own there, and none of %d-%d and %d-%d is free on the host; free one, or add "
                "ping with an entryPoint of yours to Traefik's static config; nothing was changed"
                % (min(PING_PORTS[:8]), max(PING_PORTS[:8]), min(PING_PORTS[8:]), max(PING_PORTS[8:])))
        out["ping"], out["ping_address"] = PING_ENTRYPOINT, "127.0.0.1:%d" % port
        return out
    if adds_ping and not names_implicit(users):
        clash = sorted(e for e, a in users.items() if port_of(a) == port_of(IMPLICIT_ADDRESS))
        if clash and not verify:
            raise TraefikConfigError(
                "ping (the health check's) would make Traefik open its default entrypoint %s on %s, where your "
                "entrypoint %s listens: add ping with an entryPoint of yours to the static config, or leave "
                "traefik_inflight_verify on (ping then goes on the role's API entrypoint); nothing was changed"
                % (IMPLICIT_ENTRYPOINT, IMPLICIT_ADDRESS, ", ".join(clash)))
        if clash:
            out["ping"] = API_ENTRYPOINT
    return out


def http_entrypoints(requested, routing, warnings):
    """The requested entrypoints an in-flight limit counts requests on: one
    that serves only TCP routers of the user's (TLS passthrough, a database)
    is left out with a warning that names it; when that leaves none, the
    change is refused."""
    out, tcp_only = [], []
    for ep in requested:
        http, tcp = entrypoint_routers(routing, ep)
        if tcp and not http and (routing or {}).get("complete", True):
            tcp_only.append("%s (%s)" % (ep, ", ".join(tcp)))
        else:
            out.append(ep)
    if tcp_only and not out:
        raise TraefikConfigError(
            "entrypoint(s) %s serve only TCP routers: an in-flight limit counts HTTP requests and would do nothing "
            "there. Name the entrypoints of your HTTP routers in traefik_inflight_entrypoints; nothing was changed"
            % "; ".join(tcp_only))
    for words in tcp_only:
        warnings.append("entrypoint %s serves only TCP routers: an in-flight limit counts HTTP requests and does "
                        "nothing there, so it is left off that entrypoint" % words)
    return out


def ping_report(ping_entrypoint, addresses, own, before):
    """Where ping listens and whose it is: {entrypoint, address, by}."""
    ep = ping_entrypoint or IMPLICIT_ENTRYPOINT
    name = next((e for e in addresses if e.lower() == ep.lower()), None)
    defaults = {IMPLICIT_ENTRYPOINT: IMPLICIT_ADDRESS, API_ENTRYPOINT: "127.0.0.1:%d" % API_PORT}
    address = addresses.get(name) if name else (own.get("ping_address") or defaults.get(ep))
    mine = before.get("ping") == ep or ep in (API_ENTRYPOINT, PING_ENTRYPOINT)
    return {"entrypoint": ep, "address": address, "by": "homelab.edge" if mine else "you"}


def _limit_entrypoint(ep, name, mws, ref, opts, kept):
    """The user's inFlightReq or rateLimit on an entrypoint of theirs, and the
    role's: (the entrypoint's new middleware list or None for no change,
    whether the role's limit runs there)."""
    routing = opts.get("routing") or {}
    limiters = routing.get("limiters") or {}
    theirs = [(m,) + limiter_of(m, limiters) for m in mws if m != ref and limiter_of(m, limiters)]
    inflight = [t for t in theirs if t[2]["type"] == "inFlightReq"]
    setting = "entryPoints.%s.http.middlewares" % name
    for m, n, lim in theirs:
        if lim["type"] == "rateLimit":
            kept.append(user_value(setting, n, ref, True, "%s runs on every router of %s beside the role's limit"
                                   % (limiter_text(n, lim), name)))
    for router, n, lim in router_limiters(routing, ep):
        kept.append(user_value("router %s" % router, n, ref, True, "%s runs on that router %s" % (
            limiter_text(n, lim), "as well: the lower of the two bounds holds there" if lim["type"] == "inFlightReq"
            else "beside the role's limit")))
    if inflight and not opts.get("override_user_values"):
        theirs_text = ", ".join(limiter_text(n, lim) for m, n, lim in inflight)
        kept.append(user_value(setting, [t[1] for t in inflight], ref, True, "%s limits every router of %s; the "
                               "role's limit is not added there" % (theirs_text, name)))
        return None, False
    if inflight:
        kept.append(user_value(setting, [t[1] for t in inflight], ref, False, "%s limits every router of %s" % (
            ref, name)))
        return [m for m in mws if m not in [t[0] for t in inflight] and m != ref] + [ref], True
    return (None if ref in mws else list(mws) + [ref]), True


def _streams_value(setting, have, streams, opts, kept, written):
    """The role's http2.maxConcurrentStreams beside the user's: the value to
    write (None: none to write)."""
    before = opts.get("written_before") or {}
    mine = setting in before and str(before[setting]) == str(have)
    if have is None or mine:
        written[setting] = int(streams)
        return int(streams) if str(have) != str(int(streams)) else None
    if str(have) == str(int(streams)):
        return None
    if opts.get("override_user_values"):
        written[setting] = int(streams)
        kept.append(user_value(setting, have, int(streams), False,
                               "%d requests at once per HTTP/2 connection" % int(streams)))
        return int(streams)
    kept.append(user_value(setting, have, int(streams), True, "%s requests at once per HTTP/2 connection (yours)"
                           % have))
    return None


def _trusted_value(name, have, trusted, opts, kept):
    """An entrypoint's PROXY protocol trust beside the user's: (the new list
    or None for no change, whether to remove it whole)."""
    before = opts.get("trusted_added_before") or []
    setting = "entryPoints.%s.proxyProtocol.trustedIPs" % name
    theirs = [t for t in have if t not in before and t not in trusted]
    if theirs and opts.get("override_user_values"):
        kept.append(user_value(setting, theirs, trusted, False, "PROXY protocol trusted from %s" % (
            _said(trusted) if trusted else "nobody (off)")))
        return (list(trusted), False) if trusted else (None, True)
    merged, added, dropped = trusted_merge(have, trusted, before)
    if theirs:
        kept.append(user_value(setting, theirs, trusted, True, "PROXY protocol trusted from %s" % _said(merged)))
    if merged == have:
        return None, False
    if not merged:
        return None, True
    return merged, False


def static_changes(static, opts, warnings=None, report=None):
    """The edits a static config needs, as data: a list of (op, path,
    value), op one of text_edit's append, ensure, set, delete and replace
    (its sixth, flags, is for a compose command list: see flag_changes).
    Settings the user's Traefik (opts["version"]) lacks are left out, each
    with a line in `warnings`. A value of the user's where the role would set
    its own is kept (opts["override_user_values"]: replaced), each listed in
    report["user_values"]; report["entrypoints"] are the entrypoints that get
    the role's limit, report["ping"] where ping listens, report["written"] the
    values that are the role's (for the record).

    Raises TraefikConfigError for input that cannot work (an entrypoint that
    does not exist or is UDP, a file provider the role cannot reach, a
    listener of the role's on a port of the user's)."""
    static = static or {}
    warnings = [] if warnings is None else warnings
    report = {} if report is None else report
    kept, written = report.setdefault("user_values", []), report.setdefault("written", {})
    version = opts.get("version") or "3"
    gate(version, "entrypoint_middlewares")
    eps = lookup(static, ["entryPoints"]) or {}
    if not eps:
        raise TraefikConfigError(IMPLICIT_HTTP % "in its static config (entryPoints: http: address: \":80\")")
    missing = [e for e in opts["entrypoints"] if ci(eps, e) is None]
    if missing:
        raise TraefikConfigError("entrypoint(s) %s not defined in the static config (defined: %s)"
                                 % (", ".join(missing), ", ".join(sorted(eps)) or "none"))
    addresses = dict((name, ep["address"]) for name, ep in entrypoint_facts(static, None).items())
    udp = [ci(eps, e) for e in opts["entrypoints"] if is_udp(addresses.get(ci(eps, e)))]
    if udp:
        raise TraefikConfigError("entrypoint(s) %s listen on UDP: an in-flight limit is for HTTP; name the HTTP "
                                 "entrypoints in traefik_inflight_entrypoints" % ", ".join(udp))
    if opts.get("verify_api", True) and ci(eps, API_ENTRYPOINT) is not None and \
            (lookup(eps, [API_ENTRYPOINT, "address"]) != "127.0.0.1:%d" % API_PORT):
        raise TraefikConfigError("an entrypoint named %s exists with another address: rename yours" % API_ENTRYPOINT)
    http = http_entrypoints(opts["entrypoints"], opts.get("routing"), warnings)
    ping = lookup(static, ["ping"])
    adds_ping = ping is None
    own = own_entrypoints(addresses, opts, adds_ping)
    ref = "%s@file" % opts["name"]
    changes = []
    streams = opts.get("http2_max_streams")
    if streams and not allowed(version, "http2_max_streams", warnings):
        streams = 0
    report["entrypoints"] = []
    for ep in http:
        name = ci(eps, ep)
        mws = lookup(eps, [name, "http", "middlewares"]) or []
        new, limited = _limit_entrypoint(ep, name, mws, ref, opts, kept)
        if new is not None:
            changes.append(("set", ["entryPoints", name, "http", "middlewares"], new) if ref in mws or
                           len(new) != len(mws) + 1 else ("append", ["entryPoints", name, "http", "middlewares"], ref))
        if limited:
            report["entrypoints"].append(ep)
            report.setdefault("middlewares", {})[name] = list(mws) if new is None else new
        if streams:
            value = _streams_value("entryPoints.%s.http2.maxConcurrentStreams" % name,
                                   lookup(eps, [name, "http2", "maxConcurrentStreams"]), streams, opts, kept, written)
            if value is not None:
                changes.append(("set", ["entryPoints", name, "http2", "maxConcurrentStreams"], value))
    trusted = opts.get("proxy_protocol_trusted_ips")
    if trusted is not None:
        # every TCP entrypoint the proxy in front may forward to (all of the user's): one without the
        # trust would read the PROXY header as a broken request. The user's own trusted addresses are kept.
        for name in sorted(e for e in eps if e not in OWN_ENTRYPOINTS and not is_udp(addresses.get(e))
                           and not tunnel.is_ours(e, opts)):
            have = lookup(eps, [name, "proxyProtocol", "trustedIPs"])
            have = list(have) if isinstance(have, list) else []
            path = ["entryPoints", name, "proxyProtocol", "trustedIPs"]
            new, off = _trusted_value(name, have, trusted, opts, kept)
            others = [k for k in (lookup(eps, [name, "proxyProtocol"]) or {}) if str(k).lower() != "trustedips"]
            if off and have:
                # the user's other PROXY protocol settings (insecure: true) stay
                changes.append(("delete", path if others else ["entryPoints", name, "proxyProtocol"], None))
            elif new is not None and new[:len(have)] == have:  # one item each: their list keeps its comments
                changes += [("append", path, t) for t in new[len(have):]]
            elif new is not None:
                changes.append(("set", path, new))
    provider = opts["provider"]
    if provider["kind"] == "filename":
        changes.append(("replace", ["providers", "file", "filename"], ("directory", provider["dir"])))
    elif provider["kind"] == "none":
        changes.append(("ensure", ["providers", "file"], {"directory": provider["dir"], "watch": True}))
    if adds_ping:
        changes.append(("ensure", ["ping"], {"entryPoint": own["ping"]} if own["ping"] else {}))
        if own["ping"] == PING_ENTRYPOINT and ci(eps, PING_ENTRYPOINT) is None:
            changes.append(("ensure", ["entryPoints", PING_ENTRYPOINT], {"address": own["ping_address"]}))
        report["ping"] = ping_report(own["ping"], addresses, own, {"ping": own["ping"] or IMPLICIT_ENTRYPOINT})
        written["ping"] = report["ping"]["entrypoint"]
    else:
        _users_ping(lookup(ping if isinstance(ping, dict) else {}, ["entryPoint"]), addresses, own, opts, report)
    if opts.get("verify_api", True):
        if lookup(static, ["api"]) is None:
            changes.append(("ensure", ["api"], {}))
        if ci(eps, API_ENTRYPOINT) is None:
            changes.append(("ensure", ["entryPoints", API_ENTRYPOINT], {"address": "127.0.0.1:%d" % API_PORT}))
        host_api_warning(opts, ci(eps, API_ENTRYPOINT) is None, warnings)
    if opts.get("tunnel_total"):
        source = ci(eps, tunnel.source_entrypoint(report["entrypoints"]))
        tunnel.check_clash(addresses, opts, tunnel.mine(static, None, opts))
        changes += tunnel.static_changes(static, source, report["middlewares"][source], opts, trusted)
    changes += tunnel.left_over(static, None, opts)
    port = opts.get("metrics_port")
    if port and lookup(static, ["metrics"]) is None:  # the user's own metrics are kept as they are
        check_metrics_port(port, addresses, opts)
        metrics = dict(METRICS)
        if not allowed(version, "metrics_routers_labels", warnings):
            del metrics["addRoutersLabels"]
        changes.append(("ensure", ["metrics"], {"prometheus": metrics}))
        if ci(eps, METRICS_ENTRYPOINT) is None:
            changes.append(("ensure", ["entryPoints", METRICS_ENTRYPOINT], {"address": ":%d" % port}))
    return changes


def host_api_warning(opts, adds_api, warnings):
    """On the host's network the role's API entrypoint is on the host's own loopback: say so."""
    if opts.get("host_network") and opts.get("verify_api", True) and adds_api:
        warnings.append("Traefik shares the host's network namespace (network_mode: host), so the role's API entrypoint "
                        "%s listens on the host's own 127.0.0.1:%d, where local users of the host can read Traefik's "
                        "API; traefik_inflight_verify: false leaves it out" % (API_ENTRYPOINT, API_PORT))


def _users_ping(entrypoint, addresses, own, opts, report):
    """Ping as the config has it already: the role's (its record, its entrypoints) or the user's, kept."""
    report["ping"] = ping_report(entrypoint, addresses, own, opts.get("written_before") or {})
    if report["ping"]["by"] == "you":
        report["user_values"].append(user_value(
            "ping", "entryPoint %s" % report["ping"]["entrypoint"], "ping on an entrypoint of the role's", True,
            "the health check asks your ping on %s (%s%s)" % (
                report["ping"]["entrypoint"], report["ping"]["address"] or "its address",
                ", the host's own port: network_mode host" if opts.get("host_network") else "")))
    else:
        report["written"]["ping"] = report["ping"]["entrypoint"]


# ---------------------------------------------------------------- flags

def flag_changes(flags, opts, warnings=None, report=None):
    """The same change for a Traefik configured with command-line flags:
    (flags to add or replace {name: value}, flags to remove [name]); the
    user's values kept and reported as static_changes does."""
    warnings = [] if warnings is None else warnings
    report = {} if report is None else report
    kept, written = report.setdefault("user_values", []), report.setdefault("written", {})
    version = opts.get("version") or "3"
    gate(version, "entrypoint_middlewares")
    ref = "%s@file" % opts["name"]
    add, remove = {}, []
    addresses = dict((name, ep["address"]) for name, ep in entrypoint_facts(None, flags).items()
                     if ep["address"] is not None)
    if not addresses:
        raise TraefikConfigError(IMPLICIT_HTTP % "with a flag (--entrypoints.http.address=:80)")
    streams = opts.get("http2_max_streams")
    if streams and not allowed(version, "http2_max_streams", warnings):
        streams = 0
    for ep in opts["entrypoints"]:
        if "entrypoints.%s.address" % ep.lower() not in flags:
            raise TraefikConfigError("entrypoint %s is not defined by the flags (--entrypoints.%s.address)" % (ep, ep))
        if is_udp(addresses.get(ep.lower())):
            raise TraefikConfigError("entrypoint %s listens on UDP: an in-flight limit is for HTTP; name the HTTP "
                                     "entrypoints in traefik_inflight_entrypoints" % ep)
    report["entrypoints"] = []
    for ep in http_entrypoints(opts["entrypoints"], opts.get("routing"), warnings):
        key = "entrypoints.%s.http.middlewares" % ep.lower()
        have = [m for m in flags.get(key, "").split(",") if m]
        new, limited = _limit_entrypoint(ep, ep, have, ref, opts, kept)
        if new is not None:
            add[key] = ",".join(new)
        if limited:
            report["entrypoints"].append(ep)
            report.setdefault("middlewares", {})[ep] = list(have) if new is None else new
        skey = "entrypoints.%s.http2.maxconcurrentstreams" % ep.lower()
        if streams:
            value = _streams_value("entryPoints.%s.http2.maxConcurrentStreams" % ep, flags.get(skey), streams, opts,
                                   kept, written)
            if value is not None:
                add[skey] = str(value)

    trusted = opts.get("proxy_protocol_trusted_ips")
    if trusted is not None:
        for ep in sorted(e for e in addresses if e not in OWN_ENTRYPOINTS and not is_udp(addresses[e])
                         and not tunnel.is_ours(e, opts)):
            pkey = "entrypoints.%s.proxyprotocol.trustedips" % ep
            have = [t for t in flags.get(pkey, "").split(",") if t]
            new, off = _trusted_value(ep, have, trusted, opts, kept)
            if off and pkey in flags:
                remove.append(pkey)
            elif new is not None:
                add[pkey] = ",".join(new)
    provider = opts["provider"]
    if provider["kind"] == "filename":
        remove.append("providers.file.filename")
        add["providers.file.directory"] = provider["dir"]
    elif provider["kind"] == "none":
        add["providers.file.directory"] = provider["dir"]
    adds_ping = not any(k == "ping" or k.startswith("ping.") for k in flags)
    own = own_entrypoints(addresses, opts, adds_ping)
    if adds_ping:
        add["ping"] = "true"
        if own["ping"]:
            add["ping.entrypoint"] = own["ping"]
        if own["ping"] == PING_ENTRYPOINT and "entrypoints.%s.address" % PING_ENTRYPOINT not in flags:
            add["entrypoints.%s.address" % PING_ENTRYPOINT] = own["ping_address"]
        report["ping"] = ping_report(own["ping"], addresses, own, {"ping": own["ping"] or IMPLICIT_ENTRYPOINT})
        written["ping"] = report["ping"]["entrypoint"]
    else:
        _users_ping(flags.get("ping.entrypoint"), addresses, own, opts, report)
    if opts.get("verify_api", True):
        if not any(k == "api" or k.startswith("api.") for k in flags):
            add["api"] = "true"
        if "entrypoints.%s.address" % API_ENTRYPOINT not in flags:
            add["entrypoints.%s.address" % API_ENTRYPOINT] = "127.0.0.1:%d" % API_PORT
        host_api_warning(opts, "entrypoints.%s.address" % API_ENTRYPOINT not in flags, warnings)
    if opts.get("tunnel_total"):
        source = tunnel.source_entrypoint(report["entrypoints"])
        tunnel.check_clash(addresses, opts, tunnel.mine(None, flags, opts))
        add.update(tunnel.flag_adds(flags, source, report["middlewares"][source], opts, trusted))
    remove += tunnel.left_over(None, flags, opts)
    port = opts.get("metrics_port")
    if port and not any(k == "metrics" or k.startswith("metrics.") for k in flags):
        check_metrics_port(port, addresses, opts)
        add.update({"metrics.prometheus": "true", "metrics.prometheus.entrypoint": METRICS_ENTRYPOINT,
                    "metrics.prometheus.addentrypointslabels": "true",
                    "entrypoints.%s.address" % METRICS_ENTRYPOINT: ":%d" % port})
        if allowed(version, "metrics_routers_labels", warnings):
            add["metrics.prometheus.addrouterslabels"] = "true"
    return add, remove


def flags_text(add, remove):
    """What to add to a `docker run`, for the message when the role cannot."""
    parts = ["--%s=%s" % kv for kv in sorted(add.items())]
    if remove:
        parts.append("and remove %s" % ", ".join("--" + r for r in remove))
    return " ".join(parts)


def compose_command_changes(compose, service, args, add, remove):
    """Data changes to a compose file for new Traefik flags: the service's
    `command` list, item by item where its items are the flags."""
    svc = lookup(compose, ["services", service])
    if svc is None:
        raise TraefikConfigError("service %s is not in the compose file" % service)
    command = svc.get("command")
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command or []]
    apart = [w[2:] for i, w in enumerate(words) if w.startswith("--") and "=" not in w and i + 1 < len(words)
             and not words[i + 1].startswith("-") and w[2:].lower() in set(add) | set(remove)]
    if apart:
        raise TraefikConfigError(
            "the compose service %s gives %s its value as a separate word (--%s VALUE): write it as --%s=VALUE "
            "(one word) to let the role edit it; nothing was changed" % (service, ", ".join("--" + a for a in apart),
                                                                         apart[0], apart[0]))
    if command is not None and sorted(set(parse_flags(words))) != sorted(set(parse_flags(args))):
        raise TraefikConfigError(
            "Traefik runs with flags that are not the command of service %s in the compose file the role edits: they "
            "come from another compose file (an override, extends) or were changed since it was started. The role "
            "edits only that file's command; put the flags there (or re-create Traefik from it) and run the role "
            "again; nothing was changed" % service)
    if command is None:
        raise TraefikConfigError("the compose service %s has no command: its flags come from elsewhere (entrypoint, "
                                 "an extended file): put them in its command; nothing was changed" % service)
    # a value the file spells with compose variables (${MW}) keeps them: what the role adds goes after
    # them, not after their expansion that docker inspect shows
    raw = dict((k.lower(), v) for k, dummy, v in (w[2:].partition("=") for w in words if w.startswith("--")))
    running = parse_flags(args)
    add = dict(add)
    for key, value in add.items():
        have = running.get(key)
        if "$" in raw.get(key, "") and have and value.startswith(have):
            add[key] = raw[key] + value[len(have):]
    return [("flags", ["services", service, "command"], (add, remove))]


# -------------------------------------------------------- dynamic files

def dynamic_names(texts):
    """(routers, middlewares) named in dynamic-config files {path: text}
    (YAML or TOML by suffix; a file that does not parse names nothing:
    Traefik skips it too)."""
    routers, middlewares = set(), set()
    for path, text in sorted(texts.items()):
        try:
            doc = parse_static(text, path)
        except EditError:
            continue
        http = lookup(doc, ["http"]) or {}
        routers |= set((lookup(http, ["routers"]) or {}).keys())
        middlewares |= set((lookup(http, ["middlewares"]) or {}).keys())
    return routers, middlewares


def docker_provider(static, flags):
    """The Docker provider's settings, or None when Traefik does not run it:
    {exposed_by_default, constrained}."""
    if flags is not None:
        if not any(k == "providers.docker" or k.startswith("providers.docker.") for k in flags):
            return None
        return {"exposed_by_default": flags.get("providers.docker.exposedbydefault", "true").lower() != "false",
                "constrained": "providers.docker.constraints" in flags}
    docker = lookup(static, ["providers", "docker"])
    if docker is None and ci(lookup(static, ["providers"]) or {}, "docker") is None:
        return None
    docker = docker or {}
    exposed = lookup(docker, ["exposedByDefault"])
    return {"exposed_by_default": str(exposed).lower() != "false" if exposed is not None else True,
            "constrained": bool(lookup(docker, ["constraints"]))}


def docker_routers(provider, containers):
    """The routers Traefik's Docker provider makes from container labels
    (traefik.http.routers.<name>.*), as <name>@docker: of containers with
    traefik.enable=true, or not false when exposedByDefault. With
    constraints, none (they are Traefik's to evaluate: the routers Traefik
    showed before the change stand in)."""
    if not provider or provider["constrained"]:
        return []
    names = set()
    for labels in containers:
        enable = str(labels.get("traefik.enable", "")).lower()
        if enable == "false" or (enable != "true" and not provider["exposed_by_default"]):
            continue
        for key in labels:
            m = re.match(r"^traefik\.http\.routers\.([^.]+)\.", key, re.I)
            if m:
                names.add("%s@docker" % m.group(1))
    return sorted(names)


def _qualified(ref, provider):
    return ref if "@" in ref else "%s@%s" % (ref, provider)


def _words(value):
    """A list as a file or a label gives it ("a,b", [a, b]) -> [a, b]."""
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [w.strip() for w in str(value or "").split(",") if w.strip()]


def _enabled(labels, provider):
    enable = str(labels.get("traefik.enable", "")).lower()
    return enable != "false" and (enable == "true" or provider["exposed_by_default"])


def user_routing(dynamic_texts, provider=None, containers=()):
    """The user's routers and limiting middlewares, from their dynamic files
    {path: text} and the labels of running containers (the Docker provider's
    `provider` settings, docker_provider()):
    {"routers": [{name, kind (http or tcp), entrypoints (None: every default
    entrypoint), middlewares}], "limiters": {name@provider: {type, config}}}.
    Names carry their provider (@file, @docker), as Traefik's API shows them."""
    routers, limiters = [], {}
    for path, text in sorted(dynamic_texts.items()):
        try:
            doc = parse_static(text, path)
        except EditError:
            continue
        for kind in ("http", "tcp"):
            for name, router in sorted((lookup(doc, [kind, "routers"]) or {}).items()):
                router = router if isinstance(router, dict) else {}
                eps = lookup(router, ["entryPoints"])
                routers.append({"name": "%s@file" % name, "kind": kind, "entrypoints": _words(eps) if eps else None,
                                "tls": lookup(router, ["tls"]) is not None,
                                "middlewares": [_qualified(m, "file") for m in _words(lookup(router, ["middlewares"]))]})
        for name, mw in sorted((lookup(doc, ["http", "middlewares"]) or {}).items()):
            for key, config in (mw.items() if isinstance(mw, dict) else []):
                if str(key).lower() in LIMITERS:
                    limiters["%s@file" % name] = {"type": LIMITERS[str(key).lower()], "config": config or {}}
    if provider and not provider.get("constrained"):
        for labels in containers:
            if not _enabled(labels, provider):
                continue
            found = {}
            for key, value in sorted(labels.items()):
                m = re.match(r"^traefik\.(http|tcp)\.routers\.([^.]+)\.(.+)$", key, re.I)
                if m:
                    r = found.setdefault((m.group(1).lower(), m.group(2)), {"entrypoints": None, "middlewares": []})
                    if m.group(3).lower() == "entrypoints":
                        r["entrypoints"] = _words(value)
                    elif m.group(3).lower() == "tls" or m.group(3).lower().startswith("tls."):
                        r["tls"] = r.get("tls") or m.group(3).lower() != "tls" or str(value).lower() == "true"
                    elif m.group(3).lower() == "middlewares":
                        r["middlewares"] = [_qualified(w, "docker") for w in _words(value)]
                m = re.match(r"^traefik\.http\.middlewares\.([^.]+)\.(inflightreq|ratelimit)\.(.+)$", key, re.I)
                if m:
                    mw = limiters.setdefault("%s@docker" % m.group(1),
                                             {"type": LIMITERS[m.group(2).lower()], "config": {}})
                    mw["config"][m.group(3).lower()] = value
            routers += [dict(r, name="%s@docker" % name, kind=kind) for (kind, name), r in sorted(found.items())]
    # with constraints the Docker provider's routers are Traefik's to work out: what is known here is not all
    return {"routers": routers, "limiters": limiters, "complete": not (provider and provider.get("constrained"))}


def limiter_of(ref, limiters):
    """The user's limiting middleware a reference names (name@provider, or a
    bare name as an entrypoint may give it), as (name@provider, limiter) or None."""
    if ref in limiters:
        return ref, limiters[ref]
    if "@" not in ref:
        found = sorted(n for n in limiters if n.partition("@")[0] == ref)
        if found:
            return found[0], limiters[found[0]]
    return None


def limiter_text(name, limiter):
    """A limiter of the user's in words: what it bounds, per what."""
    config = dict((str(k).lower(), v) for k, v in (limiter.get("config") or {}).items())
    if limiter["type"] == "inFlightReq":
        keys = " ".join(str(k).lower() for k in config) + " " + json.dumps(config, default=str).lower()
        per = ("client IP" if "ipstrategy" in keys else "request header" if "requestheadername" in keys else
               "request Host")
        return "%s (inFlightReq: %s in flight per %s, per router)" % (name, config.get("amount", "?"), per)
    return "%s (rateLimit: average %s per %s, burst %s; it answers 429 too)" % (
        name, config.get("average", "?"), config.get("period", "1s"), config.get("burst", 1))


def entrypoint_routers(routing, entrypoint):
    """(HTTP routers, TCP routers) of the user's that listen on `entrypoint`
    (a router without entryPoints listens on every default one)."""
    http, tcp = [], []
    for r in (routing or {}).get("routers") or []:
        if r["entrypoints"] is None or entrypoint.lower() in [e.lower() for e in r["entrypoints"]]:
            (http if r["kind"] == "http" else tcp).append(r["name"])
    return http, tcp


def router_limiters(routing, entrypoint):
    """The user's limiters that routers on `entrypoint` run themselves: [(router, name, limiter)]."""
    out = []
    limiters = (routing or {}).get("limiters") or {}
    for r in (routing or {}).get("routers") or []:
        if r["kind"] != "http" or not (r["entrypoints"] is None or
                                       entrypoint.lower() in [e.lower() for e in r["entrypoints"]]):
            continue
        for ref in r["middlewares"]:
            found = limiter_of(ref, limiters)
            if found:
                out.append((r["name"],) + found)
    return out


def user_value(setting, yours, ours, kept, effective):
    """One value of the user's where the role would set its own: kept (or,
    with override_user_values, replaced), and what holds then."""
    return {"setting": setting, "yours": yours, "ours": ours, "kept": kept, "effective": effective,
            "text": "%s: yours (%s) %s; %s" % (
                setting, _said(yours), "kept, the role's would be %s" % _said(ours) if kept else
                "replaced by the role's %s (override_user_values)" % _said(ours), effective)}


def _said(value):
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def listening_ports(proc_net_tcp):
    """The TCP ports something listens on, from /proc/net/tcp and tcp6 text
    (state 0A), on any address: 127.0.0.1:<port> cannot be bound beside one."""
    ports = set()
    for line in (proc_net_tcp or "").splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:
            try:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
            except ValueError:
                continue
    return ports


def free_loopback_port(taken):
    """The first of PING_PORTS not in `taken`, or None."""
    return next((p for p in PING_PORTS if p not in taken), None)


# ------------------------------------------------------------------ API

def _pruned(value):
    """A config as Traefik's API shows it: zero and empty values left out."""
    if isinstance(value, dict):
        out = dict((k, _pruned(v)) for k, v in value.items())
        return dict((k, v) for k, v in out.items() if v not in (None, 0, "", [], {}, False))
    return value


def check_api(routers, middlewares, expected_routers, entrypoints, middleware_ref, amount=None, want=None):
    """Problems in what Traefik's API says (empty when all is well): every
    expected router exists and is enabled, the middleware is loaded with the
    amount just written - or, with `want`, exactly the inFlightReq just
    written (not an earlier one Traefik still runs) - and every router on the
    limited entrypoints runs it."""
    by_name = dict((r.get("name"), r) for r in routers or [])
    problems = []
    for name in sorted(expected_routers):
        # Traefik splits a router without entryPoints whose entrypoint has
        # middlewares into <entrypoint>-<name> (with them) and <name> (the rest)
        found = [r for n, r in by_name.items()
                 if n == name or any(n == "%s-%s" % (ep, name) for ep in entrypoints)]
        if not found:
            problems.append("router %s is gone" % name)
        for r in found:
            if r.get("status") != "enabled":
                problems.append("router %s is %s: %s" % (r.get("name"), r.get("status"), "; ".join(r.get("error") or [])))
    mws = dict((m.get("name"), m) for m in middlewares or [])
    mw = mws.get(middleware_ref)
    if mw is None:
        problems.append("middleware %s is not loaded" % middleware_ref)
    elif mw.get("status") != "enabled":
        problems.append("middleware %s is %s: %s" % (middleware_ref, mw.get("status"), "; ".join(mw.get("error") or [])))
    elif want is not None and _pruned(mw.get("inFlightReq") or {}) != _pruned(want):
        problems.append("middleware %s runs %s, not %s (not reloaded yet)"
                        % (middleware_ref, json.dumps(mw.get("inFlightReq"), sort_keys=True),
                           json.dumps(want, sort_keys=True)))
    elif amount is not None and (mw.get("inFlightReq") or {}).get("amount") != amount:
        problems.append("middleware %s runs amount %s, not %s (not reloaded yet)"
                        % (middleware_ref, (mw.get("inFlightReq") or {}).get("amount"), amount))
    for r in routers or []:
        if r.get("name", "").startswith(API_ROUTER + "@"):
            continue
        on = set(r.get("using") or r.get("entryPoints") or [])
        if on & set(entrypoints) and middleware_ref not in (r.get("middlewares") or []):
            problems.append("router %s does not run %s" % (r.get("name"), middleware_ref))
    return problems


def client_bound(routers, entrypoints, middleware_ref, amount, bound_max=0):
    """What one client can hold in flight: inFlightReq is one limiter per
    router, so amount x the routers on the limited entrypoints that run it
    (Traefik's API routers; the role's own API router left out); whether
    that is within `bound_max` (0: 2 x amount), and the same in words."""
    limited = sorted(r.get("name") for r in routers or []
                     if not r.get("name", "").startswith(API_ROUTER + "@")
                     and set(r.get("using") or r.get("entryPoints") or []) & set(entrypoints)
                     and middleware_ref in (r.get("middlewares") or []))
    out = {"routers": len(limited), "names": limited, "amount": amount, "bound": amount * len(limited),
           "max": int(bound_max) or 2 * amount}
    out["within"] = out["bound"] <= out["max"]
    out["text"] = bound_text(out)
    return out


def bound_text(bound):
    """The bound in words, the same in the module, status and diagnose."""
    words = "%d in flight per client: %d per router x %d router%s (%s)" % (
        bound["bound"], bound["amount"], bound["routers"], "" if bound["routers"] == 1 else "s",
        ", ".join(bound["names"]) or "none")
    if bound.get("within", True):
        return words
    return ("%s, above %d: inFlightReq is one limiter per router, so one client can hold that many across the "
            "routers; lower traefik_inflight_amount, or bound HTTP/2 streams per connection "
            "(traefik_inflight_http2_max_streams) with the VPS's per-IP connection limit in front"
            % (words, bound["max"]))


# ------------------------------------------------------------------ plan

def _dirname(path):
    return posixpath.dirname(path.rstrip("/"))


def _mount_spec(host_dir, container_dir, compose_dir):
    """A compose volume for a new directory mount, relative to the compose
    file's directory when it is under it (as people write them)."""
    if compose_dir and (host_dir + "/").startswith(compose_dir.rstrip("/") + "/"):
        host_dir = "./" + posixpath.relpath(host_dir, compose_dir)
    return "%s:%s:ro" % (host_dir, container_dir)


def locate(facts, static_text, opts):
    """Where everything is: the static config (file or flags), the file
    provider (directory, filename or none), the directory the middleware goes
    to, as Traefik sees it and on the host (and the mount to add when no
    mount covers it: compose only). Raises TraefikConfigError when the role
    cannot work here (before anything is changed)."""
    if facts["major"] < 2:
        raise TraefikConfigError("Traefik %s is not supported (v2 and v3 are)" % facts["version"])
    swarm = (facts.get("labels") or {}).get(SWARM_SERVICE_LABEL)
    if swarm:
        raise TraefikConfigError(
            "%s is a task of the swarm service %s: its static config comes from the service (swarm configs, "
            "mounts, arguments), which the role does not change; nothing was changed. By hand: put %s@file on the "
            "entrypoints %s (entryPoints.<name>.http.middlewares) in the config the service uses, add the middleware "
            "file to its file provider, then `docker service update` the service"
            % (facts["name"], swarm, opts.get("name") or "inflight-limit", ", ".join(opts.get("entrypoints") or [])))
    src = facts["source"]
    out = {"mode": src["mode"], "static": None, "provider": None, "format": None}
    if src["mode"] == "env":
        raise TraefikConfigError("%s has no static config file (Traefik looked in /etc/traefik/, $XDG_CONFIG_HOME/, "
                                 "$HOME/.config/ and its working directory %s for traefik.toml, .yaml or .yml) and no "
                                 "command-line flags: it takes its static config from TRAEFIK_* environment variables, "
                                 "which the role does not change. Mount a traefik.yml at /etc/traefik/traefik.yml or "
                                 "give the settings as flags in a compose file; nothing was changed"
                                 % (facts["name"], facts.get("workdir", "/")))
    if src["mode"] == "file":
        if not src["path"].lower().endswith((".yml", ".yaml", ".toml")):
            raise TraefikConfigError("%s reads %s: the role changes YAML and TOML static configs only"
                                     % (facts["name"], src["path"]))
        where = host_path(src["path"], facts["mounts"])
        if where is None:
            raise TraefikConfigError("%s reads %s from its own image layer (no mount): a change there would be lost "
                                     "when the container is re-created; mount it from the host" % (facts["name"], src["path"]))
        out["static"], out["format"] = where["host"], static_format(src["path"])
        doc = parse_static(static_text, where["host"])
        file_provider = lookup(doc, ["providers", "file"]) or {}
        directory, filename = lookup(file_provider, ["directory"]), lookup(file_provider, ["filename"])
        base, host_base = _dirname(src["path"]), _dirname(where["host"])
        out["docker"] = docker_provider(doc, None)
    else:
        flags = src["flags"]
        directory, filename = flags.get("providers.file.directory"), flags.get("providers.file.filename")
        base = "/etc/traefik"
        host_base = (facts["compose"] or {}).get("working_dir")
        out["docker"] = docker_provider(None, flags)
    # Traefik opens a relative provider path from its working directory
    workdir = facts.get("workdir") or "/"
    directory = posixpath.normpath(posixpath.join(workdir, directory)) if directory else directory
    filename = posixpath.normpath(posixpath.join(workdir, filename)) if filename else filename
    if directory:
        provider = {"kind": "directory", "dir": directory.rstrip("/")}
    elif filename:
        provider = {"kind": "filename", "file": filename,
                    "dir": (opts.get("dynamic_dir") or posixpath.join(_dirname(filename), "dynamic")).rstrip("/")}
    else:
        provider = {"kind": "none", "dir": (opts.get("dynamic_dir") or posixpath.join(base, "dynamic")).rstrip("/")}
    file_where = host_path(filename, facts["mounts"]) if provider["kind"] == "filename" else None
    alone = bool(file_where and file_where["whole_mount"])
    if provider["kind"] == "filename" and (file_where is None or (alone and not (facts["compose"] and host_base))):
        raise TraefikConfigError(
            "%s reads its routes from %s, %s: the middleware goes into a directory of Traefik's file provider, "
            "beside your routes, so the role moves that file into %s (where Traefik's directory watch sees every "
            "change) and needs the directory around it mounted. Mount the directory that holds %s%s (%s), then "
            "run the role again; nothing was changed"
            % (facts["name"], filename, ("a file mounted alone from %s" % file_where["host"]) if file_where else
               "which is on no mount", provider["dir"], posixpath.basename(filename),
               " instead of the file alone" if file_where else "",
               "in its compose file" if facts["compose"] else "re-create it with that -v"))
    where = host_path(provider["dir"], facts["mounts"])
    if where is None and (provider["kind"] == "none" or alone) and facts["compose"] and host_base:
        # Traefik with no file provider (the Docker provider and labels, its static file mounted alone),
        # or with one file of routes mounted alone (traefik.yml and config.yml, the commonest guides'
        # layout): the role adds a directory mount beside that file (or the static config) and a file
        # provider on it; a routes file is moved in, a link left at its place for its own mount
        host_dir = posixpath.join(_dirname(file_where["host"]) if alone else host_base, "dynamic")
        compose_dir = _dirname(facts["compose"]["files"][0]) if facts["compose"]["files"] else None
        provider["mount"] = {"host": host_dir, "container": provider["dir"],
                             "spec": _mount_spec(host_dir, provider["dir"], compose_dir)}
        where = {"host": host_dir}
    if where is None:
        how = ("in its compose file, volumes: - ./dynamic:%s" if facts["compose"] else
               "re-create it with -v /srv/traefik/dynamic:%s added to its docker run") % provider["dir"]
        raise TraefikConfigError(
            "the dynamic directory %s is not visible inside %s (no mount covers it; mounts: %s): mount a host "
            "directory there (%s) or set traefik_inflight_dynamic_dir_in_container to a directory under one of its "
            "mounts; nothing was changed"
            % (provider["dir"], facts["name"], ", ".join(m["Destination"] for m in facts["mounts"]) or "none", how))
    provider["dir_host"] = where["host"]
    if provider["kind"] == "filename":
        provider["file_host"] = file_where["host"]
    out["provider"] = provider
    return out


def plan(facts, where, static_text, compose_text, dynamic_texts, opts, containers=()):
    """Everything the role changes, computed before it changes anything.
    `dynamic_texts`: the user's dynamic files {path: text}; `containers`:
    the labels of the running containers (for the Docker provider's routers)."""
    provider = where["provider"]
    opts = dict(opts, provider=provider, version=facts["version"], host_network=facts.get("network_mode") == "host",
                routing=user_routing(dynamic_texts, where.get("docker"), containers))
    warnings, report = [], {}
    routers, middlewares = dynamic_names(dynamic_texts)
    if opts["name"] in middlewares:
        raise TraefikConfigError("a middleware named %s already exists in your dynamic config (%s): choose another "
                                 "traefik_inflight_name; nothing was changed" % (opts["name"], ", ".join(sorted(dynamic_texts))))
    if API_ROUTER in routers:
        raise TraefikConfigError("a router named %s already exists in your dynamic config; nothing was changed" % API_ROUTER)
    static = parse_static(static_text, where["static"]) if where["mode"] == "file" else None
    flags = facts["source"]["flags"] if where["mode"] != "file" else None
    compose_path = facts["compose"]["files"][0] if facts["compose"] and compose_text is not None else None
    compose = yaml_text.parse(compose_text, compose_path) if compose_path else None
    out = {"mode": where["mode"], "static": None, "compose": None, "restart": False, "recreate": False,
           "provider": provider, "middleware_ref": "%s@file" % opts["name"], "entrypoints": list(opts["entrypoints"]),
           "expected_routers": sorted(["%s@file" % r for r in routers] + docker_routers(where.get("docker"), containers)),
           "version": facts["version"], "amount": int(opts["amount"]), "warnings": warnings,
           "trusted_added": trusted_added(static, flags, opts.get("proxy_protocol_trusted_ips"),
                                          opts.get("trusted_added_before"))}
    if opts.get("tunnel_total"):
        if not facts["compose"] and facts.get("network_mode") != "host":
            raise TraefikConfigError(
                "%s was started with docker run: the tunnel's entrypoint needs its port (%d) published, which the role "
                "does only in a compose file. Publish it (-p %s) and re-create Traefik, or run it from compose; "
                "nothing was changed" % (facts["name"], int(opts["tunnel_port"]), tunnel.port_spec(opts)))
        out["tunnel"] = {"entrypoint": opts["tunnel_entrypoint"], "port": int(opts["tunnel_port"]),
                         "published": tunnel.port_spec(opts) if facts.get("network_mode") != "host" else None,
                         "total": int(opts["tunnel_total"]), "header": tunnel.HEADER,
                         "middlewares": tunnel.names(opts["name"])}
    if facts["source"].get("ignored"):
        src = facts["source"]
        warnings.append("%s reads its static config from %s, so Traefik ignores its command-line flags (--%s): "
                        "the change goes into the file" % (facts["name"], src["path"], ", --".join(src["ignored"])))
    compose_changes = []
    if compose is not None:
        check_service_home(compose, facts["compose"], compose_path)
    if where["mode"] == "file":
        changes = static_changes(static, opts, warnings, report)
        new = edit_static(static_text, changes, where["static"])
        out["static"] = {"path": where["static"], "old": static_text, "new": new}
        out["restart"] = new != static_text
    else:
        add, remove = flag_changes(flags, opts, warnings, report)
        opts["flags_added"] = add
        if (add or remove) and not facts["compose"]:
            raise TraefikConfigError(
                "%s was started with docker run and takes its static config from flags: add %s to its command and "
                "re-create it (the role changes flags only in a compose file); nothing was changed"
                % (facts["name"], flags_text(add, remove)))
        if add or remove:
            compose_changes += compose_command_changes(compose, facts["compose"]["service"], facts["args"], add, remove)
    out.update(entrypoints=report["entrypoints"], user_values=report["user_values"], ping=report.get("ping"),
               written=report["written"], network_mode=facts.get("network_mode") or "default")
    for value in report["user_values"]:
        if value["kept"] and value["setting"] != "ping":
            warnings.append("%s (override_user_values: true replaces it)" % value["text"])
    if compose is not None:
        compose_changes += service_changes(compose, facts, opts, warnings, report)
        new = yaml_text.edit_yaml(compose_text, compose_changes, compose_path) if compose_changes else compose_text
        out["compose"] = {"path": compose_path, "old": compose_text, "new": new, "files": facts["compose"]["files"],
                          "env_files": facts["compose"].get("env_files") or [],
                          "project_dir": facts["compose"]["working_dir"], "service": facts["compose"]["service"],
                          "project": facts["compose"]["project"]}
    else:  # docker run: the health check is the user's to change; it is reviewed all the same
        test = (facts.get("health") or {}).get("test")
        report["healthcheck"] = {"by": "you" if test else None, "test": test_text(test) if test else None,
                                 "through": None, "replaced": False, "problems": review_healthcheck(
                                     test, report.get("ping"), opts.get("entrypoint_facts") or {},
                                     facts.get("health"), opts.get("health")) if test else []}
    out["healthcheck"] = report["healthcheck"]
    warnings += health_warnings(report, opts.get("health"), bool(opts.get("healthcheck")))
    if compose is not None:
        out["recreate"] = new != compose_text
    return out


def included_files(compose):
    """The files a compose file includes (include: as strings or {path: ...}), as written."""
    out = []
    for entry in lookup(compose, ["include"]) or []:
        paths = entry.get("path") if isinstance(entry, dict) else entry
        out += [str(p) for p in (paths if isinstance(paths, list) else [paths]) if p]
    return out


def check_service_home(compose, project, path):
    """Refuse, naming where it lives, a Traefik service that is not in the
    first compose file (an included file, an override file): the role edits
    that one file, and an edit there would make a second service."""
    service = project["service"]
    if lookup(compose, ["services", service]) is not None:
        return
    elsewhere = ["%s (include:)" % f for f in included_files(compose)] + list(project.get("files") or [])[1:]
    raise TraefikConfigError(
        "the compose service %s is not in %s, the compose file it was started from%s: the role edits that one "
        "file; move the service %s into it, or make the change by hand where it is (README: layouts the role "
        "refuses); nothing was changed" % (service, path, (", it comes from " + " or ".join(elsewhere)) if elsewhere
                                           else "", service))


# ------------------------------------------------------------ health check

# The health check through the user's own entrypoint: one HTTP(S) request from inside Traefik's
# network namespace to the entrypoint users reach, on a path no router of theirs is likely to have.
# Any HTTP status means Traefik accepted, shook hands (TLS) and answered there; no answer within
# the check's timeout (Docker kills the probe) means users get none either. busybox's wget (the
# official image is Alpine's; -S prints the status line indented, also when the server answers
# 404) - a status line is what counts, not wget's exit code, which is 1 for a 404.
HEALTH_PATH = "/homelab-edge-health"
HEALTH_AGENT = "homelab-edge-health"
# Words in a health check that name something outside Traefik's container (a host name with a dot,
# or an IPv4 address that is not loopback): the check then fails when that is down.
OUTSIDE = re.compile(r"(?<![\w.-])((?:\d{1,3}\.){3}\d{1,3}|(?:[a-z0-9-]+\.)+[a-z]{2,})(?![\w-])", re.I)
LOCAL = re.compile(r"^(127\.|0\.0\.0\.0$|localhost)", re.I)


def entrypoint_facts(static, flags):
    """{name: {"address": str, "tls": bool}} of the entrypoints in a static
    config (a parsed file) or in flags ({lower-cased name: value})."""
    out = {}
    if static is not None:
        for name, ep in (lookup(static, ["entryPoints"]) or {}).items():
            ep = ep if isinstance(ep, dict) else {}
            tls = lookup(ep, ["http", "tls"])
            out[name] = {"address": lookup(ep, ["address"]), "tls": tls is not None and tls is not False
                         and str(tls).lower() != "false"}
        return out
    for key, value in (flags or {}).items():
        parts = key.split(".")
        if len(parts) >= 3 and parts[0] == "entrypoints":
            ep = out.setdefault(parts[1], {"address": None, "tls": False})
            if parts[2:] == ["address"]:
                ep["address"] = value
            elif parts[2:4] == ["http", "tls"] and str(value).lower() != "false":
                ep["tls"] = True
    return out


def health_url(address, tls):
    """The URL the health check asks on an entrypoint address (':443',
    '0.0.0.0:443/tcp', '[::]:443', '192.168.1.5:443'): the loopback of
    Traefik's network namespace where the entrypoint listens on every
    address, else the address itself."""
    host, dummy, port = str(address or "").strip().partition("/")[0].rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = "[%s]" % host
    return "%s://%s:%s%s" % ("https" if tls else "http", host, port, HEALTH_PATH)


def health_command(url):
    """The shell command of the health check through an entrypoint (exit 0: Traefik answered)."""
    return "%s 2>&1 | grep -q '^ *HTTP/'" % health_request(url)


def health_request(url):
    """The request alone (its output says what the entrypoint answered)."""
    return "wget -q -S -O /dev/null -U %s%s %s" % (HEALTH_AGENT, " --no-check-certificate" if url.startswith("https:")
                                                   else "", url)


def health_target(entrypoints, routing, opts):
    """Where the health check asks: {"entrypoint", "address", "url",
    "command"} for the entrypoint opts["healthcheck_entrypoint"] (default:
    the first of opts["entrypoints"] that listens on TCP), HTTPS where the
    entrypoint or a router of the user's on it uses TLS; None when
    opts["healthcheck_through"] is "ping" or no health check is wanted. Raises TraefikConfigError for an
    entrypoint that is not there or has no TCP port."""
    if not opts.get("healthcheck") or opts.get("healthcheck_through", "entrypoint") != "entrypoint":
        return None
    if not opts.get("healthcheck_entrypoint") and not any(port_of((entrypoints.get(ci(entrypoints, e)) or {}).get(
            "address")) for e in opts.get("entrypoints") or []):
        return None  # the entrypoints to limit are checked (and refused) where the limit goes
    wanted = opts.get("healthcheck_entrypoint") or next(
        (e for e in opts.get("entrypoints") or [] if port_of((entrypoints.get(ci(entrypoints, e)) or {}).get("address"))),
        None)
    name = ci(entrypoints, wanted) if wanted else None
    if name is None or not port_of(entrypoints[name]["address"]):
        raise TraefikConfigError(
            "the health check goes through entrypoint %s, which %s: set traefik_inflight_healthcheck_entrypoint to "
            "an HTTP entrypoint of yours (defined: %s), or traefik_inflight_healthcheck_through: ping; nothing was "
            "changed" % (wanted or "(none named)", "has no TCP port" if name else "is not in the static config",
                         ", ".join(sorted(entrypoints)) or "none"))
    routers = [r for r in (routing or {}).get("routers") or [] if r["kind"] == "http" and r.get("tls")
               and (r["entrypoints"] is None or name.lower() in [e.lower() for e in r["entrypoints"]])]
    url = health_url(entrypoints[name]["address"], entrypoints[name]["tls"] or bool(routers))
    return {"entrypoint": name, "address": entrypoints[name]["address"], "url": url, "command": health_command(url),
            "request": health_request(url)}


def health_plan(facts, where, static_text, dynamic_texts, opts, containers=()):
    """(entrypoint_facts(), health_target()) of a Traefik as read: before
    plan(), so that the module can try the request through the entrypoint
    on the running Traefik first."""
    static = parse_static(static_text, where["static"]) if where["mode"] == "file" else None
    eps = entrypoint_facts(static, facts["source"]["flags"] if where["mode"] != "file" else None)
    return eps, health_target(eps, user_routing(dynamic_texts, where.get("docker"), containers), opts)


def test_text(test):
    """A compose or Docker health check test (a list or a string) as one line."""
    if isinstance(test, (list, tuple)):
        words = [str(w) for w in test]
        if words and words[0] in ("CMD", "CMD-SHELL"):
            words = words[1:]
        return " ".join(words)
    return str(test or "")


def is_ping_check(test):
    return bool(re.search(r"\btraefik\s+healthcheck\b|/ping\b", test_text(test)))


def review_healthcheck(test, ping, entrypoints, health=None, target=None):
    """What would make a health check miss a wedge users see or restart a
    Traefik that serves: [{"problem", "text"}]. `ping`: ping_report();
    `entrypoints`: entrypoint_facts(); `health`: {"status", "output"} as
    Docker last saw it; `target`: health_target() with target["answered"]
    (the module's own request through the entrypoint just now)."""
    text, out = test_text(test), []
    outside = sorted(set(m for m in OUTSIDE.findall(text) if not LOCAL.match(m)))
    if outside:
        out.append({"problem": "outside", "text": "it asks %s, outside Traefik: it fails when that is down (an ISP "
                    "outage restarts a Traefik that serves)" % ", ".join(outside)})
    if is_ping_check(test):
        ep = (entrypoints.get(ci(entrypoints, (ping or {}).get("entrypoint") or "")) or {})
        if ep.get("tls") and re.search(r"\btraefik\s+healthcheck\b|http://", text):
            out.append({"problem": "never_passes", "text": "it asks ping in plain HTTP on %s, an entrypoint with "
                        "TLS, where ping answers 404: it never passes, so autoheal restarts Traefik again and again"
                        % ping["entrypoint"]})
        else:
            out.append({"problem": "ping_only", "text": "it asks ping only (%s): a stall of the entrypoint users "
                        "reach leaves it green" % ((ping or {}).get("entrypoint") or "traefik")})
    if (health or {}).get("status") == "unhealthy" and (target or {}).get("answered"):
        out.append({"problem": "fails", "text": "Docker says unhealthy while Traefik answers on %s (the check's last "
                    "output: %s)" % (target["entrypoint"], (health.get("output") or "none").strip()[:200])})
    return out


def health_changes(svc, facts, opts, report):
    """The health check of a compose-managed Traefik: the module's (through
    the user's entrypoint where opts["health"] answered, else ping) where
    the service has none, has the module's from an earlier run, or
    opts["healthcheck_replace"]; the user's own kept otherwise and reviewed.
    report["healthcheck"]: {"by", "test", "through", "problems", "replaced"}."""
    service = facts["compose"]["service"]
    hc, target = opts.get("healthcheck"), opts.get("health")
    have = (svc.get("healthcheck") or {}).get("test")
    written = (opts.get("written_before") or {}).get("healthcheck")
    ping = ping_argv(facts, opts)
    through = ["CMD-SHELL", target["command"]] if target else None
    # the module's: what it wrote (its record), what it writes (the same words are its own: the role's compose
    # template writes them for a Traefik it deploys), or the ping check of an earlier version or of a user who
    # asked for ping
    ours = bool(have) and (have in (written, through) or (have == ping and (
        opts.get("written_before") is not None or opts.get("healthcheck_through") == "ping")))
    # through the entrypoint where the request answered now, or where it is the module's already (a
    # Traefik stalled while the role runs is the check's to catch, not a reason to weaken it)
    argv = through if through and (target.get("answered") or (ours and have == through)) else ping
    problems = [] if not have or ours else review_healthcheck(have, report.get("ping"), opts.get("entrypoint_facts")
                                                              or {}, facts.get("health"), target)
    replace = bool(hc) and bool(have) and not ours and bool(opts.get("healthcheck_replace"))
    if not hc or (have and not ours and not replace):
        report["healthcheck"] = {"by": "you" if have else None, "test": test_text(have) if have else None,
                                 "through": None, "problems": problems, "replaced": False}
        return []
    report["healthcheck"] = {"by": "homelab.edge", "test": test_text(argv),
                             "through": target["entrypoint"] if argv[0] == "CMD-SHELL" else "ping",
                             "problems": problems, "replaced": replace}
    report.setdefault("written", {})["healthcheck"] = argv
    current = dict((k, v) for k, v in (svc.get("healthcheck") or {}).items() if k != "test")
    if have == argv and all(str(current.get(k)) == str(v) for k, v in hc.items()):
        return []
    return [("set", ["services", service, "healthcheck"], dict(test=argv, **hc))]


def ping_argv(facts, opts):
    """`traefik healthcheck --ping` with what it needs to find ping (the static config file, or the flags
    of ping and its entrypoint as they will be)."""
    argv = ["CMD", "traefik", "healthcheck", "--ping"]
    if facts["source"]["mode"] == "file":
        return argv + ["--configFile=%s" % facts["source"]["path"]]
    new_flags = ["--%s=%s" % kv for kv in sorted((opts.get("flags_added") or {}).items())]
    ping_ep = (opts.get("flags_added") or {}).get("ping.entrypoint") or \
        parse_flags(facts["args"]).get("ping.entrypoint") or IMPLICIT_ENTRYPOINT
    return argv + [a for a in facts["args"] + new_flags
                   if a.lower().startswith(("--ping", "--entrypoints.%s." % ping_ep.lower()))]


def health_warnings(report, target, wanted):
    """One line per thing the user should know about the health check: the user's own kept with its
    problems; the module's on ping because the entrypoint did not answer; or the module's through an
    entrypoint that does not answer now."""
    out = []
    hc = report.get("healthcheck") or {}
    if hc.get("by") == "you" and hc.get("problems"):
        out.append("your health check (%s) is kept: %s. traefik_inflight_healthcheck_replace: true replaces it with "
                   "the role's, which asks through your entrypoint" % (hc["test"], "; ".join(
                       p["text"] for p in hc["problems"])))
    if not (wanted and target and not target.get("answered") and hc.get("by") == "homelab.edge"):
        return out
    if hc.get("through") == "ping":
        out.append("the health check asks ping, not your entrypoint %s: the request through it (%s) got no HTTP "
                   "answer now (%s), so a check on it would restart a Traefik that serves. A stall of %s alone is not "
                   "seen" % (target["entrypoint"], target["url"], target.get("output") or "no output",
                             target["entrypoint"]))
    else:
        out.append("Traefik gave no HTTP answer on %s just now (%s: %s): its health check, which asks there, will "
                   "fail too while this lasts" % (target["entrypoint"], target["url"], target.get("output") or
                                                  "no output"))
    return out


def service_changes(compose, facts, opts, warnings=None, report=None):
    """The compose service of Traefik: the autoheal label, a health check
    (health_changes; report["healthcheck"] says whose and what it found), and
    the drain sysctls of its own network namespace, where missing. A Traefik in the host's network
    namespace gets no net.* sysctls (the runtime refuses them there; the
    host's are the tcp_drain role's): `warnings` says so."""
    warnings = [] if warnings is None else warnings
    service = facts["compose"]["service"]
    svc = lookup(compose, ["services", service]) or {}
    changes = []
    mount = (opts.get("provider") or {}).get("mount")
    if mount:
        volumes = svc.get("volumes")
        if volumes is not None and not isinstance(volumes, list):
            raise TraefikConfigError("the compose service %s has volumes that are not a list" % service)
        targets = [v.get("target") if isinstance(v, dict) else (str(v).split(":") + [""])[1] for v in volumes or []]
        if mount["container"] not in [str(t).rstrip("/") for t in targets]:
            changes.append(("append", ["services", service, "volumes"], mount["spec"]))
    label = opts.get("autoheal_label")
    if label:
        labels = svc.get("labels")
        if isinstance(labels, list):
            if "%s=true" % label not in labels and not any(str(x).startswith(label + "=") for x in labels):
                changes.append(("append", ["services", service, "labels"], "%s=true" % label))
        elif str((labels or {}).get(label, "")).lower() != "true":
            changes.append(("set", ["services", service, "labels", label], "true"))
    changes += health_changes(svc, facts, opts, report if report is not None else {})
    if opts.get("tunnel_total"):
        changes += tunnel.compose_changes(svc, service, opts, facts.get("network_mode"))
    sysctls = dict(opts.get("sysctls") or {})
    refused = sorted(k for k in sysctls if str(k).startswith(HOST_REFUSED_SYSCTLS))
    if facts.get("network_mode") == "host" and refused:
        warnings.append("%s shares the host's network namespace (network_mode: host), where the container runtime "
                        "refuses net.* sysctls: the role sets none of %s in the compose file. There they are the "
                        "host's own settings, which are the tcp_drain role's job" % (facts["name"], ", ".join(refused)))
        for key in refused:
            del sysctls[key]
    for key, value in sorted(sysctls.items()):
        have = svc.get("sysctls")
        if isinstance(have, list):
            raise TraefikConfigError("the compose service %s lists its sysctls as a list; write them as a mapping" % service)
        if str((have or {}).get(key)) != str(value):
            changes.append(("set", ["services", service, "sysctls", key], str(value)))
    return changes


# ------------------------------------------------------------ access log

def access_records(log_lines):
    """The JSON records among log lines (Traefik's access log on stdout,
    mixed with its own log lines), of the user's entrypoints: the role's own
    (its API reads, Prometheus's scrapes, the health check's requests) are
    not the users' requests."""
    for line in log_lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("entryPointName") not in OWN_ENTRYPOINTS and record.get("RequestPath") != HEALTH_PATH:
                yield record


def _count(log_lines, field):
    counts = {}
    for record in access_records(log_lines):
        value = record.get(field)
        if value:
            counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def status_counts(log_lines):
    """{status: requests} of the access log (DownstreamStatus)."""
    return _count(log_lines, "DownstreamStatus")


# One address with at least this share of at least this many requests: Traefik
# sees a proxy, not the clients (its per-IP limit is blind).
BLIND_SHARE, BLIND_MIN_REQUESTS = 0.9, 20


def is_blind(requests, share):
    return requests >= BLIND_MIN_REQUESTS and share >= BLIND_SHARE


def client_share(log_lines):
    """From Traefik's JSON access log: (the address most requests come from,
    its share 0..1, how many requests were read). One address carrying nearly
    every request means Traefik sees a proxy, not the clients: a per-IP limit
    is then one bucket for everyone."""
    counts = _count(log_lines, "ClientHost")
    total = sum(counts.values())
    if not total:
        return None, 0.0, 0
    top = max(sorted(counts), key=lambda h: counts[h])
    return top, round(counts[top] / float(total), 3), total
