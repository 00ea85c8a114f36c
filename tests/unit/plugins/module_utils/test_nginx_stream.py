"""The VPS's nginx read as nginx loads it (nginx_stream_dump: `nginx -T`'s
output, nginx's tokenizer, includes placed where they stand) and the plan
(nginx_stream_plan: which stream servers get PROXY protocol, which are
refused and why, the edit of the user's bytes). Real nginx's dumps of public
configs are in test_nginx_stream_fixtures.py."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_dump as dump
from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream_plan as plan

NAS = ["10.8.0.2:443", "10.8.0.2:80"]
USER = """# my VPS; do not lose this comment
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
events { worker_connections 1024; }
stream {
  upstream nas_tls {
    server 10.8.0.2:443 max_fails=3;   # the NAS over wg0
  }
  server {
    listen 443;
    proxy_pass nas_tls;
    proxy_timeout 10m;
  }
  server { listen 80; proxy_pass 10.8.0.2:80; }
  server {
    listen 2222;
    proxy_pass 192.168.1.5:22; # "{ not a brace }"
  }
}
http {
  server { listen 8080; location / { proxy_pass http://10.8.0.2:80; } }
}
"""


def nginx_T(*files):
    """What nginx -T prints for these (path, text) files, in this order."""
    return "".join("# configuration file %s:\n%s\n" % (p, t) for p, t in files)


def conf_of(*files):
    return dump.load(nginx_T(*files))


def outcomes(p):
    return [(s.where().split(" (")[0], s.outcome) for s in p.servers]


def edited(conf, p):
    """{path: new text} of the plan's edits."""
    return dict((path, plan.apply_edits(conf.files[path], e)) for path, e in p.edits().items())


def rerun(files, new, upstreams, present=True):
    """The plan again, on the files as the edit left them."""
    files = [(path, new.get(path, text)) for path, text in files]
    conf = conf_of(*files)
    return conf, plan.Plan(conf, upstreams, present)


# ---- nginx -T's output and nginx's tokenizer

def test_the_dump_splits_into_each_file_with_nginxs_newline_taken_off():
    out = nginx_T(("/etc/nginx/nginx.conf", "events {}\n"), ("/etc/nginx/empty.conf", ""),
                  ("/etc/nginx/no-newline.conf", "stream {}"))
    assert dump.split_dump(out) == [("/etc/nginx/nginx.conf", "events {}\n"), ("/etc/nginx/empty.conf", ""),
                                    ("/etc/nginx/no-newline.conf", "stream {}")]
    with pytest.raises(dump.DumpError, match="not what nginx -T prints"):
        dump.split_dump("nginx: the configuration file /etc/nginx/nginx.conf syntax is ok\n")


def test_tokens_follow_nginxs_rules():
    text = 'a "q;{}" \'s\\\'x\' b#c d\\;e ${var}x;# comment ; {\nf}g;'
    words = [t[1] for t in dump.tokens(text) if t[0] == "word"]
    # a `#` inside a word and `}` inside a word belong to it; quotes and escapes as nginx stores them
    # (it unescapes only \" \' \\ \t \r \n: an escaped `;` keeps its backslash)
    assert words == ["a", "q;{}", "s'x", "b#c", "d\\;e", "${var}x", "f}g"]
    kinds = [t[0] for t in dump.tokens(text) if t[0] != "word"]
    assert kinds == [";", ";"]


def test_crlf_and_one_line_blocks_parse_as_nginx_reads_them():
    conf = conf_of(("/etc/nginx/nginx.conf", USER.replace("\n", "\r\n")))
    p = plan.Plan(conf, NAS)
    assert outcomes(p) == [("443", "add"), ("80", "add"), ("2222", "other")]
    one = conf_of(("/etc/nginx/nginx.conf", "events{}stream{server{listen 80;proxy_pass 10.8.0.2:80;}}"))
    assert outcomes(plan.Plan(one, NAS)) == [("80", "add")]


# ---- includes placed where they stand

MAIN = ("/etc/nginx/nginx.conf", "load_module x.so;\nevents {}\nstream { include streams/*.conf; }\n"
        "http { include /etc/nginx/conf.d/*.conf; }\n")


def test_a_one_line_stream_include_puts_its_files_inside_stream_in_glob_order():
    conf = conf_of(MAIN, ("/etc/nginx/streams/b.conf", "server { listen 80; proxy_pass 10.8.0.2:80; }\n"),
                   ("/etc/nginx/streams/a.conf", "server { listen 443; proxy_pass 10.8.0.2:443; }\n"),
                   ("/etc/nginx/conf.d/site.conf", "server { listen 8443; location / { proxy_pass http://10.8.0.2:443; } }\n"))
    p = plan.Plan(conf, NAS)
    # the relative include is the main file's directory; nginx's glob sorts: a.conf first; conf.d is http's
    assert [(s.directive.file, s.outcome) for s in p.servers] == [
        ("/etc/nginx/streams/a.conf", "add"), ("/etc/nginx/streams/b.conf", "add")]


def test_a_glob_skips_dot_files_and_a_bracket_include_is_optional():
    assert dump.glob_matches("/etc/nginx/streams-enabled/*", "/etc/nginx/streams-enabled/nas")
    assert not dump.glob_matches("/etc/nginx/streams-enabled/*", "/etc/nginx/streams-enabled/.nas.homelab-edge.x1")
    assert not dump.glob_matches("/etc/nginx/stream/*.conf", "/etc/nginx/stream/sub/a.conf")
    assert dump.glob_matches("/data/nginx/custom/stream[.]conf", "/data/nginx/custom/stream.conf")
    assert dump.included_files("/data/nginx/custom/stream[.]conf", "/etc/nginx/", {"/etc/nginx/nginx.conf": ""}) == []


def test_a_file_included_twice_is_in_the_dump_once_and_read_at_both_places():
    main = ("/etc/nginx/nginx.conf", "events {}\nstream {\n  server { listen 443; include /etc/nginx/nas.inc; }\n"
            "  server { listen 8443; include /etc/nginx/nas.inc; }\n}\n")
    conf = conf_of(main, ("/etc/nginx/nas.inc", "proxy_pass 10.8.0.2:443;\n"))
    p = plan.Plan(conf, NAS)
    assert outcomes(p) == [("443", "add"), ("8443", "add")]
    # our line goes into each server's own file, after the include: the shared snippet stays as it is
    assert list(p.edits()) == ["/etc/nginx/nginx.conf"]
    new = edited(conf, p)["/etc/nginx/nginx.conf"]
    assert new.count("include /etc/nginx/nas.inc;\n  %s  %s" % (plan.LINE, plan.MARK)) == 2


def test_an_include_inside_a_map_is_read():
    main = ("/etc/nginx/nginx.conf", "events {}\nstream {\n  map $ssl_preread_server_name $up {\n"
            "    include /etc/nginx/names.map;\n    default 10.8.0.2:443;\n  }\n"
            "  server { listen 443; ssl_preread on; proxy_pass $up; }\n}\n")
    conf = conf_of(main, ("/etc/nginx/names.map", "old.example.net 192.168.1.9:443;\n"))
    p = plan.Plan(conf, NAS)
    assert outcomes(p) == [("443", "refused")]
    assert "192.168.1.9:443" in p.refusals[0] and "map $ssl_preread_server_name $up at /etc/nginx/nginx.conf:3" \
        in p.refusals[0]


def test_a_dump_that_cannot_be_placed_is_refused():
    with pytest.raises(dump.DumpError, match="includes /etc/nginx/missing.conf, which is not in nginx -T's output"):
        conf_of(("/etc/nginx/nginx.conf", "include missing.conf;\n"))
    with pytest.raises(dump.DumpError, match="no include read here leads to it"):
        conf_of(("/etc/nginx/nginx.conf", "events {}\n"), ("/etc/nginx/stray.conf", "stream {}\n"))


# ---- the plan: PROXY protocol only where the server behind speaks it

def test_servers_to_listed_upstreams_get_it_the_others_are_left():
    conf = conf_of(("/etc/nginx/nginx.conf", USER))
    p = plan.Plan(conf, NAS)
    assert outcomes(p) == [("443", "add"), ("80", "add"), ("2222", "other")]
    assert [s.result()["targets"] for s in p.servers] == [
        ["10.8.0.2:443 (upstream nas_tls)"], ["10.8.0.2:80"], ["192.168.1.5:22"]]
    assert p.refusals == [] and p.warnings == [] and p.nothing_forwards() is None


def test_udp_servers_never_get_it_and_say_so_naming_the_port():
    text = ("events {}\nstream {\n  server { listen 443; proxy_pass 10.8.0.2:443; }\n"
            "  server { listen 443 udp reuseport; listen [::]:443 udp reuseport; proxy_pass 10.8.0.2:443; }\n}\n")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), NAS)
    assert outcomes(p) == [("443", "add"), ("443 udp reuseport / [::]:443 udp reuseport", "udp")]
    assert len(p.warnings) == 1 and "is UDP (port 443): it never gets PROXY protocol" in p.warnings[0]
    assert "QUIC (HTTP/3)" in p.warnings[0]


def test_a_udp_server_with_an_earlier_versions_line_loses_it():
    earlier = ("events {}\nstream {\n  server {\n    listen 443 udp;\n    proxy_pass 10.8.0.2:443;\n"
               "    proxy_protocol on;  %s\n  }\n}\n" % plan.MARK)
    conf = conf_of(("/etc/nginx/nginx.conf", earlier))
    p = plan.Plan(conf, NAS)
    assert outcomes(p) == [("443 udp", "remove")]
    assert "earlier run comes out" in p.warnings[0]
    assert plan.LINE not in edited(conf, p)["/etc/nginx/nginx.conf"]


def test_an_upstream_with_an_unlisted_backup_or_down_server_is_refused_naming_it():
    text = ("events {}\nstream {\n  upstream nas {\n    server 10.8.0.2:443;\n    server 192.168.1.9:443 backup;\n"
            "    server 192.168.1.10:443 down;\n  }\n  server { listen 443; proxy_pass nas; }\n}\n")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), NAS)
    assert outcomes(p) == [("443", "refused")]
    why = p.refusals[0]
    assert "192.168.1.9:443 (backup, upstream nas), 192.168.1.10:443 (down, upstream nas)" in why
    assert "when it picks a backup server" in why and "List them in upstreams if they accept PROXY protocol" in why
    assert p.edits() == {}
    # listed, they are fine
    every = NAS + ["192.168.1.9:443", "192.168.1.10:443"]
    assert outcomes(plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), every)) == [("443", "add")]


def test_set_and_map_are_followed_to_their_values():
    text = ("events {}\nstream {\n  resolver 100.100.100.100;\n"
            "  map $ssl_preread_server_name $sni {\n    hostnames;\n    .example.net 10.8.0.2:443;\n"
            "    default 192.168.1.20:443;\n  }\n"
            "  server { listen 25565; set $target \"100.101.102.103:25565\"; proxy_pass $target; }\n"
            "  server { listen 443; ssl_preread on; proxy_pass $sni; }\n"
            "  server { listen 8443; ssl_preread on; proxy_pass $ssl_preread_server_name:443; }\n}\n")
    conf = conf_of(("/etc/nginx/nginx.conf", text))
    p = plan.Plan(conf, ["100.101.102.103:25565", "10.8.0.2:443"])
    assert outcomes(p) == [("25565", "add"), ("443", "refused"), ("8443", "unknown")]
    assert "forwards to $sni (map $ssl_preread_server_name $sni at /etc/nginx/nginx.conf:4), which can also " \
           "reach 192.168.1.20:443, not in upstreams" in p.refusals[0]
    assert "$ssl_preread_server_name" in p.warnings[0] and "leaves this server alone" in p.warnings[0]
    # a map with no default sends the unmatched nowhere: only the listed value counts
    no_default = text.replace("    default 192.168.1.20:443;\n", "")
    assert outcomes(plan.Plan(conf_of(("/etc/nginx/nginx.conf", no_default)),
                              ["100.101.102.103:25565", "10.8.0.2:443"]))[1] == ("443", "add")


def test_a_variable_known_only_per_connection_among_listed_values_is_refused_naming_it():
    text = ("events {}\nstream {\n  map $ssl_preread_server_name $name {\n    nas.example.net 10.8.0.2:443;\n"
            "    default $ssl_preread_server_name:443;\n  }\n  server { listen 443; proxy_pass $name; }\n}\n")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), NAS)
    assert outcomes(p) == [("443", "refused")]
    assert "which can be $ssl_preread_server_name besides the listed upstreams" in p.refusals[0]


def test_tcp_and_udp_in_one_server_is_refused():
    text = "events {}\nstream {\n  server { listen 443; listen 443 udp; proxy_pass 10.8.0.2:443; }\n}\n"
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), NAS)
    assert outcomes(p) == [("443 / 443 udp", "refused")]
    assert "Give the UDP listen a server of its own" in p.refusals[0]


def test_the_users_own_proxy_protocol_line_off_is_refused_on_is_adopted():
    off = USER.replace("proxy_timeout 10m;", "proxy_protocol off;")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", off)), NAS)
    assert p.servers[0].outcome == "refused" and "sets 'proxy_protocol off;' itself (/etc/nginx/nginx.conf:11)" \
        in p.refusals[0]
    on = USER.replace("proxy_timeout 10m;", "proxy_protocol on;")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", on)), NAS)
    assert outcomes(p)[0] == ("443", "theirs") and "own line" in p.warnings[0]
    absent = plan.Plan(conf_of(("/etc/nginx/nginx.conf", on)), NAS, present=False)
    assert absent.edits() == {} and "takes out only homelab.edge's lines" in absent.servers[0].why
    stream_level = USER.replace("stream {\n", "stream {\n  proxy_protocol on;\n")
    assert outcomes(plan.Plan(conf_of(("/etc/nginx/nginx.conf", stream_level)), NAS))[:2] == [
        ("443", "theirs"), ("80", "theirs")]


def test_nothing_to_the_listed_upstreams_says_what_each_server_forwards_to():
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", USER)), ["10.9.9.9:443"])
    why = p.nothing_forwards()
    assert "no stream server of nginx forwards to 10.9.9.9:443" in why
    assert "443 (/etc/nginx/nginx.conf:8) -> nas_tls; 80 (/etc/nginx/nginx.conf:13) -> 10.8.0.2:80" in why
    none = plan.Plan(conf_of(("/etc/nginx/nginx.conf", "events {}\nhttp {}\n")), NAS)
    assert "has no stream {} block" in none.nothing_forwards()


# ---- the edit: every other byte stays, and absent gives it back

SHAPES = {
    "lines": USER,
    "crlf": USER.replace("\n", "\r\n"),
    "one line, no newline at the end": "events{}stream{server{listen 80;proxy_pass 10.8.0.2:80;}}",
    "a comment after the proxy_pass": "events {}\nstream {\n  server {\n    listen 80;\n"
                                      "    proxy_pass 10.8.0.2:80;   # to the NAS\n  }\n}\n",
    "a comment after the proxy_pass, crlf": "events {}\r\nstream {\r\n  server {\r\n    listen 80;\r\n"
                                            "    proxy_pass 10.8.0.2:80; # to the NAS\r\n  }\r\n}\r\n",
    "tabs": "events {}\nstream {\n\tserver {\n\t\tlisten 80;\n\t\tproxy_pass 10.8.0.2:80;\n\t}\n}\n",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_edit_is_one_marked_line_idempotent_and_reversible_byte_for_byte(shape):
    text = SHAPES[shape]
    files = [("/etc/nginx/nginx.conf", text)]
    conf = conf_of(*files)
    p = plan.Plan(conf, NAS)
    new = edited(conf, p)
    out = new["/etc/nginx/nginx.conf"]
    assert out.count(plan.LINE + "  " + plan.MARK) == len(p.of("add")) >= 1
    if "\r\n" in text:
        assert "\n" not in out.replace("\r\n", "")  # the new lines end as the file's do
    again_conf, again = rerun(files, new, NAS)
    assert again.edits() == {} and set(s.outcome for s in again.servers) <= {"has", "other"}
    back_conf, back = rerun(files, new, NAS, present=False)
    assert edited(back_conf, back)["/etc/nginx/nginx.conf"] == text


def test_the_marked_line_goes_after_the_proxy_pass_and_splits_a_one_line_server():
    conf = conf_of(("/etc/nginx/nginx.conf", USER))
    out = edited(conf, plan.Plan(conf, NAS))["/etc/nginx/nginx.conf"]
    assert "    proxy_pass nas_tls;\n    proxy_protocol on;  " + plan.MARK + "\n    proxy_timeout 10m;" in out
    assert "server { listen 80; proxy_pass 10.8.0.2:80;\n  proxy_protocol on;  %s [split]\n   }" % plan.MARK in out


def test_lines_an_earlier_version_wrote_are_recognised_and_removed():
    # 0.x wrote the same line; a CRLF file got it with CRLF everywhere, the split too
    earlier = USER.replace("proxy_pass nas_tls;\n", "proxy_pass nas_tls;\n    proxy_protocol on;  %s\n" % plan.MARK)
    conf = conf_of(("/etc/nginx/nginx.conf", earlier))
    assert [s.outcome for s in plan.Plan(conf, NAS).servers][:1] == ["has"]
    absent = plan.Plan(conf, NAS, present=False)
    assert edited(conf, absent)["/etc/nginx/nginx.conf"] == USER
    # reformatted by hand: still ours, still removed
    moved = USER.replace("    proxy_timeout 10m;\n", "    proxy_timeout 10m;  proxy_protocol on;  %s\n" % plan.MARK)
    conf = conf_of(("/etc/nginx/nginx.conf", moved))
    assert edited(conf, plan.Plan(conf, NAS, present=False))["/etc/nginx/nginx.conf"] == USER


# ---- where the checks go

@pytest.mark.parametrize("listen, where", [
    ("443", ("127.0.0.1", 443)), ("*:443", ("127.0.0.1", 443)), ("0.0.0.0:443", ("127.0.0.1", 443)),
    ("[::]:443", ("::1", 443)), ("203.0.113.10:443", ("203.0.113.10", 443)), ("[2001:db8::1]:8443", ("2001:db8::1", 8443)),
    ("localhost:443", ("localhost", 443)), ("8000-8010", ("127.0.0.1", 8000)), ("unix:/run/nginx.sock", (None, None)),
])
def test_a_listener_is_checked_at_its_own_address(listen, where):
    assert plan.connect_address(listen) == where


def test_the_check_carries_what_the_listener_expects():
    text = ("events {}\nstream {\n  map $ssl_preread_server_name $up { nas.example.net 10.8.0.2:443; "
            "old.example.net 192.168.1.9:443; default 10.8.0.2:443; }\n"
            "  server { listen 203.0.113.10:443 proxy_protocol; listen unix:/run/n.sock; ssl_preread on; proxy_pass $up; }\n}\n")
    p = plan.Plan(conf_of(("/etc/nginx/nginx.conf", text)), NAS + ["192.168.1.9:443"])
    checks, skipped = p.checks()
    assert [(c["host"], c["port"], c["proxy_protocol"], c["sni"]) for c in checks] == [
        ("203.0.113.10", 443, True, "nas.example.net")]
    assert "unix socket, not checked" in skipped[0]
    assert p.upstreams_to_ask() == [("10.8.0.2:443", "nas.example.net"), ("192.168.1.9:443", "nas.example.net")]


def test_proxy_header_is_v1_tcp4_or_tcp6():
    assert plan.proxy_header() == b"PROXY TCP4 198.51.100.7 10.8.0.2 40000 443\r\n"
    assert plan.proxy_header(server="::1", server_port=8443) == b"PROXY TCP6 2001:db8::7 ::1 40000 8443\r\n"


def test_backup_copies_ansible_writes_are_recognised_in_nginxs_messages():
    message = ('nginx: [emerg] duplicate "0.0.0.0:443" address and port pair in '
               '/etc/nginx/streams-enabled/nas.1234.2026-01-05@10:11:12~:3\nnginx: configuration file /etc/nginx/nginx.conf '
               'test failed')
    assert plan.backup_copies(message) == ["/etc/nginx/streams-enabled/nas.1234.2026-01-05@10:11:12~"]
    assert plan.backup_copies("nginx: [emerg] unknown directive \"banana\" in /etc/nginx/nginx.conf:1") == []
