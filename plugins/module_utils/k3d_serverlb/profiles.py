# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k3d's load balancer fix: the UDP profile of each port. Pure functions.

nginx's `proxy_responses 1` ends a UDP session at the first datagram back:
right for request/response protocols (DNS: one query, one answer), fatal for
everything that answers with more than one datagram or keeps talking
(WireGuard, QUIC/HTTP3, game servers, syslog or SNMP streams): whatever the
server sends after its first reply is dropped. So each UDP port gets one of
two profiles:

- dns     proxy_responses 1 and the short udp_timeout (the DNS fix);
- stream  no proxy_responses; sessions end after udp_stream_timeout seconds
          of silence (0: k3d's own defaultProxyTimeout, 600 s unless set).

Both stay inside the UDP session budget (limit_conn), so a flood on a stream
port cannot starve TCP either. Port 53 is dns unless the user's map says
otherwise; a port the map does not name is stream, with a warning.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DNS = "dns"
STREAM = "stream"
PROFILES = (DNS, STREAM)
# the port that is dns without being named (the map may still name it stream)
IMPLICIT = {53: DNS}
# what an undeclared port gets: it keeps every datagram, like stock k3d
UNDECLARED = STREAM


def normalize(udp_ports):
    """The user's map ({53: 'dns', '51820': 'stream'}; keys int or str, as
    YAML, JSON and Ansible give them) as {int port: profile}, port 53 added
    as dns unless named. Raises ValueError naming every bad entry."""
    problems, out = [], dict(IMPLICIT)
    for key, profile in (udp_ports or {}).items():
        try:
            port = int(str(key).strip())
        except ValueError:
            port = None
        if port is None or not 1 <= port <= 65535:
            problems.append("udp_ports: %r is not a port (1-65535)" % (key,))
            continue
        if profile not in PROFILES:
            problems.append("udp_ports: port %d has profile %r, not one of %s" % (port, profile, ", ".join(PROFILES)))
            continue
        out[port] = profile
    if problems:
        raise ValueError("; ".join(problems))
    return out


def problems(udp_ports):
    """validate_options' part: a list of problems with the map (empty when valid)."""
    try:
        normalize(udp_ports)
    except ValueError as e:
        return [str(e)]
    return []


def profile_of(port, udp_ports):
    """(profile, declared) of a UDP port under the user's map: port 53 counts
    as declared (it is dns by default); a port the map does not name is
    stream, undeclared."""
    ports = normalize(udp_ports)
    port = int(port)
    return (ports[port], True) if port in ports else (UNDECLARED, False)


def dns_ports(udp_ports):
    """The ports of the dns profile, sorted as strings (the template compares $port, a string)."""
    return sorted(str(p) for p, profile in normalize(udp_ports).items() if profile == DNS)


def live_profile(server):
    """What nginx runs on a parsed UDP server: dns when a reply ends the
    session (any proxy_responses), stream when nothing but silence does."""
    return DNS if server.get("proxy_responses") not in (None, "") else STREAM


def undeclared_warning(name, ports):
    """The warning for UDP ports the map does not name: what they get and how to declare them."""
    listed = ", ".join("%s/udp" % p for p in ports)
    example = ", ".join("%s: stream" % p for p in ports)
    return ("%s: UDP port%s %s %s no profile in udp_ports (role: k3d_serverlb_udp_ports): %s stream "
            "(sessions stay open until the stream timeout of silence, every datagram delivered, inside the UDP "
            "session budget). Declare %s: {%s} for a tunnel, QUIC or other traffic with more than one reply, or "
            "dns for a request/response service (one reply ends a session)."
            % (name, "s" if len(ports) > 1 else "", listed, "have" if len(ports) > 1 else "has",
               "they get" if len(ports) > 1 else "it gets", "them" if len(ports) > 1 else "it", example))


def describe(port, profile, declared, live, proxy_timeout):
    """One UDP port's profile in plain words, for the check report, status and diagnose."""
    timeout = "%s of silence" % _seconds_text(proxy_timeout)
    if live == DNS:
        how = "a session ends at its first reply or after %s" % timeout
    else:
        how = "sessions stay open (every datagram delivered) until %s" % timeout
    words = "%s/udp %s: %s" % (port, profile, how)
    if live != profile:
        words += " - nginx runs %s, not %s" % (live, profile)
    if not declared:
        words += " (not declared: stream by default)"
    return words


def _seconds_text(value):
    if value is None:
        return "600 s"
    text = str(value).strip()
    return "%s s" % text[:-1] if text.endswith("s") and text[:-1].isdigit() else (
        "%s s" % text if text.isdigit() else text)
