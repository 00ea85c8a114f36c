"""A Synology-shaped NAS (docs/synology.md): DSM's own web server holds 80 and 443 of the NAS - here the host's
nginx, a default server that answers 200 "DSM" to any host name - and the admin's Traefik v3 runs as a Container
Manager project in /volume1/docker/traefik, its 80 and 443 published on 8080 and 8443
(lab/user-configs/nas/synology). A lab host booted by systemd (as DSM 7 is), reached over SSH as a sudo user,
with its own Docker engine (Engine 29, started by systemd). In front of it a VPS whose nginx stream proxy forwards
its 443 to the NAS's 8443 (lab/user-configs/nas/synology/vps-nginx.conf), and a client on the internet side. The
playbooks as a user runs them: `site` (the NAS's roles, then the VPS's PROXY protocol to 8443) changes Traefik beside
DSM, and Traefik then sees the client's own address through the VPS; `status` and `diagnose` read both hosts, and
`prove` proves the in-flight limit and the opt-in wedge through 8443 - urls derived from Traefik's own config and its
published ports, with no url set. Given DSM's https://127.0.0.1:443 instead, both checks are refused before anything
is sent or wedged. DSM's nginx answers on 443 throughout."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "lab"), os.path.join(ROOT, "tests", "support")]
import adhoc  # noqa: E402
import hosts  # noqa: E402
import upstream_images  # noqa: E402

NAS, NET, SSH_PORT = "hle-syno", "hle-syno", 2252
VPS, VPS_SSH_PORT, CLIENT = "hle-syno-vps", 2253, "hle-syno-client"
USER = os.path.join(ROOT, "lab", "user-configs", "nas")
PROJECT = "/volume1/docker/traefik"
IMAGES = ["homelab-edge/nas:lab", "homelab-edge/autoheal:lab", "homelab-edge/socket-proxy:lab"]
DSM_443 = "https://127.0.0.1:443"


def sh(*argv, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=kw.pop("check", True), timeout=300, **kw)


def nas(*argv, **kw):
    return sh("docker", "exec", NAS, *argv, **kw)


def answer(port, name):
    """(status, body) of https://<name>:<port>/ asked on the NAS itself."""
    out = nas("curl", "-sk", "-m", "5", "-w", "\n%{http_code}", "--resolve", "%s:%d:127.0.0.1" % (name, port),
              "https://%s:%d/" % (name, port), check=False).stdout.rsplit("\n", 1)
    return (out[1] if len(out) > 1 else "none"), out[0].strip()


def through_the_vps(vps_ip):
    """(status, body) of https://site.nas.lab/ asked by the client, through the VPS's 443."""
    out = sh("docker", "exec", CLIENT, "curl", "-sk", "-m", "5", "-w", "\n%{http_code}", "--resolve",
             "site.nas.lab:443:%s" % vps_ip, "https://site.nas.lab/", check=False).stdout.rsplit("\n", 1)
    return (out[1] if len(out) > 1 else "none"), out[0].strip()


def client_hosts(since):
    """The client addresses in Traefik's access log (JSON, its stdout) for the route site@file, since `since`."""
    out = nas("sh", "-c", "docker logs --since %.3f traefik 2>&1" % since).stdout
    return set(json.loads(ln)["ClientHost"] for ln in out.splitlines()
               if ln.startswith("{") and json.loads(ln).get("RouterName") == "site@file")


def started_at():
    return nas("docker", "inspect", "-f", "{{.State.StartedAt}}", "traefik").stdout.strip()


@pytest.fixture(scope="module")
def syno(tmp_path_factory):
    hosts.down(NAS, VPS, CLIENT)
    try:
        hosts.up(NAS, NET, SSH_PORT, docker=True, load=IMAGES, systemd=True)
        # DSM's web server on 80 and 443 (a self-signed certificate, as DSM's own is until you replace it)
        nas("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=dsm",
            "-keyout", "/etc/nginx/dsm.key", "-out", "/etc/nginx/dsm.crt")
        sh("docker", "cp", os.path.join(USER, "synology", "dsm-nginx.conf"), "%s:/etc/nginx/nginx.conf" % NAS)
        nas("sh", "-c", "nginx -t && systemctl enable nginx.service >/dev/null 2>&1 && systemctl restart nginx.service")
        # the admin's projects, as Container Manager keeps them in the docker shared folder
        for src, dest in (("synology/compose.yml", PROJECT + "/compose.yml"), ("filename/config", PROJECT + "/config"),
                          ("backends.yml", "/volume1/docker/apps/compose.yml")):
            nas("mkdir", "-p", os.path.dirname(dest))
            sh("docker", "cp", os.path.join(USER, src), "%s:%s" % (NAS, dest))
        for project in ("/volume1/docker/apps", PROJECT):
            sh("docker", "exec", "-w", project, NAS, "docker", "compose", "up", "-d")
        hosts.wait("Traefik on 8443", lambda: answer(8443, "site.nas.lab")[0] == "200", timeout=60)
        # the VPS: its stream proxy forwards 443 to the NAS's 8443 (the tunnel's far end: here the lab network)
        tmp = tmp_path_factory.mktemp("syno")
        nas_ip = hosts.address(NAS, NET)
        with open(os.path.join(USER, "synology", "vps-nginx.conf")) as f:
            (tmp / "vps-nginx.conf").write_text(f.read().replace("10.8.0.2", nas_ip))
        hosts.up(VPS, NET, VPS_SSH_PORT, nginx_conf=str(tmp / "vps-nginx.conf"))
        hosts.client(CLIENT, NET)
        vps_ip = hosts.address(VPS, NET)
        inventory = tmp / "hosts.yml"
        syno_vars = dict(hosts.inventory_vars(SSH_PORT), traefik_inflight_container="traefik",
                         traefik_inflight_healthcheck={"interval": "2s", "timeout": "2s", "retries": 3,
                                                       "start_period": "3s"},
                         tcp_drain_containers=["traefik"], autoheal_dir="/volume1/docker/autoheal",
                         autoheal_image="homelab-edge/autoheal:lab", autoheal_socket_proxy=True,
                         autoheal_socket_proxy_image="homelab-edge/socket-proxy:lab", autoheal_interval=2,
                         autoheal_start_period=0, autoheal_watched=["traefik"],
                         traefik_inflight_proxy_protocol_trusted_ips=["%s/32" % vps_ip])
        # docs/synology.md: the upstream is the NAS's 8443; whether it speaks TLS is asked, nothing to set
        vps_vars = dict(hosts.inventory_vars(VPS_SSH_PORT), vps_proxy_protocol_upstreams=["%s:8443" % nas_ip])
        inventory.write_text(json.dumps({"all": {"children": {"nas": {"hosts": {"syno": syno_vars}},
                                                              "vps": {"hosts": {"syno-vps": vps_vars}},
                                                              "k3d_hosts": {"hosts": {}}}}}))
        yield {"inventory": str(inventory), "nas_ip": nas_ip, "vps_ip": vps_ip}
    finally:
        hosts.down(NAS, VPS, CLIENT)


def playbook(inventory, name, *args):
    skip = upstream_images.skipped_tags()
    out = subprocess.run(["ansible-playbook", "-i", inventory, os.path.join(ROOT, "playbooks", name + ".yml")]
                         + (["--skip-tags", ",".join(skip)] if skip else []) + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=900, check=False)
    return out.returncode, out.stdout


def rows(report):
    return dict((r["check"], r) for r in report["rows"])


@upstream_images.needs("autoheal")
def test_site_changes_traefik_beside_dsm_and_dsm_keeps_80_and_443(syno):
    """The NAS's roles, then the VPS's PROXY protocol to 8443 (its connection limit is Molecule's: not here)."""
    rc, out = playbook(syno["inventory"], "site", "--tags", "nas,vps_proxy_protocol")
    assert rc == 0, out[-4000:]
    status, body = answer(8443, "site.nas.lab")
    assert status == "200" and body != "DSM", (status, body)
    assert answer(443, "site.nas.lab") == ("200", "DSM") and answer(443, "anything.example") == ("200", "DSM")
    assert "inflight-limit" in nas("cat", PROJECT + "/config/traefik.yml").stdout
    assert "proxy_protocol on;" in sh("docker", "exec", VPS, "cat", "/etc/nginx/nginx.conf").stdout


@upstream_images.needs("autoheal")
def test_traefik_sees_the_client_through_the_vps_on_8443(syno):
    """PROXY protocol from the VPS to the NAS's 8443: Traefik answers through the VPS and logs the client's own
    address, not the VPS's."""
    # from now to the millisecond: the test before asked Traefik on the NAS itself a moment ago (its address there:
    # the NAS engine's bridge gateway)
    t0 = time.time()
    status, body = through_the_vps(syno["vps_ip"])
    assert status == "200" and body != "DSM", (status, body)
    client = hosts.address(CLIENT, NET)
    hosts.wait("the access log's line", lambda: client_hosts(t0), timeout=30)
    assert client_hosts(t0) == {client}, (client, syno["vps_ip"])


@upstream_images.needs("autoheal")
def test_status_and_diagnose_read_it(syno, tmp_path):
    rc, out = playbook(syno["inventory"], "status")
    assert rc == 0, out[-4000:]
    assert re.search(r"syno +traefik middleware +ok ", out) and re.search(r"syno +traefik health +ok ", out), out[-3000:]
    # the table's first columns are 32 characters wide: "PROXY protocol to <address>:8443" may be cut short there
    what = ("PROXY protocol to %s:8443" % syno["nas_ip"])[:32]
    assert re.search(r"syno-vps +%s\S* +ok " % re.escape(what), out), out[-3000:]
    report = tmp_path / "diagnose.json"
    rc, out = playbook(syno["inventory"], "diagnose", "-e", "diagnose_output=%s" % report)
    assert rc == 0, out[-4000:]
    assert json.loads(report.read_text())["not_read"] == {}


def test_prove_measures_traefik_through_8443_with_urls_from_its_config(syno):
    wedge = upstream_images.reason("autoheal") is None
    # the NAS's checks (the VPS's is its connection limit, which this lab does not set up)
    rc, out, report = adhoc.prove(syno["inventory"], "--tags", "nas",
                                  "-e", json.dumps(dict(adhoc.PROVE_LAB_BACKEND, autoheal_prove_wedge=wedge)))
    assert rc == 0, out[-4000:]
    got = rows(report)
    inflight = got["Traefik in-flight limit"]
    assert inflight["status"] == "proved" and inflight["target"] == "traefik (https://127.0.0.1:8443)", inflight
    assert inflight["measured"] == "400 answered 200, 10 answered 429", inflight
    assert got["drain values"]["status"] == "proved", got["drain values"]
    if wedge:
        healed = got["autoheal on a wedge"]
        assert healed["status"] == "proved" and healed["target"] == "traefik (https://127.0.0.1:8443)", healed
        adhoc.record("synology", "prove_wedge", measured=healed["measured"].replace(" ", "_"))
    assert answer(443, "site.nas.lab") == ("200", "DSM")


def test_prove_given_dsm_s_443_is_refused_before_anything_is_sent_or_wedged(syno):
    """The url a default used to give: DSM's nginx answers there. Neither check runs: no route, no wedge."""
    before = started_at()
    extra = dict(adhoc.PROVE_LAB_BACKEND, traefik_inflight_prove_url=DSM_443, autoheal_prove_url=DSM_443,
                 autoheal_prove_wedge=True)
    rc, out, report = adhoc.prove(syno["inventory"], "--tags", "nas", "-e", json.dumps(extra))
    assert rc != 0
    got = rows(report)
    words = "%s does not reach Traefik: nothing of Traefik's listens on port 443 here" % DSM_443
    inflight = got["Traefik in-flight limit"]
    assert inflight["status"] == "refused" and inflight["reasons"][0].startswith(words), inflight
    assert "websecure (443 in its container) published on 8443" in inflight["reasons"][0]
    if upstream_images.reason("autoheal") is None:
        healed = got["autoheal on a wedge"]
        assert healed["status"] == "refused" and healed["reasons"][0].startswith(words), healed
    assert started_at() == before
    assert nas("docker", "ps", "-aq", "--filter", "label=homelab.edge.prove").stdout.strip() == ""
    assert "homelab-edge-prove" not in nas("ls", PROJECT + "/config").stdout
