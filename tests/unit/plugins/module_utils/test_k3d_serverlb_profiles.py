"""The UDP profile of each port of a k3d load balancer (issue 53): dns ports end
a session at the first reply, stream ports (WireGuard, QUIC) keep every
datagram; both stay inside the UDP session budget."""
import os
import re
import shutil
import subprocess

import pytest

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import fix as k3d_fix
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import config as k3d_config
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import profiles as k3d_profiles
from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import template as k3d_template

from ...conftest import fixture

K3D = fixture("k3d_nginx.tmpl")
PROFILES = {53: "dns", "1053": "dns", 51820: "stream"}
WANT = dict(k3d_fix.DEFAULTS)
WANT["udp_ports"] = PROFILES


def managed_block(template):
    return template[template.index(k3d_template.BEGIN):template.index(k3d_template.END)]


def rendered(block, protocol, port):
    """The directives of the managed block for one server, as confd would
    render them: the block's if/else/end on $protocol and $port, evaluated
    (the real confd renders it in test_the_real_confd_renders_each_port_its_profile)."""
    stack, out = [], []
    for line in block.splitlines():
        line = line.strip()
        m = re.match(r"\{\{- if \(eq \$(protocol|port) ((?:\"[^\"]*\" ?)+)\) \}\}$", line)
        if m:
            value = protocol if m.group(1) == "protocol" else port
            stack.append(value in re.findall(r'"([^"]*)"', m.group(2)))
        elif line == "{{- else }}":
            stack[-1] = not stack[-1]
        elif line == "{{- end }}":
            stack.pop()
        elif line and not line.startswith("{{-") and all(stack):
            out.append(line)
    assert not stack
    return out


@pytest.mark.parametrize("given, ports", [
    (None, {53: "dns"}),
    ({}, {53: "dns"}),
    ({"1053": "dns", 51820: "stream"}, {53: "dns", 1053: "dns", 51820: "stream"}),
    ({53: "stream"}, {53: "stream"}),  # 53 named otherwise: the user's word wins
    ({" 443 ": "stream"}, {53: "dns", 443: "stream"}),
])
def test_the_map_is_read_whatever_the_key_type_and_53_is_dns_unless_named(given, ports):
    assert k3d_profiles.normalize(given) == ports


@pytest.mark.parametrize("given, words", [
    ({"dns": "dns"}, "'dns' is not a port"),
    ({0: "dns"}, "0 is not a port"),
    ({70000: "stream"}, "70000 is not a port"),
    ({51820: "tunnel"}, "port 51820 has profile 'tunnel', not one of dns, stream"),
])
def test_a_bad_map_is_refused_naming_the_entry(given, words):
    options = dict(k3d_fix.DEFAULTS)
    options["udp_ports"] = given
    problems = k3d_fix.validate_options(**options)
    assert len(problems) == 1 and words in problems[0]


def test_a_stream_timeout_out_of_range_is_refused():
    for seconds, refused in ((-1, True), (86401, True), (180, False), (0, False)):
        options = dict(k3d_fix.DEFAULTS)
        options["udp_stream_timeout"] = seconds
        assert bool(k3d_fix.validate_options(**options)) == refused, seconds


def test_dns_ports_end_at_the_first_reply_and_stream_ports_keep_every_datagram_both_in_the_budget():
    block = managed_block(k3d_template.patch_template(K3D, WANT))
    budget = ["limit_conn homelab_edge_udp {{ div (mul $homelabEdgeConnections 50) 200 }};",
              "limit_conn_log_level info;"]
    k3d_timeout = 'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};'
    for port in ("53", "1053"):
        assert rendered(block, "udp", port) == ["proxy_responses 1;", "proxy_timeout 5s;"] + budget
    for port in ("51820", "443", "853"):  # named stream, and two nobody named: stream too
        assert rendered(block, "udp", port) == [k3d_timeout] + budget
    for port in ("53", "443", "6443"):  # TCP: k3d's own line, nothing else
        assert rendered(block, "tcp", port) == [k3d_timeout]


def test_the_stream_timeout_the_user_sets_goes_on_stream_ports_only():
    block = managed_block(k3d_template.patch_template(K3D, dict(WANT, udp_stream_timeout=180)))
    assert rendered(block, "udp", "51820")[0] == "proxy_timeout 180s;"
    assert rendered(block, "udp", "53")[:2] == ["proxy_responses 1;", "proxy_timeout 5s;"]
    assert rendered(block, "tcp", "443") == ['proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};']


def test_with_53_named_stream_no_port_ends_at_a_reply():
    block = managed_block(k3d_template.patch_template(K3D, dict(WANT, udp_ports={53: "stream"})))
    assert "proxy_responses" not in block and "$port" not in block
    assert rendered(block, "udp", "53")[0].startswith("proxy_timeout {{ getv")


def test_changing_the_profiles_rewrites_the_block_and_back():
    once = k3d_template.patch_template(K3D, WANT)
    other = k3d_template.patch_template(once, dict(WANT, udp_ports={53: "dns"}))
    assert '(eq $port "53")' in other and '"1053"' not in other
    assert k3d_template.patch_template(other, WANT) == once
    assert k3d_template.unpatch_template(once) == K3D


@pytest.mark.skipif(not shutil.which("confd") and not os.path.exists("/var/cache/homelab-edge/bin/confd"),
                    reason="no confd binary here (the lab builds k3d's confd fork)")
def test_the_real_confd_renders_each_port_its_profile(tmp_path):
    confd = shutil.which("confd") or "/var/cache/homelab-edge/bin/confd"
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "nginx.tmpl").write_text(k3d_template.patch_template(K3D, WANT))
    out = tmp_path / "nginx.conf"
    (tmp_path / "conf.d" / "nginx.toml").write_text(
        '[template]\nsrc = "nginx.tmpl"\ndest = "%s"\nkeys = ["/ports", "/settings"]\n' % out)
    (tmp_path / "values.yaml").write_text("ports:\n  1053.udp:\n  - srv\n  443.tcp:\n  - srv\n  51820.udp:\n  - srv\n"
                                          "  53.udp:\n  - srv\n  9999.udp:\n  - srv\nsettings:\n  workerConnections: 1024\n")
    subprocess.run([confd, "-onetime", "-backend", "file", "-file", str(tmp_path / "values.yaml"),
                    "-confdir", str(tmp_path), "-log-level", "error"], check=True, timeout=30)
    facts = k3d_config.parse_live(out.read_text())
    udp = dict((s["port"], s) for s in facts["udp_servers"])
    assert sorted(udp) == ["1053", "51820", "53", "9999"]
    assert [udp[p]["proxy_responses"] for p in ("53", "1053", "51820", "9999")] == ["1", "1", None, None]
    assert [udp[p]["proxy_timeout"] for p in ("53", "1053", "51820", "9999")] == ["5s", "5s", "600", "600"]
    assert all(s["limit_conn"] == 1024 for s in udp.values())  # floor 4096 x 50 / 200, every UDP port
    assert k3d_config.shortfalls(facts, dict(WANT, worker_rlimit_nofile=16384)) == []


def live(port, responses, timeout, listen_udp=True):
    lines = ["listen %s%s;" % (port, " udp" if listen_udp else ""), "proxy_pass x;"]
    if responses:
        lines.append("proxy_responses %s;" % responses)
    lines += ["proxy_timeout %s;" % timeout]
    if listen_udp:
        lines += ["limit_conn homelab_edge_udp 1024;", "limit_conn_log_level info;"]
    return "  server {\n%s\n  }\n" % "\n".join("    " + x for x in lines)


def conf(*servers):
    return ("worker_rlimit_nofile 16384;\nevents {\n  worker_connections 4096;\n}\nstream {\n%s}\n"
            % "".join(servers))


FIXED = conf(live(53, "1", "5s"), live(1053, "1", "5s"), live(51820, None, "600"), live(6443, None, "600", False))
# the fix before the profiles: every UDP port ends its sessions at the first reply
EVERY_PORT_DNS = conf(live(53, "1", "5s"), live(1053, "1", "5s"), live(51820, "1", "5s"), live(6443, None, "600", False))


def test_profiles_as_they_should_be_are_no_shortfall():
    assert k3d_config.shortfalls(k3d_config.parse_live(FIXED), WANT) == []


def test_a_stream_port_that_ends_its_sessions_at_the_first_reply_is_a_shortfall():
    """The tunnel case (20 of 20 datagrams through stock k3d, 7 of 20 with proxy_responses 1)."""
    out = k3d_config.shortfalls(k3d_config.parse_live(EVERY_PORT_DNS), WANT)
    assert [x for x in out if x.startswith("UDP 51820 (stream): proxy_responses 1")]
    assert not [x for x in out if x.startswith(("UDP 53 ", "UDP 1053 "))]


def test_a_dns_port_without_the_reply_limit_is_a_shortfall():
    stock = conf(live(53, None, "600"), live(51820, None, "600"), live(6443, None, "600", False))
    out = k3d_config.shortfalls(k3d_config.parse_live(stock), WANT)
    assert "UDP 53 (dns): proxy_responses unset" in out and "UDP 53 (dns): proxy_timeout 600" in out
    assert not [x for x in out if x.startswith("UDP 51820")]


def test_a_stream_port_holds_k3d_s_timeout_or_the_one_set():
    facts = k3d_config.parse_live(FIXED)
    assert k3d_config.shortfalls(facts, dict(WANT, udp_stream_timeout=180)) == ["UDP 51820 (stream): proxy_timeout 600, not 180"]
    other = k3d_config.parse_live(FIXED.replace("proxy_timeout 600;\n    limit_conn", "proxy_timeout 30s;\n    limit_conn"))
    assert k3d_config.shortfalls(other, WANT) == ["UDP 51820 (stream): proxy_timeout 30s, not 600"]


def test_the_report_shows_each_udp_port_with_its_profile_in_words():
    r = k3d_config.report("k3d-a-serverlb", "a", k3d_config.parse_live(FIXED), 16384, WANT)
    assert [(p["port"], p["profile"], p["live"], p["declared"]) for p in r["udp_profiles"]] == [
        ("53", "dns", "dns", True), ("1053", "dns", "dns", True), ("51820", "stream", "stream", True)]
    assert r["udp_profiles_text"] == (
        "53/udp dns: a session ends at its first reply or after 5 s of silence; "
        "1053/udp dns: a session ends at its first reply or after 5 s of silence; "
        "51820/udp stream: sessions stay open (every datagram delivered) until 600 s of silence")
    assert r["udp_dns_unfixed"] == r["udp_stream_cut"] == r["udp_ports_undeclared"] == [] and r["warnings"] == []
    # the DNS hold decides how fast unanswered queries fill the connections; the tunnel's 600 s is meant
    assert r["udp_timeout"] == 5


def test_the_report_of_the_old_fix_names_the_cut_stream_port():
    r = k3d_config.report("k3d-a-serverlb", "a", k3d_config.parse_live(EVERY_PORT_DNS), 16384, WANT)
    assert r["udp_stream_cut"] == ["51820"] and r["udp_dns_unfixed"] == []
    assert "51820/udp stream: a session ends at its first reply or after 5 s of silence - nginx runs dns, not stream" \
        in r["udp_profiles_text"]


def test_an_undeclared_port_is_stream_with_a_warning_naming_it_and_how_to_declare_it():
    r = k3d_config.report("k3d-a-serverlb", "a", k3d_config.parse_live(FIXED), 16384, dict(k3d_fix.DEFAULTS))
    assert r["udp_ports_undeclared"] == ["1053", "51820"]
    assert [p["profile"] for p in r["udp_profiles"]] == ["dns", "stream", "stream"]
    assert r["udp_dns_unfixed"] == [] and r["udp_stream_cut"] == ["1053"]
    warning, = r["warnings"]
    assert warning.startswith("k3d-a-serverlb: UDP ports 1053/udp, 51820/udp have no profile in udp_ports "
                              "(role: k3d_serverlb_udp_ports): they get stream")
    assert "{1053: stream, 51820: stream}" in warning and "dns for a request/response service" in warning
    assert "(not declared: stream by default)" in r["udp_profiles_text"]
