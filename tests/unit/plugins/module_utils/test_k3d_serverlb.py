import io
import re
import tarfile

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import capacity as k3d_capacity
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import config as k3d_config
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import signals as k3d_signals
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template

from ...conftest import fixture

K3D = fixture("k3d_nginx.tmpl")
# the seed's two DNS ports (CoreDNS on 53, another cluster's on 1053), as the fixtures have them
WANT = dict(k3d_fix.DEFAULTS)
WANT["udp_ports"] = {53: "dns", 1053: "dns"}
STOCK = fixture("nginx_T_stock.txt")
FIXED = fixture("nginx_T_fixed.txt")


def patch(text, **kw):
    return k3d_template.patch_template(text, dict(WANT, **kw))


def test_patch_adds_floor_udp_policy_rlimit_and_zone():
    out = patch(K3D)
    assert out.count(k3d_template.BEGIN) == out.count(k3d_template.END) == out.count(k3d_template.FLOOR_BEGIN) == out.count(k3d_template.FLOOR_END) == 1
    # the floor: the larger of k3d's values.yaml setting and 4096, in one variable
    assert ('  {{- $homelabEdgeConnections := atoi (getv "/settings/workerConnections") }}\n'
            "  {{- if lt $homelabEdgeConnections 4096 }}{{ $homelabEdgeConnections = 4096 }}{{ end }}\n"
            "  worker_connections {{ $homelabEdgeConnections }};\n") in out
    assert 'worker_connections {{ getv "/settings/workerConnections" }};' not in out
    assert "proxy_responses 1;" in out and "proxy_timeout 5s;" in out
    # the budget reads the same variable, so it follows whatever the floor renders
    assert "limit_conn homelab_edge_udp {{ div (mul $homelabEdgeConnections 50) 200 }};" in out
    # TCP keeps k3d's timeout, in the else branch
    assert re.search(r'\{\{- else \}\}\n\s+proxy_timeout \{\{ getv "/settings/defaultProxyTimeout" "600" \}\};\n', out)
    assert "worker_processes auto;\nworker_rlimit_nofile 16384;\nevents {" in out
    assert "stream {\n  limit_conn_zone $protocol zone=homelab_edge_udp:1m;\n" in out
    # nothing else changed: 14 lines of UDP policy for 1, 5 of floor for 1, rlimit and zone
    assert len(out.splitlines()) == len(K3D.splitlines()) + 13 + 4 + 2


def test_patch_is_idempotent():
    once = patch(K3D)
    assert patch(once) == once


def test_patch_updates_when_options_change():
    once = patch(K3D)
    again = patch(once, udp_timeout=10, worker_rlimit_nofile=32768, udp_share=25, worker_connections=8192)
    assert "proxy_timeout 10s;" in again and "proxy_timeout 5s;" not in again
    assert "worker_rlimit_nofile 32768;" in again and again.count("worker_rlimit_nofile") == 1
    assert "mul $homelabEdgeConnections 25) 200" in again
    assert "lt $homelabEdgeConnections 8192 }}{{ $homelabEdgeConnections = 8192 }}" in again
    assert again.count(k3d_template.BEGIN) == again.count(k3d_template.FLOOR_BEGIN) == again.count("limit_conn_zone") == 1
    assert patch(again) == once


def test_patch_accepts_whitespace_variations():
    varied = (K3D.replace('proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};',
                          'proxy_timeout   {{getv "/settings/defaultProxyTimeout" "600"}} ;')
              .replace("  server {\n    listen", "\tserver {\n\t\tlisten")
              .replace("stream {", "stream {   ")
              .replace('worker_connections {{ getv "/settings/workerConnections" }};',
                       'worker_connections   {{getv "/settings/workerConnections"}};'))
    out = patch(varied)
    assert out.count(k3d_template.BEGIN) == out.count(k3d_template.FLOOR_BEGIN) == 1
    assert patch(out) == out


def test_patch_replaces_the_seeds_hand_made_conditional():
    seed = K3D.replace(
        '    proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};\n',
        '    {{- if (eq $protocol "udp") }}\n    proxy_responses 1;\n    proxy_timeout 10s;\n'
        '    {{- else }}\n    proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};\n    {{- end }}\n')
    out = patch(seed)
    assert "proxy_timeout 10s;" not in out
    assert out.count("proxy_responses 1;") == 1
    assert out.count("{{- if (eq $protocol \"udp\") }}") == 2  # listen line + ours


def test_existing_rlimit_is_replaced_not_duplicated():
    out = patch(K3D.replace("worker_processes auto;", "worker_processes auto;\nworker_rlimit_nofile 2048;"))
    assert out.count("worker_rlimit_nofile") == 1 and "worker_rlimit_nofile 16384;" in out


@pytest.mark.parametrize("broken, why", [
    (K3D.replace("events {", "evnts {"), "events"),
    (K3D.replace("stream {", "http {"), "stream"),
    (K3D.replace('{{ getv "/settings/workerConnections" }}', "1024"), "worker_connections"),
    (K3D.replace('proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};', "proxy_timeout 600;"), "exactly one"),
    (K3D + K3D[K3D.index("  server {"):], "exactly one"),
    ("", "events"),
])
def test_unexpected_template_shapes_are_refused(broken, why):
    with pytest.raises(k3d_template.ShapeError, match=why):
        patch(broken)


VALUES_K3D = """ports:
  53.udp:
  - k3d-core-server-0
  6443.tcp:
  - k3d-core-server-0
settings:
  workerConnections: 1029
"""
VALUES_INDENTED = """ports:
  '1053.udp':
    - k3d-core-server-0
  53.udp:
    - k3d-core-server-0
    - k3d-core-server-1
  443.tcp:
    - k3d-core-server-0
settings:
  defaultProxyTimeout: 900
  workerConnections: 1024
"""


def test_parse_values_both_list_styles():
    v = k3d_config.parse_values(VALUES_K3D)
    assert v["ports"] == {"53.udp": ["k3d-core-server-0"], "6443.tcp": ["k3d-core-server-0"]}
    assert v["settings"] == {"workerConnections": "1029"}
    v = k3d_config.parse_values(VALUES_INDENTED)
    assert v["ports"]["53.udp"] == ["k3d-core-server-0", "k3d-core-server-1"]
    assert k3d_config.udp_ports(v) == ["53.udp", "1053.udp"]


@pytest.mark.parametrize("bad", ["ports:\n  53:\n  - a\n", "ports:\n- a\n", "just text\n", "ports:\n  53.sctp:\n  - a\n"])
def test_bad_values_are_refused(bad):
    with pytest.raises(k3d_template.ShapeError):
        k3d_config.parse_values(bad)


def test_upstreams_of_values_and_of_the_render_compare():
    assert k3d_config.upstreams_from_values(k3d_config.parse_values(VALUES_INDENTED)) == {
        "1053_udp": ["k3d-core-server-0:1053"], "53_udp": ["k3d-core-server-0:53", "k3d-core-server-1:53"],
        "443_tcp": ["k3d-core-server-0:443"]}
    assert k3d_config.parse_live(FIXED)["upstreams"] == {
        "1053_udp": ["k3d-core-server-0:1053"], "443_tcp": ["k3d-core-server-0:443"], "53_udp": ["k3d-core-server-0:53"]}


def test_parse_live_stock_and_report_the_seeds_math():
    facts = k3d_config.parse_live(STOCK)
    assert facts["worker_connections"] == 1029
    assert facts["worker_rlimit_nofile"] is None
    assert [s["port"] for s in facts["udp_servers"]] == ["53"]
    assert [s["port"] for s in facts["tcp_servers"]] == ["443"]
    assert k3d_config.shortfalls(facts, WANT)
    r = k3d_config.report("k3d-core-serverlb", "core", facts, open_file_limit=1024)
    # seed 000: 1029 / (2 x 600) = about 0.9 queries per second fills every connection
    assert r["exhaustion_rate"] == 0.86
    assert r["summary"] == ("k3d-core-serverlb: worker_connections 1029, worker_rlimit_nofile unset, "
                            "UDP servers 1, with proxy_responses 0")
    assert any("exceed the open file limit 1024" in w for w in r["warnings"])
    assert any("no session budget" in w for w in r["warnings"])


def test_parse_live_fixed():
    facts = k3d_config.parse_live(FIXED)
    assert not k3d_config.shortfalls(facts, WANT)
    assert k3d_config.shortfalls(facts, dict(WANT, udp_timeout=10))
    assert k3d_config.shortfalls(facts, dict(WANT, worker_connections=8192))
    assert k3d_config.shortfalls(facts, dict(WANT, budget_log_level="warn"))
    # a floor: more connections than asked (k3d's own number above it) is fixed too, budget from them
    more = FIXED.replace("worker_connections 4096;", "worker_connections 8192;").replace(
        "limit_conn homelab_edge_udp 1024;", "limit_conn homelab_edge_udp 2048;")
    assert not k3d_config.shortfalls(k3d_config.parse_live(more), WANT)
    r = k3d_config.report("lb", "core", facts, open_file_limit=16384, want=WANT)
    assert r["udp_session_budget"] == 1024 == k3d_capacity.udp_budget(4096, 50)
    assert r["udp_servers_patched"] == 2 and r["udp_ports"] == ["1053", "53"]
    assert r["exhaustion_rate"] == 409.6
    assert r["open_file_limit"] == 16384 and r["warnings"] == []


@pytest.mark.parametrize("line, reason", [
    ("    proxy_responses 1;\n", "proxy_responses unset"),
    ("    limit_conn homelab_edge_udp 1024;\n", "session budget None"),
    ("    limit_conn_log_level info;\n", "limit_conn_log_level None"),
    ("worker_rlimit_nofile 16384;\n", "worker_rlimit_nofile None"),
])
def test_live_is_not_fixed_without_any_one_piece(line, reason):
    # drop the line from the second UDP server only (or the one rlimit line)
    head, tail = FIXED.rsplit(line, 1)
    facts = k3d_config.parse_live(head + tail)
    assert k3d_config.shortfalls(facts, WANT)
    assert any(reason in s for s in k3d_config.shortfalls(facts, WANT))


def test_report_takes_the_smallest_budget():
    uneven = FIXED.replace("limit_conn homelab_edge_udp 1024;", "limit_conn homelab_edge_udp 2048;", 1)
    assert k3d_config.report("lb", "c", k3d_config.parse_live(uneven), 16384)["udp_session_budget"] == 1024


def test_report_takes_the_longest_udp_timeout():
    """The slowest UDP server decides how fast sessions fill the connections: one left at 10 minutes."""
    uneven = FIXED.replace("proxy_timeout 5s;", "proxy_timeout 600s;", 1)
    r = k3d_config.report("lb", "c", k3d_config.parse_live(uneven), 16384, WANT)
    assert r["udp_timeout"] == 600 and r["exhaustion_rate"] == k3d_capacity.exhaustion_rate(4096, 600)


def test_a_worker_still_at_another_open_file_limit_is_a_reason():
    """One worker of an earlier render still runs at 1024 beside one at the fix's limit: not fixed yet."""
    state = {"template": patch(K3D), "values": VALUES_K3D, "conf": FIXED, "hard_limit": 1048576,
             "worker_limits": [1024, WANT["worker_rlimit_nofile"]]}
    reasons = k3d_fix.plan(state, WANT)[2]
    assert reasons == ["nginx workers run with open-file limit 1024,%d" % WANT["worker_rlimit_nofile"]], reasons


def test_the_created_hard_limit_is_the_hard_one():
    """k3d's --runtime-ulimit nofile=1024:16384: the soft 1024 is what nginx may raise; the hard 16384 is the cap."""
    c = type("C", (), {"attrs": {"HostConfig": {"Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 16384}]}}})()
    assert k3d_container.created_hard_limit(c) == 16384


def test_no_udp_servers():
    facts = k3d_config.parse_live(FIXED.split("  upstream 1053_udp")[0] + "}\n")
    r = k3d_config.report("lb", "c", facts, 16384)
    assert r["udp_servers"] == 0 and r["exhaustion_rate"] is None and r["udp_session_budget"] is None


@pytest.mark.parametrize("value, seconds", [("600", 600), ("10s", 10), ("2m", 120), ("1h", 3600), ("500ms", 0.5), ("x", None)])
def test_timeout_seconds(value, seconds):
    assert k3d_config.timeout_seconds(value) == seconds


def test_validate_options():
    assert k3d_fix.validate_options(**WANT) == []
    problems = k3d_fix.validate_options(udp_timeout=0, worker_connections=10, worker_rlimit_nofile=100, udp_share=95,
                                        budget_log_level="info")
    assert len(problems) == 4
    debug = dict(WANT)
    debug["budget_log_level"] = "debug"
    assert k3d_fix.validate_options(**debug) == [
        "budget_log_level must be one of info, notice, warn, error, got 'debug'"]


def test_budget_log_level():
    # default: refusals below k3d's notice-level error_log, so a flood writes no line per query
    assert "    limit_conn_log_level info;\n" in patch(K3D)
    warn = patch(patch(K3D), budget_log_level="warn")
    assert "limit_conn_log_level warn;" in warn and "limit_conn_log_level info;" not in warn
    assert patch(warn) == patch(K3D)


# ------------------------------------------------------------- discovery

class C(object):
    def __init__(self, name, labels=None, status="running"):
        self.name, self.labels, self.status = name, labels or {}, status


LBL = {"k3d.role": "loadbalancer", "k3d.cluster": "core"}


def test_wanted_discovery_names_clusters_and_leftovers():
    assert k3d_container.wanted(C("k3d-core-serverlb", LBL))
    assert k3d_container.wanted(C("k3d-core-serverlb", LBL), clusters=["core"])
    assert not k3d_container.wanted(C("k3d-core-serverlb", LBL), clusters=["ai"])
    assert not k3d_container.wanted(C("k3d-core-serverlb-ab1Cd", LBL))  # k3d's renamed leftover while recreating
    assert not k3d_container.wanted(C("k3d-core-server-0", {"k3d.role": "server", "k3d.cluster": "core"}))
    # explicit names need no label
    assert k3d_container.wanted(C("my-proxy"), names=["my-proxy"]) and not k3d_container.wanted(C("k3d-core-serverlb", LBL), names=["x"])


class Client(object):
    def __init__(self, containers):
        self.containers = self
        self._all = containers

    def list(self, all=False, filters=None):
        assert filters == {"label": ["k3d.role=loadbalancer"]}
        return [c for c in self._all if c.labels.get("k3d.role") == "loadbalancer"]

    def get(self, name):
        for c in self._all:
            if c.name == name:
                return c
        raise KeyError(name)


def test_find_load_balancers():
    client = Client([C("k3d-b-serverlb", dict(LBL, **{"k3d.cluster": "b"})), C("k3d-core-serverlb", LBL),
                     C("k3d-core-serverlb-x1y2z", LBL)])
    assert [(n, e) for n, c, e in k3d_container.find_load_balancers(client)] == [("k3d-b-serverlb", False),
                                                                                 ("k3d-core-serverlb", False)]
    assert [n for n, c, e in k3d_container.find_load_balancers(client, clusters=["b"])] == ["k3d-b-serverlb"]
    found = k3d_container.find_load_balancers(client, names=["k3d-core-serverlb", "nope"], not_found=KeyError)
    assert [(n, c is not None, e) for n, c, e in found] == [("k3d-core-serverlb", True, True), ("nope", False, True)]


# ---------------------------------------------------------------- apply()

class Fake(object):
    """A load balancer container: a file system, nginx's workers and a confd
    whose render is given by the test (no Go template engine here)."""

    def __init__(self, template=K3D, conf=STOCK, limits=(20000,), render=None, status="running", hard="1048576"):
        self.fs = {k3d_container.TEMPLATE_PATH: template, k3d_container.VALUES_PATH: VALUES_K3D, k3d_container.NGINX_CONF: conf}
        self.limits = list(limits)
        self.hard = hard  # the master's hard open-file limit, as /proc/<pid>/limits prints it
        self.status = status
        self.renders = []
        self.on_render = render or self.render_fixed
        self.labels = LBL
        self.name = "k3d-core-serverlb"

    def render_fixed(self, template):
        if k3d_template.BEGIN in template:
            self.fs[k3d_container.NGINX_CONF], self.limits = FIXED, [16384]
        else:
            self.fs[k3d_container.NGINX_CONF], self.limits = STOCK, [20000]
        return 0, "", ""

    def reload(self):
        pass

    def put_archive(self, directory, data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                self.fs["%s/%s" % (directory, m.name)] = tar.extractfile(m).read().decode()
        return True

    def exec_run(self, argv, demux=False):
        rc, out, err = self.run(argv)
        return type("R", (), {"exit_code": rc, "output": (out.encode(), err.encode())})()

    def run(self, argv):
        if argv[:2] == ["pgrep", "-f"]:
            return 0, "1\n", ""
        if argv[0] == "mv":
            self.fs[argv[3]] = self.fs.pop(argv[2])
            return 0, "", ""
        if argv[0] == "rm":
            return 0, "", ""
        if argv[0] == "timeout" and argv[2] == "confd":
            self.renders.append(self.fs[k3d_container.TEMPLATE_PATH])
            return self.on_render(self.fs[k3d_container.TEMPLATE_PATH])
        if argv[:2] == ["sh", "-c"] and argv[2].startswith("set -e; cat"):
            parts = [self.fs[p] for p in (k3d_container.TEMPLATE_PATH, k3d_container.VALUES_PATH, k3d_container.NGINX_CONF)]
            return 0, k3d_container._SPLIT.join(parts + ["\n".join(map(str, self.limits)) + "\n", self.hard + "\n"]), ""
        raise AssertionError("unexpected exec %r" % (argv,))


class LosesExecs(Fake):
    """An engine that loses the first `lost` execs of the read: nothing comes back, not even an exit code."""

    def __init__(self, lost, **kw):
        Fake.__init__(self, **kw)
        self.lost = lost

    def exec_run(self, argv, demux=False):
        if argv[:2] == ["sh", "-c"] and self.lost:
            self.lost -= 1
            return type("R", (), {"exit_code": None, "output": (None, None)})()
        return Fake.exec_run(self, argv, demux)


def test_a_read_lost_on_its_way_is_tried_again_and_a_real_failure_is_not():
    assert k3d_container.read_state(LosesExecs(2), sleep=lambda s: None)["template"] == K3D
    with pytest.raises(k3d_container.ApplyError, match=r"exit code None"):
        k3d_container.read_state(LosesExecs(3), sleep=lambda s: None)
    calls = []

    class Missing(Fake):
        def exec_run(self, argv, demux=False):
            calls.append(argv)
            return type("R", (), {"exit_code": 1, "output": (b"", b"cat: /etc/nginx/nginx.conf: No such file")})()

    with pytest.raises(k3d_container.ApplyError, match=r"exit code 1\): cat: /etc/nginx/nginx.conf"):
        k3d_container.read_state(Missing(), sleep=lambda s: None)
    assert len(calls) == 1  # a read that failed saying why is not repeated

    class NoExitCodeYet(Fake):
        def exec_run(self, argv, demux=False):
            r = Fake.exec_run(self, argv, demux)
            return type("R", (), {"exit_code": None, "output": r.output})()

    assert k3d_container.read_state(NoExitCodeYet(), sleep=lambda s: None)["template"] == K3D  # the whole read


def test_apply_patches_renders_and_reports():
    c = Fake()
    res = k3d_fix.apply(c, WANT)
    assert res["changed"] and "template not patched" in res["reasons"]
    assert c.fs[k3d_container.TEMPLATE_PATH] == patch(K3D)
    assert c.fs[k3d_container.VALUES_PATH] == VALUES_K3D  # k3d's file is never written
    assert len(c.renders) == 1 and res["open_file_limit"] == 16384
    assert not k3d_config.shortfalls(res["facts"], WANT)
    assert not [p for p in c.fs if "homelab-edge-" in p]  # no temporary file left


def test_apply_is_idempotent_and_renders_nothing_when_fixed():
    c = Fake(template=patch(K3D), conf=FIXED, limits=[16384])
    res = k3d_fix.apply(c, WANT)
    assert not res["changed"] and res["reasons"] == [] and c.renders == []


def test_apply_renders_a_patched_template_whose_render_never_went_live():
    """The files alone say "fixed"; nginx runs the stock config: render."""
    c = Fake(template=patch(K3D), conf=STOCK, limits=[20000])
    res = k3d_fix.apply(c, WANT)
    assert res["changed"] and "template not patched" not in res["reasons"]
    assert len(c.renders) == 1 and not k3d_config.shortfalls(res["facts"], WANT)


def test_apply_renders_when_only_the_workers_lack_the_limit():
    c = Fake(template=patch(K3D), conf=FIXED, limits=[1024])
    res = k3d_fix.apply(c, WANT)
    assert res["reasons"] == ["nginx workers run with open-file limit 1024"] and len(c.renders) == 1


def test_apply_check_mode_writes_and_renders_nothing():
    c = Fake()
    before = dict(c.fs)
    res = k3d_fix.apply(c, WANT, check_mode=True)
    assert res["changed"] and c.fs == before and c.renders == []
    assert res["template"] == (K3D, patch(K3D))


def test_apply_rolls_back_a_rejected_render():
    def reject(template):
        if k3d_template.BEGIN in template:
            return 1, "", 'confd[7]: ERROR "nginx: [emerg] host not found in upstream \\"x:53\\""\n'
        return 0, "", ""
    c = Fake(render=reject)
    with pytest.raises(k3d_container.ApplyError, match="confd rejected the render.*host not found.*template rolled back"):
        k3d_fix.apply(c, WANT, render_timeout=1)
    assert c.fs[k3d_container.TEMPLATE_PATH] == K3D
    assert [k3d_template.BEGIN in t for t in c.renders] == [True, False]  # the new one, then the old one again


def test_apply_fails_when_the_render_does_not_take():
    c = Fake(render=lambda template: (0, "", ""))  # confd says yes, nginx.conf stays stock
    clock = iter(range(100))
    with pytest.raises(k3d_container.ApplyError, match="after the render: .*proxy_responses unset"):
        k3d_fix.wait_settled(c, WANT, timeout=3, sleep=lambda s: None, clock=lambda: next(clock))


def test_apply_refuses_a_stopped_container():
    with pytest.raises(k3d_container.ApplyError, match="container is exited"):
        k3d_fix.apply(Fake(status="exited"), WANT)


def test_handle_never_raises_and_reports():
    entry = k3d_fix.handle(Fake(), "k3d-core-serverlb", False, WANT)
    assert entry["changed"] and not entry["failed"] and entry["cluster"] == "core"
    assert entry["diff"][0]["before"] == K3D and entry["udp_session_budget"] == 1024
    broken = k3d_fix.handle(Fake(template="no template"), "k3d-core-serverlb", False, WANT)
    assert broken["failed"] and "no 'events {' block" in broken["msg"]
    assert k3d_fix.handle(None, "gone", True, WANT)["msg"] == "no container named gone"
    skipped = k3d_fix.handle(Fake(status="exited"), "k3d-core-serverlb", False, WANT)
    assert not skipped["failed"] and skipped["msg"] == "skipped: container is exited"


def test_render_is_stale_when_k3d_values_were_not_rendered():
    c = Fake(template=patch(K3D), conf=FIXED, limits=[16384])
    c.fs[k3d_container.VALUES_PATH] = VALUES_INDENTED.replace("  443.tcp:\n    - k3d-core-server-0\n", "")
    assert k3d_fix.render_is_stale(c)  # values list a second server that nginx.conf lacks
    c.fs[k3d_container.VALUES_PATH] = ("ports:\n  1053.udp:\n  - k3d-core-server-0\n  443.tcp:\n  - k3d-core-server-0\n"
                                       "  53.udp:\n  - k3d-core-server-0\nsettings:\n  workerConnections: 1029\n")
    assert not k3d_fix.render_is_stale(c)


# ------------------------------------------------- an open-file cap (issue 22)

# what nginx renders from the capped template under a hard limit of 1024
CAPPED = (FIXED.replace("worker_rlimit_nofile 16384;", "worker_rlimit_nofile 1024;")
          .replace("worker_connections 4096;", "worker_connections 1024;")
          .replace("limit_conn homelab_edge_udp 1024;", "limit_conn homelab_edge_udp 256;"))


def render_capped(c):
    def render(template):
        if k3d_template.BEGIN in template and "{{ $homelabEdgeConnections = 1024 }}" in template:
            c.fs[k3d_container.NGINX_CONF], c.limits = CAPPED, [1024]
        elif k3d_template.BEGIN in template:  # the whole fix asked for: the workers stay at the hard limit
            c.fs[k3d_container.NGINX_CONF], c.limits = FIXED, [1024]
        return 0, "", ""
    return render


def capped_fake():
    c = Fake(limits=[1024], hard="1024")
    c.on_render = render_capped(c)
    return c


class Observed(Fake):
    """A load balancer as signals() reads it: its log and its workers' load besides its files."""

    def logs(self, since=None, until=None):
        self.log_window = (since, until)
        return b""

    def run(self, argv):
        if argv[:2] == ["sh", "-c"] and not argv[2].startswith("set -e; cat"):
            return 0, "", ""  # the workers' load: none
        return Fake.run(self, argv)


@pytest.mark.parametrize("conf, limits, state", [
    (STOCK, [1024], "not_fixed"),      # under a hard cap and not fixed at all: not "fixed with a cap"
    (CAPPED, [1024], "capped"),
])
def test_a_capped_load_balancer_is_fixed_with_a_cap_only_once_it_has_the_fix(conf, limits, state):
    c = Observed(template=K3D if conf is STOCK else k3d_template.patch_template(K3D, k3d_capacity.capped_want(WANT, 1024)[0]),
                 conf=conf, limits=limits, hard="1024")
    assert k3d_signals.signals(c, WANT, 0)["state"] == state


def test_the_keepers_log_windows_meet_without_overlap():
    """The keeper reads each load balancer's log from where its last read ended, to now, both to the fraction of
    a second: a whole-second `since` read the lines of the boundary second twice (rates inflated)."""
    c = Observed(template=patch(K3D), conf=FIXED, limits=[16384])
    entry = k3d_signals.signals(c, WANT, 100.5, until=200.25)
    assert c.log_window == (100.5, 200.25) and entry["not_enough_keys"][-1] == "unnamed"


@pytest.mark.parametrize("hard, cap", [(None, None), (16384, None), (65536, None), (524288, None), (1024, 1024),
                                       (4000, 4000), (8192, 8192), (16383, 16383)])
def test_capped_want_fits_under_the_hard_limit(hard, cap):
    want, got = k3d_capacity.capped_want(WANT, hard)
    assert got == cap
    if cap:
        assert want["worker_rlimit_nofile"] == cap and want["worker_connections"] == min(4096, cap)
        assert (want["udp_timeout"], want["udp_share"]) == (WANT["udp_timeout"], WANT["udp_share"])
    else:
        assert want == WANT


@pytest.mark.parametrize("wc, files, held, beyond", [(4096, 16384, 4096, False), (16384, 16384, 16384, False),
                                                     (16385, 16384, 16384, True), (10 ** 9, 16384, 16384, True),
                                                     (1029, 1024, 1024, True)])
def test_a_worker_holds_no_more_connections_than_its_open_files(wc, files, held, beyond):
    """One home for nginx's rule (the options' check, the live report's warning and the demo's proof read it)."""
    assert k3d_capacity.connections_held(wc, files) == held
    assert k3d_capacity.beyond_open_files(wc, files) is beyond
    problems = k3d_fix.validate_options(**{**WANT, "worker_connections": min(wc, 1048576), "worker_rlimit_nofile": files})
    assert any("must not exceed worker_rlimit_nofile" in p for p in problems) is (min(wc, 1048576) > files)


def test_the_capped_template_keeps_every_udp_part_and_clamps_connections():
    want = k3d_capacity.capped_want(WANT, 1024)[0]
    text = k3d_template.patch_template(K3D, want)
    assert "proxy_responses 1;" in text and "proxy_timeout 5s;" in text and "limit_conn homelab_edge_udp" in text
    assert "worker_rlimit_nofile 1024;" in text
    assert "{{- if gt $homelabEdgeConnections 1024 }}{{ $homelabEdgeConnections = 1024 }}{{ end }}" in text
    assert k3d_template.patch_template(text, want) == text  # idempotent
    assert "if gt" not in k3d_template.patch_template(text, WANT)  # the cap lifted: the ceiling goes


def test_apply_under_a_cap_fixes_dns_and_reports_fixed_with_a_cap():
    c = capped_fake()
    entry = k3d_fix.handle(c, "k3d-core-serverlb", False, WANT)
    assert not entry["failed"] and entry["changed"], entry["msg"]
    assert entry["state"] == "capped" and entry["state_text"] == "fixed with a cap (1024 open files)"
    assert entry["open_file_cap"] == 1024 and entry["udp_session_budget"] == 256
    assert entry["worker_connections"] == 1024 and entry["udp_servers_patched"] == entry["udp_servers"]
    warning = [w for w in entry["warnings"] if "fixed with a cap" in w][0]
    assert "--runtime-ulimit nofile=16384:16384" in warning and "default-ulimits" in warning
    assert "TCP (HTTPS, the API) keeps 512 connections" in warning
    again = k3d_fix.handle(c, "k3d-core-serverlb", False, WANT)
    assert not again["changed"] and again["state"] == "capped"  # idempotent


def test_without_the_capped_path_the_whole_fix_is_rolled_back():
    """The net removed (the whole fix asked for, as before): the render cannot
    take, and the load balancer keeps k3d's 600 s UDP hold."""
    c = capped_fake()
    clock = iter(range(1000))
    original = k3d_capacity.capped_want
    try:
        k3d_capacity.capped_want = lambda want, hard: (want, None)
        with pytest.raises(k3d_container.ApplyError, match="workers run with open-file limit 1024.*rolled back"):
            k3d_fix.apply(c, WANT, render_timeout=2)
    finally:
        k3d_capacity.capped_want = original
    assert c.fs[k3d_container.TEMPLATE_PATH] == K3D
    del clock


def test_a_stock_docker_29_load_balancer_is_fixed_in_full():
    """Docker 29 with containerd 2 starts containers with systemd's limits,
    soft 1024 and hard 524288 (moby#51485): nginx raises its own soft limit
    up to the hard one, so the whole fix takes and nothing is capped."""
    c = Fake(limits=[1024], hard="524288")
    entry = k3d_fix.handle(c, "k3d-core-serverlb", False, WANT)
    assert not entry["failed"] and entry["changed"], entry["msg"]
    assert entry["state"] == "fixed" and not entry.get("open_file_cap")
    assert not [w for w in entry["warnings"] if "cap" in w]
    assert "worker_rlimit_nofile 16384;" in c.fs[k3d_container.TEMPLATE_PATH]


def test_require_full_fix_makes_a_capped_load_balancer_a_failure():
    entry = k3d_fix.handle(capped_fake(), "k3d-core-serverlb", False, WANT, require_full_fix=True)
    assert entry["failed"] and entry["state"] == "capped" and "require_full_fix" in entry["msg"]


def test_check_mode_under_a_cap_says_not_fixed_and_plans_the_capped_fix():
    c = capped_fake()
    entry = k3d_fix.handle(c, "k3d-core-serverlb", False, WANT, check_mode=True)
    assert entry["changed"] and entry["state"] == "not_fixed" and entry["open_file_cap"] == 1024
    assert "worker_rlimit_nofile 1024;" in entry["diff"][0]["after"] and c.renders == []


def test_worker_connections_above_the_rlimit_is_refused():
    options = dict(WANT)
    options.update(worker_connections=65536, worker_rlimit_nofile=1024)
    problems = k3d_fix.validate_options(**options)
    assert any("must not exceed worker_rlimit_nofile" in p for p in problems)


def test_state_words():
    assert k3d_fix.state_text("fixed") == "fixed" and k3d_fix.state_text("not_fixed") == "not fixed"
    assert k3d_fix.state_text("capped", 1024) == "fixed with a cap (1024 open files)"


def test_the_keeper_refuses_a_config_with_a_missing_key(tmp_path):
    """As the role installs it: the keeper and, under module_utils/ beside it, the library vars/main.yml names."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
    shutil.copy(os.path.join(root, "roles", "k3d_serverlb", "files", "k3d-serverlb-keeper.py"), str(tmp_path))
    import yaml
    with open(os.path.join(root, "roles", "k3d_serverlb", "vars", "main.yml")) as f:
        for name in yaml.safe_load(f)["k3d_serverlb_keeper_library"]:  # as the role installs them
            os.makedirs(os.path.dirname(str(tmp_path / "module_utils" / name)), exist_ok=True)
            shutil.copy(os.path.join(root, "plugins", "module_utils", name), str(tmp_path / "module_utils" / name))
    cfg = dict(WANT)
    del cfg["udp_share"]
    (tmp_path / "k.json").write_text(json.dumps(cfg))
    out = subprocess.run([sys.executable, str(tmp_path / "k3d-serverlb-keeper.py"), "--config", str(tmp_path / "k.json")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0 and "lacks udp_share" in out.stderr and "Traceback" not in out.stderr, out.stderr


# ------------------------------------------------- what a plausible bug breaks

def test_a_live_budget_other_than_the_computed_one_is_a_shortfall():
    """A budget is not enough: it must be the one computed from the
    connections (a smaller one starves DNS, a larger one lets UDP take
    what HTTPS and the API need)."""
    for wrong in ("512", "4096"):
        facts = k3d_config.parse_live(FIXED.replace("limit_conn homelab_edge_udp 1024;", "limit_conn homelab_edge_udp %s;" % wrong))
        assert k3d_config.shortfalls(facts, WANT)
        assert "UDP 53: session budget %s, not 1024" % wrong in k3d_config.shortfalls(facts, WANT)


def test_a_load_balancer_with_a_budget_on_only_some_udp_servers_is_not_budgeted():
    head, tail = FIXED.rsplit("    limit_conn homelab_edge_udp 1024;\n", 1)
    r = k3d_config.report("lb", "c", k3d_config.parse_live(head + tail), 16384)
    assert r["udp_servers"] == 2 and r["udp_session_budget"] is None
    assert any("no session budget" in w for w in r["warnings"])


def test_apply_rolls_back_a_render_confd_accepts_but_nginx_never_runs():
    """confd says yes, nginx keeps the stock config: the wait for the new
    workers fails, and the template is put back and rendered."""
    c = Fake(render=lambda template: (0, "", ""))
    with pytest.raises(k3d_container.ApplyError, match="after the render: .*template rolled back and rendered"):
        k3d_fix.apply(c, WANT, render_timeout=1)
    assert c.fs[k3d_container.TEMPLATE_PATH] == K3D
    assert [k3d_template.BEGIN in t for t in c.renders] == [True, False]


# state=absent: the undo

@pytest.mark.parametrize("kw", [{}, {"cap": 1024}, {"udp_timeout": 9, "udp_share": 30, "worker_rlimit_nofile": 4096}])
def test_unpatch_gives_k3ds_own_template_back(kw):
    assert k3d_template.unpatch_template(patch(K3D, **kw)) == K3D


def test_unpatch_leaves_a_template_without_the_fix_alone():
    mine = K3D.replace("worker_processes auto;", "worker_processes auto;\nworker_rlimit_nofile 8192;")
    assert k3d_template.unpatch_template(mine) == mine  # not ours: the user's rlimit stays
    assert not k3d_template.is_patched(K3D) and k3d_template.is_patched(patch(K3D))


def test_remove_puts_k3ds_template_back_renders_and_checks_nginx():
    c = Fake(template=patch(K3D), conf=FIXED, limits=[16384])
    res = k3d_fix.remove(c)
    assert res["changed"] and res["reasons"][0] == "template patched by homelab.edge"
    assert c.fs[k3d_container.TEMPLATE_PATH] == K3D and len(c.renders) == 1
    assert c.fs[k3d_container.VALUES_PATH] == VALUES_K3D
    assert k3d_fix._live_fix(c.fs[k3d_container.NGINX_CONF]) == []


def test_remove_is_idempotent_and_check_mode_writes_nothing():
    c = Fake()
    assert not k3d_fix.remove(c)["changed"] and c.renders == []
    c = Fake(template=patch(K3D), conf=FIXED)
    before = dict(c.fs)
    res = k3d_fix.remove(c, check_mode=True)
    assert res["changed"] and c.fs == before and c.renders == [] and res["template"] == (patch(K3D), K3D)


def test_remove_renders_when_nginx_still_runs_the_fix():
    """The template is k3d's already (a half-done earlier undo) but nginx runs the fix: render."""
    c = Fake(template=K3D, conf=FIXED)
    res = k3d_fix.remove(c)
    assert res["reasons"] and "template patched by homelab.edge" not in res["reasons"] and len(c.renders) == 1


def test_remove_rolls_back_when_the_render_does_not_take():
    c = Fake(template=patch(K3D), conf=FIXED, render=lambda template: (0, "", ""))  # nginx keeps the fix
    clock = iter(range(100))
    with pytest.raises(k3d_container.ApplyError, match="after the render: nginx runs the UDP session budget.*rolled back"):
        k3d_fix.remove(c, render_timeout=3, sleep=lambda s: None, clock=lambda: next(clock))
    assert c.fs[k3d_container.TEMPLATE_PATH] == patch(K3D)


def test_handle_absent_reports_removed():
    entry = k3d_fix.handle(Fake(template=patch(K3D), conf=FIXED), "k3d-core-serverlb", False, WANT, absent=True)
    assert entry["changed"] and entry["state"] == "removed" and entry["state_text"] == "k3d's own (fix removed)"
    assert entry["diff"][0]["after"] == K3D
    check = k3d_fix.handle(Fake(template=patch(K3D), conf=FIXED), "k3d-core-serverlb", False, WANT, check_mode=True,
                           absent=True)
    assert check["msg"].startswith("would remove the fix: template patched by homelab.edge")
