"""Where the NAS reaches a Traefik entrypoint (homelab.edge.prove's url), from Traefik's own config and Docker's
view of its container: a Synology-shaped NAS (DSM's nginx on 80 and 443, Traefik's 80 and 443 published on 8080
and 8443, or Traefik in the host's network on :8080 and :8443), and a url that reaches another server refused."""
import pytest

from ansible_collections.homelab.edge.plugins.module_utils.traefik import entrypoint_url as eu

YAML = "entryPoints:\n  web:\n    address: ':80'\n  websecure:\n    address: ':443'\n    http:\n      tls: {}\n"
TOML = '[entryPoints]\n  [entryPoints.web]\n    address = ":8080"\n  [entryPoints.websecure]\n    address = ":8443"\n'


def container(cmd=("--configFile=/etc/traefik/traefik.yml",), mode="bridge", ports=None, networks=None):
    return {"Config": {"Cmd": list(cmd), "WorkingDir": "/"}, "HostConfig": {"NetworkMode": mode},
            "NetworkSettings": {"Ports": {"443/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8443"},
                                                      {"HostIp": "::", "HostPort": "8443"}],
                                          "80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}
                                if ports is None else ports,
                                "Networks": {"traefik": {"IPAddress": "172.20.0.2"}} if networks is None else networks}}


def exec_of(files):
    """The container's commands: which of the candidates exist, and cat of a file."""
    def run(*argv):
        if argv[0] == "sh":
            return 0, "".join(f + "\n" for f in argv[4:] if f in files), ""
        if argv[0] == "cat":
            return (0, files[argv[1]], "") if argv[1] in files else (1, "", "cat: %s: No such file" % argv[1])
        raise AssertionError(argv)
    return run


def test_the_static_file_traefik_finds_gives_the_entrypoints():
    eps = eu.read_entrypoints(container(), exec_of({"/etc/traefik/traefik.yml": YAML}))
    assert eps == {"web": {"address": ":80", "tls": False}, "websecure": {"address": ":443", "tls": True}}
    # no --configFile: Traefik's own search order (here a TOML one in /etc/traefik)
    eps = eu.read_entrypoints(container(cmd=("--log.level=INFO",)), exec_of({"/etc/traefik/traefik.toml": TOML}))
    assert eps["websecure"]["address"] == ":8443"


def test_flags_give_the_entrypoints_when_no_file_is_found():
    eps = eu.read_entrypoints(container(cmd=("--entrypoints.websecure.address=:8443",
                                             "--entrypoints.websecure.http.tls=true")), exec_of({}))
    assert eps == {"websecure": {"address": ":8443", "tls": True}}


@pytest.mark.parametrize("cmd, files, words", [
    ((), {}, "from its environment"),
    (("--configFile=/etc/traefik/traefik.yml",), {"/etc/traefik/traefik.yml": "entryPoints: ["}, "does not parse"),
])
def test_what_cannot_be_read_is_said(cmd, files, words):
    with pytest.raises(ValueError, match=words):
        eu.read_entrypoints(container(cmd=cmd), exec_of(files))


EPS = {"web": {"address": ":80", "tls": False}, "websecure": {"address": ":443", "tls": True},
       "dns": {"address": ":53/udp", "tls": False}}


def test_a_synology_s_published_8443_is_the_url_not_the_443_dsm_holds():
    assert eu.url_for(EPS, "websecure", container()) == ("https://127.0.0.1:8443", None)
    assert eu.url_for(EPS, "WebSecure", container(), "http") == ("http://127.0.0.1:8443", None)
    assert eu.url_for(EPS, "web", container()) == ("https://127.0.0.1:8080", None)


def test_in_the_host_s_network_the_entrypoint_s_own_port():
    eps = {"websecure": {"address": ":8443", "tls": True}, "lan": {"address": "192.168.1.5:9443", "tls": False},
           "v6": {"address": "[::1]:7443", "tls": False}}
    host = container(mode="host", ports={}, networks={"host": {}})
    assert eu.url_for(eps, "websecure", host) == ("https://127.0.0.1:8443", None)
    assert eu.url_for(eps, "lan", host) == ("https://192.168.1.5:9443", None)
    assert eu.url_for(eps, "v6", host) == ("https://[::1]:7443", None)


def test_a_port_bound_to_one_address_and_one_not_published():
    bound = container(ports={"443/tcp": [{"HostIp": "127.0.0.1", "HostPort": "10443"}]})
    assert eu.url_for(EPS, "websecure", bound) == ("https://127.0.0.1:10443", None)
    # not published: the container's own address on its network (this host reaches a bridge network)
    assert eu.url_for(EPS, "websecure", container(ports={})) == ("https://172.20.0.2:443", None)


@pytest.mark.parametrize("name, inspect, words", [
    ("https", container(), "Traefik has no entrypoint https (its entrypoints: dns (:53/udp), web (:80), websecure (:443))"),
    ("dns", container(), "Traefik's entrypoint dns (:53/udp) has no TCP port"),
    ("websecure", container(ports={}, networks={}), "is neither published nor on a network this host reaches"),
])
def test_no_url_without_an_entrypoint_this_host_reaches(name, inspect, words):
    url, why = eu.url_for(EPS, name, inspect)
    assert url is None and why.startswith(words) if "has no entrypoint" in words else words in why


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443", "https://192.168.1.5:8443", "http://127.0.0.1:8080",
                                 "https://172.20.0.2:443"])
def test_a_url_that_reaches_one_of_traefik_s_entrypoints_is_taken(url):
    assert eu.reaches(url, EPS, container()) is None


def test_a_url_at_dsm_s_443_is_refused_naming_where_traefik_listens():
    why = eu.reaches("https://127.0.0.1", EPS, container())
    assert why.startswith("https://127.0.0.1 does not reach Traefik: nothing of Traefik's listens on port 443 here")
    assert "websecure (443 in its container) published on 8443" in why and "web (80 in its container) published on 8080" in why
    # a port published on another address only, and the container's address with a port it does not listen on
    bound = container(ports={"443/tcp": [{"HostIp": "192.168.1.5", "HostPort": "8443"}]})
    assert eu.reaches("https://127.0.0.1:8443", EPS, bound) is not None
    assert eu.reaches("https://172.20.0.2:8443", EPS, container()) is not None


def test_in_the_host_s_network_only_an_entrypoint_s_port():
    host = container(mode="host", ports={}, networks={"host": {}})
    eps = {"websecure": {"address": ":8443", "tls": True}}
    assert eu.reaches("https://127.0.0.1:8443", eps, host) is None
    assert "websecure on 8443" in eu.reaches("https://127.0.0.1:443", eps, host)
