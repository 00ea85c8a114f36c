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
# build(): the build (sources' hash) every result of binary() reports
sources_hash, binary, build = GENERATOR.sources_hash, GENERATOR.binary, GENERATOR.build


def validity(result):
    """(valid, why) for the generator's JSON output `result`: the Go code's rule (cmd/tlsgen/validity.go's validity,
    core/conns.go's ConnValidity; here loadgen.connection_rules)."""
    r = result
    why = loadgen.connection_rules(r, MAX_P99_LATENESS_S, MAX_CPU_SHARE)
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
