import pytest

from ansible_collections.homelab.edge.plugins.module_utils import nginx_stream

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


def test_servers_upstreams_and_targets():
    found = nginx_stream.servers(USER)
    assert [s["listen"] for s in found] == [["443"], ["80"], ["2222"]]
    ups = nginx_stream.upstream_servers(USER)
    assert ups == {"nas_tls": ["10.8.0.2:443"]}
    assert [nginx_stream.targets(s, ups) for s in found] == [["10.8.0.2:443"], ["10.8.0.2:80"], ["192.168.1.5:22"]]


def test_edit_adds_one_marked_line_after_each_proxy_pass_to_the_nas_and_nothing_else():
    out, changed = nginx_stream.edit(USER, NAS)
    assert sorted(changed) == [["443"], ["80"]]
    assert out.count(nginx_stream.LINE) == 2 and out.count(nginx_stream.MARK) == 2
    assert "    proxy_pass nas_tls;\n    proxy_protocol on;  " + nginx_stream.MARK + "\n    proxy_timeout 10m;" in out
    # a server on one line: the marked line on its own, the rest of the line after it
    assert "server { listen 80; proxy_pass 10.8.0.2:80;\n  proxy_protocol on;  %s [split]\n   }" % nginx_stream.MARK in out
    # every other line of the user's is still there, in order; the http server is not a stream server
    assert [l for l in out.splitlines() if nginx_stream.MARK not in l and "listen 80" not in l and l != "   }"] == \
        [l for l in USER.splitlines() if "listen 80" not in l]


def test_edit_is_idempotent_and_reversible():
    once, dummy = nginx_stream.edit(USER, NAS)
    assert nginx_stream.edit(once, NAS) == (once, [])
    back, changed = nginx_stream.edit(once, NAS, present=False)
    assert back == USER and sorted(changed) == [["443"], ["80"]]
    assert nginx_stream.edit(USER, NAS, present=False) == (USER, [])


def test_the_users_own_proxy_protocol_is_refused():
    theirs = USER.replace("proxy_timeout 10m;", "proxy_protocol off;")
    with pytest.raises(nginx_stream.NginxConfigError, match="sets 'proxy_protocol off;' itself"):
        nginx_stream.edit(theirs, NAS)


def test_crlf_and_included_files():
    out, dummy = nginx_stream.edit(USER.replace("\n", "\r\n"), NAS)
    assert "proxy_pass 10.8.0.2:80;\r\n  proxy_protocol on;" in out
    assert nginx_stream.edit(out, NAS, present=False)[0] == USER.replace("\n", "\r\n")
    inner = "server {\n  listen 80;\n  proxy_pass 10.8.0.2:80;\n}\n"
    assert nginx_stream.edit(inner, NAS)[1] == [] and nginx_stream.edit(inner, NAS, in_stream=True)[1] == [["80"]]
    main = "stream {\n  include /etc/nginx/stream.d/*.conf;\n}\ninclude /etc/nginx/conf.d/*.conf;\n"
    assert nginx_stream.includes(main) == [("/etc/nginx/stream.d/*.conf", True), ("/etc/nginx/conf.d/*.conf", False)]


def test_unbalanced_braces_are_refused():
    with pytest.raises(nginx_stream.NginxConfigError, match="unbalanced braces"):
        nginx_stream.servers("stream { server { listen 80; proxy_pass 10.8.0.2:80; }\n")


def test_proxy_header_is_v1():
    assert nginx_stream.proxy_header() == b"PROXY TCP4 198.51.100.7 10.8.0.2 40000 443\r\n"
