"""What the demo claims, as data and checks: one row per claim, each with the
failure "before" must show (or None where the lab does not reproduce one,
said in the row) and the fix "after" must show. The demo passes only when
every row holds; tests/dev/test_demo_proof.py breaks each row in turn.

Measures are raw values (numbers, lists, dicts), never formatted text: the
table formats them, the checks read them."""

import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as f:
        return yaml.safe_load(f)


def _lab_vars(host):
    """A host's variables in the lab inventory: its groups' vars, outer
    first, then its own."""
    with open(os.path.join(ROOT, "inventories", "lab", "hosts.yml")) as f:
        inv = yaml.safe_load(f)

    def walk(group, inherited):
        merged = dict(inherited, **(group.get("vars") or {}))
        if host in (group.get("hosts") or {}):
            return dict(merged, **(group["hosts"][host] or {}))
        for child in (group.get("children") or {}).values():
            found = walk(child or {}, merged)
            if found is not None:
                return found
        return None
    return walk(inv["all"], {}) or {}


K3D = _defaults("k3d_serverlb")
DRAIN = _defaults("tcp_drain")
VPS = _defaults("vps_connlimit")
FLOOD_CONNECTIONS = 150  # the demo's connections at once from one client
VPS_LIMIT = _lab_vars("lab-vps").get("vps_connlimit_limit", VPS["vps_connlimit_limit"])
AMOUNT = _lab_vars("lab-nas").get("traefik_inflight_amount", _defaults("traefik_inflight")["traefik_inflight_amount"])
DRAIN_WANT = {"net.ipv4.tcp_fin_timeout": DRAIN["tcp_drain_fin_timeout"],
              "net.ipv4.tcp_abort_on_overflow": DRAIN["tcp_drain_abort_on_overflow"]}
PROBES_GOAL_PCT = 99.0
HEALTHY_AFTER_FLOOD_S = 30


def _answered_all(m):
    return m["sent"] > 0 and m["answered"] == m["sent"]


def _probes_clean(m):
    return m["ok"] > 0 and m["failed"] == 0


# (part, measure, what it shows, failure before, fix after)
CLAIMS = [
    ("k3d", "dns", "DNS queries answered (fresh source port each)",
     lambda m: m["answered"] < m["sent"], _answered_all),
    ("k3d", "alerts", "'worker_connections are not enough' lines",
     lambda m: m > 0, lambda m: m == 0),
    ("k3d", "tcp_during_dns", "HTTPS+API probes through the same load balancer meanwhile",
     lambda m: m["failed"] > 0, _probes_clean),
    ("k3d", "hung_dns", "DNS server hung (SIGSTOP): 'not enough' lines, HTTPS+API probes",
     lambda m: m["alerts"] > 0 and m["tcp"]["failed"] > 0,
     lambda m: m["alerts"] == 0 and _probes_clean(m["tcp"])),
    ("k3d", "worker_connections", "connections nginx may hold (the floor)",
     lambda m: m < K3D["k3d_serverlb_worker_connections"], lambda m: m >= K3D["k3d_serverlb_worker_connections"]),
    ("k3d", "worker_open_files", "open files each nginx worker may hold",
     lambda m: m != [K3D["k3d_serverlb_worker_rlimit_nofile"]],
     lambda m: m == [K3D["k3d_serverlb_worker_rlimit_nofile"]]),
    ("k3d", "recreated_fixed_s", "k3d re-creates a load balancer: seconds until it has the fix",
     None, lambda m: m is not None),
    ("edge", "reset_at_vps", "%d connections from one client: reset at the VPS" % FLOOD_CONNECTIONS,
     lambda m: m == 0, lambda m: m == FLOOD_CONNECTIONS - VPS_LIMIT),
    ("edge", "answered_429", "%d connections from one client: answered 429 by Traefik" % FLOOD_CONNECTIONS,
     lambda m: m == 0, lambda m: m == min(FLOOD_CONNECTIONS, VPS_LIMIT) - AMOUNT),
    ("edge", "second_client", "a second client (same site) meanwhile: answers",
     None, lambda m: len(m) > 0 and set(m) == {200}),
    ("edge", "client_addresses", "client addresses Traefik saw",
     lambda m: m == 1, lambda m: m >= 2),
    ("nas", "served_again_s", "Traefik wedged (SIGSTOP): seconds until served again",
     lambda m: m is None, lambda m: m is not None),
    ("nas", "health", "Traefik's health check after the heal",
     lambda m: m != "healthy", lambda m: m == "healthy"),
    ("nas", "drain", "drain sysctls live in Traefik's namespace",
     lambda m: m != DRAIN_WANT, lambda m: m == DRAIN_WANT),
    ("nas", "flood_probes_pct", "seed 001's flood via the VPS: LAN probes answered %",
     None, lambda m: m is not None and m >= PROBES_GOAL_PCT),
    ("nas", "flood_healthy_after_s", "seed 001's flood: seconds until every probe answers again",
     None, lambda m: m is not None and m <= HEALTHY_AFTER_FLOOD_S),
]
NOT_REPRODUCED = ("before: the lab's flood does not take the NAS down (a 2-core lab machine is not the seed's NAS): "
                  "its rows claim only what 'after' must hold")


def verdicts(results):
    """One dict per claim: part, measure, label, before, after, before_ok,
    after_ok (None where no failure is claimed before). A measure missing
    from the results fails its row."""
    rows = []
    for part, measure, label, failed_before, fixed_after in CLAIMS:
        row = {"part": part, "measure": measure, "label": label}
        for phase, check in (("before", failed_before), ("after", fixed_after)):
            value = results.get(part, {}).get(phase, {}).get(measure, KeyError)
            row[phase] = None if value is KeyError else value
            if check is None:
                row[phase + "_ok"] = None
            elif value is KeyError:
                row[phase + "_ok"] = False
            else:
                try:
                    row[phase + "_ok"] = bool(check(value))
                except (KeyError, TypeError, ValueError):
                    row[phase + "_ok"] = False
        rows.append(row)
    return rows


def proved(results):
    """True only when every "before" shows its failure and every "after" its fix."""
    return all(r["before_ok"] is not False and r["after_ok"] is True for r in verdicts(results))
