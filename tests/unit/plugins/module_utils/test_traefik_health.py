"""The health check through the user's entrypoint, and the review of a
health check of the user's (issue 54): where it asks, what it writes, whose
it is on a later run, and what makes a check of theirs miss a wedge or
restart a Traefik that serves."""
import pytest
import yaml

from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight
from ansible_collections.homelab.edge.plugins.module_utils.traefik import yaml_text

HC = {"interval": "30s", "timeout": "5s", "retries": 3}
FILE_FACTS = {"compose": {"service": "traefik"}, "source": {"mode": "file", "path": "/etc/traefik/traefik.yml"},
              "args": ["--configFile=/etc/traefik/traefik.yml"]}
STATIC = {"entryPoints": {"web": {"address": ":80"}, "websecure": {"address": ":443", "http": {"tls": {}}},
                          "lan": {"address": "192.168.1.5:8443/tcp"}, "v6": {"address": "[::1]:9443"},
                          "dns": {"address": ":53/udp"}}}
EPS = traefik_inflight.entrypoint_facts(STATIC, None)
TARGET = traefik_inflight.health_target(EPS, {}, {"healthcheck": HC, "entrypoints": ["websecure"]})


@pytest.mark.parametrize("address, tls, url", [
    (":443", True, "https://127.0.0.1:443/homelab-edge-health"),
    ("0.0.0.0:80", False, "http://127.0.0.1:80/homelab-edge-health"),
    ("[::]:8443", True, "https://127.0.0.1:8443/homelab-edge-health"),
    ("192.168.1.5:8443/tcp", False, "http://192.168.1.5:8443/homelab-edge-health"),
    ("[::1]:9443", False, "http://[::1]:9443/homelab-edge-health"),
])
def test_the_health_check_asks_where_the_entrypoint_listens(address, tls, url):
    assert traefik_inflight.health_url(address, tls) == url


def test_entrypoints_from_a_file_and_from_flags():
    assert EPS["websecure"] == {"address": ":443", "tls": True} and EPS["web"] == {"address": ":80", "tls": False}
    flags = traefik_inflight.parse_flags(["--entrypoints.websecure.address=:443", "--entrypoints.websecure.http.tls=true",
                                          "--entrypoints.web.address=:80", "--entrypoints.b.address=:8443",
                                          "--entrypoints.b.http.tls.certresolver=le", "--entrypoints.c.http.tls=false"])
    eps = traefik_inflight.entrypoint_facts(None, flags)
    assert eps["websecure"]["tls"] and eps["b"]["tls"] and not eps["web"]["tls"] and not eps["c"]["tls"]


def test_the_target_is_the_first_limited_entrypoint_with_tls_where_it_has_it():
    assert TARGET["entrypoint"] == "websecure" and TARGET["url"] == "https://127.0.0.1:443/homelab-edge-health"
    # any HTTP status counts: the check greps the status line, not wget's exit code (1 for a 404)
    assert TARGET["command"] == ("wget -q -S -O /dev/null -U homelab-edge-health --no-check-certificate "
                                 "https://127.0.0.1:443/homelab-edge-health 2>&1 | grep -q '^ *HTTP/'")
    # a TLS router of the user's on a plain entrypoint makes it HTTPS too; UDP entrypoints are skipped
    routing = {"routers": [{"name": "r@file", "kind": "http", "entrypoints": ["web"], "tls": True}]}
    got = traefik_inflight.health_target(EPS, routing, {"healthcheck": HC, "entrypoints": ["dns", "web"]})
    assert got["entrypoint"] == "web" and got["url"].startswith("https://127.0.0.1:80/")
    assert traefik_inflight.health_target(EPS, {}, {"healthcheck": HC, "entrypoints": ["web"], "healthcheck_through": "ping"}) \
        is None
    assert traefik_inflight.health_target(EPS, {}, {"entrypoints": ["web"]}) is None  # no health check wanted


@pytest.mark.parametrize("wanted, words", [("nope", "is not in the static config"), ("dns", "has no TCP port")])
def test_a_health_entrypoint_that_cannot_be_asked_is_refused(wanted, words):
    with pytest.raises(traefik_inflight.TraefikConfigError, match=words):
        traefik_inflight.health_target(EPS, {}, {"healthcheck": HC, "entrypoints": ["web"], "healthcheck_entrypoint": wanted})


def test_docker_labels_say_which_routers_use_tls():
    labels = {"traefik.enable": "true", "traefik.http.routers.a.entrypoints": "web",
              "traefik.http.routers.a.tls.certresolver": "le", "traefik.http.routers.b.tls": "false"}
    routing = traefik_inflight.user_routing({}, {"exposed_by_default": True}, [labels])
    tls = dict((r["name"], bool(r.get("tls"))) for r in routing["routers"])
    assert tls == {"a@docker": True, "b@docker": False}


def changes_for(svc, opts, facts=None):
    facts = facts or FILE_FACTS
    compose = {"services": {"traefik": dict(svc, image="traefik:v3.6")}}
    report = {"ping": {"entrypoint": "traefik", "address": ":8080", "by": "homelab.edge"}}
    changes = traefik_inflight.service_changes(compose, facts, dict({"healthcheck": HC, "entrypoint_facts": EPS}, **opts),
                                               [], report)
    new = [c[2] for c in changes if c[1][-1] == "healthcheck"]
    return (new[0] if new else None), report["healthcheck"], report


def test_the_role_s_check_asks_through_the_entrypoint_when_the_request_answered():
    new, hc, report = changes_for({}, {"health": dict(TARGET, answered=True)})
    assert new == dict(test=["CMD-SHELL", TARGET["command"]], **HC)
    assert hc == {"by": "homelab.edge", "test": TARGET["command"], "through": "websecure", "problems": [],
                  "replaced": False}
    assert report["written"]["healthcheck"] == ["CMD-SHELL", TARGET["command"]]


def test_without_an_answer_it_asks_ping_and_says_why():
    target = dict(TARGET, answered=False, output="wget: can't connect to remote host (127.0.0.1): Connection refused")
    new, hc, report = changes_for({}, {"health": target})
    assert new["test"] == ["CMD", "traefik", "healthcheck", "--ping", "--configFile=/etc/traefik/traefik.yml"]
    assert hc["through"] == "ping"
    words = traefik_inflight.health_warnings(report, target, True)
    assert len(words) == 1 and "asks ping, not your entrypoint websecure" in words[0] and "Connection refused" in words[0]


def test_the_role_s_own_check_from_an_earlier_run_is_brought_up_to_date():
    old = ["CMD", "traefik", "healthcheck", "--ping", "--configFile=/etc/traefik/traefik.yml"]
    # the 1.x check (ping), recognised by the record of an earlier run
    opts = {"health": dict(TARGET, answered=True), "written_before": {"ping": "traefik"}}
    new, hc, dummy = changes_for({"healthcheck": dict(test=old, **HC)}, opts)
    assert new["test"][0] == "CMD-SHELL" and hc["by"] == "homelab.edge"
    # the same test without a record is the user's: kept
    new, hc, dummy = changes_for({"healthcheck": dict(test=old, **HC)}, {"health": dict(TARGET, answered=True)})
    assert new is None and hc["by"] == "you"
    # the current one again: nothing to change
    mine = ["CMD-SHELL", TARGET["command"]]
    opts = {"health": dict(TARGET, answered=True), "written_before": {"healthcheck": mine}}
    new, hc, dummy = changes_for({"healthcheck": dict(test=mine, **HC)}, opts)
    assert new is None and hc["by"] == "homelab.edge"


TLS_PING = {"entrypoint": "websecure", "address": ":443", "by": "you"}


@pytest.mark.parametrize("test, ping, health, problems", [
    # one real config (issue 54): Traefik restarted throughout an ISP outage
    (["CMD-SHELL", "ping -c 1 www.google.com"], None, None, ["outside"]),
    (["CMD", "wget", "-q", "--spider", "http://1.1.1.1"], None, None, ["outside"]),
    # ping in plain HTTP on a TLS entrypoint answers 404: never healthy
    (["CMD", "traefik", "healthcheck", "--ping"], TLS_PING, None, ["never_passes"]),
    (["CMD", "traefik", "healthcheck", "--ping"], {"entrypoint": "traefik", "address": ":8080"}, None, ["ping_only"]),
    (["CMD-SHELL", "wget -q --spider http://localhost:8080/ping"], {"entrypoint": "traefik"}, None, ["ping_only"]),
    # unhealthy while Traefik answers through the entrypoint
    (["CMD-SHELL", "curl -fs http://127.0.0.1:8081/ || exit 1"], None, {"status": "unhealthy", "output": "exit 7"},
     ["fails"]),
    (["CMD-SHELL", "curl -fs http://127.0.0.1:8081/ || exit 1"], None, {"status": "healthy"}, []),
])
def test_a_users_health_check_is_reviewed(test, ping, health, problems):
    got = traefik_inflight.review_healthcheck(test, ping, EPS, health, dict(TARGET, answered=True))
    assert [p["problem"] for p in got] == problems


def test_a_users_check_is_kept_and_its_problems_said_or_replaced_with_consent():
    theirs = dict(test=["CMD-SHELL", "ping -c 1 www.google.com"], interval="10s")
    new, hc, report = changes_for({"healthcheck": theirs}, {"health": dict(TARGET, answered=True)})
    assert new is None and hc["by"] == "you" and hc["problems"][0]["problem"] == "outside"
    words = traefik_inflight.health_warnings(report, dict(TARGET, answered=True), True)
    assert len(words) == 1 and "www.google.com" in words[0] and "traefik_inflight_healthcheck_replace" in words[0]
    new, hc, report = changes_for({"healthcheck": theirs}, {"health": dict(TARGET, answered=True),
                                                            "healthcheck_replace": True})
    assert new["test"] == ["CMD-SHELL", TARGET["command"]] and hc["replaced"] and hc["problems"]
    assert traefik_inflight.health_warnings(report, dict(TARGET, answered=True), True) == []


def test_the_check_is_written_in_the_users_compose_file_keeping_the_rest():
    text = "services:\n  traefik:\n    image: traefik:v3.6  # pinned\n    restart: unless-stopped\n"
    compose = yaml.safe_load(text)
    changes = traefik_inflight.service_changes(compose, FILE_FACTS, {"healthcheck": HC, "health": dict(TARGET, answered=True),
                                                                     "entrypoint_facts": EPS}, [], {})
    new = yaml_text.edit_yaml(text, changes)
    assert "image: traefik:v3.6  # pinned" in new
    assert yaml.safe_load(new)["services"]["traefik"]["healthcheck"]["test"] == ["CMD-SHELL", TARGET["command"]]


def test_the_health_checks_requests_are_not_counted_as_a_client():
    line = '{"entryPointName": "websecure", "ClientHost": "%s", "RequestPath": "%s", "DownstreamStatus": %d}'
    lines = [line % ("127.0.0.1", traefik_inflight.HEALTH_PATH, 404)] * 30 + [line % ("203.0.113.%d" % i, "/", 200)
                                                                              for i in range(5)]
    assert traefik_inflight.status_counts(lines) == {"200": 5}
    top, share, total = traefik_inflight.client_share(lines)
    assert total == 5 and share == 0.2


def test_the_role_s_check_through_the_entrypoint_stays_when_the_entrypoint_is_dark_now():
    mine = ["CMD-SHELL", TARGET["command"]]
    target = dict(TARGET, answered=False, output="no answer within 5 s")
    new, hc, report = changes_for({"healthcheck": dict(test=mine, **HC)}, {"health": target,
                                                                           "written_before": {"healthcheck": mine}})
    assert new is None and hc["through"] == "websecure"
    words = traefik_inflight.health_warnings(report, target, True)
    assert len(words) == 1 and "no HTTP answer on websecure just now" in words[0]


def test_the_deployed_traefik_s_template_writes_what_the_module_writes():
    from ansible_collections.homelab.edge.plugins.filter.traefik import traefik_health_test
    base = {"entryPoints": {"web": {"address": ":80"}, "websecure": {"address": ":443", "http": {"tls": {}}}}}
    test = traefik_health_test(base, ["websecure"])
    assert test == ["CMD-SHELL", TARGET["command"]]
    # the module takes it as its own on the next run, even without a record
    new, hc, dummy = changes_for({"healthcheck": dict(test=test, **HC)}, {"health": dict(TARGET, answered=True)})
    assert new is None and hc["by"] == "homelab.edge"
    ping = traefik_health_test(base, ["websecure"], through="ping")
    assert ping == ["CMD", "traefik", "healthcheck", "--ping", "--configFile=/etc/traefik/traefik.yml"]
    new, hc, dummy = changes_for({"healthcheck": dict(test=ping, **HC)}, {"healthcheck_through": "ping"})
    assert new is None and hc["by"] == "homelab.edge" and hc["through"] == "ping"
