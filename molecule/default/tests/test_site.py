"""site.yml over the whole lab: tag runs, check mode, the status table, and
the edge path client -> VPS -> WireGuard -> NAS with real client addresses,
in both orders of failure."""
import json
import os
import re
import subprocess
import sys
import time

import docker
import pytest
import testinfra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import adhoc  # noqa: E402
import hosts  # noqa: E402
import monitoring  # noqa: E402
import nginx_conf  # noqa: E402
import probes  # noqa: E402
import upstream_images  # noqa: E402

INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
VPS = testinfra.get_host("docker://lab-vps")
NAS = testinfra.get_host("docker://lab-nas")
MIDDLEWARE = "/srv/traefik/config/dynamic/inflight-limit.yml"
BLOCK = "homelab.edge.ufw_connlimit"
AMOUNT = 50  # inventories/lab: below the VPS's 100 connections per address


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def site(*args, ok=True):
    """ansible-playbook site.yml; its recap, or (rc, output, recap) with ok=False. The output is stdout and
    stderr together: where a failure's message goes depends on the callback (Molecule sets its own config)."""
    out = subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "site.yml")] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900, check=False)
    if ok:
        assert out.returncode == 0, out.stdout[-3000:]
    recap = dict((m.group(1), (int(m.group(2)), int(m.group(3))))
                 for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)", out.stdout, re.M))
    return recap if ok else (out.returncode, " ".join(out.stdout.split()), recap)


def vps_ip():
    return hosts.address("lab-vps", "lab-wan")


def nas_lan_ip():
    return hosts.address("lab-nas", "lab-lan")


def get(container, address, name="site", port=443):
    out = subprocess.run(["docker", "exec", container, "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10",
                          "--resolve", "%s.nas.lab:%d:%s" % (name, port, address), "https://%s.nas.lab:%d/" % (name, port)],
                         capture_output=True, text=True, check=False)
    return out.stdout


def access_log(since):
    out = NAS.check_output("docker logs --since %d traefik 2>&1" % int(since))
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def files():
    """Every file the site changes on the VPS and the NAS (autoheal's where the lab runs it: its part is skipped by
    tag where it has no image)."""
    dirs = "/srv/traefik" + (" /srv/autoheal" if upstream_images.reason("autoheal") is None else "")
    return (VPS.file("/etc/ufw/before.rules").content_string, VPS.file("/etc/nginx/nginx.conf").content_string,
            NAS.check_output("find %s -type f ! -name '*~' | sort | xargs cat" % dirs))


def test_tags_vps_touches_only_the_vps():
    VPS.check_output("sed -i '/%s/,/END %s/d' /etc/ufw/before.rules" % (BLOCK, BLOCK))
    recap = site("--tags", "vps")
    assert recap["lab-vps"][1] > 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-nas"][1] == 0
    assert BLOCK in VPS.file("/etc/ufw/before.rules").content_string


def test_tags_nas_touches_only_the_nas():
    NAS.check_output("rm %s" % MIDDLEWARE)
    recap = site("--tags", "nas")
    assert recap["lab-nas"][1] > 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-vps"][1] == 0
    assert NAS.file(MIDDLEWARE).exists


def test_role_tag_selects_one_role():
    recap = site("--tags", "traefik_inflight")
    assert recap["lab-nas"][0] > 0 and recap["lab-nas"][1] == 0
    assert recap["lab-k3d"][1] == 0 and recap["lab-vps"][1] == 0


def test_check_diff_over_the_whole_site_changes_nothing():
    before = files()
    recap = site("--check", "--diff")
    assert set(recap) == {"lab-k3d", "lab-vps", "lab-nas"}
    assert all(changed == 0 for ok, changed in recap.values())
    assert files() == before


def status_table():
    out = subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "playbooks", "status.yml")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:]
    return " ".join(out.stdout.split("Print the table")[1].split())


STATUS_ROWS = ("k3d-lab-serverlb", "k3d-lab2-serverlb", "connlimit 100/IP", "PROXY protocol to 10.8.0.2:443",
               "traefik middleware", "traefik client addresses", "traefik health", "drain traefik")


def test_everything_is_fixed_in_the_status_table():
    """Every row fixed; autoheal's row only where the lab runs it (its part is skipped by tag where it has no image).
    The clients ask through the VPS first, as a site's users do: the access log's window of 300 s otherwise holds
    mostly the lab's blackbox probe (one address, 97 % of 68 requests in one run), which the client-addresses row
    reads as a proxy in front (so does status on a quiet site whose only client is an uptime probe: issue note)."""
    for c in ("lab-client1", "lab-client2"):
        assert [get(c, vps_ip()) for dummy in range(20)] == ["200"] * 20
    table = status_table()
    assert "NOT FIXED" not in table, table
    for what in STATUS_ROWS:
        assert what in table
    # (the lab's autoheal row: "running behind the socket proxy, watching traefik"; Traefik's health row names the label)
    assert ("behind the socket proxy" in table) == (upstream_images.reason("autoheal") is None), table


def test_traefik_sees_each_client_with_its_own_address():
    t0 = time.time() - 1
    for c in ("lab-client1", "lab-client2"):
        assert [get(c, vps_ip()) for dummy in range(2)] == ["200", "200"]
    seen = set(r["ClientHost"] for r in access_log(t0) if r.get("RouterName") == "site@file")
    seen.discard(hosts.address(monitoring.EDGE_PROBE, "lab-wan"))  # the lab's blackbox probe, a WAN client too
    assert seen == {hosts.address("lab-client1", "lab-wan"), hosts.address("lab-client2", "lab-wan")}


def test_plain_http_through_the_vps_gets_proxy_protocol_too():
    """Port 80's stream server is on one line in the admin's nginx.conf
    (lab/user-configs/vps/nginx-tunnel.conf): nginx (read with crossplane, not
    the module's parser) has proxy_protocol on for it as for 443, and Traefik
    takes the header there (its redirect, not a 400). Traefik does not log an
    entrypoint's redirect, so its access log cannot show the address on 80."""
    servers = nginx_conf.summary(VPS.check_output("nginx -T 2>/dev/null"))["tcp"]
    assert servers["80"]["proxy_protocol"] == "on" and servers["443"]["proxy_protocol"] == "on"
    out = subprocess.run(["docker", "exec", "lab-client1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m",
                          "10", "-H", "Host: site.nas.lab", "http://%s/" % vps_ip()], capture_output=True, text=True, check=False)
    assert out.stdout in ("301", "302", "307", "308")  # the admin's redirect to websecure


def flood_through_the_vps(client, n=150):
    """client1 floods the NAS through the VPS; client2 asks meanwhile."""
    flood = probes.https_flood(client.containers.get("lab-client1"), vps_ip(), "/slower", n, 443, "site.nas.lab").started()
    # while its requests are in flight (6 s), on the same router: the same middleware instance
    second = [get("lab-client2", vps_ip(), "site") for dummy in range(3)]
    return flood.result(), second


def test_a_flood_through_the_vps_is_cut_at_both_doors_and_a_second_client_is_served(client):
    """150 connections from one address: the VPS resets 50 (connlimit 100),
    Traefik answers 50 and turns 50 away with 429 (amount 50 per address);
    a second client through the same VPS and tunnel is served meanwhile."""
    counts, second = flood_through_the_vps(client)
    adhoc.record("site", "flood_through_vps", second=second, **counts)
    assert counts.get("200") == AMOUNT and counts.get("429") == 100 - AMOUNT, counts
    assert sum(v for k, v in counts.items() if not k.isdigit()) == 50  # reset at the VPS
    assert second == ["200"] * 3


def test_internal_clients_are_limited_by_their_own_address(client):
    flood = probes.https_flood(client.containers.get("lab-lan-client"), nas_lan_ip(), "/slower", 120, 443,
                               "site.nas.lab").started()
    second = get("lab-client2", vps_ip())  # while its requests are in flight (6 s)
    counts = flood.result()
    adhoc.record("site", "flood_from_the_lan", second=second, **counts)
    assert counts.get("200") == AMOUNT and counts.get("429") == 120 - AMOUNT
    assert second == "200"


def test_without_proxy_protocol_one_client_blocks_everyone_and_status_says_so(client):
    """The net, removed: without PROXY protocol every request through the VPS
    comes from its tunnel address, one bucket: client2 gets 429 too."""
    site("--tags", "vps_proxy_protocol", "-e", "vps_proxy_protocol_state=absent")
    try:
        assert "proxy_protocol on" not in VPS.file("/etc/nginx/nginx.conf").content_string
        counts, second = flood_through_the_vps(client, n=100)
        adhoc.record("site", "flood_without_proxy_protocol", second=second, **counts)
        assert "429" in second
        table = status_table()
        assert "per-IP limit blind" in table and "10.8.0.1" in table
    finally:
        site("--tags", "vps_proxy_protocol")
    assert "proxy_protocol on" in VPS.file("/etc/nginx/nginx.conf").content_string


def both_off():
    site("--tags", "vps_proxy_protocol", "-e", "vps_proxy_protocol_state=absent")  # the VPS first
    site("--tags", "traefik_inflight", "-e", '{"traefik_inflight_proxy_protocol_trusted_ips": []}')
    assert "proxyProtocol" not in NAS.file("/srv/traefik/config/traefik.yml").content_string


def test_when_the_nas_fails_first_the_vps_does_not_send_and_the_path_keeps_working():
    """The NAS's change fails (and is rolled back): site.yml goes on to the VPS
    (one host failing stops no other), whose PROXY protocol step refuses to send
    it to a Traefik that does not trust it yet, and the run ends naming both;
    the VPS run on its own (its tag) refuses the same. TLS through the VPS works all along."""
    both_off()
    try:
        rc, out, recap = site("-e", '{"traefik_inflight_excluded_ips": ["not-an-ip"]}', ok=False)
        assert rc != 0 and "The change was rolled back" in out and "invalid CIDR address: not-an-ip" in out
        # from the task's header on (ansible-core 2.19+ quotes the task's source line, its name, under each error)
        summary = out.split("TASK [Hosts that failed in a play above")[-1]
        assert "fatal: [lab-nas]" in summary and "fatal: [lab-vps]" in summary, summary[-3000:]
        assert "do not accept PROXY protocol from this host yet" in summary and "nothing was changed" in summary
        assert "proxy_protocol on" not in VPS.file("/etc/nginx/nginx.conf").content_string
        assert "proxyProtocol" not in NAS.file("/srv/traefik/config/traefik.yml").content_string
        assert get("lab-client1", vps_ip()) == "200"
        rc, out, recap = site("--tags", "vps", ok=False)
        assert rc != 0 and "do not accept PROXY protocol from this host yet" in out and "nothing was changed" in out
        assert "proxy_protocol on" not in VPS.file("/etc/nginx/nginx.conf").content_string
        assert [get("lab-client1", vps_ip()), get("lab-client1", vps_ip(), port=443)] == ["200", "200"]
    finally:
        site()
    assert get("lab-client1", vps_ip()) == "200"


def test_when_the_vps_fails_after_the_nas_the_path_keeps_working():
    site("--tags", "vps_proxy_protocol", "-e", "vps_proxy_protocol_state=absent")
    conf = VPS.file("/etc/nginx/nginx.conf").content_string
    try:
        # something of the admin's makes `nginx -t` fail: nginx -T, which the module reads the config with, refuses
        # too, and the run stops before it writes anything, with nginx's own words
        VPS.check_output("sed -i '1i worker_shutdown_timeout banana;' /etc/nginx/nginx.conf")
        rc, out, recap = site("--tags", "vps_proxy_protocol", ok=False)
        assert rc != 0 and "nginx itself cannot load your configuration as it is" in out
        assert "worker_shutdown_timeout" in out and "directive invalid value in /etc/nginx/nginx.conf:1" in out
        assert "nothing was changed" in out
        assert VPS.file("/etc/nginx/nginx.conf").content_string.startswith("worker_shutdown_timeout banana;")
        assert "proxy_protocol on" not in VPS.file("/etc/nginx/nginx.conf").content_string
        assert "trustedIPs" in NAS.file("/srv/traefik/config/traefik.yml").content_string
        assert get("lab-client1", vps_ip()) == "200"  # Traefik takes both, with and without the header
    finally:
        VPS.check_output("cat > /etc/nginx/nginx.conf <<'EOF'\n%sEOF" % conf)
        site("--tags", "vps_proxy_protocol")
    assert get("lab-client1", vps_ip()) == "200"


def test_the_tunnel_comes_back_through_the_vps_firewall_on_a_new_flow():
    """ufw was inactive on the lab's VPS (sshd on 2222, WireGuard on
    51820/udp) before site.yml. The tunnel's running flow is ESTABLISHED
    traffic that any firewall lets through; a NEW flow is what a NAS that
    restarts (or whose address changes) sends: the NAS's wg0 comes up again
    from a new source port, and its handshake must get through the VPS's ufw."""
    assert VPS.check_output("ufw status").startswith("Status: active")
    assert "51820/udp" in VPS.check_output("ufw status")
    env = "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go"
    NAS.check_output("wg-quick down wg0 >/dev/null 2>&1; %s wg-quick up wg0 >/dev/null 2>&1" % env)
    deadline = time.time() + 30
    while time.time() < deadline and NAS.run("ping -c 1 -W 1 10.8.0.1").rc != 0:
        time.sleep(1)
    assert NAS.run("ping -c 1 -W 1 10.8.0.1").rc == 0, "no new handshake through the VPS's firewall"
    assert get("lab-client1", vps_ip()) == "200"
    # a new SSH login on the VPS's own port (sshd on 2222 inside)
    assert hosts.ssh(2224, "true", check=False).returncode == 0
