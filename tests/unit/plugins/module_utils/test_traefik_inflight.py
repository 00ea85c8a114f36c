import difflib
import re

import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import yaml_text
from ansible_collections.homelab.edge.plugins.module_utils.traefik.text_edit import EditError


def test_inflight_per_ip_by_default():
    doc = traefik_inflight.inflight_middleware("inflight-limit", 400)
    assert doc == {"http": {"middlewares": {"inflight-limit": {"inFlightReq": {
        "amount": 400, "sourceCriterion": {"ipStrategy": {"depth": 0}}}}}}}


def test_inflight_other_criteria():
    mw = traefik_inflight.inflight_middleware("m", 10, "ip", 1, ["10.0.0.0/8"])["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"ipStrategy": {"depth": 1, "excludedIPs": ["10.0.0.0/8"]}}
    mw = traefik_inflight.inflight_middleware("m", 10, "host")["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"requestHost": True}
    mw = traefik_inflight.inflight_middleware("m", 10, "header", header="X-User")["http"]["middlewares"]["m"]["inFlightReq"]
    assert mw["sourceCriterion"] == {"requestHeaderName": "X-User"}


@pytest.mark.parametrize("kwargs, words", [
    ({"amount": 0}, "amount must be"),
    ({"amount": True}, "amount must be"),
    ({"amount": 5, "source": "cookie"}, "source must be"),
    ({"amount": 5, "source": "header"}, "needs a header"),
    ({"amount": 5, "depth": -1}, "depth must be"),
])
def test_inflight_bad_input(kwargs, words):
    with pytest.raises(traefik_inflight.TraefikConfigError, match=words):
        traefik_inflight.inflight_middleware("m", **kwargs)


WEBSECURE = {"address": ":443", "http": {"tls": {"certResolver": "le"}, "middlewares": ["auth@docker"]}}
STATIC = {
    "entryPoints": {"web": {"address": ":80"}, "websecure": WEBSECURE},
    "providers": {"docker": {"exposedByDefault": False}, "file": {"filename": "/etc/traefik/dynamic.yml"}},
    "certificatesResolvers": {"le": {"acme": {"email": "me@example.org"}}},
}


STATIC = """# Static config, written by hand - keep my comments.
global:
  checkNewVersion: false   # no phoning home

entryPoints:
  web:
    address: ":80"
  websecure:
    address: ":443"
    http:
      tls: {}
      middlewares:
        - security-headers@file   # mine

providers:
  # my routes
  file:
    filename: /etc/traefik/dynamic.yml
    watch: true

log:
  level: INFO
"""
FILENAME = {"kind": "filename", "file": "/etc/traefik/dynamic.yml", "dir": "/etc/traefik/dynamic"}
OPTS = {"name": "inflight-limit", "amount": 400, "entrypoints": ["websecure"], "provider": FILENAME}


def edit(text, opts=None, **kw):
    o = dict(OPTS, **(opts or {}))
    o.update(kw)
    return yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), o))


def removed_lines(old, new):
    return [ln[1:] for ln in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
            if ln.startswith("-") and not ln.startswith("---")]


def test_static_edit_keeps_every_byte_of_theirs():
    new = edit(STATIC)
    # the one line that changes is the provider's; everything else of theirs is there, in order
    assert removed_lines(STATIC, new) == ["    filename: /etc/traefik/dynamic.yml"]
    assert "        - security-headers@file   # mine\n        - inflight-limit@file\n" in new
    assert "    directory: /etc/traefik/dynamic\n    watch: true\n" in new
    assert "  homelab-edge-api:\n    address: 127.0.0.1:9099\n" in new
    assert new.endswith("  level: INFO\n\nping: {}\napi: {}\n")
    doc = yaml.safe_load(new)
    assert doc["entryPoints"]["websecure"]["http"]["middlewares"] == ["security-headers@file", "inflight-limit@file"]
    assert doc["providers"]["file"] == {"directory": "/etc/traefik/dynamic", "watch": True}


def test_static_edit_is_idempotent():
    once = edit(STATIC)
    assert traefik_inflight.static_changes(yaml.safe_load(once), dict(OPTS, provider={"kind": "directory",
                                                                                      "dir": "/etc/traefik/dynamic"})) == []


def test_a_missing_http_block_and_middlewares_are_created_at_the_right_depth():
    text = "entryPoints:\n    websecure:\n        address: ':443'\n"
    new = edit(text, provider={"kind": "directory", "dir": "/d"}, verify_api=False)
    assert new.startswith(text)
    assert "    websecure:\n        address: ':443'\n        http:\n            middlewares:\n" \
           "                - inflight-limit@file\n" in new


def test_flow_lists_get_the_item_inline():
    text = STATIC.replace("      middlewares:\n        - security-headers@file   # mine\n",
                          "      middlewares: [security-headers@file]   # mine\n")
    new = edit(text)
    assert "      middlewares: [security-headers@file, inflight-limit@file]   # mine\n" in new


def test_keys_are_matched_case_insensitively_as_traefik_does():
    text = STATIC.replace("entryPoints:", "entrypoints:")
    new = edit(text)
    assert "entryPoints" not in new.split("# mine", maxsplit=1)[0]
    assert yaml.safe_load(new)["entrypoints"]["websecure"]["http"]["middlewares"][-1] == "inflight-limit@file"


def test_crlf_files_keep_their_line_endings():
    new = edit(STATIC.replace("\n", "\r\n"))
    assert "\n" not in new.replace("\r\n", "")


def test_proxy_protocol_is_trusted_from_the_tunnel_only_and_removed_again():
    new = edit(STATIC, proxy_protocol_trusted_ips=["10.8.0.1/32"])
    assert yaml.safe_load(new)["entryPoints"]["websecure"]["proxyProtocol"] == {"trustedIPs": ["10.8.0.1/32"]}
    directory = {"kind": "directory", "dir": "/etc/traefik/dynamic"}
    off = yaml_text.edit_yaml(new, traefik_inflight.static_changes(yaml.safe_load(new), dict(
        OPTS, provider=directory, proxy_protocol_trusted_ips=[], trusted_added_before=["10.8.0.1/32"])))
    assert "proxyProtocol" not in off
    unchanged = traefik_inflight.static_changes(yaml.safe_load(new), dict(OPTS, provider=directory, proxy_protocol_trusted_ips=None))
    assert unchanged == []


@pytest.mark.parametrize("text, words", [
    ("entryPoints: {websecure: {address: ':443'}}\n", "flow mapping"),
    ("entryPoints:\n  websecure: &ep\n    address: ':443'\n  other: *ep\n", "anchors and aliases"),
])
def test_layouts_it_cannot_edit_line_by_line_are_refused(text, words):
    with pytest.raises(EditError, match=words):
        edit(text, provider={"kind": "directory", "dir": "/d"}, entrypoints=["websecure"])


def test_bad_static_input():
    with pytest.raises(traefik_inflight.TraefikConfigError, match="entrypoint\\(s\\) nosuch not defined"):
        edit(STATIC, entrypoints=["nosuch"])
    with pytest.raises(EditError, match="does not parse as YAML"):
        yaml_text.edit_yaml("a: [b\n", [])


COMPOSE = """services:
  traefik:
    image: traefik:v3.6
    command:
      # entrypoints
      - --entrypoints.websecure.address=:443
      - --providers.file.filename=/etc/traefik/dynamic.yml
      - "--entrypoints.websecure.http.middlewares=mine@file"
    labels:
      - traefik.enable=false
"""


def test_flags_are_edited_item_by_item_in_the_compose_file():
    compose = yaml.safe_load(COMPOSE)
    args = compose["services"]["traefik"]["command"]
    flags = traefik_inflight.parse_flags(args)
    add, remove = traefik_inflight.flag_changes(flags, dict(OPTS, provider=FILENAME))
    assert add["entrypoints.websecure.http.middlewares"] == "mine@file,inflight-limit@file"
    assert remove == ["providers.file.filename"]
    changes = traefik_inflight.compose_command_changes(compose, "traefik", args, add, remove)
    new = yaml_text.edit_yaml(COMPOSE, changes)
    assert removed_lines(COMPOSE, new) == ["      - --providers.file.filename=/etc/traefik/dynamic.yml",
                                           '      - "--entrypoints.websecure.http.middlewares=mine@file"']
    assert '      - "--entrypoints.websecure.http.middlewares=mine@file,inflight-limit@file"\n' in new
    assert "      # entrypoints\n" in new
    # the directory takes the filename's place (and its comment, if any)
    assert yaml.safe_load(new)["services"]["traefik"]["command"][1] == "--providers.file.directory=/etc/traefik/dynamic"
    commented = COMPOSE.replace("dynamic.yml\n", "dynamic.yml  # my routes\n")
    changes = traefik_inflight.compose_command_changes(yaml.safe_load(commented), "traefik", args, add, remove)
    new = yaml_text.edit_yaml(commented, changes)
    assert "      - --providers.file.directory=/etc/traefik/dynamic  # my routes\n" in new


def test_flags_for_docker_run_are_spelled_out():
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"},
                                                dict(OPTS, provider={"kind": "none", "dir": "/etc/traefik/dynamic"}))
    assert traefik_inflight.flags_text(add, remove) == (
        "--api=true --entrypoints.homelab-edge-api.address=127.0.0.1:9099 "
        "--entrypoints.websecure.http.middlewares=inflight-limit@file --ping=true "
        "--providers.file.directory=/etc/traefik/dynamic")


def test_service_changes_add_label_health_check_and_sysctls_in_the_users_style():
    facts = {"compose": {"service": "traefik"}, "source": {"mode": "flags"}, "args": ["--ping=true"]}
    changes = traefik_inflight.service_changes(yaml.safe_load(COMPOSE), facts, {
        "autoheal_label": "autoheal", "healthcheck": {"interval": "30s"}, "sysctls": {"net.ipv4.tcp_fin_timeout": 15}})
    new = yaml_text.edit_yaml(COMPOSE, changes)
    svc = yaml.safe_load(new)["services"]["traefik"]
    assert svc["labels"] == ["traefik.enable=false", "autoheal=true"]
    assert svc["healthcheck"] == {"test": ["CMD", "traefik", "healthcheck", "--ping", "--ping=true"], "interval": "30s"}
    assert svc["sysctls"] == {"net.ipv4.tcp_fin_timeout": "15"}
    assert removed_lines(COMPOSE, new) == []


def test_where_traefik_takes_its_static_config_from():
    assert traefik_inflight.static_source(["--configFile=/c/t.yml", "--ping"], ["/c/t.yml"]) == {
        "mode": "file", "path": "/c/t.yml", "ignored": ["ping"]}
    # a file in a default place wins over every flag, as in Traefik
    assert traefik_inflight.static_source(["--ping"], ["/etc/traefik/traefik.yml"]) == {
        "mode": "file", "path": "/etc/traefik/traefik.yml", "ignored": ["ping"]}
    assert traefik_inflight.static_source(["--entryPoints.web.address=:80"])["flags"] == {"entrypoints.web.address": ":80"}
    assert traefik_inflight.static_source([]) == {"mode": "env"}


ROOT_ENV = {"HOME": "/root"}
ORDER = ["/etc/traefik/traefik.toml", "/etc/traefik/traefik.yaml", "/etc/traefik/traefik.yml",
         "/traefik.toml", "/traefik.yaml", "/traefik.yml",
         "/root/.config/traefik.toml", "/root/.config/traefik.yaml", "/root/.config/traefik.yml"]


def test_the_candidates_in_traefiks_own_order():
    # the official image: no XDG_CONFIG_HOME ("$XDG_CONFIG_HOME/traefik" is "/traefik"), working directory /
    assert traefik_inflight.static_candidates([], ROOT_ENV, "/") == ORDER
    assert traefik_inflight.static_candidates([], {"HOME": "/home/t", "XDG_CONFIG_HOME": "/config"}, "/app") == [
        "/etc/traefik/traefik.toml", "/etc/traefik/traefik.yaml", "/etc/traefik/traefik.yml",
        "/config/traefik.toml", "/config/traefik.yaml", "/config/traefik.yml",
        "/home/t/.config/traefik.toml", "/home/t/.config/traefik.yaml", "/home/t/.config/traefik.yml",
        "/app/traefik.toml", "/app/traefik.yaml", "/app/traefik.yml"]
    # an explicit file first, relative to the working directory
    assert traefik_inflight.static_candidates(["--configfile", "conf/t.yml"], ROOT_ENV, "/app")[0] == "/app/conf/t.yml"
    assert traefik_inflight.static_candidates(["-configFile=${HOME}/t.toml"], ROOT_ENV, "/")[0] == "/root/t.toml"


@pytest.mark.parametrize("args, existing, env, workdir, want", [
    # the guides' ./traefik.yml:/traefik.yml: found (as $XDG_CONFIG_HOME/traefik.yml), flags beside it ignored
    (["--api.insecure=true"], ["/traefik.yml"], ROOT_ENV, "/", ("file", "/traefik.yml")),
    ([], ["/traefik.yaml"], ROOT_ENV, "/", ("file", "/traefik.yaml")),
    # two files side by side: the one Traefik reads (toml before yaml before yml)
    ([], ["/etc/traefik/traefik.yml", "/etc/traefik/traefik.toml"], ROOT_ENV, "/", ("file", "/etc/traefik/traefik.toml")),
    ([], ["/etc/traefik/traefik.yml", "/etc/traefik/traefik.yaml"], ROOT_ENV, "/", ("file", "/etc/traefik/traefik.yaml")),
    # /etc/traefik before the working directory
    ([], ["/traefik.yml", "/etc/traefik/traefik.yml"], ROOT_ENV, "/", ("file", "/etc/traefik/traefik.yml")),
    # the working directory of another image
    ([], ["/srv/traefik.yml"], ROOT_ENV, "/srv", ("file", "/srv/traefik.yml")),
    (["--ping"], ["/root/.config/traefik.yml"], ROOT_ENV, "/", ("file", "/root/.config/traefik.yml")),
    # --configFile beats the defaults; one that does not exist falls back to them, then to the flags
    (["--configFile=/c/t.yml"], ["/c/t.yml", "/etc/traefik/traefik.yml"], ROOT_ENV, "/", ("file", "/c/t.yml")),
    (["--configFile=/c/t.yml"], ["/etc/traefik/traefik.yml"], ROOT_ENV, "/", ("file", "/etc/traefik/traefik.yml")),
    (["--configFile=/c/t.yml", "--ping"], [], ROOT_ENV, "/", ("flags", None)),
    # other spellings are not Traefik's configFile
    (["--ConfigFile=/c/t.yml", "--ping"], ["/c/t.yml"], ROOT_ENV, "/", ("flags", None)),
    # no file and no argument: TRAEFIK_* variables
    ([], [], ROOT_ENV, "/", ("env", None)),
])
def test_the_static_config_traefik_reads(args, existing, env, workdir, want):
    got = traefik_inflight.static_source(args, existing, env, workdir)
    assert (got["mode"], got.get("path")) == want


def test_container_env_as_docker_gives_it():
    assert traefik_inflight.container_env({"Config": {"Env": ["PATH=/bin", "A=b=c"], "WorkingDir": ""}}) == (
        {"PATH": "/bin", "A": "b=c", "HOME": "/root"}, "/")
    assert traefik_inflight.container_env({"Config": {"Env": ["HOME=/h"], "WorkingDir": "/w", "User": "1000"}})[0]["HOME"] == "/h"
    assert traefik_inflight.container_env({"Config": {"User": "1000:1000"}})[0]["HOME"] == "/"


MOUNTS = [{"Type": "bind", "Source": "/srv/t/config", "Destination": "/etc/traefik", "RW": False},
          {"Type": "bind", "Source": "/srv/t/routes.yml", "Destination": "/etc/traefik/routes.yml", "RW": True}]


def test_host_paths_through_the_longest_mount():
    assert traefik_inflight.host_path("/etc/traefik/dynamic", MOUNTS)["host"] == "/srv/t/config/dynamic"
    assert traefik_inflight.host_path("/etc/traefik/routes.yml", MOUNTS)["whole_mount"]
    assert traefik_inflight.host_path("/other", MOUNTS) is None


def facts(args, mounts=None, compose=None):
    given = traefik_inflight.configfile_flag(args)
    return {"name": "traefik", "version": "3.6.12", "major": 3, "args": args, "mounts": MOUNTS if mounts is None else mounts,
            "source": traefik_inflight.static_source(args, [given] if given else []), "compose": compose}


def test_locate_refuses_what_it_cannot_reach_before_anything_changes():
    with pytest.raises(traefik_inflight.TraefikConfigError, match="own image layer"):
        traefik_inflight.locate(facts(["--configFile=/opt/t.yml"]), "", {})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="a file mounted alone from /srv/t/routes.yml.*Mount the directory"):
        traefik_inflight.locate(facts(["--providers.file.filename=/etc/traefik/routes.yml"]), None, {})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="not visible inside traefik"):
        traefik_inflight.locate(facts(["--providers.file.directory=/dyn"]), None, {})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="environment variables"):
        traefik_inflight.locate(facts([]), None, {})
    where = traefik_inflight.locate(facts(["--configFile=/etc/traefik/traefik.yml"]), STATIC.replace(
        "/etc/traefik/dynamic.yml", "/etc/traefik/mine.yml"), {})
    assert where["provider"] == {"kind": "filename", "file": "/etc/traefik/mine.yml", "dir": "/etc/traefik/dynamic",
                                 "dir_host": "/srv/t/config/dynamic", "file_host": "/srv/t/config/mine.yml"}


def test_a_middleware_name_of_theirs_is_refused():
    where = traefik_inflight.locate(facts(["--configFile=/etc/traefik/traefik.yml"]), STATIC.replace(
        "/etc/traefik/dynamic.yml", "/etc/traefik/mine.yml"), {})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="a middleware named inflight-limit already exists"):
        traefik_inflight.plan(facts(["--configFile=/etc/traefik/traefik.yml"]), where, STATIC, None,
                              {"/srv/t/config/mine.yml": "http:\n  middlewares:\n    inflight-limit: {}\n"}, OPTS)


ROUTERS = [{"name": "websecure-site@file", "status": "enabled", "using": ["websecure"],
            "middlewares": ["inflight-limit@file", "mine@file"]},
           {"name": "site@file", "status": "enabled", "using": ["homelab-edge-api"], "middlewares": ["mine@file"]},
           {"name": "auth@file", "status": "enabled", "using": ["websecure"], "middlewares": ["inflight-limit@file"]}]
MWS = [{"name": "inflight-limit@file", "status": "enabled", "inFlightReq": {"amount": 400}}]


def test_the_api_check():
    assert traefik_inflight.check_api(ROUTERS, MWS, {"site@file", "auth@file"}, ["websecure"], "inflight-limit@file", 400) == []
    problems = traefik_inflight.check_api(ROUTERS[:1], MWS, {"site@file", "auth@file"}, ["websecure"], "inflight-limit@file", 50)
    assert problems == ["router auth@file is gone", "middleware inflight-limit@file runs amount 400, not 50 "
                                                    "(not reloaded yet)"]
    broken = [dict(ROUTERS[2], status="disabled", error=["invalid IP"], middlewares=[])]
    assert traefik_inflight.check_api(broken, [], {"auth@file"}, ["websecure"], "inflight-limit@file") == [
        "router auth@file is disabled: invalid IP", "middleware inflight-limit@file is not loaded",
        "router auth@file does not run inflight-limit@file"]


DEV = "Version:      dev\nCodename:     cheddar\nGo version:   go1.26.8\n"
LABEL = {"org.opencontainers.image.version": "v3.6.12"}


def test_version():
    assert traefik_inflight.parse_version("Version:      2.11.30\nCodename: cheddar\n") == (2, "2.11.30")
    assert traefik_inflight.parse_version("nope") is None
    assert traefik_inflight.parse_version(DEV) is None


@pytest.mark.parametrize("output, labels, given, want", [
    # what the binary reports counts
    ("Version:      3.6.12\n", {}, None, (3, "3.6.12", "traefik version")),
    ("Version:      3.6.12\n", {"org.opencontainers.image.version": "v2.11.0"}, None, (3, "3.6.12", "traefik version")),
    ("Version:      3.6.12\n", {}, "3", (3, "3.6.12", "traefik version")),
    # a build that says "dev": the user's word, then the image's label
    (DEV, {}, "3", (3, "3", "traefik_version")),
    (DEV, LABEL, "v2.11.31", (2, "2.11.31", "traefik_version")),
    (DEV, LABEL, None, (3, "3.6.12", "image label org.opencontainers.image.version")),
    (DEV, {"org.opencontainers.image.version": "3.6"}, None, (3, "3.6", "image label org.opencontainers.image.version")),
])
def test_traefik_version_where_it_comes_from(output, labels, given, want):
    got = traefik_inflight.traefik_version(output, labels, given)
    assert (got["major"], got["version"], got["source"]) == want


@pytest.mark.parametrize("output, labels, given, words", [
    # a dev build with neither: the refusal names the option (in the module and the role) and what it read
    (DEV, {}, None, ["'Version: dev Codename: cheddar'", "traefik_version (traefik_inflight_traefik_version in the role)",
                     "org.opencontainers.image.version", "nothing was changed"]),
    (DEV, {"org.opencontainers.image.version": "latest"}, None, ["traefik_version"]),
    ("", {}, None, ["says 'nothing'"]),
    # the user's word against the binary's: refused, naming both
    ("Version:      3.6.12\n", {}, "2", ["traefik_version says 2", "reports 3.6.12"]),
    (DEV, {}, "three", ["'three' is not a version"]),
])
def test_traefik_version_refusals_say_what_to_do(output, labels, given, words):
    with pytest.raises(traefik_inflight.TraefikConfigError) as e:
        traefik_inflight.traefik_version(output, labels, given)
    for w in words:
        assert w in str(e.value)


def test_container_facts_on_a_dev_build():
    inspect = {"Name": "/traefik", "Config": {"Labels": LABEL, "Cmd": []}, "State": {"Running": True}}
    facts = traefik_inflight.container_facts(inspect, DEV, [])
    assert (facts["major"], facts["version"]) == (3, "3.6.12")
    facts = traefik_inflight.container_facts(dict(inspect, Config={"Cmd": []}), DEV, [], "2.11.31")
    assert (facts["major"], facts["version"], facts["version_source"]) == (2, "2.11.31", "traefik_version")


ACCESS_LOG = ['{"ClientHost": "10.8.0.1", "DownstreamStatus": 200}', '{"ClientHost": "10.8.0.1", "DownstreamStatus": 429}',
              'time="..." level=info msg="Configuration loaded"', '{"ClientHost": "192.168.176.3", "DownstreamStatus": 429}',
              '{"broken"', '{"ClientHost": "10.8.0.1", "DownstreamStatus": 200}']


def test_access_log_status_counts_and_client_share():
    assert traefik_inflight.status_counts(ACCESS_LOG) == {"200": 2, "429": 2}
    assert traefik_inflight.client_share(ACCESS_LOG) == ("10.8.0.1", 0.75, 4)
    assert traefik_inflight.client_share(["no json here"]) == (None, 0.0, 0)


# ---- the Docker provider with labels, traefik.yml mounted alone (the commonest compose setup)

DOCKER_STATIC = """entryPoints:
  websecure:
    address: ":443"
providers:
  docker:
    exposedByDefault: false
"""
ALONE = [{"Type": "bind", "Source": "/srv/d/traefik.yml", "Destination": "/etc/traefik/traefik.yml", "RW": False},
         {"Type": "bind", "Source": "/var/run/docker.sock", "Destination": "/var/run/docker.sock", "RW": False}]
COMPOSE_D = {"project": "d", "service": "traefik", "working_dir": "/srv/d", "files": ["/srv/d/compose.yml"],
             "env_files": ["/srv/d/.env"]}
COMPOSE_D_TEXT = """# mine
services:
  traefik:
    image: traefik:${TRAEFIK_VERSION}   # from .env
    volumes:
      - /var/run/docker.sock:/var/run/docker.sock:ro
      - ./traefik.yml:/etc/traefik/traefik.yml:ro
"""


def test_a_docker_provider_traefik_with_its_static_file_mounted_alone_gets_a_directory_mount_and_a_file_provider():
    f = facts(["--configFile=/etc/traefik/traefik.yml"], ALONE, COMPOSE_D)
    where = traefik_inflight.locate(f, DOCKER_STATIC, {})
    assert where["provider"]["mount"] == {"host": "/srv/d/dynamic", "container": "/etc/traefik/dynamic",
                                          "spec": "./dynamic:/etc/traefik/dynamic:ro"}
    assert where["docker"] == {"exposed_by_default": False, "constrained": False}
    labels = [{"traefik.enable": "true", "traefik.http.routers.site.rule": "Host(`site`)"},
              {"traefik.http.routers.hidden.rule": "Host(`x`)"},
              {"traefik.enable": "false", "traefik.http.routers.off.rule": "Host(`y`)"}]
    plan = traefik_inflight.plan(f, where, DOCKER_STATIC, COMPOSE_D_TEXT, {}, dict(OPTS, provider=None), labels)
    assert plan["expected_routers"] == ["site@docker"]
    assert plan["recreate"] and plan["restart"]
    assert plan["compose"]["env_files"] == ["/srv/d/.env"]
    new = plan["compose"]["new"]
    assert removed_lines(COMPOSE_D_TEXT, new) == [] and "      - ./dynamic:/etc/traefik/dynamic:ro\n" in new
    assert "${TRAEFIK_VERSION}   # from .env" in new
    static = yaml.safe_load(plan["static"]["new"])
    assert static["providers"]["file"] == {"directory": "/etc/traefik/dynamic", "watch": True}
    assert static["providers"]["docker"] == {"exposedByDefault": False}


def test_the_same_started_by_docker_run_is_refused_with_the_mount_to_add():
    # in docker run's terms, not compose's
    with pytest.raises(traefik_inflight.TraefikConfigError,
                       match="not visible inside traefik.*-v /srv/traefik/dynamic:/etc/traefik/dynamic added to its docker run"):
        traefik_inflight.locate(facts(["--configFile=/etc/traefik/traefik.yml"], ALONE, None), DOCKER_STATIC, {})


def test_routers_from_labels_follow_exposed_by_default_and_leave_constraints_to_traefik():
    labels = [{"traefik.http.routers.a.rule": "x"}, {"traefik.enable": "true", "traefik.http.routers.b.tls": "true"},
              {"traefik.enable": "false", "traefik.http.routers.c.rule": "x"}]
    assert traefik_inflight.docker_routers({"exposed_by_default": True, "constrained": False}, labels) == ["a@docker", "b@docker"]
    assert traefik_inflight.docker_routers({"exposed_by_default": False, "constrained": False}, labels) == ["b@docker"]
    assert traefik_inflight.docker_routers({"exposed_by_default": True, "constrained": True}, labels) == []
    assert traefik_inflight.docker_routers(None, labels) == []
    assert traefik_inflight.docker_provider(None, {"providers.docker": "true"}) == {"exposed_by_default": True,
                                                                                    "constrained": False}
    assert traefik_inflight.docker_provider({"providers": {"docker": None}}, None)["exposed_by_default"] is True
    assert traefik_inflight.docker_provider({"providers": {"file": {}}}, None) is None


def test_dynamic_names_read_yaml_and_toml():
    routers, mws = traefik_inflight.dynamic_names({"/d/a.yml": "http:\n  routers:\n    site: {}\n",
                                                   "/d/b.toml": "[http.routers.auth]\n[http.middlewares.hdr.headers]\n",
                                                   "/d/broken.toml": "[http\n"})
    assert routers == {"site", "auth"} and mws == {"hdr"}


def test_the_per_client_bound_is_amount_times_the_limited_routers():
    unlimited = {"name": "other@docker", "status": "enabled", "using": ["websecure"], "middlewares": ["mine@file"]}
    b = traefik_inflight.client_bound(ROUTERS + [unlimited], ["websecure"], "inflight-limit@file", 400)
    assert b == {"routers": 2, "names": ["auth@file", "websecure-site@file"], "amount": 400, "bound": 800,
                 "max": 800, "within": True, "text": traefik_inflight.bound_text(b)}
    assert "800 in flight per client: 400 per router x 2 routers" in b["text"]
    assert traefik_inflight.client_bound(ROUTERS, ["websecure"], "inflight-limit@file", 400, 500)["within"] is False
    over = dict(b, max=500, within=False)
    assert "above 500" in traefik_inflight.bound_text(over) and "traefik_inflight_http2_max_streams" in traefik_inflight.bound_text(over)


def test_http2_streams_are_set_on_the_limited_entrypoints_in_files_and_flags():
    opts = dict(OPTS, http2_max_streams=32, provider={"kind": "directory", "dir": "/d"})
    changes = traefik_inflight.static_changes(yaml.safe_load(DOCKER_STATIC), opts)
    assert ("set", ["entryPoints", "websecure", "http2", "maxConcurrentStreams"], 32) in changes
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"},
                                                dict(OPTS, http2_max_streams=32, provider={"kind": "directory", "dir": "/d"}))
    assert add["entrypoints.websecure.http2.maxconcurrentstreams"] == "32"


def test_the_api_check_waits_for_the_middleware_exactly_as_written():
    """A file Traefik has not reloaded yet shows the old middleware with the
    same amount: only the whole inFlightReq tells (zero values as the API
    leaves them out)."""
    want = traefik_inflight.inflight_middleware("inflight-limit", 400, excluded_ips=["10.0.0.9"])["http"]["middlewares"][
        "inflight-limit"]["inFlightReq"]
    old = [{"name": "inflight-limit@file", "status": "enabled",
            "inFlightReq": {"amount": 400, "sourceCriterion": {"ipStrategy": {}}}}]
    problems = traefik_inflight.check_api(ROUTERS, old, [], ["websecure"], "inflight-limit@file", 400, want)
    assert problems and "not reloaded yet" in problems[0]
    new = [dict(old[0], inFlightReq={"amount": 400, "sourceCriterion": {"ipStrategy": {"excludedIPs": ["10.0.0.9"]}}})]
    assert traefik_inflight.check_api(ROUTERS, new, [], ["websecure"], "inflight-limit@file", 400, want) == []


def test_metrics_get_an_entrypoint_of_their_own_unless_the_user_has_metrics():
    new = edit(STATIC, metrics_port=9101)
    doc = yaml.safe_load(new)
    assert doc["metrics"] == {"prometheus": {"entryPoint": "homelab-edge-metrics", "addEntryPointsLabels": True,
                                             "addRoutersLabels": True}}
    assert doc["entryPoints"]["homelab-edge-metrics"] == {"address": ":9101"}
    assert "homelab-edge-metrics" not in str(doc["entryPoints"]["websecure"])  # not limited
    theirs = STATIC + "metrics:\n  prometheus:\n    entryPoint: web\n"
    assert yaml.safe_load(edit(theirs, metrics_port=9101))["metrics"] == {"prometheus": {"entryPoint": "web"}}
    with pytest.raises(traefik_inflight.TraefikConfigError, match="metrics port 443 is the port of entrypoint websecure"):
        edit(STATIC, metrics_port=443)
    # never trusted for PROXY protocol, as the API's
    trusted = yaml.safe_load(edit(new, metrics_port=9101, proxy_protocol_trusted_ips=["10.8.0.1"],
                                  provider={"kind": "directory", "dir": "/etc/traefik/dynamic"}))
    assert "proxyProtocol" not in trusted["entryPoints"]["homelab-edge-metrics"]


def test_metrics_in_flags_and_in_toml():
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"},
                                                dict(OPTS, metrics_port=9101, provider={"kind": "directory", "dir": "/d"}))
    assert add["metrics.prometheus.entrypoint"] == "homelab-edge-metrics"
    assert add["entrypoints.homelab-edge-metrics.address"] == ":9101"
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443", "metrics.prometheus": "true"},
                                                dict(OPTS, metrics_port=9101, provider={"kind": "directory", "dir": "/d"}))
    assert not [k for k in add if "metrics" in k]
    text = '[entryPoints]\n  [entryPoints.websecure]\n    address = ":443"\n'
    changes = traefik_inflight.static_changes(traefik_inflight.parse_static(text, "/t.toml"),
                                              dict(OPTS, metrics_port=9101, provider={"kind": "directory", "dir": "/d"}))
    new = traefik_inflight.edit_static(text, changes, "/t.toml")
    doc = traefik_inflight.parse_static(new, "/t.toml")
    assert doc["metrics"]["prometheus"]["entryPoint"] == "homelab-edge-metrics"
    assert new.startswith(text)


def test_requests_on_the_roles_own_entrypoints_are_not_the_users():
    """Prometheus's scrapes (every few seconds, one address) and the role's API
    reads would make the per-IP limit look blind: they are left out."""
    scrapes = ['{"ClientHost": "172.18.0.1", "DownstreamStatus": 200, "entryPointName": "homelab-edge-metrics"}'] * 60
    api = ['{"ClientHost": "127.0.0.1", "DownstreamStatus": 200, "entryPointName": "homelab-edge-api"}'] * 10
    assert traefik_inflight.client_share(ACCESS_LOG + scrapes + api) == ("10.8.0.1", 0.75, 4)
    assert traefik_inflight.status_counts(scrapes + ACCESS_LOG) == {"200": 2, "429": 2}


# ---- the role's own listeners never collide with the user's (ping's default entrypoint is `traefik` on :8080)

ON_8080 = "entryPoints:\n  web:\n    address: \":8080\"\n  websecure:\n    address: \":8443\"\n"
DIRECTORY = {"kind": "directory", "dir": "/d"}


def test_ping_beside_a_user_entrypoint_on_8080_goes_on_the_roles_api_entrypoint():
    doc = yaml.safe_load(edit(ON_8080, provider=DIRECTORY))
    assert doc["ping"] == {"entryPoint": "homelab-edge-api"}
    assert doc["entryPoints"]["homelab-edge-api"] == {"address": "127.0.0.1:9099"}
    # no clash: ping stays on Traefik's default, as before
    assert yaml.safe_load(edit(STATIC))["ping"] == {}
    # an entrypoint of theirs named traefik: ping uses it, Traefik creates none
    theirs = ON_8080.replace("  web:", "  traefik:")
    assert yaml.safe_load(edit(theirs, provider=DIRECTORY))["ping"] == {}
    # a UDP entrypoint on 8080 binds no TCP port
    udp = ON_8080.replace('":8080"', '":8080/udp"')
    assert yaml.safe_load(edit(udp, provider=DIRECTORY))["ping"] == {}


def test_ping_clash_in_toml_and_flags():
    text = '[entryPoints]\n  [entryPoints.web]\n    address = ":8080"\n  [entryPoints.websecure]\n    address = ":8443"\n'
    opts = dict(OPTS, provider=DIRECTORY)
    new = traefik_inflight.edit_static(text, traefik_inflight.static_changes(traefik_inflight.parse_static(text, "/t.toml"), opts), "/t.toml")
    assert traefik_inflight.parse_static(new, "/t.toml")["ping"] == {"entryPoint": "homelab-edge-api"}
    add, remove = traefik_inflight.flag_changes({"entrypoints.web.address": ":8080", "entrypoints.websecure.address": ":8443"},
                                                opts)
    assert add["ping"] == "true" and add["ping.entrypoint"] == "homelab-edge-api"
    assert add["entrypoints.homelab-edge-api.address"] == "127.0.0.1:9099"
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"}, opts)
    assert "ping.entrypoint" not in add


def test_the_health_check_asks_ping_where_it_listens():
    facts = {"compose": {"service": "traefik"}, "source": {"mode": "flags"},
             "args": ["--entrypoints.web.address=:8080", "--entrypoints.websecure.address=:8443"]}
    compose = {"services": {"traefik": {"image": "traefik:v3.6"}}}
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(facts["args"]), dict(OPTS, provider=DIRECTORY))
    changes = traefik_inflight.service_changes(compose, facts, {"healthcheck": {"interval": "30s"}, "flags_added": add})
    test = [c for c in changes if c[1][-1] == "healthcheck"][0][2]["test"]
    assert test == ["CMD", "traefik", "healthcheck", "--ping", "--entrypoints.homelab-edge-api.address=127.0.0.1:9099",
                    "--ping=true", "--ping.entrypoint=homelab-edge-api"]


@pytest.mark.parametrize("text, opts, words", [
    # the role's API entrypoint on a port of theirs
    (ON_8080.replace('":8443"', '":9099"'), {}, "listens on 127.0.0.1:9099, the port of your entrypoint websecure"),
    # ping would clash and there is no API entrypoint to put it on
    (ON_8080, {"verify_api": False}, "default entrypoint traefik on :8080, where your entrypoint web listens"),
    # an in-flight limit on a UDP entrypoint
    ("entryPoints:\n  websecure:\n    address: \":443/udp\"\n", {}, "websecure listen on UDP"),
])
def test_clashes_are_refused_naming_them(text, opts, words):
    with pytest.raises(traefik_inflight.TraefikConfigError, match=words.replace("(", "\\(")):
        edit(text, provider=DIRECTORY, **opts)


# ---- every setting held to the version the user's Traefik has

def test_settings_newer_than_the_users_traefik_are_left_out_with_a_warning():
    warnings = []
    changes = traefik_inflight.static_changes(yaml.safe_load(STATIC), dict(OPTS, version="2.5.7", http2_max_streams=32,
                                                                           metrics_port=9101), warnings)
    assert not [c for c in changes if "http2" in c[1]]
    assert ("append", ["entryPoints", "websecure", "http", "middlewares"], "inflight-limit@file") in changes
    assert warnings == ["entryPoints.<name>.http2.maxConcurrentStreams (entrypoints.go, v2.8.0) needs Traefik 2.8.0 "
                        "or later; this one is 2.5.7: left out"]
    warnings = []
    changes = traefik_inflight.static_changes(yaml.safe_load(STATIC), dict(OPTS, version="2.4.0", metrics_port=9101), warnings)
    assert [c for c in changes if c[1] == ["metrics"]][0][2]["prometheus"] == {
        "entryPoint": "homelab-edge-metrics", "addEntryPointsLabels": True}
    assert "addRoutersLabels" in warnings[0] and "2.5.0" in warnings[0]
    warnings = []
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"}, dict(
        OPTS, version="2.7.1", http2_max_streams=32, provider=DIRECTORY), warnings)
    assert not [k for k in add if "http2" in k] and "2.8.0" in warnings[0]
    # at and above each version, everything
    warnings = []
    changes = traefik_inflight.static_changes(yaml.safe_load(STATIC), dict(OPTS, version="2.8.0", http2_max_streams=32), warnings)
    assert [c for c in changes if "http2" in c[1]] and warnings == []


def test_below_the_essential_version_the_change_is_refused():
    with pytest.raises(traefik_inflight.TraefikConfigError, match="needs Traefik 2.2.0 or later; this one is 2.1.1"):
        traefik_inflight.static_changes(yaml.safe_load(STATIC), dict(OPTS, version="2.1.1"))
    with pytest.raises(traefik_inflight.TraefikConfigError, match="give the full version in traefik_version"):
        traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"}, dict(OPTS, version="2", provider=DIRECTORY))


def test_version_tuples():
    assert traefik_inflight.version_tuple("3") == (3, 0, 0) and traefik_inflight.version_tuple("2.11.30") == (2, 11, 30)
    assert traefik_inflight.supports("2.10", "http2_max_streams") and not traefik_inflight.supports("2.7.9", "http2_max_streams")


# ---- the user's trusted addresses are kept; HTTP settings only where HTTP is

def test_trusted_ips_are_merged_with_the_users_and_skip_udp_entrypoints():
    text = ("entryPoints:\n  websecure:\n    address: \":443\"\n    proxyProtocol:\n      trustedIPs:\n"
            "        - 173.245.48.0/20   # Cloudflare\n  h3:\n    address: \":443/udp\"\n")
    new = edit(text, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.8.0.1/32"])
    doc = yaml.safe_load(new)
    assert doc["entryPoints"]["websecure"]["proxyProtocol"]["trustedIPs"] == ["173.245.48.0/20", "10.8.0.1/32"]
    assert "proxyProtocol" not in doc["entryPoints"]["h3"]
    assert edit(new, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.8.0.1/32"]) == new  # idempotent
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443",
                                                 "entrypoints.websecure.proxyprotocol.trustedips": "173.245.48.0/20",
                                                 "entrypoints.h3.address": ":443/udp"},
                                                dict(OPTS, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.8.0.1/32"]))
    assert add["entrypoints.websecure.proxyprotocol.trustedips"] == "173.245.48.0/20,10.8.0.1/32"
    assert "entrypoints.h3.proxyprotocol.trustedips" not in add


# ---- a byte-order mark (Traefik's parsers skip it) is kept as it was

@pytest.mark.parametrize("path, text", [
    ("/etc/traefik/traefik.yml", "\ufeff# mine\nentryPoints:\n  websecure:\n    address: \":443\"\n"),
    ("/etc/traefik/traefik.toml", '\ufeff# mine\n[entryPoints]\n  [entryPoints.websecure]\n    address = ":443"\n'),
])
def test_a_byte_order_mark_is_read_past_and_kept(path, text):
    doc = traefik_inflight.parse_static(text, path)
    assert doc["entryPoints"]["websecure"]["address"] == ":443"
    new = traefik_inflight.edit_static(text, traefik_inflight.static_changes(doc, dict(OPTS, provider=DIRECTORY)), path)
    assert new.startswith(text) and new.count("\ufeff") == 1
    assert traefik_inflight.parse_static(new, path)["entryPoints"]["websecure"]["http"]["middlewares"] == ["inflight-limit@file"]


def test_flags_beside_the_file_traefik_reads_are_named_as_ignored():
    f = facts(["--configFile=/etc/traefik/traefik.yml", "--api.insecure=true"])
    where = traefik_inflight.locate(f, STATIC, {})
    p = traefik_inflight.plan(f, where, STATIC, None, {}, dict(OPTS, verify_api=True))
    assert "Traefik ignores its command-line flags (--api.insecure)" in p["warnings"][0]


# ---- a command written as one string (compose splits it as a shell does), plain, quoted or folded

@pytest.mark.parametrize("command", [
    "    command: --providers.docker --entrypoints.websecure.address=:443 --api.dashboard=true  # mine\n",
    "    command: \"--providers.docker --entrypoints.websecure.address=:443 --api.dashboard=true\"\n",
    "    command: >-\n      --providers.docker\n      --entrypoints.websecure.address=:443\n      --api.dashboard=true\n",
    "    command: |\n      --providers.docker\n      --entrypoints.websecure.address=:443\n      --api.dashboard=true\n",
])
def test_a_string_command_is_edited_word_by_word_in_place(command):
    text = "services:\n  traefik:\n    image: traefik:v3.6\n" + command + "    ports:\n      - 443:443\n"
    args = ["--providers.docker", "--entrypoints.websecure.address=:443", "--api.dashboard=true"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(args), dict(OPTS, provider=DIRECTORY))
    changes = traefik_inflight.compose_command_changes(yaml.safe_load(text), "traefik", args, add, remove)
    new = yaml_text.edit_yaml(text, changes, "compose")
    got = yaml.safe_load(new)["services"]["traefik"]["command"]
    import shlex
    words = shlex.split(got)
    assert words[:3] == args and "--entrypoints.websecure.http.middlewares=inflight-limit@file" in words
    assert "--ping=true" in words and "--entrypoints.homelab-edge-api.address=127.0.0.1:9099" in words
    assert removed_lines(text, new) == ([] if command.count("\n") > 1 else [command.rstrip("\n")])
    assert new.endswith("    ports:\n      - 443:443\n")
    # again: nothing more to do
    again = traefik_inflight.flag_changes(traefik_inflight.parse_flags(words), dict(OPTS, provider=DIRECTORY))
    assert again == ({}, [])


def test_a_flag_in_a_string_command_is_replaced_where_it_stands():
    text = ("services:\n  traefik:\n    command: >-\n      --entrypoints.websecure.address=:443\n"
            "      --entrypoints.websecure.http.middlewares=auth@file\n      --ping\n")
    args = ["--entrypoints.websecure.address=:443", "--entrypoints.websecure.http.middlewares=auth@file", "--ping"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(args), dict(OPTS, provider=DIRECTORY, verify_api=False))
    new = yaml_text.edit_yaml(text, traefik_inflight.compose_command_changes(yaml.safe_load(text), "traefik", args, add, remove),
                              "compose")
    assert "      --entrypoints.websecure.http.middlewares=auth@file,inflight-limit@file\n      --ping\n" in new


# ---- where the role does not edit: said truly, in the user's terms

def test_a_service_from_an_included_file_is_refused_naming_it():
    compose = "include:\n  - ./traefik/compose.yml\n  - path: [./apps.yml]\nservices:\n  app:\n    image: nginx\n"
    project = {"project": "p", "service": "traefik", "working_dir": "/srv/p", "files": ["/srv/p/compose.yml"]}
    f = dict(facts(["--configFile=/etc/traefik/traefik.yml"], ALONE, project), labels={})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="not in /srv/p/compose.yml.*it comes from ./traefik/compose.yml "
                       "\\(include:\\) or ./apps.yml \\(include:\\)"):
        traefik_inflight.plan(f, traefik_inflight.locate(f, DOCKER_STATIC, {}), DOCKER_STATIC, compose, {}, dict(OPTS, autoheal_label="a"))


def test_a_swarm_task_is_refused_with_the_change_in_swarm_terms():
    f = dict(facts(["--configFile=/etc/traefik/traefik.yml"]), labels={"com.docker.swarm.service.name": "edge_traefik"})
    with pytest.raises(traefik_inflight.TraefikConfigError, match="swarm service edge_traefik.*docker service update"):
        traefik_inflight.locate(f, STATIC, {"name": "inflight-limit", "entrypoints": ["websecure"]})


def test_a_refusal_spells_values_as_a_user_writes_them():
    from ansible_collections.homelab.edge.plugins.module_utils.traefik import text_edit
    words = text_edit.describe([("ensure", ["providers", "file"], {"directory": "/d", "watch": True}),
                                ("ensure", ["ping"], {}), ("append", ["a"], "x@file")])
    assert words == 'set providers.file to {"directory": "/d", "watch": true}; set ping to {}; add x@file to the list a'


@pytest.mark.parametrize("version, docker_provider, min_api, warns", [
    ("2.11.30", True, "1.44", True),      # Docker 29.0: the lab's old v2 would route nothing
    ("2.10.7", True, "1.44", True),
    ("2.11.31", True, "1.44", False),     # negotiates from 2.11.31
    ("2.11.30", True, "1.24", False),     # Docker 28 and older accept 1.24
    ("2.11.30", True, "1.40", True),
    ("2.11.30", False, "1.44", False),    # no Docker provider: nothing asks the engine
    ("3.6.12", True, "1.44", False),
    ("2.11.30", True, "", False),         # the engine's minimum unknown: no word
])
def test_a_traefik_too_old_for_the_engine_is_named(version, docker_provider, min_api, warns):
    warning = traefik_inflight.engine_api_warning(version, docker_provider, min_api)
    assert bool(warning) == warns
    if warns:
        assert "below this engine's minimum %s" % min_api in warning and "2.11.31 or later" in warning


def test_a_flag_whose_value_is_the_next_word_is_read_whole_and_refused_for_editing():
    cmd = ["traefik", "--configFile", "/etc/traefik/custom.yml", "--ping"]
    inspect = {"Config": {"Entrypoint": ["/entrypoint.sh"], "Cmd": cmd}}
    args = traefik_inflight.traefik_args(inspect)
    assert args == ["--configFile", "/etc/traefik/custom.yml", "--ping"]
    got = traefik_inflight.static_source(args, ["/etc/traefik/custom.yml", "/etc/traefik/traefik.yml"])
    assert (got["mode"], got["path"]) == ("file", "/etc/traefik/custom.yml")
    text = ("services:\n  traefik:\n    command:\n      - --entrypoints.websecure.address=:443\n"
            "      - --entrypoints.websecure.http.middlewares\n      - auth@file\n")
    words = yaml.safe_load(text)["services"]["traefik"]["command"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(words), dict(OPTS, provider=DIRECTORY))
    assert add["entrypoints.websecure.http.middlewares"] == "auth@file,inflight-limit@file"
    with pytest.raises(traefik_inflight.TraefikConfigError, match="as a separate word .*--entrypoints.websecure.http.middlewares="
                       "VALUE"):
        traefik_inflight.compose_command_changes(yaml.safe_load(text), "traefik", words, add, remove)


def test_a_value_spelled_with_compose_variables_keeps_them():
    text = ("services:\n  traefik:\n    command:\n      - --entrypoints.websecure.address=:443\n"
            "      - --entrypoints.websecure.http.middlewares=${MW}\n")
    running = ["--entrypoints.websecure.address=:443", "--entrypoints.websecure.http.middlewares=secure@file"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(running), dict(OPTS, provider=DIRECTORY))
    changes = traefik_inflight.compose_command_changes(yaml.safe_load(text), "traefik", running, add, remove)
    new = yaml_text.edit_yaml(text, changes)
    assert "      - --entrypoints.websecure.http.middlewares=${MW},inflight-limit@file\n" in new


@pytest.mark.parametrize("port, words", [
    (9099, "homelab-edge-api (the role's API)"),
    (8080, "traefik (Traefik's default, :8080)"),
])
def test_the_metrics_port_is_clear_of_the_other_listeners_traefik_will_have(port, words):
    with pytest.raises(traefik_inflight.TraefikConfigError, match=re.escape(words)):
        edit(STATIC, metrics_port=port)
    with pytest.raises(traefik_inflight.TraefikConfigError, match=re.escape(words)):
        traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443"},
                                      dict(OPTS, metrics_port=port, provider=DIRECTORY))


def test_a_flag_removed_first_on_a_line_of_a_folded_command_keeps_the_line_indented():
    text = ("services:\n  traefik:\n    command: >-\n"
            "      --entrypoints.web.proxyprotocol.trustedips=10.0.0.1 --entrypoints.web.address=:80\n"
            "      --entrypoints.websecure.address=:443\n")
    args = ["--entrypoints.web.proxyprotocol.trustedips=10.0.0.1", "--entrypoints.web.address=:80",
            "--entrypoints.websecure.address=:443"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(args), dict(OPTS, provider=DIRECTORY,
                                                                                         proxy_protocol_trusted_ips=[],
                                                                                         trusted_added_before=["10.0.0.1"]))
    assert remove == ["entrypoints.web.proxyprotocol.trustedips"]
    new = yaml_text.edit_yaml(text, traefik_inflight.compose_command_changes(yaml.safe_load(text), "traefik", args, add, remove))
    assert "    command: >-\n      --entrypoints.web.address=:80\n      --entrypoints.websecure.address=:443\n" in new


def test_a_compose_file_with_a_byte_order_mark_keeps_it():
    text = "\ufeff" + COMPOSE
    compose = yaml_text.parse(text, "compose.yml")
    args = compose["services"]["traefik"]["command"]
    add, remove = traefik_inflight.flag_changes(traefik_inflight.parse_flags(args), dict(OPTS, provider=FILENAME))
    new = yaml_text.edit_yaml(text, traefik_inflight.compose_command_changes(compose, "traefik", args, add, remove))
    assert new.startswith("\ufeffservices:\n") and new.count("\ufeff") == 1


def test_trusted_ips_keep_the_users_comments_and_drop_only_what_the_role_added_before():
    text = ("entryPoints:\n  websecure:\n    address: \":443\"\n    proxyProtocol:\n      trustedIPs:\n"
            "        - \"192.168.1.1\"   # office VPN\n")
    once = edit(text, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.8.0.1/32"])
    assert '        - "192.168.1.1"   # office VPN\n        - 10.8.0.1/32\n' in once
    p = traefik_inflight.plan(facts(["--configFile=/etc/traefik/traefik.yml"]), {
        "mode": "file", "static": "/etc/traefik/traefik.yml", "provider": DIRECTORY, "docker": None},
        text, None, {}, dict(OPTS, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.8.0.1/32"]))
    assert p["trusted_added"] == ["10.8.0.1/32"]
    # the tunnel moved: the role's old address goes, the user's stays
    moved = edit(once, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.9.0.1/32"],
                 trusted_added_before=["10.8.0.1/32"])
    assert yaml.safe_load(moved)["entryPoints"]["websecure"]["proxyProtocol"]["trustedIPs"] == [
        "192.168.1.1", "10.9.0.1/32"]
    # an address of the user's that the role also wants is never the role's to drop
    merged = traefik_inflight.trusted_merge(["10.8.0.1/32"], ["10.9.0.1/32"], [])
    assert merged == (["10.8.0.1/32", "10.9.0.1/32"], ["10.9.0.1/32"], [])
    assert traefik_inflight.trusted_added(yaml.safe_load(text), None, None, ["10.8.0.1/32"]) == ["10.8.0.1/32"]
    add, remove = traefik_inflight.flag_changes({"entrypoints.websecure.address": ":443",
                                                 "entrypoints.websecure.proxyprotocol.trustedips": "10.0.0.9,10.8.0.1/32"},
                                                dict(OPTS, provider=DIRECTORY, proxy_protocol_trusted_ips=["10.9.0.1/32"],
                                                     trusted_added_before=["10.8.0.1/32"]))
    assert add["entrypoints.websecure.proxyprotocol.trustedips"] == "10.0.0.9,10.9.0.1/32"


# ---- issue 53: the user's own values are kept (or replaced only on request), Traefik on the host's network

HOST_YAML = "entryPoints:\n  web:\n    address: \":80\"\n  websecure:\n    address: \":443\"\n"
HOST_FLAGS = {"entrypoints.web.address": ":80", "entrypoints.websecure.address": ":443"}
PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:238A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100007F:238B 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
"""


def test_the_hosts_listening_ports_are_read_from_proc_net_tcp():
    # 0x1F90 = 8080 on every address, 0x238A = 9098 on loopback; 0x238B is an established connection
    assert traefik_inflight.listening_ports(PROC_NET_TCP) == {8080, 9098}
    assert traefik_inflight.listening_ports("") == set()


# (what, listening ports of the host, extra options, the ping address or the refusal's words)
HOST_PING = [
    ("the first free loopback port", [], {}, "127.0.0.1:9098"),
    ("past the ports something on the host holds", [8080, 9098, 9097], {}, "127.0.0.1:9096"),
    ("past the metrics port", [9098], {"metrics_port": 9097}, "127.0.0.1:9096"),
    ("every candidate taken", list(traefik_inflight.PING_PORTS), {}, "none of 9091-9098 and 9180-9199 is free"),
    ("the API port taken on the host", [9099], {}, "something listens on port 9099 already"),
    ("the metrics port taken on the host", [9101], {"metrics_port": 9101}, "metrics port 9101 is taken on the host"),
]


@pytest.mark.parametrize("what, listening, extra, want", HOST_PING, ids=[h[0] for h in HOST_PING])
def test_on_the_hosts_network_ping_gets_a_free_loopback_port_never_8080(what, listening, extra, want):
    opts = dict(OPTS, provider=DIRECTORY, host_network=True, listening=listening, **extra)
    if not want.startswith("127."):
        for run in (lambda: traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), opts),
                    lambda: traefik_inflight.flag_changes(HOST_FLAGS, opts)):
            with pytest.raises(traefik_inflight.TraefikConfigError, match=re.escape(want)) as e:
                run()
            assert "nothing was changed" in str(e.value)
        return
    report = {}
    changes = traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), opts, [], report)
    assert ("ensure", ["ping"], {"entryPoint": traefik_inflight.PING_ENTRYPOINT}) in changes
    assert ("ensure", ["entryPoints", traefik_inflight.PING_ENTRYPOINT], {"address": want}) in changes
    assert report["ping"] == {"entrypoint": traefik_inflight.PING_ENTRYPOINT, "address": want, "by": "homelab.edge"}
    add, remove = traefik_inflight.flag_changes(HOST_FLAGS, opts)
    assert add["ping.entrypoint"] == traefik_inflight.PING_ENTRYPOINT and add["entrypoints.homelab-edge-ping.address"] == want
    # applied, a second run changes nothing and calls that ping the role's
    new = yaml_text.edit_yaml(HOST_YAML, changes)
    again = {}
    assert traefik_inflight.static_changes(yaml.safe_load(new), dict(opts, listening=listening + [int(want[-4:])]), [],
                                           again) == []
    assert again["ping"]["by"] == "homelab.edge" and again["user_values"] == []


def test_off_the_hosts_network_ping_stays_where_it_was():
    report = {}
    changes = traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), dict(OPTS, provider=DIRECTORY), [], report)
    assert ("ensure", ["ping"], {}) in changes and report["ping"]["address"] == ":8080"


def test_the_health_check_of_a_host_network_traefik_asks_ping_where_the_role_put_it():
    opts = dict(OPTS, provider=DIRECTORY, host_network=True, listening=[],
                healthcheck={"interval": "30s", "timeout": "5s", "retries": 3})
    add, remove = traefik_inflight.flag_changes(HOST_FLAGS, opts)
    args = ["--entrypoints.web.address=:80", "--entrypoints.websecure.address=:443"]
    compose = {"files": ["/srv/compose.yml"], "service": "traefik", "working_dir": "/srv"}
    f = dict(facts(args, compose=compose), network_mode="host")
    changes = traefik_inflight.service_changes(yaml.safe_load(COMPOSE), f, dict(opts, flags_added=add))
    test = [c for c in changes if c[1][-1] == "healthcheck"][0][2]["test"]
    assert "--ping.entrypoint=homelab-edge-ping" in test and "--entrypoints.homelab-edge-ping.address=127.0.0.1:9098" in test


@pytest.mark.parametrize("mode, sysctls, kept_keys", [
    ("host", {"net.ipv4.tcp_fin_timeout": 15}, []),
    ("default", {"net.ipv4.tcp_fin_timeout": 15}, ["net.ipv4.tcp_fin_timeout"]),
])
def test_no_net_sysctls_in_the_hosts_namespace(mode, sysctls, kept_keys):
    compose = {"files": ["/srv/compose.yml"], "service": "traefik", "working_dir": "/srv"}
    f = dict(facts(["--entrypoints.websecure.address=:443"], compose=compose), network_mode=mode)
    warnings = []
    changes = traefik_inflight.service_changes(yaml.safe_load(COMPOSE), f, {"sysctls": sysctls}, warnings)
    assert [c[1][-1] for c in changes if "sysctls" in c[1]] == kept_keys
    assert bool(warnings) == (mode == "host")
    assert all("tcp_drain" in w and "net.ipv4.tcp_fin_timeout" in w for w in warnings)


LIMITERS = {
    "/d/mine.yml": "http:\n  middlewares:\n    my-limit:\n      inFlightReq:\n        amount: 100\n"
                   "    my-rate:\n      rateLimit:\n        average: 50\n        burst: 100\n"
                   "  routers:\n    app:\n      rule: Host(`a`)\n      entryPoints: [websecure]\n"
                   "      middlewares: [my-rate]\n      service: app\n",
}
ON_EP = "entryPoints:\n  websecure:\n    address: \":443\"\n    http:\n      middlewares:\n        - my-limit@file\n"


def routing(containers=()):
    return traefik_inflight.user_routing(LIMITERS, {"exposed_by_default": False, "constrained": False}, containers)


# (what, static, options, middlewares on websecure after, limited entrypoints, user values: setting -> kept)
USERS_LIMITERS = [
    ("their inFlightReq on the entrypoint is kept and ours not added", ON_EP, {}, ["my-limit@file"], [],
     {"entryPoints.websecure.http.middlewares": True, "router app@file": True}),
    ("override_user_values puts ours in its place", ON_EP, {"override_user_values": True},
     ["inflight-limit@file"], ["websecure"], {"entryPoints.websecure.http.middlewares": False, "router app@file": True}),
    ("their rateLimit on a router stays beside ours", HOST_YAML, {}, ["inflight-limit@file"], ["websecure"],
     {"router app@file": True}),
]


@pytest.mark.parametrize("what, text, extra, mws, limited, values", USERS_LIMITERS, ids=[u[0] for u in USERS_LIMITERS])
def test_the_users_limiters_are_kept_and_reported(what, text, extra, mws, limited, values):
    opts = dict(OPTS, provider=DIRECTORY, routing=routing(), **extra)
    report = {}
    new = yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), opts, [], report))
    assert yaml.safe_load(new)["entryPoints"]["websecure"].get("http", {}).get("middlewares") == mws
    assert report["entrypoints"] == limited
    got = dict((v["setting"], v["kept"]) for v in report["user_values"] if v["setting"] != "ping")
    assert got == values
    # the same on flags
    flags = dict(HOST_FLAGS, **({"entrypoints.websecure.http.middlewares": "my-limit@file"} if "my-limit" in text else {}))
    add, remove = traefik_inflight.flag_changes(flags, opts, [], {})
    assert add.get("entrypoints.websecure.http.middlewares", flags.get("entrypoints.websecure.http.middlewares")) == \
        ",".join(mws)


def test_limiters_in_labels_are_read_and_described():
    labels = {"traefik.enable": "true", "traefik.http.routers.web.entrypoints": "websecure",
              "traefik.http.routers.web.middlewares": "lim", "traefik.http.middlewares.lim.inflightreq.amount": "10",
              "traefik.http.middlewares.lim.inflightreq.sourcecriterion.ipstrategy.depth": "1",
              "traefik.tcp.routers.db.entrypoints": "pg"}
    r = routing([labels])
    assert r["limiters"]["lim@docker"] == {"type": "inFlightReq", "config": {
        "amount": "10", "sourcecriterion.ipstrategy.depth": "1"}}
    assert traefik_inflight.limiter_text("lim@docker", r["limiters"]["lim@docker"]) == \
        "lim@docker (inFlightReq: 10 in flight per client IP, per router)"
    assert "average 50 per 1s, burst 100" in traefik_inflight.limiter_text("my-rate@file", r["limiters"]["my-rate@file"])
    assert traefik_inflight.entrypoint_routers(r, "pg") == ([], ["db@docker"])
    assert [x[0] for x in traefik_inflight.router_limiters(r, "websecure")] == ["app@file", "web@docker"]
    # a container the Docker provider does not expose is no router of Traefik's
    assert traefik_inflight.user_routing({}, {"exposed_by_default": False, "constrained": False},
                                         [dict(labels, **{"traefik.enable": "false"})])["routers"] == []


STREAMS = "entryPoints.websecure.http2.maxConcurrentStreams"
WITH_STREAMS = HOST_YAML + "    http2:\n      maxConcurrentStreams: 100\n"


# (what, options, the value after, whose it is in the report: None - no report, True kept, False replaced)
USERS_STREAMS = [
    ("theirs is kept", {}, 100, True),
    ("override_user_values replaces it", {"override_user_values": True}, 32, False),
    ("one the role wrote before is the role's to change", {"written_before": {STREAMS: 100}}, 32, None),
    ("equal to the role's: nothing to say", {"http2_max_streams": 100}, 100, None),
]


@pytest.mark.parametrize("what, extra, after, kept", USERS_STREAMS, ids=[u[0] for u in USERS_STREAMS])
def test_the_users_http2_streams_are_kept_unless_asked(what, extra, after, kept):
    opts = dict(OPTS, provider=DIRECTORY, http2_max_streams=32)
    opts.update(extra)
    report, warnings = {}, []
    new = yaml_text.edit_yaml(WITH_STREAMS, traefik_inflight.static_changes(yaml.safe_load(WITH_STREAMS), opts, warnings, report))
    assert yaml.safe_load(new)["entryPoints"]["websecure"]["http2"]["maxConcurrentStreams"] == after
    values = [v for v in report["user_values"] if v["setting"] == STREAMS]
    assert [v["kept"] for v in values] == ([] if kept is None else [kept])
    flags = dict(HOST_FLAGS, **{"entrypoints.websecure.http2.maxconcurrentstreams": "100"})
    add, remove = traefik_inflight.flag_changes(flags, opts, [], {})
    assert add.get("entrypoints.websecure.http2.maxconcurrentstreams", "100") == str(after)


def test_the_users_trusted_addresses_stay_when_the_roles_go_and_go_only_on_request():
    text = ("entryPoints:\n  websecure:\n    address: \":443\"\n    proxyProtocol:\n      insecure: false\n"
            "      trustedIPs:\n        - 192.168.1.1   # office VPN\n        - 10.8.0.1/32\n")
    base = dict(OPTS, provider=DIRECTORY, proxy_protocol_trusted_ips=[], trusted_added_before=["10.8.0.1/32"])
    report = {}
    off = yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), base, [], report))
    assert yaml.safe_load(off)["entryPoints"]["websecure"]["proxyProtocol"] == {"insecure": False,
                                                                                "trustedIPs": ["192.168.1.1"]}
    assert [(v["yours"], v["kept"]) for v in report["user_values"] if "trusted" in v["setting"]] == [(["192.168.1.1"], True)]
    report = {}
    gone = yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), dict(base, override_user_values=True),
                                                                     [], report))
    assert yaml.safe_load(gone)["entryPoints"]["websecure"]["proxyProtocol"] == {"insecure": False}
    replaced = yaml_text.edit_yaml(text, traefik_inflight.static_changes(yaml.safe_load(text), dict(
        base, proxy_protocol_trusted_ips=["10.9.0.1/32"], override_user_values=True)))
    assert yaml.safe_load(replaced)["entryPoints"]["websecure"]["proxyProtocol"]["trustedIPs"] == ["10.9.0.1/32"]


def test_a_tcp_router_beside_a_constrained_docker_provider_does_not_make_an_entrypoint_tcp_only():
    tcp = {"/d/tcp.yml": "tcp:\n  routers:\n    pass:\n      rule: HostSNI(`*`)\n      entryPoints: [websecure]\n"
                         "      service: s\n      tls:\n        passthrough: true\n"}
    known = traefik_inflight.user_routing(tcp, {"exposed_by_default": True, "constrained": False}, [])
    with pytest.raises(traefik_inflight.TraefikConfigError, match="websecure \\(pass@file\\) serve only TCP routers"):
        traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), dict(OPTS, provider=DIRECTORY, routing=known))
    # with constraints the Docker provider's HTTP routers are not known here: the limit stays
    unknown = traefik_inflight.user_routing(tcp, {"exposed_by_default": True, "constrained": True}, [])
    report = {}
    traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), dict(OPTS, provider=DIRECTORY, routing=unknown), [], report)
    assert report["entrypoints"] == ["websecure"]


def test_on_the_hosts_network_the_roles_api_on_the_hosts_loopback_is_said():
    warnings = []
    traefik_inflight.static_changes(yaml.safe_load(HOST_YAML), dict(OPTS, provider=DIRECTORY, host_network=True, listening=[]),
                                    warnings)
    assert any("the host's own 127.0.0.1:9099" in w for w in warnings)
    warnings = []
    traefik_inflight.flag_changes(HOST_FLAGS, dict(OPTS, provider=DIRECTORY, host_network=True, listening=[], verify_api=False),
                                  warnings)
    assert not any("9099" in w for w in warnings)
