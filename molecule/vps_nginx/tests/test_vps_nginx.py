"""nginx_proxy_protocol on the real nginx (issue 61): the shapes users run,
each edited right (nginx serves through it, Traefik on the NAS sees the
client's own address, a second run changes nothing, absent gives the files
back byte for byte with links as links) or refused before anything is
written; nginx -t passes after every run, a failed one too.

Converge ran the role on the admin's Debian layout (lab/user-configs/vps:
streams-available/nas linked from streams-enabled/, TCP and UDP on 443, 80 on
one line); the first tests look at what it left. The others put a layout of
their own in place (the VPS's console: docker exec), run the module ad hoc
as the role does (SSH as a sudo user) and put the admin's layout back."""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "molecule", "vps_nginx"),
                os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import hosts  # noqa: E402
import lab  # noqa: E402

INVENTORY = adhoc.molecule_inventory()
VPS = testinfra.get_host("docker://%s" % lab.VPS)
NAS = testinfra.get_host("docker://%s" % lab.NAS)
NAS_UPSTREAMS = ["10.8.0.2:443", "10.8.0.2:80"]
MARK = "proxy_protocol on;  # homelab.edge: PROXY protocol to the NAS (managed by Ansible)"
with open(os.path.join(lab.USER_CONFIGS, "streams-available", "nas")) as f:
    ADMINS = f.read()


def run(args, check=False):
    return adhoc.run_module("nginx_proxy_protocol", dict({"config": "/etc/nginx/nginx.conf"}, **args),
                            target=lab.VPS, inventory=INVENTORY, become=True, check=check)


def tree():
    """Every file and link under /etc/nginx: a link's target, a file's sha256; and whether a journal is left."""
    out = VPS.check_output("cd / && find etc/nginx var/backups/homelab-edge/nginx/journal.json "
                           "\\( -type f -o -type l \\) 2>/dev/null | sort | while read -r p; do "
                           "if [ -L \"$p\" ]; then echo \"$p -> $(readlink \"$p\")\"; "
                           "else echo \"$p $(sha256sum < \"$p\" | cut -c1-16)\"; fi; done")
    return out.splitlines()


def nginx_t():
    return VPS.run("nginx -t -c /etc/nginx/nginx.conf")


def put(path, text):
    VPS.check_output("mkdir -p %s && cat > %s <<'EOF'\n%sEOF" % (os.path.dirname(path), path, text))


def layout(text, name="shape"):
    """A stream layout of the test's: the file in streams-available/, linked from streams-enabled/ (alone)."""
    VPS.check_output("rm -rf /etc/nginx/streams-enabled/*")
    put("/etc/nginx/streams-available/%s" % name, text)
    VPS.check_output("ln -s /etc/nginx/streams-available/%s /etc/nginx/streams-enabled/%s && nginx -s reload"
                     % (name, name))
    wait_listening(text)


def wait_listening(text):
    ports = set(w.rstrip(";").split(":")[-1] for line in text.splitlines() if line.strip().startswith("listen")
                for w in line.split()[1:2] if "udp" not in line)
    hosts.wait("nginx listening on %s" % ", ".join(sorted(ports)), lambda: all(
        VPS.run("ss -Htln | awk '{print $4}' | grep -q ':%s$'" % p).rc == 0 for p in ports), timeout=30)


@pytest.fixture
def admins_layout_after():
    """Whatever a test does, the admin's layout (as converge left it: the role's lines in) comes back."""
    yield
    VPS.check_output("rm -rf /etc/nginx/streams-enabled/* /etc/nginx/streams-available/shape")
    lab.debian_layout()
    assert not run({"upstreams": NAS_UPSTREAMS}).get("failed")


def client(*argv):
    return subprocess.run(["docker", "exec", lab.CLIENT] + list(argv), capture_output=True, text=True, timeout=60,
                          check=False)


def through_vps(url, *extra):
    """A client's request through the VPS: (HTTP status, the client addresses Traefik logged for it)."""
    before = len(access_log_lines())
    out = client("curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10", *extra, url)
    if out.stdout == "200":  # Traefik writes its access log line once the answer is out
        hosts.wait("Traefik's access log line", lambda: len(access_log_lines()) > before, timeout=10)
    seen = [json.loads(line)["ClientHost"] for line in access_log_lines()[before:]]
    return out.stdout, seen


def access_log_lines():
    return [line for line in NAS.check_output("cat /tmp/access.log").splitlines() if line.strip()]


def vps_ip():
    return hosts.address(lab.VPS, lab.NET)


def client_ip():
    return hosts.address(lab.CLIENT, lab.NET)


# ---- what converge left on the admin's Debian layout

def test_the_links_target_is_edited_the_link_stays_and_nothing_is_left_where_nginx_reads():
    assert VPS.file("/etc/nginx/streams-enabled/nas").is_symlink
    assert VPS.file("/etc/nginx/streams-enabled/nas").linked_to == "/etc/nginx/streams-available/nas"
    assert VPS.check_output("ls -A /etc/nginx/streams-enabled /etc/nginx/streams-available").split() == [
        "/etc/nginx/streams-available:", "nas", "/etc/nginx/streams-enabled:", "nas"]
    text = VPS.file("/etc/nginx/streams-available/nas").content_string
    assert text.count(MARK) == 2  # TCP 443 and 80, never the UDP server
    udp = text.split("listen 443 udp reuseport;")[1].split("}")[0]
    assert "proxy_protocol" not in udp
    backups = VPS.check_output("find /var/backups/homelab-edge/nginx -name 'nas.*~'").split()
    assert backups and all(VPS.file(b).content_string == ADMINS for b in backups)  # the admin's bytes, out of nginx's way
    assert nginx_t().rc == 0


def test_traefik_sees_each_client_with_its_own_address_through_the_vps():
    status, seen = through_vps("https://%s/" % vps_ip())
    assert status == "200" and seen == [client_ip()]
    status, seen = through_vps("http://%s/" % vps_ip())
    assert status == "200" and seen == [client_ip()]


def test_a_quic_like_datagram_reaches_the_nas_without_a_proxy_header():
    """Both ways: the UDP server on 443 the run left alone forwards the datagram clean; a UDP server with
    proxy_protocol on (the net removed: what the module did before) puts the header in front of it."""
    def datagram(port):
        mark = "quic-%d-%d" % (port, time.time() * 1000 % 10 ** 7)
        before = len(NAS.check_output("cat /tmp/udp.log 2>/dev/null || true").splitlines())
        out = client("python3", "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                     "s.settimeout(5); s.sendto(b'%s', ('%s', %d)); print(s.recvfrom(2048)[0].decode('latin-1'))"
                     % (mark, vps_ip(), port))
        assert out.returncode == 0, out.stderr
        entries = [json.loads(line) for line in NAS.check_output("cat /tmp/udp.log").splitlines()[before:]]
        return [e["proxy"] for e in entries if mark in e["first"] or e["proxy"]]
    assert datagram(443) == [False]
    put("/etc/nginx/streams-enabled/udp-with-header", "server { listen 4443 udp; proxy_pass 10.8.0.2:443; "
        "proxy_protocol on; }\n")
    try:
        VPS.check_output("nginx -s reload")
        hosts.wait("nginx on 4443/udp", lambda: VPS.run("ss -Hlun | grep -q ':4443 '").rc == 0, timeout=30)
        assert datagram(4443) == [True]
    finally:
        VPS.check_output("rm -f /etc/nginx/streams-enabled/udp-with-header && nginx -s reload")


def test_a_second_run_changes_nothing_and_absent_gives_every_byte_back_with_links_as_links(admins_layout_after):
    before = tree()
    again = run({"upstreams": NAS_UPSTREAMS})
    assert again["changed"] is False and tree() == before
    undone = run({"upstreams": NAS_UPSTREAMS, "state": "absent"})
    assert undone["changed"] and VPS.file("/etc/nginx/streams-available/nas").content_string == ADMINS
    assert VPS.file("/etc/nginx/streams-enabled/nas").is_symlink and nginx_t().rc == 0
    assert sorted(undone["changed_servers"]) == [["443"], ["80"]]


# ---- the severe shapes, each on its own

BACKUP_SERVER = """upstream nas {
	server 10.8.0.2:443;
	server 192.168.1.9:443 backup;   # the old Pi, when the NAS is down
}
server {
	listen 443;
	proxy_pass nas;
}
"""


def test_an_upstream_with_a_backup_server_is_refused_and_nothing_is_written(admins_layout_after):
    layout(BACKUP_SERVER)
    before = tree()
    res = run({"upstreams": NAS_UPSTREAMS})
    assert res["failed"] and "192.168.1.9:443 (backup, upstream nas), not in upstreams" in res["msg"]
    assert res["msg"].endswith("nothing was changed.") and tree() == before and nginx_t().rc == 0


FORCED_FAILURE = """server {
	listen 9444;
	proxy_pass 10.8.0.2:9444;   # the NAS's picky stand-in: takes the module's probe, resets forwarded clients
}
"""


def test_a_failure_after_the_write_gives_every_byte_back_and_nginx_t_passes(admins_layout_after):
    layout(FORCED_FAILURE)
    before = tree()
    res = run({"upstreams": ["10.8.0.2:9444"], "backup": True})
    assert res["failed"] and "after the reload, connections through nginx fail" in res["msg"], res["msg"]
    assert "your files are back byte for byte and nginx was reloaded on them; nginx -t passes" in res["msg"]
    assert tree() == before and VPS.file("/etc/nginx/streams-enabled/shape").is_symlink and nginx_t().rc == 0
    # nginx serves the files put back: a forwarded client gets its answer again (no header, the stand-in answers)
    assert client("curl", "-s", "-m", "10", "http://%s:9444/" % vps_ip()).stdout == "ok\n"


LISTEN_PROXY_PROTOCOL = """server {
	listen 9443 proxy_protocol;   # a load balancer in front of the VPS sends PROXY protocol
	proxy_pass 10.8.0.2:443;
}
"""


def test_a_listener_with_proxy_protocol_is_checked_with_a_header_and_edited(admins_layout_after):
    layout(LISTEN_PROXY_PROTOCOL)
    res = run({"upstreams": ["10.8.0.2:443"]})
    assert res["changed"] and not res.get("failed"), res.get("msg")
    through = [p for p in res["probes"] if p.get("listen") == "9443 proxy_protocol"]
    assert [(p["step"], p["proxy_protocol_header"], p["ok"]) for p in through] == [
        ("before", True, True), ("after", True, True)]
    status, seen = through_vps("https://%s:9443/" % vps_ip(), "--haproxy-protocol")
    assert status == "200" and seen == [client_ip()] and nginx_t().rc == 0


TLS_ON_ANOTHER_PORT = """server {
	listen 443;
	proxy_pass 10.8.0.2:8443;   # Traefik on 8443 (DSM holds 443 on a Synology)
}
server {
	listen 8080;
	proxy_pass 10.8.0.2:443;    # 8080 to TLS on 443
}
"""


def test_tls_upstreams_on_other_ports_are_checked_in_tls_and_edited(admins_layout_after):
    layout(TLS_ON_ANOTHER_PORT)
    res = run({"upstreams": ["10.8.0.2:8443", "10.8.0.2:443"]})
    assert res["changed"] and not res.get("failed"), res.get("msg")
    assert sorted(set((p["to"], p.get("speaks")) for p in res["probes"] if p["step"] != "upstream, with a PROXY header")) \
        == [("127.0.0.1:443", "tls"), ("127.0.0.1:8080", "tls")]
    for port in (443, 8080):
        status, seen = through_vps("https://%s:%d/" % (vps_ip(), port))
        assert status == "200" and seen == [client_ip()]
    assert run({"upstreams": ["10.8.0.2:8443", "10.8.0.2:443"]})["changed"] is False


def test_a_public_address_listener_is_checked_at_that_address_and_edited(admins_layout_after):
    layout("server {\n\tlisten %s:8445;\n\tproxy_pass 10.8.0.2:443;\n}\n" % vps_ip())
    res = run({"upstreams": ["10.8.0.2:443"]})
    assert res["changed"] and not res.get("failed"), res.get("msg")
    assert set(p["to"] for p in res["probes"] if p["step"] in ("before", "after")) == {"%s:8445" % vps_ip()}
    status, seen = through_vps("https://%s:8445/" % vps_ip())
    assert status == "200" and seen == [client_ip()] and nginx_t().rc == 0
    assert VPS.run("ss -Htln | grep -q '127.0.0.1:8445'").rc != 0  # where the old check went, nothing listens


def test_an_absent_run_gives_a_shapes_bytes_back(admins_layout_after):
    layout(TLS_ON_ANOTHER_PORT)
    original = hashlib.sha256(VPS.file("/etc/nginx/streams-available/shape").content).hexdigest()
    assert run({"upstreams": ["10.8.0.2:8443", "10.8.0.2:443"]})["changed"]
    assert run({"upstreams": ["10.8.0.2:8443", "10.8.0.2:443"], "state": "absent"})["changed"]
    assert hashlib.sha256(VPS.file("/etc/nginx/streams-available/shape").content).hexdigest() == original
    assert VPS.file("/etc/nginx/streams-enabled/shape").is_symlink and nginx_t().rc == 0
