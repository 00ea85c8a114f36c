"""The compiled TLS connection generator (tests/support/loadgen_go/cmd/tlsgen,
built by `lab/lab.sh gobins` into $HOMELAB_EDGE_CACHE/bin/tlsgen; loadgen.py):
seed 001's flood, new TLS connections opened at a fixed rate, each holding
one request.

Open loop: connection i is due at start + i/rate whatever the target does,
each with one deadline (`timeout`) from its start. The binary counts what
each connection got (status codes; failures by stage, connect / handshake /
response, and kind), times the handshakes and the answers, and says whether
the run measured the target or itself; validity() re-judges its figures by
the same rule. A run is valid only when the generator kept up: no connection
skipped at its own -max-open bound, none it could not open itself (file or
port limits), 99 % of the starts within MAX_P99_LATENESS_S of their due
time, its CPU under MAX_CPU_SHARE of the cores it may use, none left open
past its deadline, and every planned connection reached before the hard bound
(seconds x START_OVERRUN + 0.5 s). A slow, refusing or dead target is a
figure about the target, never an invalid run.

Targets are only loopback or private addresses (the binary refuses others,
exit code 2); it prints its one JSON object by seconds x START_OVERRUN +
timeout + 2 s.
"""
import os
import subprocess
import threading

import loadgen

START_OVERRUN = 1.10
MAX_P99_LATENESS_S = 0.010
MAX_CPU_SHARE = 0.70  # of the cores the generator may run on, over its wall time
GO_DIR = loadgen.GO_DIR  # the Go module; the generator is its ./cmd/tlsgen
IN_CONTAINER = "/tmp/tlsgen"

_copied = {}  # container -> the binary copied into it
_copy_lock = threading.Lock()


class Missing(loadgen.Missing):
    """No compiled TLS generator built from these sources."""


GENERATOR = loadgen.Generator("tlsgen", "TLS generator", Missing)
# sources_hash(): the hash lab/lab.sh's go_tool names the binary by; binary(): $HOMELAB_EDGE_CACHE/bin/tlsgen when it
# is the build of these sources (else Missing)
sources_hash, binary = GENERATOR.sources_hash, GENERATOR.binary


def build():
    """The build (sources' hash) every result of binary() reports."""
    binary()
    return sources_hash()


def validity(result):
    """(valid, why) for the generator's JSON output `result`: the Go code's rule (cmd/tlsgen/validity.go's validity)."""
    r = result
    why = []
    if r["skipped_at_bound"]:
        why.append("%d connections skipped at the generator's bound (-max-open %d)"
                   % (r["skipped_at_bound"], r["max_open"]))
    if r["local_errors"]:
        why.append("%d connections the generator could not open (%s)"
                   % (r["local_errors"], loadgen.counts_text(r.get("local_errno"))))
    p99 = r["lateness_p99_s"]
    if p99 is None or p99 >= MAX_P99_LATENESS_S:
        why.append("99th percentile lateness %s s (not under %s s)" % (p99, MAX_P99_LATENESS_S))
    cpu, cpus = r["user_s"] + r["system_s"], r.get("cpus") or 0
    if r["wall_s"] <= 0 or cpus < 1 or cpu >= MAX_CPU_SHARE * cpus * r["wall_s"]:
        why.append("generator CPU %.3f s over %.3f s (not under %d %% of %d cores)"
                   % (cpu, r["wall_s"], 100 * MAX_CPU_SHARE, cpus))
    if r["unfinished"]:
        why.append("%d connections still open past their deadline" % r["unfinished"])
    if r["stopped_at_bound"] or r["started"] + r["skipped_at_bound"] != r["planned"]:
        why.append("reached %d of %d planned (stopped at the hard bound)"
                   % (r["started"] + r["skipped_at_bound"], r["planned"]))
    loadgen.own_verdict(r, why, required=False)
    return not why, "; ".join(why)


def command(binary_path, target, port, sni, path, rate, seconds, timeout, max_open=None, timeline=False):
    cmd = [binary_path, "-json", "-target", target, "-port", str(port), "-sni", sni, "-path", path,
           "-rate", repr(float(rate)), "-seconds", repr(float(seconds)), "-timeout", repr(float(timeout))]
    if max_open:
        cmd += ["-max-open", str(max_open)]
    if timeline:
        cmd.append("-timeline")
    return cmd


def _copy_into(container, local):
    """docker cp the binary to IN_CONTAINER once per container (again if the binary changed, or the container is a
    new one of the same name)."""
    real = os.path.realpath(local)
    ident = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", container], check=True, capture_output=True,
                           text=True, timeout=60).stdout.strip()
    with _copy_lock:
        if _copied.get(ident) != real:
            subprocess.run(["docker", "cp", real, "%s:%s" % (container, IN_CONTAINER)], check=True,
                           capture_output=True, timeout=60)
            _copied[ident] = real


def run(target, port, sni, path, rate, seconds, timeout, max_open=None, timeline=False, container=None):
    """One open-loop run, here or inside `container` (docker exec); returns the binary's JSON with
    valid and invalid_because re-judged by validity()."""
    local = binary()
    if container:
        _copy_into(container, local)
        cmd = ["docker", "exec", container] + command(IN_CONTAINER, target, port, sni, path, rate, seconds, timeout,
                                                      max_open, timeline)
    else:
        cmd = command(local, target, port, sni, path, rate, seconds, timeout, max_open, timeline)
    # the binary is gone by seconds x START_OVERRUN + timeout + 2 s; docker exec's own start on top
    bound = seconds * START_OVERRUN + timeout + 2 + 10
    result = loadgen.run_json(cmd, bound)
    result["valid"], result["invalid_because"] = validity(result)
    return result
