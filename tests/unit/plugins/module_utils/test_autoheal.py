import pytest

from ansible_collections.homelab.edge.plugins.module_utils import autoheal


@pytest.mark.parametrize("test, never_fails", [
    (["CMD", "traefik", "healthcheck", "--ping"], False),
    (["CMD", "true"], True),
    (["CMD-SHELL", "exit 0"], True),
    (["CMD-SHELL", "curl -fs http://localhost/ || true"], True),
    (["CMD-SHELL", "curl -fs http://localhost/ || exit 1"], False),
    (["NONE"], False),
])
def test_health_checks_that_cannot_fail(test, never_fails):
    assert autoheal.cannot_fail(test) is never_fails


def test_problems():
    ok = {"Config": {"Labels": {"autoheal": "true"}, "Healthcheck": {"Test": ["CMD", "traefik", "healthcheck", "--ping"]}}}
    assert autoheal.problems("traefik", ok, "autoheal") == []
    assert autoheal.problems("traefik", None, "autoheal") == ["traefik does not exist"]
    bare = {"Config": {"Labels": {}}}
    assert [p.split(":")[0] for p in autoheal.problems("x", bare, "autoheal")] == [
        "x lacks the label autoheal=true", "x has no health check"]
    assert autoheal.problems("x", bare, "all")[0].startswith("x has no health check")
    lying = {"Config": {"Labels": {"autoheal": "true"}, "Healthcheck": {"Test": ["CMD-SHELL", "true"]}}}
    assert "cannot fail" in autoheal.problems("x", lying, "autoheal")[0]


# One healer per host: real compose files and `docker run` lines, turned into what `docker inspect` shows for them.
SEED_001 = """
services:
  autoheal:
    image: willfarrell/autoheal:latest
    restart: always
    environment:
      AUTOHEAL_CONTAINER_LABEL: autoheal
      AUTOHEAL_INTERVAL: 30
      AUTOHEAL_START_PERIOD: 60
    volumes:
      - /var/run/docker.sock:/var/run/docker.sock
  traefik:
    labels:
      - "autoheal=true"
"""
# seed 001's snippet with the README's other choice (AUTOHEAL_CONTAINER_LABEL=all) and Traefik unlabelled
SEED_001_ALL = SEED_001.replace("AUTOHEAL_CONTAINER_LABEL: autoheal", "AUTOHEAL_CONTAINER_LABEL: all").replace(
    """    labels:\n      - "autoheal=true"\n""", "    image: traefik:v3.6\n")
# willfarrell/docker-autoheal, docker-compose.yml at the repository's root (commit 327735d)
WILLFARRELL_COMPOSE = """
version: '3'
services:
  autoheal:
    container_name: autoheal
    image: willfarrell/autoheal
    environment:
      - AUTOHEAL_CONTAINER_LABEL=all
    volumes:
      - '/var/run/docker.sock:/var/run/docker.sock'
    restart: always
"""
# willfarrell/docker-autoheal README.md, "TCP socket": docker run --name autoheal --restart=always
#   -e AUTOHEAL_CONTAINER_LABEL=all -e DOCKER_SOCK=tcp://HOST:PORT -v /path/to/certs/:/certs/:ro willfarrell/autoheal
WILLFARRELL_README_TCP = """
services:
  autoheal:
    container_name: autoheal
    image: willfarrell/autoheal
    restart: always
    environment:
      - AUTOHEAL_CONTAINER_LABEL=all
      - DOCKER_SOCK=tcp://HOST:PORT
    volumes:
      - /path/to/certs/:/certs/:ro
"""
# munirmardinli/homelab-cli, docs/posts/containerManagement.md ("Autoheal"; found with the search tool): a custom
# label (recreat.container, which the file's x-labels anchor puts on its own containers), DOCKER_HOST, long syntax
MUNIRMARDINLI = """
services:
  autoheal:
    image: willfarrell/autoheal
    container_name: autoheal
    hostname: autoheal
    restart: always
    environment:
      UID: 1026
      GID: 100
      AUTOHEAL_INTERVAL: 60s
      AUTOHEAL_CONTAINER_LABEL: recreat.container
      DOCKER_HOST: unix:///var/run/docker.sock
      AUTOHEAL_ONLY_MONITOR_RUNNING: false
    volumes:
      - type: bind
        source: /var/run/docker.sock
        target: /var/run/docker.sock
        read_only: true
      - type: bind
        source: /etc/localtime
        target: /etc/localtime
        read_only: true
    labels:
      com.centurylinklabs.watchtower.enable: true
      recreat.container: true
"""
# a user's own container that is merely called autoheal (a web app, no healer)
NAMED_AUTOHEAL = """
services:
  app:
    container_name: autoheal
    image: nginx:1.25
"""
TRAEFIK = {"Name": "/traefik", "State": {"Running": True},
           "Config": {"Image": "traefik:v3.6", "Labels": {"autoheal": "true"}, "Env": [],
                      "Healthcheck": {"Test": ["CMD", "traefik", "healthcheck", "--ping"]}}}


def _str(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


def from_compose(text, project="edge"):
    """docker inspect documents of a compose file's services, as docker compose up creates them."""
    import yaml
    out = []
    for service, s in yaml.safe_load(text)["services"].items():
        env = s.get("environment") or []
        env = ["%s=%s" % (k, _str(v)) for k, v in env.items()] if isinstance(env, dict) else list(env)
        labels = s.get("labels") or {}
        labels = dict((k, _str(v)) for k, v in labels.items()) if isinstance(labels, dict) else \
            dict(x.split("=", 1) for x in labels)
        labels.update({"com.docker.compose.project": project, "com.docker.compose.service": service})
        mounts = []
        for v in s.get("volumes") or []:
            if isinstance(v, dict):
                mounts.append({"Source": v["source"], "Destination": v["target"]})
            else:
                parts = v.split(":")
                mounts.append({"Source": parts[0], "Destination": parts[1]})
        out.append({"Name": "/" + s.get("container_name", "%s-%s-1" % (project, service)),
                    "State": {"Running": True},
                    "Config": {"Image": s.get("image", "traefik:v3.6"), "Env": env, "Labels": labels},
                    "Mounts": mounts})
    return out


def ours(name="autoheal"):
    return from_compose("services:\n  autoheal:\n    container_name: %s\n    image: willfarrell/autoheal:1.2.0\n"
                        "    environment: [AUTOHEAL_CONTAINER_LABEL=autoheal]\n"
                        "    volumes: ['/var/run/docker.sock:/var/run/docker.sock']\n" % name,
                        project=autoheal.OWN_PROJECT)


def with_traefik(docs):
    """The seed's Traefik stands in its compose file; the others run beside the user's Traefik."""
    return docs if any(d["Name"] == "/edge-traefik-1" for d in docs) else docs + [TRAEFIK]


# (source, what runs, the Traefik to heal, autoheal_existing, action, words the result must have)
CASES = [
    ("seed 001", from_compose(SEED_001), "edge-traefik-1", "adopt", "adopt",
     ["edge-autoheal-1", "the label autoheal=true", "the Docker socket /var/run/docker.sock"]),
    ("seed 001", from_compose(SEED_001), "edge-traefik-1", "refuse", "refuse",
     ["edge-autoheal-1 (image willfarrell/autoheal:latest, AUTOHEAL_CONTAINER_LABEL=autoheal)", "twice",
      "docker rm -f edge-autoheal-1", "Nothing was changed"]),
    ("seed 001, label all", from_compose(SEED_001_ALL), "edge-traefik-1", "adopt", "adopt",
     ["every container (all)"]),
    ("willfarrell docker-compose.yml", from_compose(WILLFARRELL_COMPOSE), "traefik", "adopt", "adopt",
     ["autoheal (image willfarrell/autoheal, AUTOHEAL_CONTAINER_LABEL=all)", "every container (all)"]),
    ("willfarrell README, TCP socket", from_compose(WILLFARRELL_README_TCP), "traefik", "adopt", "adopt",
     ["DOCKER_SOCK=tcp://HOST:PORT"]),
    ("munirmardinli/homelab-cli", from_compose(MUNIRMARDINLI), "traefik", "adopt", "refuse",
     ["autoheal does not watch traefik", "recreat.container=true", "traefik has recreat.container=(none)",
      "Nothing was changed"]),
    ("a user's container named autoheal", from_compose(NAMED_AUTOHEAL), "traefik", "adopt", "deploy",
     ["autoheal-homelab-edge", "heals nothing"]),
    ("a user's container named autoheal", from_compose(NAMED_AUTOHEAL), "traefik", "refuse", "deploy", []),
    ("the role's own autoheal", ours(), "traefik", "refuse", "deploy", ["runs as autoheal"]),
    ("nothing", [], "traefik", "refuse", "deploy", []),
]


@pytest.mark.parametrize("source, docs, traefik, existing, action, words", CASES,
                         ids=["%s-%s" % (c[0], c[3]) for c in CASES])
def test_one_healer_per_host(source, docs, traefik, existing, action, words):
    got = autoheal.plan(with_traefik(docs), [traefik], "autoheal", existing, "autoheal")
    assert got["action"] == action, got["msg"]
    for w in words:
        assert w in got["msg"], (w, got["msg"])


def test_a_healer_without_the_socket_is_not_adopted():
    docs = from_compose(SEED_001)
    docs[0]["Mounts"] = []
    got = autoheal.plan(docs, ["edge-traefik-1"], "autoheal", "adopt", "autoheal")
    assert got["action"] == "refuse" and "no way to the Docker API" in got["msg"]


def test_a_container_labelled_autoheal_false_is_not_seen_even_under_all():
    docs = from_compose(SEED_001_ALL)
    docs[1]["Config"]["Labels"]["autoheal"] = "False"
    got = autoheal.plan(docs, ["edge-traefik-1"], "autoheal", "adopt", "autoheal")
    assert got["action"] == "refuse" and "autoheal=False" in got["msg"]


def test_adopting_removes_the_roles_own_and_two_others_are_refused():
    got = autoheal.plan(with_traefik(from_compose(SEED_001) + ours()), ["edge-traefik-1"], "autoheal", "adopt",
                        "autoheal")
    assert (got["action"], got["ours"], got["healer"]) == ("adopt", "autoheal", "edge-autoheal-1")
    assert "removes its own, autoheal" in got["msg"]
    two = from_compose(SEED_001) + from_compose(WILLFARRELL_COMPOSE, project="other")
    got = autoheal.plan(with_traefik(two), ["edge-traefik-1"], "autoheal", "adopt", "autoheal")
    assert got["action"] == "refuse" and got["msg"].startswith("2 healers already run")


def test_a_stopped_healer_is_not_counted_but_still_holds_its_name():
    docs = from_compose(WILLFARRELL_COMPOSE)
    docs[0]["State"]["Running"] = False
    got = autoheal.plan(with_traefik(docs), ["traefik"], "autoheal", "refuse", "autoheal")
    assert (got["action"], got["name"]) == ("deploy", "autoheal-homelab-edge")


@pytest.mark.parametrize("test, output, words", [
    (["CMD-SHELL", "ping -c 1 www.google.com"], "ping: bad address", "reaches the internet"),
    (["CMD", "traefik", "healthcheck", "--ping"], "Bad healthcheck status: 404 Not Found", "TLS entrypoint"),
    (["CMD", "traefik", "healthcheck", "--ping"], "connection refused", "keeps failing after each start"),
    (None, "", "no health check"),
])
def test_the_likely_cause_of_a_restart_loop(test, output, words):
    assert words in autoheal.loop_cause(test, output)
