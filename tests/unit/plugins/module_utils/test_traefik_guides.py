"""Traefik as the guides write it: every static config and compose file in
tests/unit/fixtures/traefik_guides/ (each case a folder of files as a public
guide, repository or Traefik's own docs has them, SOURCE.txt naming where)
goes through the module's own pipeline - container_facts, locate, plan - as
`docker inspect` would show the container that compose (or docker run)
makes from it. Each case is either changed exactly as intended, every line of
the user's kept but the ones the change is about, or refused for its true
reason (EXPECT below), nothing written.

tests/lab/test_traefik_live.py starts the real Traefik on one result of each
kind (YAML, TOML, flags) and reads back what it loaded."""
import os
import re
import shlex
import shutil

import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDES = os.path.join(HERE, "..", "..", "fixtures", "traefik_guides")
COMPOSE_NAMES = ("docker-compose.yml", "docker-compose.yaml", "compose.yml", "compose.yaml")
# A guide's absolute host paths (/home/user/traefik/traefik.yml) stand for where the user put the
# guide's files: HOSTPATHS in a case maps each such prefix to the case's folder ("/home/u/t -> data").
# The Traefik each image tag stands for here (a tag without a patch: that minor's first release).
LATEST = "3.6.12"
# Lines of theirs a change may rewrite: the provider file (moved into a directory), an entrypoint's
# middlewares, HTTP/2 streams and trusted addresses, a flag, a command written as one string.
MAY_CHANGE = re.compile(r"filename|middlewares|maxConcurrentStreams|trustedIPs|^\s*-?\s*[\"']?--|command:", re.I)


def cases():
    if not os.path.isdir(GUIDES):
        return []
    return sorted(d for d in os.listdir(GUIDES) if os.path.isdir(os.path.join(GUIDES, d)))


def read(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def dotenv(case):
    """The project's .env, and ENV: the shell's variables a guide expects (compose reads both)."""
    env = {}
    for path in (os.path.join(case, "ENV"), os.path.join(case, ".env")):
        if not os.path.exists(path):
            continue
        for line in read(path).splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                env.setdefault(k.strip(), v.strip().strip('"').strip("'"))
    return env


def interpolate(value, env):
    """compose's ${VAR}, ${VAR:-default}, ${VAR-default}, $VAR (unset: empty or the default)."""
    if isinstance(value, dict):
        return dict((k, interpolate(v, env)) for k, v in value.items())
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m):
        name, default = m.group(1) or m.group(3), m.group(2)
        if default is None:
            return env.get(name, "")
        if default.startswith(":-"):
            return env.get(name) or default[2:]
        return env.get(name, default[1:])
    return re.sub(r"\$\{([A-Za-z0-9_]+)((?::?-)[^}]*)?\}|\$([A-Za-z0-9_]+)", one, value.replace("$$", "\0")).replace(
        "\0", "$")


def version_of(image):
    """`traefik version`'s first line for an image tag: traefik:v2.11 -> 2.11.0, none or latest -> LATEST."""
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else "latest"
    m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", tag)
    if not m:
        return "Version:      %s\n" % LATEST
    major, minor, patch = m.group(1), m.group(2), m.group(3)
    if minor is None:
        return "Version:      %s\n" % (LATEST if major == "3" else "2.11.30" if major == "2" else major + ".0.0")
    return "Version:      %s.%s.%s\n" % (major, minor, patch or "0")


def host_paths(case):
    path = os.path.join(case, "HOSTPATHS")
    pairs = [ln.split("->") for ln in read(path).splitlines() if "->" in ln] if os.path.exists(path) else []
    return sorted(((a.strip().rstrip("/"), os.path.join(case, b.strip())) for a, b in pairs), key=lambda p: -len(p[0]))


def mounts_of(volumes, base, rebase=()):
    out = []
    for v in volumes or []:
        if isinstance(v, dict):
            src, dst, kind = v.get("source", ""), v.get("target", ""), v.get("type", "volume")
            rw = not v.get("read_only", False)
        else:
            parts = str(v).split(":")
            src, dst = parts[0], parts[1] if len(parts) > 1 else parts[0]
            rw = not (len(parts) > 2 and "ro" in parts[2].split(","))
            kind = "bind" if src.startswith((".", "/", "~", "%")) else "volume"
        if kind == "bind":
            src = src.rstrip("/") or "/"
            for prefix, there in rebase:
                if src == prefix or src.startswith(prefix + "/"):
                    src = there + src[len(prefix):]
                    break
            src = os.path.normpath(os.path.join(base, os.path.expanduser(src)))
        else:
            src = "/var/lib/docker/volumes/%s/_data" % src
        out.append({"Type": kind, "Source": src, "Destination": dst.rstrip("/") or "/", "RW": rw})
    return out


def container(name, image, args, env, labels, mounts, workdir="", network_mode="default"):
    """What `docker inspect` shows of a running container."""
    return {"Name": "/" + name, "Config": {"Image": image, "Cmd": args, "Env": env, "Labels": labels,
                                           "WorkingDir": workdir},
            "State": {"Running": True}, "Mounts": mounts, "HostConfig": {"NetworkMode": network_mode}}


def docker_run(case):
    """(inspect, None) from a docker-run.sh: its -v/--volume, -e/--env, -l/--label, --name, image and arguments."""
    text = read(os.path.join(case, "docker-run.sh")).replace("\\\n", " ").replace("${PWD}", case).replace("$PWD", case)
    words = shlex.split(text, comments=True)
    words = words[words.index("run") + 1:]
    volumes, env, labels, name, i = [], [], {}, "traefik", 0
    takes = ("-p", "--publish", "--network", "--restart", "-w", "--workdir", "--hostname", "--user", "-u")
    while i < len(words) and words[i].startswith("-"):
        key, sep, value = words[i].partition("=")
        if not sep and key in ("-v", "--volume", "-e", "--env", "-l", "--label", "--name") + takes:
            value, i = words[i + 1], i + 1
        if key in ("-v", "--volume"):
            volumes.append(value)
        elif key in ("-e", "--env"):
            env.append(value)
        elif key in ("-l", "--label"):
            k, dummy, v = value.partition("=")
            labels[k] = v
        elif key == "--name":
            name = value
        i += 1
    return container(name, words[i], words[i + 1:], env, labels, mounts_of(volumes, case, host_paths(case))), None


def quadlet(case):
    """(inspect, None) from a Podman quadlet (traefik.container): Image=, Volume=, Exec=."""
    keys = [ln.split("=", 1) for ln in read(os.path.join(case, "traefik.container")).splitlines() if "=" in ln]
    volumes = [v.rsplit(":", 1)[0] if v.count(":") > 1 else v for k, v in keys if k == "Volume"]
    args = shlex.split(" ".join(v for k, v in keys if k == "Exec"))
    image = [v for k, v in keys if k == "Image"][0]
    return container("systemd-traefik", image, args, [], {}, mounts_of(volumes, case, host_paths(case))), None


def static_alone(case):
    """(inspect, None) for a guide that gives only the static file: docker run with it at Traefik's
    first default place, /etc/traefik/<name> (as Traefik's docs run it)."""
    name = [n for n in os.listdir(case) if n.startswith("traefik.") and n.endswith((".yml", ".yaml", ".toml"))][0]
    return container("traefik", "traefik", [], [], {},
                     mounts_of(["./%s:/etc/traefik/%s" % (name, name)], case)), None


def compose_file(case):
    """The compose file a case names (compose's default names first, else the one file whose name says compose)."""
    for n in COMPOSE_NAMES:
        if os.path.exists(os.path.join(case, n)):
            return os.path.join(case, n)
    named = sorted(n for n in os.listdir(case) if "compose" in n and n.endswith((".yml", ".yaml")))
    return os.path.join(case, named[0])


def merged(base, over):
    """compose's merge of one service over another: lists of volumes, ports and labels add up; the
    rest (command, image...) is replaced."""
    out = dict(base)
    for k, v in (over or {}).items():
        if k in ("volumes", "ports") and isinstance(v, list):
            out[k] = list(out.get(k) or []) + v
        elif k == "labels":
            have = out.get(k) or {}
            have = dict((x.split("=", 1) + [""])[:2] for x in have) if isinstance(have, list) else dict(have)
            have.update(dict((x.split("=", 1) + [""])[:2] for x in v) if isinstance(v, list) else v or {})
            out[k] = have
        else:
            out[k] = v
    return out


def from_compose(case):
    """(inspect, the compose project) of the Traefik service as compose makes it: its files in order
    (COMPOSE_FILES, else the one), .env interpolated, an included file's services, swarm's labels
    for a stack (DEPLOY)."""
    listed = os.path.join(case, "COMPOSE_FILES")
    files = [os.path.join(case, f) for f in read(listed).split()] if os.path.exists(listed) else [compose_file(case)]
    env = dict(dotenv(case), PWD=case)
    compose = {}
    for path in files:
        doc = interpolate(yaml.safe_load(read(path).lstrip("\ufeff")), env)
        services = compose.setdefault("services", {})
        for n, svc in (doc.get("services") or {}).items():
            services[n] = merged(services.get(n) or {}, svc or {})
        for inc in traefik_inflight.included_files(doc):
            if not os.path.exists(os.path.join(case, inc)):
                continue  # the guide's other services (kept out of the case)
            included = interpolate(yaml.safe_load(read(os.path.join(case, inc))), env)
            for n, svc in (included.get("services") or {}).items():
                services.setdefault(n, svc)
    services = compose["services"]
    name = next((n for n, s in services.items() if "traefik" in str((s or {}).get("image", "")).partition(":")[0]), None)
    name = name or next((n for n in services if "traefik" in n), None) or "traefik"
    svc = services.get(name) or {}
    command = svc.get("command")
    labels = svc.get("labels") or {}
    if isinstance(labels, list):
        labels = dict((item.split("=", 1) + [""])[:2] for item in labels)
    environment = svc.get("environment") or {}
    if isinstance(environment, dict):
        environment = ["%s=%s" % kv for kv in environment.items()]
    labels.update({"com.docker.compose.project": os.path.basename(case), "com.docker.compose.service": name,
                   "com.docker.compose.project.working_dir": case,
                   "com.docker.compose.project.config_files": ",".join(files)})
    if os.path.exists(os.path.join(case, "DEPLOY")):
        labels["com.docker.swarm.service.name"] = "%s_%s" % (os.path.basename(case), name)
    inspect = container(str(svc.get("container_name") or name), str(svc.get("image", "traefik")), environment and [] or [],
                        environment, labels, mounts_of(svc.get("volumes"), case, host_paths(case)),
                        svc.get("working_dir") or "", str(svc.get("network_mode") or "default"))
    inspect["Config"]["Cmd"] = shlex.split(command) if isinstance(command, str) else list(command or [])
    return inspect, compose


def limited_entrypoints(facts, static_text, where):
    """The entrypoints a user would name: the HTTPS ones (port 443 or 8443), else the first HTTP one."""
    if facts["source"]["mode"] == "file":
        eps = traefik_inflight.lookup(traefik_inflight.parse_static(static_text, where["static"]), ["entryPoints"]) or {}
        addresses = dict((e, traefik_inflight.lookup(eps, [e, "address"])) for e in eps)
    else:
        addresses = dict((k.split(".")[1], v) for k, v in facts["source"]["flags"].items()
                         if k.startswith("entrypoints.") and k.endswith(".address"))
    tcp = [e for e, a in sorted(addresses.items()) if not traefik_inflight.is_udp(a) and e not in traefik_inflight.OWN_ENTRYPOINTS]
    https = [e for e in tcp if traefik_inflight.port_of(addresses[e]) in (443, 8443)]
    return https or tcp[:1] or ["websecure"]


def run_case(name, tmp_path, extra=None, containers=(), prepare=None):
    """The module's pipeline on a copy of the case (`extra`: options over the role's defaults;
    `containers`: the labels of other running containers; `prepare`: a change to the copy first).
    Returns (facts, plan, opts) or raises EditError."""
    case = str(tmp_path / name)
    shutil.copytree(os.path.join(GUIDES, name), case)
    if prepare:
        prepare(case)
    if os.path.exists(os.path.join(case, "docker-run.sh")):
        inspect, compose = docker_run(case)
    elif os.path.exists(os.path.join(case, "traefik.container")):
        inspect, compose = quadlet(case)
    elif not [n for n in os.listdir(case) if "compose" in n]:
        inspect, compose = static_alone(case)
    else:
        inspect, compose = from_compose(case)
    env, workdir = traefik_inflight.container_env(inspect)
    candidates = traefik_inflight.static_candidates(traefik_inflight.traefik_args(inspect), env, workdir)
    existing = []
    for c in candidates:
        where = traefik_inflight.host_path(c, inspect["Mounts"])
        if where and os.path.exists(where["host"]):
            existing.append(c)
    facts = traefik_inflight.container_facts(inspect, version_of(inspect["Config"]["Image"]), existing)
    static_text = ""
    if facts["source"]["mode"] == "file":
        where = traefik_inflight.host_path(facts["source"]["path"], facts["mounts"])
        static_text = read(where["host"]) if where and os.path.isfile(where["host"]) else ""
    opts = {"name": "inflight-limit", "amount": 400, "source": "ip", "depth": 0, "excluded_ips": [], "header": "",
            "entrypoints": [], "dynamic_dir": "", "verify_api": True, "proxy_protocol_trusted_ips": None,
            "autoheal_label": "autoheal", "healthcheck": {"interval": "30s", "timeout": "5s", "retries": 3},
            "sysctls": {}, "http2_max_streams": 32, "metrics_port": 0}
    opts.update(extra or {})
    located = traefik_inflight.locate(facts, static_text, dict(opts, entrypoints=["websecure"]))
    opts["entrypoints"] = (extra or {}).get("entrypoints") or limited_entrypoints(facts, static_text, located)
    compose_text = read(facts["compose"]["files"][0]) if facts["compose"] else None
    dynamic = {}
    directory = located["provider"]["dir_host"]
    if os.path.isdir(directory):
        for f in sorted(os.listdir(directory)):
            if f.lower().endswith(traefik_inflight.DYNAMIC_SUFFIXES) and os.path.isfile(os.path.join(directory, f)):
                dynamic[os.path.join(directory, f)] = read(os.path.join(directory, f))
    labels = [((s or {}).get("labels") or {}) for s in ((compose or {}).get("services") or {}).values()]
    labels = [dict((x.split("=", 1) + [""])[:2] for x in lb) if isinstance(lb, list) else lb for lb in labels]
    labels += list(containers)
    return facts, traefik_inflight.plan(facts, located, static_text, compose_text, dynamic, opts, labels), opts


def kept(old, new):
    """Lines of theirs the change lost (the ones it is about excepted)."""
    new_lines = set(new.splitlines())
    return [ln for ln in old.splitlines() if ln.strip() and ln not in new_lines and not MAY_CHANGE.search(ln)]


def check_changed(facts, plan, opts):
    ref = "inflight-limit@file"
    if plan["static"]:
        old, new = plan["static"]["old"], plan["static"]["new"]
        assert kept(old, new) == []
        assert new.startswith("\ufeff") == old.startswith("\ufeff")
        doc = traefik_inflight.parse_static(new, plan["static"]["path"])
        eps = traefik_inflight.lookup(doc, ["entryPoints"])
        for ep in opts["entrypoints"]:
            assert ref in traefik_inflight.lookup(eps, [ep, "http", "middlewares"])
        assert traefik_inflight.lookup(doc, ["ping"]) is not None
        assert traefik_inflight.lookup(eps, [traefik_inflight.API_ENTRYPOINT, "address"]) == "127.0.0.1:%d" % traefik_inflight.API_PORT
    else:
        old, new = plan["compose"]["old"], plan["compose"]["new"]
        command = traefik_inflight.lookup(yaml.safe_load(new), ["services", facts["compose"]["service"], "command"])
        words = shlex.split(command) if isinstance(command, str) else command
        flags = traefik_inflight.parse_flags(words)
        for ep in opts["entrypoints"]:
            assert ref in flags["entrypoints.%s.http.middlewares" % ep.lower()].split(",")
        assert "ping" in flags or any(k.startswith("ping.") for k in flags)
    if plan["compose"]:
        old, new = plan["compose"]["old"], plan["compose"]["new"]
        assert kept(old, new) == []
        svc = traefik_inflight.lookup(yaml.safe_load(new), ["services", facts["compose"]["service"]])
        labels = svc.get("labels") or {}
        assert ("autoheal=true" in labels) if isinstance(labels, list) else str(labels.get("autoheal")) == "true"


# Each collected case: "changed", or the words of its true refusal.
ALONE = "a file mounted alone"             # the single provider file mounted alone, not from compose
NO_DIR = "added to its docker run"         # docker run, no directory Traefik sees for the middleware
SWARM = "swarm service"                    # a stack's task: its config is the service's
EXPECT = {
    "01-lempa-boilerplates-v3-config-dir": "changed",
    "02-lempa-boilerplates-v2-crlf": "changed",
    "03-technotim-launchpad-traefik-yml-root": "changed",
    "04-technotim-portainer-ssl-crlf": "changed",
    "05-technotim-traefik3-guide-env": "changed",
    "06-jimsgarage-traefikv3-env-traefik-yaml": "changed",
    "07-jimsgarage-traefik-secure-four-entrypoints": "changed",
    "08-simplehomelab-include-v3-cli-flags": "it comes from compose/$HOSTNAME/traefik.yml (include:)",
    "09-haxxnet-cloudflare-trustedips-anchors": "changed",
    "10-haxxnet-command-config-trustedips": "changed",
    "11-bluepuma77-dashboard-letsencrypt-cli": "changed",
    "12-bluepuma77-swarm-cli": SWARM,
    "13-traefik-docs-basic-example-cli": "changed",
    "14-traefik-docs-quickstart-v2-string-command": "implicit entrypoint http (:80)",
    "15-traefik-docs-docker-run-etc-traefik": NO_DIR,
    "16-dockerhub-docker-run-v3": NO_DIR,
    "17-dockerhub-docker-run-v2": NO_DIR,
    "18-traefik-docs-setup-docker-metrics": "changed",
    "19-traefik-docs-setup-swarm": SWARM,
    "20-traefik-docs-v2.0-install-sample-toml": NO_DIR,
    "21-traefik-docs-v3.0-install-sample-yml": NO_DIR,
    "22-traefik-docs-entrypoint-options-toml": NO_DIR,
    "23-traefik-docs-tls-domains-toml": NO_DIR,
    "24-dockerswarm-rocks-traefik-stack": SWARM,
    "25-geek-cookbook-swarm-toml": SWARM,
    "26-budgetsmarthome-consul-metrics-toml": NO_DIR,
    "27-cvjoint-udp-wireguard-cli": "changed",
    "28-adrienpoupa-nas-env-cli": "changed",
    "29-frappe-overrides-crlf": "they come from another compose file",
    "30-awesome-compose-string-command": "changed",
    "31-authelia-lite-quoted-cli-http3-port": "changed",
    "32-brewblox-folded-command": "changed",
    "33-wg-easy-http3-traefik-yml-root": "changed",
    "34-fthffs-rootless-high-ports": "changed",
    "35-11notes-rootless-ping-metrics-cli": "changed",
    "36-podman-quadlet-socket-activation": ALONE,
    "37-pangolin-configfile-custom-name": "changed",
    "38-runtipi-cli-plus-etc-traefik-file": "changed",
    "39-spin-swarm-configs-proxyprotocol": SWARM,
    "40-make-my-server-v3-ping-tcp-entrypoints": "changed",
    "41-make-my-server-toml-working-dir": "changed",
    "42-onramp-env-defaults-cli-metrics": "changed",
    "43-docker-run-toml-working-dir": ALONE,
    "44-coolify-proxy-cli-max-streams": "changed",
    "45-lukasnellen-host-network-v2-sample-toml": "changed",
}


@pytest.mark.parametrize("name", cases())
def test_every_guide_config_is_changed_correctly_or_refused_for_its_true_reason(name, tmp_path):
    want = EXPECT.get(name)
    assert want is not None, "%s: no expectation in EXPECT" % name
    if want == "changed":
        facts, plan, opts = run_case(name, tmp_path)
        check_changed(facts, plan, opts)
    else:
        with pytest.raises(EditError) as e:
            run_case(name, tmp_path)
        assert want in str(e.value)


def test_enough_real_configs_are_collected():
    assert len(cases()) >= 30
    for name in cases():
        source = os.path.join(GUIDES, name, "SOURCE.txt")
        assert os.path.exists(source) and "http" in read(source), "%s names no source" % name


# ---- issue 53: the user's own values, Traefik on the host's network, TCP-only entrypoints, on real configs

def labels_of(case, name):
    """The labels of every service of a compose file of a case (other containers running beside Traefik)."""
    doc = yaml.safe_load(read(os.path.join(GUIDES, case, name)))
    return [dict((x.split("=", 1) + [""])[:2] for x in (svc.get("labels") or [])) for svc in doc["services"].values()]


COOLIFY = "44-coolify-proxy-cli-max-streams"
HOST_TOML = "45-lukasnellen-host-network-v2-sample-toml"
MAKE_MY_SERVER = "40-make-my-server-v3-ping-tcp-entrypoints"
STREAMS_HTTPS = "entryPoints.https.http2.maxConcurrentStreams"
# case, options over the role's defaults, other containers' labels (file in the case), what must hold
REAL = [
    ("Coolify's maxConcurrentStreams=50 is kept and reported, and its ping on http", COOLIFY, {}, None,
     {"kept": {STREAMS_HTTPS: "50", "ping": "entryPoint http"}, "compose_has": "maxConcurrentStreams=50'",
      "compose_lacks": "maxConcurrentStreams=32", "ping_by": "you", "warns": "yours (50) kept"}),
    ("override_user_values replaces Coolify's 50 with 32", COOLIFY, {"override_user_values": True}, None,
     {"replaced": {STREAMS_HTTPS: "50"}, "compose_has": "maxConcurrentStreams=32'",
      "compose_lacks": "https.http2.maxConcurrentStreams=50"}),
    ("make-my-server's ping on websecure is kept", MAKE_MY_SERVER, {}, None,
     {"kept": {"ping": "entryPoint websecure"}, "ping_by": "you"}),
    ("its postgres entrypoint serves only TCP routers: warned and left out", MAKE_MY_SERVER,
     {"entrypoints": ["websecure", "postgres"]}, "data-labels.yml",
     {"limited": ["websecure"], "warns": "entrypoint postgres (postgres@docker) serves only TCP routers",
      "static_lacks_on": "postgres"}),
    ("only TCP entrypoints: refused naming them", MAKE_MY_SERVER, {"entrypoints": ["postgres", "redis"]},
     "data-labels.yml", {"refused": "postgres (postgres@docker); redis (redis@docker) serve only TCP routers"}),
    ("network_mode host: no net.* sysctls, the host's are tcp_drain's", HOST_TOML,
     {"sysctls": {"net.ipv4.tcp_fin_timeout": 15, "net.ipv4.tcp_abort_on_overflow": 1}, "listening": [22, 80, 443]},
     None, {"network_mode": "host", "compose_lacks": "sysctls", "warns": "the tcp_drain role's job",
            "kept": {"ping": "entryPoint traefik"}, "ping_by": "you", "provider_after": "  # exposedByDefault = false\n"}),
]


@pytest.mark.parametrize("what, case, extra, others, want", REAL, ids=[r[0] for r in REAL])
def test_real_configs_keep_the_users_values_and_say_so(what, case, extra, others, want, tmp_path):
    containers = labels_of(case, others) if others else ()
    if "refused" in want:
        with pytest.raises(EditError) as e:
            run_case(case, tmp_path, extra, containers)
        assert want["refused"] in str(e.value) and "nothing was changed" in str(e.value)
        return
    facts, plan, opts = run_case(case, tmp_path, extra, containers)
    values = dict((v["setting"], v) for v in plan["user_values"])
    for setting, yours in want.get("kept", {}).items():
        assert values[setting]["kept"] is True and str(values[setting]["yours"]) == yours, values
    for setting, yours in want.get("replaced", {}).items():
        assert values[setting]["kept"] is False and str(values[setting]["yours"]) == yours, values
        assert plan["written"][setting] == 32
    compose = plan["compose"]["new"] if plan["compose"] else ""
    if "compose_has" in want:
        assert want["compose_has"] in compose
    if "compose_lacks" in want:
        assert want["compose_lacks"] not in compose
    if "ping_by" in want:
        assert plan["ping"]["by"] == want["ping_by"]
    if "warns" in want:
        assert any(want["warns"] in w for w in plan["warnings"]), plan["warnings"]
    if "limited" in want:
        assert plan["entrypoints"] == want["limited"]
    if "static_lacks_on" in want:
        doc = traefik_inflight.parse_static(plan["static"]["new"], plan["static"]["path"])
        assert traefik_inflight.lookup(doc, ["entryPoints", want["static_lacks_on"], "http"]) is None
    if "network_mode" in want:
        assert plan["network_mode"] == want["network_mode"]
    if "provider_after" in want:
        new = plan["static"]["new"]
        assert new.index(want["provider_after"]) < new.index("[providers.file]")
        # a commented-out option of the docker provider, uncommented later, is still the docker provider's
        uncommented = new.replace("  # exposedByDefault = false", "  exposedByDefault = false")
        doc = traefik_inflight.parse_static(uncommented, plan["static"]["path"])
        assert traefik_inflight.lookup(doc, ["providers", "docker", "exposedByDefault"]) is False
        assert traefik_inflight.lookup(doc, ["providers", "file"]) == {"directory": "/etc/traefik/dynamic", "watch": True}
    check_changed(facts, plan, dict(opts, entrypoints=plan["entrypoints"]))
