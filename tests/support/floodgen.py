"""The compiled many-source flood generator (tests/support/loadgen_go/cmd/floodgen, built by `lab/lab.sh gobins` into
$HOMELAB_EDGE_CACHE/bin/floodgen; loadgen.py): connections from hundreds of distinct source addresses - the flood
every per-address limit lets through - or from one address, for comparison.

Open loop: connection i is due at start + i/rate whatever the target does and comes from source base + (i % sources),
bound to it before connect (IP_FREEBIND): an AnyIP route in the generator's network namespace makes the whole prefix
local (anyip()), and the target needs a route back. `hold` mode keeps each connection idle for `hold` seconds (a count
of connections); `tls` makes a handshake and one request. The binary counts what each connection got (connected,
refused or reset at connect, held to the end, status codes, failures by stage and kind), times the connects, the
handshakes and the answers, counts the sources it started and connected from, and says whether the run measured the
target or itself; validity() re-judges its figures by the same rule: no connection skipped at its own -max-open bound,
none it could not open itself (file, port or address limits), 99 % of the starts within MAX_P99_LATENESS_S, its CPU
under MAX_CPU_SHARE of its cores, none left open past its deadline, every planned connection started before the hard
bound, and connections from every source asked. A refusing, slow or dead target is a figure, never an invalid run.

Targets and sources are loopback or private addresses only (the binary refuses others, exit code 2); at most 4096
sources and 60,000 connections a run; it prints its one JSON object by planned/rate x 1.1 + its deadline + 2 s.
"""
import contextlib
import subprocess

import loadgen
import tlsgen

# one home: the TLS generator's numbers (its starts and this one's are the same goroutines and timers)
START_OVERRUN = tlsgen.START_OVERRUN
MAX_P99_LATENESS_S = tlsgen.MAX_P99_LATENESS_S
MAX_CPU_SHARE = tlsgen.MAX_CPU_SHARE
MAX_SOURCES, MAX_PLANNED, MAX_HOLD_S = 4096, 60000, 120


class Missing(loadgen.Missing):
    """No compiled flood generator built from these sources."""


GENERATOR = loadgen.Generator("floodgen", "flood generator", Missing)
# build(): the build (sources' hash) every result of binary() reports
sources_hash, binary, build = GENERATOR.sources_hash, GENERATOR.binary, GENERATOR.build


def validity(result):
    """(valid, why) for the generator's JSON output: the Go code's rule (cmd/floodgen/validity.go's validity: core's
    ConnValidity, here loadgen.connection_rules, and every source used)."""
    r = result
    why = loadgen.connection_rules(r, MAX_P99_LATENESS_S, MAX_CPU_SHARE)
    if r["sources_used"] != min(r["sources"], r["started"]):
        why.append("connections left from %d of %d source addresses" % (r["sources_used"], r["sources"]))
    loadgen.own_verdict(r, why, required=False)
    return not why, "; ".join(why)


def command(binary_path, target, port, source_base, sources, per_source, rate, mode="hold", hold=5.0, timeout=5.0,
            sni="site.nas.lab", path="/", max_open=None, timeline=False, fifo=None):
    cmd = [binary_path, "-json", "-target", target, "-port", str(port), "-source-base", source_base,
           "-sources", str(sources), "-per-source", str(per_source), "-rate", repr(float(rate)), "-mode", mode,
           "-timeout", repr(float(timeout))]
    cmd += ["-hold", repr(float(hold))] if mode == "hold" else ["-sni", sni, "-path", path]
    if max_open:
        cmd += ["-max-open", str(max_open)]
    if timeline:
        cmd.append("-timeline")
    if fifo:
        cmd += ["-fifo", str(fifo)]
    return cmd


def deadline(mode, hold, timeout):
    return timeout + hold if mode == "hold" else timeout


def run(target, port, source_base, sources, per_source, rate, mode="hold", hold=5.0, timeout=5.0, sni="site.nas.lab",
        path="/", max_open=None, timeline=False, netns_pid=None, cpus=None, fifo=None):
    """One run, here or in the network namespace of process `netns_pid` (nsenter; a lab container's), pinned to
    `cpus`, under SCHED_FIFO at `fifo` (a busy machine cannot then hold the starter off its schedule); returns the
    binary's JSON with valid and invalid_because re-judged by validity()."""
    cmd = command(binary(), target, port, source_base, sources, per_source, rate, mode, hold, timeout, sni, path,
                  max_open, timeline, fifo)
    if netns_pid:
        cmd = ["nsenter", "-t", str(netns_pid), "-n"] + cmd
    seconds = sources * per_source / float(rate)
    result = loadgen.run_json(loadgen.pinned(cmd, cpus), seconds * START_OVERRUN + deadline(mode, hold, timeout) + 12)
    result["valid"], result["invalid_because"] = validity(result)
    return result


def _ip(netns_pid, *argv):
    prefix = ["nsenter", "-t", str(netns_pid), "-n"] if netns_pid else []
    return subprocess.run(prefix + ["ip"] + list(argv), check=True, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def anyip(prefix, netns_pid=None):
    """The whole `prefix` local to the namespace of `netns_pid` (an AnyIP route on lo) while the block runs: the
    generator binds its sources there. The route goes again on every path out."""
    _ip(netns_pid, "route", "replace", "local", prefix, "dev", "lo")
    try:
        yield
    finally:
        subprocess.run((["nsenter", "-t", str(netns_pid), "-n"] if netns_pid else []) +
                       ["ip", "route", "del", "local", prefix, "dev", "lo"], capture_output=True, timeout=30)


def summary(r):
    """One line of a run's figures, as the benchmark and the demo print them."""
    return ("%d planned from %d sources (%d used, %d connected): %d connected, %d refused/reset, %d held, 2xx %d, "
            "429 %d, other %d, failed %d, peak open %d; lateness p99 %s s, connect p99 %s s; %s"
            % (r["planned"], r["sources"], r["sources_used"], r["sources_connected"], r["connected"], r["refused"],
               r["held"], r["ok_2xx"], r["r429"], r["other_code"], r["failed"], r["peak_open"], r["lateness_p99_s"],
               r["connect_p99_s"], "valid" if r["valid"] else "INVALID (%s)" % r["invalid_because"]))
