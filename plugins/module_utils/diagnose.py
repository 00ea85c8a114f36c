# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""From live signals to findings: the diagnosis the seed authors made by
hand. Pure logic: signals in (what k3d_serverlb_info, ufw_connlimit and
host_signals returned per host), findings out, each with its evidence (the
number and where it came from), the likely cause and the fix. Several
symptoms of one cause are named together."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .tcp_drain import sysctl as tcp_drain_sysctl
from .ufw import connlimit as ufw_connlimit
from .traefik.inflight import bound_text, is_blind

# What the drain values are held to when the play does not say (no tcp_drain
# role on the host): the two keys tcp_drain sets by default.
DRAIN_WANT = dict((k, tcp_drain_sysctl.RECOMMENDED[k]) for k in (tcp_drain_sysctl.FIN_TIMEOUT, tcp_drain_sysctl.ABORT_ON_OVERFLOW))


# Every finding's code: what programs match on (the words are for people).
CODES = (
    "k3d_lb_not_running", "k3d_lb_unreadable", "k3d_lb_capped", "k3d_udp_sessions_held", "k3d_out_of_connections",
    "k3d_dns_not_answering", "k3d_files_below_connections", "k3d_fix_incomplete",
    "k3d_udp_stream_cut", "k3d_udp_port_undeclared",
    "drain_slow", "drain_boot_differs", "host_kernel_busy",
    "vps_rules_unreadable", "vps_rules_differ", "vps_address_floods", "vps_docker_port_unlimited",
    "vps_docker_nftables", "vps_user_limit", "vps_total_reached", "vps_rate_reached", "way_in_blocked", "way_in_revert_pending", "way_in_revert_missed",
    "way_in_revert_stalled",
    "nas_client_bound_high", "nas_unhealthy", "nas_autoheal_cannot_restart", "nas_rate_limited", "nas_errors_5xx",
    "nas_limit_blind", "nas_restart_loop", "nas_tunnel_total_reached",
    "k3d_engine_unreadable",
    "shared_k3d_out_of_connections", "shared_wedged_unrestarted",
)


def finding(host, what, evidence, cause, fix, about=None, code=None):
    """One finding: `code` and the fields are data, `finding` and the rest
    words for people."""
    if code not in CODES:
        raise ValueError("unknown finding code %r" % code)
    return {"code": code, "host": host, "finding": what, "evidence": evidence, "cause": cause, "fix": fix,
            "about": about}


def k3d(host, lbs, window):
    out = []
    for e in lbs:
        name = e["name"]
        if not e.get("running", True):
            out.append(finding(host, "%s is not running" % name, "docker: container not running",
                               "the cluster is stopped or the load balancer died", "k3d cluster start", name, code="k3d_lb_not_running"))
            continue
        if e.get("error"):
            out.append(finding(host, "%s cannot be read" % name, e["error"], "not k3d's load balancer layout",
                               "check the container", name, code="k3d_lb_unreadable"))
            continue
        if e.get("state") == "capped":
            out.append(finding(host, "%s is %s" % (name, e.get("state_text")),
                               "/proc: the workers' hard open-file limit is %s; nginx.conf: worker_connections %s, "
                               "UDP budget %s" % (e.get("open_file_cap"), e.get("worker_connections"),
                                                  e.get("udp_session_budget")),
                               "the container's hard open-file limit (k3d's --runtime-ulimit, or dockerd's "
                               "default-ulimits) is below worker_rlimit_nofile, and "
                               "nginx cannot raise it: DNS is fixed, TCP has fewer connections",
                               "k3d cluster create ... --runtime-ulimit nofile=16384:16384, or dockerd's "
                               "default-ulimits nofile and recreate the load balancer", name, code="k3d_lb_capped"))
        # with each UDP port's profile (k3d_serverlb_info since the profiles), only the dns ones must end at a reply
        dns_unfixed = e.get("udp_dns_unfixed")
        unpatched = len(dns_unfixed) if dns_unfixed is not None else e["udp_servers"] - e["udp_servers_patched"]
        long_hold = e.get("udp_timeout") and e["udp_timeout"] > 10
        if unpatched or long_hold:
            out.append(finding(
                host, "%s holds every UDP (DNS) session up to %s s" % (name, int(e["udp_timeout"] or 600)),
                "nginx.conf: UDP %s without proxy_responses 1, proxy_timeout %s s: its %s connections fill at %s new "
                "DNS queries/s" % (",".join(dns_unfixed or e["udp_ports"]), e["udp_timeout"], e["worker_connections"],
                                   e["exhaustion_rate"]),
                "k3d's template: a DNS query is one datagram each way, but nginx waits for more", "run the k3d tag "
                "(homelab.edge.k3d_serverlb): proxy_responses 1, a short timeout, a UDP session budget", name, code="k3d_udp_sessions_held"))
        profiles = dict((p["port"], p) for p in e.get("udp_profiles") or [])
        if e.get("udp_stream_cut"):
            out.append(finding(
                host, "%s ends every session of UDP %s at the first reply" % (name, ",".join(e["udp_stream_cut"])),
                "nginx.conf: proxy_responses on a stream port: %s" % "; ".join(
                    profiles[p]["text"] for p in e["udp_stream_cut"] if p in profiles),
                "the fix of homelab.edge before the UDP profiles put proxy_responses 1 on every UDP port: a tunnel "
                "(WireGuard), QUIC or a game server through it loses every datagram after the first reply",
                "run the k3d tag (homelab.edge.k3d_serverlb) with these ports in k3d_serverlb_udp_ports as stream",
                name, code="k3d_udp_stream_cut"))
        if e.get("udp_ports_undeclared"):
            out.append(finding(
                host, "%s has UDP %s without a declared profile" % (name, ",".join(e["udp_ports_undeclared"])),
                "; ".join(profiles[p]["text"] for p in e["udp_ports_undeclared"] if p in profiles),
                "k3d_serverlb_udp_ports does not name the port, so it is stream (every datagram delivered, sessions "
                "held until the stream timeout): right for a tunnel or QUIC, wrong for a DNS server",
                "name it in k3d_serverlb_udp_ports: {PORT: stream} for a tunnel, QUIC or a game server, "
                "{PORT: dns} for a DNS (one reply per query) service, and run the k3d tag",
                name, code="k3d_udp_port_undeclared"))
        alerts = e.get("not_enough_total", 0)
        if alerts:
            by = ", ".join("%s: %d" % kv for kv in sorted(e["not_enough"].items()))
            cause = ("DNS sessions held open fill every connection, and HTTPS and the API share them"
                     if unpatched or long_hold else
                     "the UDP sessions have no budget: a hung DNS server fills every connection"
                     if not e.get("udp_session_budget") else "more connections at once than the workers allow")
            out.append(finding(host, "%s ran out of connections" % name,
                               "docker logs: %d 'worker_connections are not enough' in the last %d s (%s)"
                               % (alerts, window, by), cause, "run the k3d tag (homelab.edge.k3d_serverlb)", name, code="k3d_out_of_connections"))
        dead = [u for u in e.get("dns_upstreams") or [] if u["answer_s"] is None]
        if dead:
            held = ("the UDP session budget (%s sessions) keeps the rest of the connections for HTTPS and the API "
                    "meanwhile" % e["udp_session_budget"] if e.get("udp_session_budget") else
                    "with no UDP session budget, its queries will fill the connections HTTPS and the API need: "
                    "run the k3d tag")
            out.append(finding(host, "the DNS server behind %s does not answer" % name,
                               "a DNS query to %s: no answer in 2 s" % ", ".join("%s:%d" % (u["node"], u["port"])
                                                                                 for u in dead),
                               "the DNS server (CoreDNS, PowerDNS) is hung or down",
                               "restart it; %s" % held, name, code="k3d_dns_not_answering"))
        exceed = e.get("exceed_open_file_limit")
        wc, nofile = e.get("worker_connections") or 0, e.get("open_file_limit") or 0
        if exceed or (nofile and wc > nofile):
            ev = ("nginx: %d worker_connections exceed open file resource limit: %d"
                  % (exceed["worker_connections"], exceed["open_file_limit"]) if exceed
                  else "worker_connections %d, its workers may open %d files" % (wc, nofile))
            out.append(finding(host, "%s has more connections than it may open files" % name, ev,
                               "each connection needs a file: the real ceiling is the open-file limit",
                               "raise k3d_serverlb_worker_rlimit_nofile above the connections (run the k3d tag)", name, code="k3d_files_below_connections"))
        drift = [d for d in e.get("drift") or [] if not (unpatched and "UDP" in d)
                 and not (e.get("udp_stream_cut") and "(stream)" in d)]
        if drift and not (unpatched or long_hold):
            out.append(finding(host, "%s lacks part of the fix" % name, "; ".join(drift),
                               "k3d re-created or rewrote it, and no keeper re-applied the fix",
                               "run the k3d tag; keep the keeper running (k3d_serverlb_keeper)", name, code="k3d_fix_incomplete"))
    return out


def drain(host, where, values, want=None):
    """Drain values that drain slower than asked (`want`: what tcp_drain
    sets on this host; DRAIN_WANT without it)."""
    want = want or DRAIN_WANT
    bad = tcp_drain_sysctl.slower(values, want)
    if not bad:
        return []
    at_default = all(tcp_drain_sysctl.KERNEL_DEFAULTS.get(k) == v for k, v in bad.items())
    return [finding(host, "drain sysctls %s in %s" % ("at kernel defaults" if at_default else "slower than asked",
                                                      where),
                    ", ".join("%s=%s (asked %s)" % (k, v, want[k]) for k, v in sorted(bad.items())),
                    "after a flood the kernel keeps orphaned sockets %d s and retries a full accept queue: the "
                    "cleanup outlasts the attack (seed 001)" % tcp_drain_sysctl.KERNEL_DEFAULTS[tcp_drain_sysctl.FIN_TIMEOUT]
                    if at_default else "the values were changed since tcp_drain set them (by hand, or a restart: "
                    "/etc/sysctl.d holds the host's, but a container's namespace starts at kernel defaults)",
                    "run the tcp_drain tag", where, code="drain_slow")]


def drain_boot(host, boot):
    """Drain keys that a file sets to another value at the next boot, or that boot cannot set (tcp_drain's `boot`,
    per key; one no file sets is drain_slow's, after a reboot)."""
    bad = dict((k, b) for k, b in (boot or {}).items() if b.get("status") in ("differs", "module-late"))
    if not bad:
        return []
    return [finding(host, "the next boot of %s undoes drain sysctls" % host,
                    ", ".join("%s=%s live, %s at boot (%s)" % (k, b.get("live"), b.get("boot"),
                                                               b.get("from") or b.get("status"))
                              for k, b in sorted(bad.items())),
                    "systemd-sysctl reads the files of sysctl.d sorted by name and the last one wins (Debian and "
                    "Ubuntu read /etc/sysctl.conf as 99-sysctl.conf, after the drop-in); a conntrack key is applied "
                    "only if nf_conntrack is loaded before it", "change the later file, or run the tcp_drain tag "
                    "with tcp_drain_boot_order: win (and tcp_drain_conntrack_modules_load)", host,
                    code="drain_boot_differs")]


def user_limit(host, ufw, limit, ports):
    """A limit on a managed port that is not the module's (ufw_connlimit's other_limits, read back live or named
    in its refusal): the smallest per port holds, so ours may not be the limit in force."""
    others = ufw.get("other_limits") or []
    if not others:
        return []
    hit = sorted(set(p for o in others for p in o.get("ports") or []))
    eff = ufw.get("effective") or {}
    words = ", ".join("%s: %s" % (p, eff[str(p)]) for p in sorted(hit) if str(p) in eff) or "unknown"
    seed = bool(ufw.get("replaced")) and not any("path" in o for o in others)  # nothing refused
    return [finding(host, "a connection limit that is not homelab.edge's also limits port %s"
                    % ",".join(map(str, hit)),
                    "%s; the limit in force per port: %s (asked %d)"
                    % ("; ".join(ufw_connlimit.describe(o) for o in others), words, limit),
                    "a limit applied by hand (seed 001's snippet, a guide) or by another tool",
                    "run the vps tag: it takes over seed 001's snippet" if seed else
                    "remove it where it is loaded (the file and line, or the chain, above), or leave the port out "
                    "of vps_connlimit_ports; seed 001's own rule shape is taken over by the vps tag", "firewall",
                    code="vps_user_limit")]


def vps(host, ufw, sig, limit, ports):
    out = []
    if ufw is not None:
        live = sorted((ufw.get("live") or {}).get("ipv4") or [])
        out += user_limit(host, ufw, limit, ports)
        if ufw.get("failed"):
            if not ufw.get("other_limits"):
                out.append(finding(host, "the connlimit rules cannot be read", ufw.get("msg", ""), "see the message",
                                   "run the vps tag", "firewall", code="vps_rules_unreadable"))
        elif ufw.get("changed") or live != sorted(ports):
            out.append(finding(host, "the connlimit rules are not what the inventory asks",
                               "live IPv4 %s, asked %s%s" % (
                                   ",".join(map(str, live)) or "none", ",".join(map(str, ports)),
                                   "; the rules files would change" if ufw.get("changed") else ""),
                               "rules files edited by hand or ufw reloaded without them", "run the vps tag", "firewall", code="vps_rules_differ"))
    fw = (sig or {}).get("firewall") or {}
    for port, peers in sorted((fw.get("top_talkers") or {}).items()):
        peers = [p for p in peers if p[1] >= max(1, int(limit * 0.8))]
        rejected = (fw.get("rejected_per_s") or {}).get(port) or (fw.get("rejected_per_s") or {}).get(str(port)) or 0
        if peers or rejected:
            out.append(finding(host, "one address floods port %s" % port,
                               "ss: %s; connlimit rejects %s new connections/s" % (
                                   ", ".join("%s has %d connections" % tuple(p) for p in peers) or "no single address near the "
                                   "limit", rejected),
                               "one client opening many connections (seed 001's 500)",
                               "the limit holds it (vps_connlimit_limit %d); block it further up if it goes on" % limit,
                               "port %s" % port, code="vps_address_floods"))
    out += bounds_reached(host, fw, ufw)
    limited = set(fw.get("limited_ports") or [])
    for port, names in sorted((fw.get("published") or {}).items()):
        if int(port) not in limited:
            out.append(finding(host, "port %s is published by Docker outside the limit" % port,
                               "docker: published by %s; no connlimit rule for it in DOCKER-USER's path"
                               % ", ".join(names), "Docker DNATs published ports through FORWARD: ufw's INPUT rules "
                               "never see them", "add %s to vps_connlimit_ports with vps_connlimit_docker_published: "
                               "docker_user (run the vps tag)" % port, "port %s" % port, code="vps_docker_port_unlimited"))
    if (fw.get("docker_firewall_backend") or "").startswith("nftables"):
        out.append(finding(host, "Docker runs its nftables firewall backend", "docker info: FirewallBackend nftables",
                           "there is no DOCKER-USER chain: a limit for published ports there protects nothing",
                           "run Docker with its iptables backend, or publish on 127.0.0.1 behind a host proxy",
                           "docker", code="vps_docker_nftables"))
    return out


def bounds_reached(host, fw, ufw=None):
    """The bounds on all sources together (issue 63) that refused new connections: the total, the rate bound; each
    with its iptables counter (since the rules were loaded) and its rate in the sample, the count the total holds
    now, and its size as the live rules have it."""
    out = []
    live = (((ufw or {}).get("bounds") or {}).get("live") or {}).get("ipv4") or {}
    counted = fw.get("counted") or {}
    for port, b in sorted((fw.get("bounds") or {}).items(), key=lambda kv: int(kv[0])):
        size = live.get(str(port)) or {}
        now = counted.get(port, counted.get(str(port)))
        if b.get("total"):
            out.append(finding(
                host, "the total bound was reached on port %s" % port,
                "iptables: the total (#conn src/0 > %s) reset %d new connections since the rules were loaded, %s a "
                "second now; %s connections counted now"
                % (size.get("total", "?"), b["total"], b.get("total_per_s", 0), "?" if now is None else now),
                "more connections at once from all addresses together than vps_connlimit_total: a flood spread over "
                "many addresses (each under the per-address limit), or more real clients than the total was sized for",
                "nothing while it is a flood - the NAS behind it gets no more than the total, its LAN keeps working; "
                "raise vps_connlimit_total (within what the NAS holds) if real clients meet it (vps tag)",
                "port %s" % port, code="vps_total_reached"))
        if b.get("rate"):
            out.append(finding(
                host, "the rate bound was reached on port %s" % port,
                "iptables: the rate bound (%s/s, bucket %s) reset %d new connections since the rules were loaded, %s a "
                "second now" % (size.get("rate", "?"), size.get("burst", "?"), b["rate"], b.get("rate_per_s", 0)),
                "new connections from all addresses together faster than vps_connlimit_rate after its bucket: a SYN "
                "storm or a flood of new connections", "nothing while it is a flood; raise vps_connlimit_rate (and "
                "vps_connlimit_total, or shorten conntrack's syn_recv timeout) if real clients meet it (vps tag)",
                "port %s" % port, code="vps_rate_reached"))
    return out


def nas(host, sig, traefik_name, proxy_trusted, bound=None):
    out = []
    if bound and bound.get("routers") and not bound.get("within", True):
        out.append(finding(host, "one client can hold %d requests in flight on %s" % (bound["bound"], traefik_name),
                           "Traefik's API: %s" % bound_text(dict(bound, within=True)),
                           "inFlightReq is one limiter per router: amount x routers, above %d" % bound["max"],
                           "lower traefik_inflight_amount, or bound HTTP/2 streams (traefik_inflight_http2_max_streams) "
                           "behind the VPS's per-IP connection limit (nas tag)", traefik_name, code="nas_client_bound_high"))
    sig = sig or {}
    unhealthy = sig.get("unhealthy") or []
    heal = sig.get("autoheal")
    for u in unhealthy:
        out.append(finding(host, "%s is unhealthy" % u["name"],
                           "docker: unhealthy for %s s, %s failed health checks in a row (%s)"
                           % (u["since_s"], u["failing_streak"], u["last_output"][:80] or "no output"),
                           "wedged: it runs, but does not answer its health check",
                           "autoheal restarts it" if heal and heal.get("can_restart") else
                           "docker restart %s now; and make autoheal able to (autoheal tag)" % u["name"], u["name"], code="nas_unhealthy"))
    for loop in (heal or {}).get("loops") or []:
        out.append(finding(host, "%s is in a restart loop" % loop["name"],
                           "autoheal's log: restarted %d times in the window%s"
                           % (loop["restarts"], "; %d restarts refused (the restart-loop guard)"
                              % heal["restart_failures"] if heal.get("restart_failures") else ""),
                           loop["cause"], "fix the health check of %s (a restart does not); the restart-loop guard "
                           "(autoheal_restart_limit, autoheal tag) holds further restarts back" % loop["name"],
                           loop["name"], code="nas_restart_loop"))
    if heal is not None and not heal.get("can_restart"):
        wedged = [u["name"] for u in unhealthy]
        out.append(finding(host, "autoheal cannot restart anything", heal.get("why", ""),
                           "%s stays %s until someone restarts it by hand (seed 001: 12 minutes dark)"
                           % (", ".join(wedged), "unhealthy") if wedged else "a wedged container would stay wedged",
                           "run the autoheal tag (autoheal_socket_proxy uses a policy that allows restarts)",
                           "autoheal", code="nas_autoheal_cannot_restart"))
    t = sig.get("traefik")
    tunnel = (t or {}).get("tunnel") or {}
    if tunnel.get("r429"):
        out.append(finding(host, "%s's total for the tunnel was reached" % traefik_name,
                           "access log: %d of %d requests through the tunnel's entrypoint answered 429 in the window"
                           % (tunnel["r429"], tunnel["requests"]),
                           "more requests in flight from everything the VPS forwards together than "
                           "traefik_inflight_tunnel_total (per router), or one client over the per-client amount",
                           "nothing while it is a flood - the LAN's entrypoint never counts; raise "
                           "traefik_inflight_tunnel_total if real users get it (nas tag)", traefik_name,
                           code="nas_tunnel_total_reached"))
    if t:
        statuses = t.get("statuses") or {}
        limited = statuses.get("429", 0) - tunnel.get("r429", 0)
        errors = sum(v for k, v in statuses.items() if k.startswith("5"))
        if limited:
            out.append(finding(host, "%s turned away %d requests (429)" % (traefik_name, limited),
                               "access log: %d of %d requests answered 429" % (limited, t["requests"]),
                               "one client over the in-flight limit (inFlightReq)", "nothing if it is a flood; raise "
                               "traefik_inflight_amount if real users get it", traefik_name, code="nas_rate_limited"))
        if errors:
            out.append(finding(host, "%s answered %d requests with 5xx" % (traefik_name, errors),
                               "access log: %s" % ", ".join("%s: %d" % kv for kv in sorted(statuses.items())
                                                            if kv[0].startswith("5")),
                               "a backend fails or is too slow", "look at the backends", traefik_name, code="nas_errors_5xx"))
        if is_blind(t["requests"], t["top_share"]):
            out.append(finding(host, "%s's per-IP limit is blind" % traefik_name,
                               "access log: %d%% of the last %d requests come from %s"
                               % (int(t["top_share"] * 100), t["requests"], t["top_client"]),
                               "a proxy in front (the VPS) without PROXY protocol: every client counts as one",
                               "PROXY protocol: traefik_inflight_proxy_protocol_trusted_ips (nas tag), then "
                               "vps_proxy_protocol_upstreams (vps tag)" if not proxy_trusted else
                               "turn PROXY protocol on at the VPS (vps tag)", traefik_name, code="nas_limit_blind"))
    return out


# what counts as many connections to tear down: conntrack this full, or this many sockets neither listening nor open
CONNTRACK_SHARE = 0.2
DYING_SOCKETS = 1000


def many_connections(h):
    """Whether a host's signals show a flood's mark: conntrack above CONNTRACK_SHARE of its limit (or, its limit
    unknown, above DYING_SOCKETS entries), or DYING_SOCKETS sockets being torn down (TIME-WAIT, FIN-WAIT...)."""
    conntrack, limit = h.get("conntrack") or 0, h.get("conntrack_max")
    dying = sum(n for state, n in (h.get("sockets") or {}).items() if state not in ("LISTEN", "ESTAB"))
    return conntrack > (CONNTRACK_SHARE * limit if limit else DYING_SOCKETS) or dying >= DYING_SOCKETS


def host_common(host, sig, containers, drain_want=None, boot=None):
    out = []
    h = (sig or {}).get("host") or {}
    out += drain(host, "%s's own namespace" % host, h.get("drain"), drain_want)
    out += drain_boot(host, boot)
    for name, c in sorted(((sig or {}).get("containers") or {}).items()):
        if name in containers and c.get("running"):
            out += drain(host, "%s's namespace" % name, c.get("drain"), drain_want)
    load, cpus = (h.get("load") or [0])[0], h.get("cpus") or 1
    system = (h.get("cpu") or {}).get("system", 0)
    # the kernel's own work shows as system CPU; a high load with little of it is user work (a build, a backup);
    # and a flood's aftermath has many connections to tear down - busy kernel work with few (a RAID scrub, a
    # machine running containers beside) is something else
    if (system > 50 or (load > 2 * cpus and system > 25)) and many_connections(h):
        out.append(finding(host, "%s's kernel is busy" % host,
                           "load %.2f on %d CPUs, %s%% system CPU; conntrack %s entries, sockets %s"
                           % (load, cpus, system, h.get("conntrack"), h.get("sockets")),
                           "the kernel cleaning up after many connections (seed 001: 80% system CPU after the flood)",
                           "the drain sysctls (tcp_drain tag); restart the wedged service", host, code="host_kernel_busy"))
    return out


def shared_causes(found):
    """One finding more where several symptoms have one cause (by code)."""
    out = []
    by_about = {}
    for f in found:
        by_about.setdefault((f["host"], f["about"]), []).append(f)
    for (host, about), group in sorted(by_about.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        codes = set(f["code"] for f in group)
        if "k3d_out_of_connections" in codes and codes & {"k3d_udp_sessions_held", "k3d_dns_not_answering"}:
            out.append(finding(host, "one cause: %s is out of connections" % about,
                               "; ".join(f["finding"] for f in group),
                               "DNS timeouts, TLS resets and the Kubernetes API's EOF through %s are one failure, not "
                               "three: DNS sessions took the connections everything shares" % about,
                               "run the k3d tag", about, code="shared_k3d_out_of_connections"))
    cannot = dict((f["host"], f) for f in found if f["code"] == "nas_autoheal_cannot_restart")
    for f in found:
        if f["code"] == "nas_unhealthy" and f["host"] in cannot:
            out.append(finding(f["host"], "one cause: %s is wedged and nothing restarts it" % f["about"],
                               "%s; %s" % (f["evidence"], cannot[f["host"]]["evidence"]),
                               "every route behind it stays dark until a restart by hand",
                               "docker restart %s; then the autoheal tag" % f["about"], f["about"],
                               code="shared_wedged_unrestarted"))
    return out


def way_in(host, access, reverts):
    """Listening ports that ufw blocks for new connections and nobody closed
    on purpose (ufw_access's blocked_unasked), and firewall reverts still
    pending or never run. access: what ufw_access returned in check mode;
    reverts: ufw_revert's query."""
    out = []
    if access and not access.get("failed") and access.get("enabled_before"):
        names = dict((e["spec"], "/".join(e.get("processes") or []) or "?") for e in access.get("listening") or [])
        for spec in access.get("blocked_unasked") or []:
            out.append(finding(host, "%s listens but ufw blocks new connections to it" % spec,
                               "ss: %s listens on %s; ufw: default incoming %s, no rule lets it in"
                               % (names.get(spec, "?"), spec, access.get("policy")),
                               "ufw was enabled without an allow rule for it (by hand, or by an older run)",
                               "ufw allow %s if new clients should reach it; or list it in "
                               "vps_connlimit_closed_ports to say it is closed on purpose" % spec, spec, code="way_in_blocked"))
    for r in (reverts or {}).get("pending") or []:
        if r.get("state") == "stalled":
            out.append(finding(host, "a revert of a firewall change was cut off half way",
                               "ufw_revert %s: armed at %s, due at %s, still reverting"
                               % (r.get("id"), r.get("armed_at"), r.get("fires_at")),
                               "the host restarted, or the revert's script was killed, while it put the firewall back",
                               "homelab.edge.ufw_revert state=reverted id=%s finishes it" % r.get("id"), "firewall",
                               code="way_in_revert_stalled"))
            continue
        missed = r.get("state") == "missed"
        what = "was never confirmed and its revert never ran" if missed else "waits for its confirmation"
        out.append(finding(host, "a firewall change %s" % what,
                           "ufw_revert %s: armed at %s, due at %s" % (r.get("id"), r.get("armed_at"), r.get("fires_at")),
                           "the host restarted before the revert fired" if missed else
                           "a run of the vps tag is between its change and the new SSH login that confirms it",
                           "homelab.edge.ufw_revert state=reverted id=%s puts the firewall back; state=confirmed keeps "
                           "it" % r.get("id") if missed else "wait: the host restores itself at the due time unless "
                           "confirmed", "firewall", code="way_in_revert_missed" if missed else "way_in_revert_pending"))
    return out


def diagnose(hosts, window):
    """hosts: {name: {"k3d": [..], "ufw": {..}, "signals": {..}, "limit": n, "ports": [..],
    "traefik": name, "proxy_trusted": bool, "bound": {..}, "containers": [..]}} -> findings."""
    found = []
    for host, s in sorted(hosts.items()):
        if s.get("k3d_error"):
            found.append(finding(host, "the k3d load balancers cannot be read", s["k3d_error"],
                                 "the Docker engine is down or does not answer this user",
                                 "start the engine (systemctl start docker) or check DOCKER_HOST and the user's "
                                 "access to the socket, then run diagnose again", code="k3d_engine_unreadable"))
        elif s.get("k3d") is not None:
            found += k3d(host, s["k3d"], window)
        if s.get("role") == "vps":
            found += vps(host, s.get("ufw"), s.get("signals"), s["limit"], s.get("ports") or [])
            found += way_in(host, s.get("access"), s.get("reverts"))
        if s.get("role") == "nas":
            found += nas(host, s.get("signals"), s.get("traefik"), s.get("proxy_trusted"), s.get("bound"))
        if s.get("role") in ("vps", "nas"):
            found += host_common(host, s.get("signals"), s.get("containers") or [], s.get("drain_want"),
                                 s.get("drain_boot"))
    return found + shared_causes(found)


def table(found):
    """The findings as text rows an operator reads in ten seconds."""
    if not found:
        return ["no findings: nothing of the two outages' signals is there"]
    rows = []
    for i, f in enumerate(found, 1):
        rows.append("%d. [%s] %s" % (i, f["host"], f["finding"]))
        rows.append("   evidence: %s" % f["evidence"])
        rows.append("   cause:    %s" % f["cause"])
        rows.append("   fix:      %s" % f["fix"])
    return rows
