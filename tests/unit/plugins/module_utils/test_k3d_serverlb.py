import re

import pytest

from ansible_collections.homelab.edge.plugins.module_utils import k3d_serverlb as lb

from ...conftest import fixture

K3D = fixture("k3d_nginx.tmpl")
OPTS = dict(udp_timeout=5, worker_rlimit_nofile=16384, udp_share=50)
WANT = dict(udp_timeout=5, worker_connections=4096, worker_rlimit_nofile=16384, udp_share=50, budget_log_level="info")


def patch(text, **kw):
    o = dict(OPTS, **kw)
    return lb.patch_template(text, o["udp_timeout"], o["worker_rlimit_nofile"], o["udp_share"])


def test_patch_adds_udp_policy_rlimit_and_zone():
    out = patch(K3D)
    assert out.count(lb.BEGIN) == 1 and out.count(lb.END) == 1
    assert "proxy_responses 1;" in out
    assert "proxy_timeout 5s;" in out
    assert 'limit_conn homelab_edge_udp {{ div (mul (atoi (getv "/settings/workerConnections")) 50) 200 }};' in out
    # TCP keeps k3d's timeout, in the else branch
    assert re.search(r'\{\{- else \}\}\n\s+proxy_timeout \{\{ getv "/settings/defaultProxyTimeout" "600" \}\};\n', out)
    assert "worker_processes auto;\nworker_rlimit_nofile 16384;\nevents {" in out
    assert "stream {\n  limit_conn_zone $protocol zone=homelab_edge_udp:1m;\n" in out
    # nothing else changed: removing what was added gives the original back
    assert len(out.splitlines()) == len(K3D.splitlines()) + 11


def test_patch_is_idempotent():
    once = patch(K3D)
    assert patch(once) == once


def test_patch_updates_values_when_options_change():
    once = patch(K3D)
    again = patch(once, udp_timeout=10, worker_rlimit_nofile=32768, udp_share=25)
    assert "proxy_timeout 10s;" in again and "proxy_timeout 5s;" not in again
    assert "worker_rlimit_nofile 32768;" in again and again.count("worker_rlimit_nofile") == 1
    assert "mul (atoi (getv \"/settings/workerConnections\")) 25) 200" in again
    assert again.count(lb.BEGIN) == 1 and again.count("limit_conn_zone") == 1


def test_patch_accepts_whitespace_variations():
    varied = (K3D.replace('proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};',
                          'proxy_timeout   {{getv "/settings/defaultProxyTimeout" "600"}} ;')
              .replace("  server {\n    listen", "\tserver {\n\t\tlisten")
              .replace("stream {", "stream {   ")
              .replace('worker_connections {{ getv "/settings/workerConnections" }};',
                       'worker_connections   {{getv "/settings/workerConnections"}};'))
    out = patch(varied)
    assert out.count(lb.BEGIN) == 1
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
    with pytest.raises(lb.ShapeError, match=why):
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
    v = lb.parse_values(VALUES_K3D)
    assert v["ports"] == {"53.udp": ["k3d-core-server-0"], "6443.tcp": ["k3d-core-server-0"]}
    assert v["settings"] == {"workerConnections": "1029"}
    v = lb.parse_values(VALUES_INDENTED)
    assert v["ports"]["53.udp"] == ["k3d-core-server-0", "k3d-core-server-1"]
    assert lb.udp_ports(v) == ["53.udp", "1053.udp"]


def test_patch_values_keeps_every_other_byte():
    out = lb.patch_values(VALUES_INDENTED, 4096)
    assert out == VALUES_INDENTED.replace("workerConnections: 1024", "workerConnections: 4096")
    assert lb.patch_values(out, 4096) == out


def test_patch_values_adds_missing_settings():
    no_settings = "ports:\n  53.udp:\n  - a\n"
    assert lb.patch_values(no_settings, 4096) == no_settings + "settings:\n  workerConnections: 4096\n"
    only_timeout = "ports:\n  53.udp:\n  - a\nsettings:\n  defaultProxyTimeout: 600\n"
    out = lb.patch_values(only_timeout, 2048)
    assert lb.parse_values(out)["settings"] == {"workerConnections": "2048", "defaultProxyTimeout": "600"}


@pytest.mark.parametrize("bad", ["ports:\n  53:\n  - a\n", "ports:\n- a\n", "just text\n", "ports:\n  53.sctp:\n  - a\n"])
def test_bad_values_are_refused(bad):
    with pytest.raises(lb.ShapeError):
        lb.patch_values(bad, 4096)


def test_parse_live_stock_and_report_the_seeds_math():
    facts = lb.parse_live(fixture("nginx_T_stock.txt"))
    assert facts["worker_connections"] == 1029
    assert facts["worker_rlimit_nofile"] is None
    assert [s["port"] for s in facts["udp_servers"]] == ["53"]
    assert [s["port"] for s in facts["tcp_servers"]] == ["443"]
    assert not lb.live_is_fixed(facts, WANT)
    r = lb.report("k3d-core-serverlb", "core", facts, open_file_limit=1024)
    # seed 000: 1029 / (2 x 600) = about 0.9 queries per second fills every connection
    assert r["exhaustion_rate"] == 0.86
    assert r["summary"] == ("k3d-core-serverlb: worker_connections 1029, worker_rlimit_nofile unset, "
                            "UDP servers 1, with proxy_responses 0")
    assert any("exceed the open file limit 1024" in w for w in r["warnings"])
    assert any("no session budget" in w for w in r["warnings"])


def test_parse_live_fixed():
    facts = lb.parse_live(fixture("nginx_T_fixed.txt"))
    assert lb.live_is_fixed(facts, WANT)
    assert not lb.live_is_fixed(facts, dict(WANT, udp_timeout=10))
    assert not lb.live_is_fixed(facts, dict(WANT, worker_connections=8192))
    assert not lb.live_is_fixed(facts, dict(WANT, budget_log_level="warn"))
    assert [s["limit_conn_log_level"] for s in facts["udp_servers"]] == ["info", "info"]
    r = lb.report("lb", "core", facts, open_file_limit=1024)
    assert r["udp_session_budget"] == 1024 == lb.udp_budget(4096, 50)
    assert r["udp_servers_patched"] == 2 and r["udp_ports"] == ["1053", "53"]
    assert r["exhaustion_rate"] == 409.6
    assert r["open_file_limit"] == 16384 and r["warnings"] == []


def test_no_udp_servers():
    facts = lb.parse_live(fixture("nginx_T_fixed.txt").split("  upstream 1053_udp")[0] + "}\n")
    r = lb.report("lb", "c", facts, 16384)
    assert r["udp_servers"] == 0 and r["exhaustion_rate"] is None and r["udp_session_budget"] is None


@pytest.mark.parametrize("value, seconds", [("600", 600), ("10s", 10), ("2m", 120), ("1h", 3600), ("500ms", 0.5), ("x", None)])
def test_timeout_seconds(value, seconds):
    assert lb.timeout_seconds(value) == seconds


def test_validate_options():
    assert lb.validate_options(**WANT) == []
    problems = lb.validate_options(udp_timeout=0, worker_connections=10, worker_rlimit_nofile=100, udp_share=95)
    assert len(problems) == 4
    bad_level = dict(WANT)
    bad_level["budget_log_level"] = "debug"
    assert lb.validate_options(**bad_level) == [
        "budget_log_level must be one of info, notice, warn, error, got 'debug'"]


def test_budget_log_level():
    # default: refusals below k3d's notice-level error_log, so a flood writes no line per query
    assert "    limit_conn_log_level info;\n" in patch(K3D)
    warn = lb.patch_template(patch(K3D), 5, 16384, 50, "warn")
    assert "limit_conn_log_level warn;" in warn and "limit_conn_log_level info;" not in warn
    assert lb.patch_template(warn, 5, 16384, 50) == patch(K3D)


def test_renamed_leftovers():
    assert lb.is_renamed_leftover("k3d-core-serverlb-ab1cd")
    assert not lb.is_renamed_leftover("k3d-core-serverlb")
    assert not lb.is_renamed_leftover("k3d-core-server-0")


class FakeContainer(object):
    """Just enough of docker's Container for wait_live."""

    def __init__(self, outputs, status="running", logs=b""):
        self.outputs = list(outputs)
        self.status = status
        self._logs = logs

    def reload(self):
        pass

    def exec_run(self, argv, demux=False):
        out = self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]
        return type("R", (), {"exit_code": 0, "output": (out.encode(), b"")})()

    def logs(self, **kw):
        return self._logs


def test_wait_live_returns_when_fixed_and_retriggers_once():
    calls = []
    clock = iter(range(0, 1000))
    c = FakeContainer([fixture("nginx_T_stock.txt")] * 20 + [fixture("nginx_T_fixed.txt")])
    facts = lb.wait_live(c, WANT, since=0, timeout=30, retrigger=lambda: calls.append(1),
                         sleep=lambda s: None, clock=lambda: next(clock))
    assert lb.live_is_fixed(facts, WANT) and calls == [1]


def test_wait_live_fails_fast_on_a_confd_error():
    c = FakeContainer([fixture("nginx_T_stock.txt")],
                      logs=b'confd[27]: ERROR "nginx: [emerg] host not found in upstream"\n')
    with pytest.raises(lb.ApplyError, match="confd rejected the render"):
        lb.wait_live(c, WANT, since=0, timeout=30, sleep=lambda s: None)


def test_wait_live_times_out_and_notices_a_stopped_container():
    clock = iter(range(0, 1000, 5))
    c = FakeContainer([fixture("nginx_T_stock.txt")])
    with pytest.raises(lb.ApplyError, match="within 30s"):
        lb.wait_live(c, WANT, since=0, timeout=30, sleep=lambda s: None, clock=lambda: next(clock))
    with pytest.raises(lb.ApplyError, match="container is exited"):
        lb.wait_live(FakeContainer([""], status="exited"), WANT, since=0, timeout=30)
