import pytest

from ansible_collections.homelab.edge.plugins.module_utils.ufw import access as ufw_access

# `ss -H -tulpn` on a fresh VPS: sshd on 2222, WireGuard, a resolver on
# loopback, nginx on 80, Docker publishing 443, node_exporter on *.
SS = """\
udp   UNCONN 0      0          127.0.0.53%lo:53        0.0.0.0:*    users:(("systemd-resolve",pid=410,fd=13))
udp   UNCONN 0      0            0.0.0.0:51820      0.0.0.0:*    users:(("wireguard-go",pid=901,fd=7))
udp   UNCONN 0      0               [::]:51820         [::]:*    users:(("wireguard-go",pid=901,fd=8))
tcp   LISTEN 0      128          0.0.0.0:2222       0.0.0.0:*    users:(("sshd",pid=1,fd=3))
tcp   LISTEN 0      128             [::]:2222          [::]:*    users:(("sshd",pid=1,fd=4))
tcp   LISTEN 0      511          0.0.0.0:80         0.0.0.0:*    users:(("nginx",pid=77,fd=6))
tcp   LISTEN 0      4096         0.0.0.0:443        0.0.0.0:*    users:(("docker-proxy",pid=1200,fd=4))
tcp   LISTEN 0      4096       127.0.0.1:8080       0.0.0.0:*    users:(("python3",pid=55,fd=3))
tcp   LISTEN 0      4096           [::1]:5432          [::]:*    users:(("postgres",pid=66,fd=3))
tcp   LISTEN 0      4096               *:9100             *:*    users:(("node_exporter",pid=88,fd=3))
"""
SESSION = ufw_access.session("198.51.100.7 50022 203.0.113.10 2222")


def tuple_line(action, proto, dport, src="0.0.0.0/0", dst="0.0.0.0/0", direction="in", comment=None):
    line = "### tuple ### %s %s %s %s any %s %s" % (action, proto, dport, dst, src, direction)
    return line + (" comment=%s" % comment if comment else "")


def rules(*lines):
    return ufw_access.user_rules("*filter\n" + "\n".join(lines) + "\nCOMMIT\n")


def test_listening_leaves_loopback_out_and_marks_docker():
    found = dict((e["spec"], e) for e in ufw_access.listening(SS))
    assert sorted(found, key=ufw_access.sort_key) == ["80/tcp", "443/tcp", "2222/tcp", "9100/tcp", "51820/udp"]
    assert found["51820/udp"]["processes"] == ["wireguard-go"] and found["51820/udp"]["addresses"] == ["0.0.0.0", "::"]
    assert found["443/tcp"]["docker"] and not found["80/tcp"]["docker"]


def test_sshd_ports_and_session():
    assert ufw_access.sshd_ports("port 2222\nport 22\nlistenaddress 0.0.0.0:2222\naddressfamily any\n") == ["22/tcp", "2222/tcp"]
    assert SESSION == {"client": "198.51.100.7", "spec": "2222/tcp"}
    assert ufw_access.session("") is None and ufw_access.session("a b c") is None


@pytest.mark.parametrize("value, spec", [(22, "22/tcp"), ("2222", "2222/tcp"), ("51820/udp", "51820/udp"),
                                         (" 80/TCP ", "80/tcp")])
def test_port_spec(value, spec):
    assert ufw_access.port_spec(value) == spec


@pytest.mark.parametrize("value", ["ssh", "0", "70000", "22/icmp", "", True, "22/", "1-2"])
def test_port_spec_refuses_junk(value):
    with pytest.raises(ufw_access.AccessError):
        ufw_access.port_spec(value)


def test_port_specs_names_the_option_and_every_bad_item():
    with pytest.raises(ufw_access.AccessError) as e:
        ufw_access.port_specs([22, "x", "99999"], "vps_connlimit_closed_ports")
    assert "vps_connlimit_closed_ports" in str(e.value) and "'x'" in str(e.value) and "'99999'" in str(e.value)


def test_default_policy():
    assert ufw_access.default_input_policy('IPV6=yes\nDEFAULT_INPUT_POLICY="DROP"\n') == "DROP"
    assert ufw_access.default_input_policy('DEFAULT_INPUT_POLICY="ACCEPT"\n') == "ACCEPT"
    assert ufw_access.default_input_policy("") == "DROP"


def test_user_rules_read_ufws_tuples():
    r = rules(tuple_line("allow", "tcp", "22", comment="686f6d656c6162"), tuple_line("deny_log", "udp", "53"),
              "### tuple ### route:allow tcp 80 0.0.0.0/0 any 0.0.0.0/0 in",
              "### tuple ### allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 OpenSSH - in",
              "-A ufw-user-input -p tcp --dport 22 -j ACCEPT")
    assert [(x["action"], x["proto"], x["dport"], x["route"]) for x in r] == [
        ("allow", "tcp", "22", False), ("deny", "udp", "53", False), ("allow", "tcp", "80", True),
        ("allow", "tcp", "22", False)]


@pytest.mark.parametrize("lines, spec, src, allowed", [
    ([], "22/tcp", None, False),
    ([tuple_line("allow", "tcp", "22")], "22/tcp", None, True),
    ([tuple_line("allow", "any", "22")], "22/tcp", None, True),
    ([tuple_line("allow", "udp", "22")], "22/tcp", None, False),
    ([tuple_line("limit", "tcp", "22")], "22/tcp", None, True),
    ([tuple_line("allow", "tcp", "80,443,8000:8100")], "8080/tcp", None, True),
    ([tuple_line("deny", "tcp", "22"), tuple_line("allow", "tcp", "22")], "22/tcp", None, False),
    ([tuple_line("allow", "tcp", "22", src="198.51.100.0/24")], "22/tcp", "198.51.100.7", True),
    ([tuple_line("allow", "tcp", "22", src="198.51.100.0/24")], "22/tcp", None, False),
    ([tuple_line("allow", "tcp", "22", direction="out")], "22/tcp", None, False),
    (["### tuple ### route:allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in"], "22/tcp", None, False),
    ([tuple_line("allow", "tcp", "22", direction="in_eth0")], "22/tcp", None, True),
    ([tuple_line("allow", "tcp", "443", dst="203.0.113.10")], "443/tcp", None, False),  # one address of the host's
    ([tuple_line("allow", "tcp", "443", dst="::/0")], "443/tcp", None, True),
])
def test_allows_first_match_wins(lines, spec, src, allowed):
    assert ufw_access.allows(rules(*lines), "DROP", spec, src=src) is allowed


def test_default_accept_lets_everything_in_unless_denied():
    assert ufw_access.allows([], "ACCEPT", "51820/udp")
    assert not ufw_access.allows(rules(tuple_line("reject", "udp", "51820")), "ACCEPT", "51820/udp")


def plan(ss=SS, sshd=("2222/tcp",), session=SESSION, front=("80/tcp", "443/tcp"), closed=(), enabled=False,
         lines=(), policy="DROP", keep=True):
    return ufw_access.plan(ufw_access.listening(ss), list(sshd), session, list(front), list(closed), enabled, rules(*lines), policy,
                           keep)


def test_fresh_vps_keeps_ssh_wireguard_and_every_listener():
    p = plan()
    assert p["allow"] == ["80/tcp", "443/tcp", "2222/tcp", "9100/tcp", "51820/udp"]
    assert p["must_stay"] == ["80/tcp", "9100/tcp", "51820/udp"]  # SSH: the new login proves it
    assert p["would_cut"] == [] and p["ssh_denied"] == [] and p["blocked"] == []


def test_closed_ports_are_left_closed_by_name_but_never_ssh():
    p = plan(closed=["9100/tcp", "2222/tcp"])
    assert "9100/tcp" not in p["allow"] and "9100/tcp" not in p["must_stay"]
    assert "2222/tcp" in p["allow"]


def test_without_keep_listening_the_cut_ports_are_named():
    p = plan(keep=False)
    assert p["would_cut"] == ["9100/tcp", "51820/udp"] and "2222/tcp" in p["allow"]  # 80: the front door
    assert plan(keep=False, closed=["9100/tcp", "51820/udp"])["would_cut"] == []


def test_a_deny_rule_of_the_users_on_the_ssh_port_is_a_refusal_elsewhere_it_is_kept():
    p = plan(lines=[tuple_line("deny", "tcp", "2222"), tuple_line("deny", "tcp", "9100")])
    assert p["ssh_denied"] == ["2222/tcp"]
    assert p["denied_by_rule"] == ["9100/tcp"] and "9100/tcp" not in p["allow"]


def test_active_ufw_with_the_users_rules_adds_nothing():
    lines = [tuple_line("allow", "tcp", "2222", src="198.51.100.0/24"), tuple_line("allow", "tcp", "80"),
             tuple_line("allow", "tcp", "443"), tuple_line("allow", "udp", "51820")]
    p = plan(enabled=True, lines=lines)
    assert p["allow"] == [] and p["would_cut"] == []
    assert p["blocked"] == ["9100/tcp"]  # the user's choice: left as it is, reported
    assert p["blocked_unasked"] == ["9100/tcp"]
    assert plan(enabled=True, lines=lines, closed=["9100/tcp"])["blocked_unasked"] == []
    assert p["must_stay"] == ["80/tcp", "51820/udp"]


def test_active_ufw_adds_only_front_door_ports_it_does_not_let_in():
    p = plan(enabled=True, lines=[tuple_line("allow", "tcp", "2222"), tuple_line("allow", "tcp", "80")])
    assert p["allow"] == ["443/tcp"]


def test_the_session_port_counts_even_when_sshd_says_nothing():
    p = plan(sshd=(), ss="")
    assert p["allow"] == ["80/tcp", "443/tcp", "2222/tcp"]


def test_reachable():
    r = rules(tuple_line("allow", "udp", "51820"))
    assert ufw_access.reachable(["51820/udp", "80/tcp"], True, r, "DROP") == ["51820/udp"]
    assert ufw_access.reachable(["51820/udp", "80/tcp"], False, r, "DROP") == ["80/tcp", "51820/udp"]


# --- port forwards through the host (DNAT, through FORWARD) ---

NAT = """-P PREROUTING ACCEPT
-P POSTROUTING ACCEPT
-N DOCKER
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A PREROUTING -i eth0 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.8.0.2:443
-A PREROUTING -i eth0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.8.0.2
-A PREROUTING -p udp -m udp --dport 3478 -j DNAT --to-destination 10.8.0.3:3478-3479
-A PREROUTING -p tcp -m tcp --dport 2200 -j DNAT --to-destination 127.0.0.1:22
-A PREROUTING -d 203.0.113.7/32 -j DNAT --to-destination 10.8.0.9
-A POSTROUTING -o wg0 -j MASQUERADE
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8443 -j DNAT --to-destination 172.17.0.2:443
"""


def test_dnat_forwards_are_the_users_port_forwards_to_another_host():
    got = [(f["spec"], f["to_addr"], f["to_port"]) for f in ufw_access.dnat_forwards(NAT)]
    # Docker's chain, a DNAT to loopback and one of every port of an address are left out
    assert got == [("443/tcp", "10.8.0.2", "443"), ("8080/tcp", "10.8.0.2", "8080"), ("3478/udp", "10.8.0.3", "3478")]
    v6 = ufw_access.dnat_forwards("-A PREROUTING -p tcp -m tcp --dport 443 -j DNAT --to-destination [fd00:8::2]:8443\n")
    assert [(f["to_addr"], f["to_port"]) for f in v6] == [("fd00:8::2", "8443")]
    assert ufw_access.dnat_forwards("") == [] and ufw_access.dnat_forwards(None) == []


def test_default_forward_policy():
    assert ufw_access.default_forward_policy('DEFAULT_FORWARD_POLICY="DROP"\n') == "DROP"
    assert ufw_access.default_forward_policy('DEFAULT_FORWARD_POLICY="ACCEPT"\n') == "ACCEPT"
    assert ufw_access.default_forward_policy("") == "DROP"  # as ufw ships it


ROUTE = """### tuple ### route:allow tcp 443 10.8.0.2 any 0.0.0.0/0 in
-A ufw-user-forward -p tcp -d 10.8.0.2 --dport 443 -j ACCEPT
"""


def test_enabling_ufw_cuts_the_forwards_no_route_rule_allows():
    forwards = ufw_access.dnat_forwards(NAT)
    rules = ufw_access.user_rules(ROUTE)
    cut = ufw_access.forwards_cut(forwards, False, rules, "DROP")
    assert [f["spec"] for f in cut] == ["8080/tcp", "3478/udp"]  # 443 has its route rule
    # ufw active already (it works as it is), or forwarding by default: nothing to keep
    assert ufw_access.forwards_cut(forwards, True, rules, "DROP") == []
    assert ufw_access.forwards_cut(forwards, False, rules, "ACCEPT") == []
    # a route rule for one source only does not keep it for every client; an incoming (not routed) rule does not
    only_one = ufw_access.user_rules("### tuple ### route:allow tcp 8080 10.8.0.2 any 192.0.2.1 in\n"
                                     "### tuple ### allow tcp 8080 0.0.0.0/0 any 0.0.0.0/0 in\n")
    assert [f["spec"] for f in ufw_access.forwards_cut(forwards, False, only_one, "DROP")] == ["443/tcp", "8080/tcp",
                                                                                               "3478/udp"]
