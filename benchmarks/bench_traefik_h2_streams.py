#!/usr/bin/env python
"""What http2.maxConcurrentStreams costs and what it bounds, to choose
traefik_inflight_http2_max_streams.

One HTTP/2 connection carries at most `streams` requests at once. Behind the
VPS's per-IP connection limit (100), that bounds one client's requests in
flight at Traefik to 100 x streams across every router, where inFlightReq
bounds amount x routers. The cost: a browser puts a page's requests on one
connection, so a page of more requests than `streams` waits in rounds.

The lab on the local engine, on a network of the benchmark's own: the lab's
Traefik (v3) in front of a backend that answers /ms/<n> after n ms and counts
the requests it holds (and their peak). The client is this script (httpx,
HTTP/2, at most one connection, as a browser keeps one per site: requests
beyond the streams wait for a free one; curl instead opens more connections,
which the VPS's per-IP limit counts). For each value of streams, the same
offered work:

  page   PAGE requests of PAGE_MS ms at once on one connection (a web UI's first
         load), RUNS times: the time until the last answer;
  hold   HOLD requests of HOLD_MS ms at once on one connection: the most the
         backend held at once (what one connection can put in flight).

A run counts only when every request was answered 200 over HTTP/2 on one
connection (planned, answered and connections are saved); otherwise it is
marked invalid and left out of the table. The chosen default is the smallest
value whose median page time is within CHOICE_FACTOR of Traefik's own default
(250), printed with the rule. Saves JSON to benchmarks/results/.
"""
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NET = "homelab-h2-bench"
STREAMS = (8, 16, 32, 64, 250)
PAGE, PAGE_MS, RUNS = 60, 50, 5
HOLD, HOLD_MS = 100, 1000
CHOICE_FACTOR = 2.0
TRAEFIK_DEFAULT = 250

BACKEND = r"""
import threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
lock = threading.Lock(); state = {"now": 0, "peak": 0}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self, body):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/peak":
            with lock:
                body = b"%d" % state["peak"]; state["peak"] = state["now"]
            return self.answer(body)
        with lock:
            state["now"] += 1; state["peak"] = max(state["peak"], state["now"])
        try:
            time.sleep(int(self.path.rsplit("/", 1)[1]) / 1000.0)
            self.answer(b"ok\n")
        finally:
            with lock:
                state["now"] -= 1
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer.request_queue_size = 1024
ThreadingHTTPServer(("", 8080), H).serve_forever()
"""

ROUTES = """http:
  routers:
    all:
      rule: PathPrefix(`/`)
      entryPoints: [websecure]
      service: backend
      tls: {}
  services:
    backend:
      loadBalancer:
        servers:
          - url: http://h2b-backend:8080
"""


def docker(*argv, check=True):
    out = subprocess.run(["docker"] + list(argv), capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise RuntimeError("docker %s: %s" % (" ".join(argv[:3]), out.stderr.strip()))
    return out.stdout.strip()


def clean():
    docker("rm", "-f", "h2b-traefik", "h2b-backend", check=False)
    docker("network", "rm", NET, check=False)


def address(name):
    return docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)


def start_traefik(streams, dyn):
    docker("rm", "-f", "h2b-traefik", check=False)
    docker("run", "-d", "--name", "h2b-traefik", "--network", NET, "-v", "%s:/dyn:ro" % dyn, "homelab-edge/nas:lab",
           "--entrypoints.websecure.address=:443", "--entrypoints.websecure.http.tls=true",
           "--entrypoints.websecure.http2.maxconcurrentstreams=%d" % streams, "--providers.file.directory=/dyn")
    url = "https://%s" % address("h2b-traefik")
    for dummy in range(60):
        try:
            if httpx.get(url + "/ms/0", verify=False, timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("Traefik did not answer with streams=%d" % streams)


async def _burst(url, n, ms, http2=True):
    connections = 1 if http2 else n
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(http2=http2, verify=False, limits=limits, timeout=120) as c:
        await c.get(url + "/ms/0")  # a connection, its TLS and HTTP/2 settings, before the clock starts
        t0 = time.monotonic()
        answers = await asyncio.gather(*[c.get("%s/ms/%d" % (url, ms)) for dummy in range(n)],
                                       return_exceptions=True)
        seconds = time.monotonic() - t0
    ok = [a for a in answers if not isinstance(a, Exception) and a.status_code == 200
          and a.http_version == ("HTTP/2" if http2 else "HTTP/1.1")]
    return {"seconds": round(seconds, 3), "planned": n, "sent": n, "answered": len(ok),
            "errors": sorted(set(type(a).__name__ for a in answers if isinstance(a, Exception))),
            "valid": len(ok) == n}


def burst(url, n, ms):
    """n requests of ms ms at once on one HTTP/2 connection: the time until the
    last answer, planned and answered (over HTTP/2, 200)."""
    return asyncio.run(_burst(url, n, ms))


def peak(url_backend):
    return int(httpx.get(url_backend + "/peak", timeout=5).text)


def machine():
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "docker": docker("version", "-f", "{{.Server.Version}}"),
            "traefik": docker("run", "--rm", "--entrypoint", "traefik", "homelab-edge/nas:lab", "version"),
            "httpx": httpx.__version__, "date": time.strftime("%FT%T%z")}


def choose(results):
    """The smallest value whose median page time is within CHOICE_FACTOR of
    Traefik's default (None when the default's runs were invalid)."""
    ref = results.get(str(TRAEFIK_DEFAULT), {}).get("page_median_s")
    if not ref:
        return None
    for s in STREAMS:
        median = results[str(s)].get("page_median_s")
        if median is not None and median <= CHOICE_FACTOR * ref:
            return s
    return None


def main():
    clean()
    dyn = tempfile.mkdtemp(prefix="h2b-")
    with open(os.path.join(dyn, "routes.yml"), "w") as f:
        f.write(ROUTES)
    os.chmod(dyn, 0o755)
    results = {}
    try:
        docker("network", "create", NET)
        docker("run", "-d", "--name", "h2b-backend", "--network", NET, "homelab-edge/client:lab", "python3", "-c", BACKEND)
        backend = "http://%s:8080" % address("h2b-backend")
        info = machine()
        # the reference, uninstrumented: the same page straight to the backend, a connection per request
        direct = [asyncio.run(_burst(backend, PAGE, PAGE_MS, http2=False)) for dummy in range(RUNS)]
        valid = [p["seconds"] for p in direct if p["valid"]]
        results["direct"] = {"pages": direct,
                             "page_median_s": round(statistics.median(valid), 3) if len(valid) == RUNS else None}
        print("direct to the backend (HTTP/1.1, %d connections): page of %d x %d ms: median %s s"
              % (PAGE, PAGE, PAGE_MS, results["direct"]["page_median_s"]), flush=True)
        for streams in STREAMS:
            url = start_traefik(streams, dyn)
            pages = [burst(url, PAGE, PAGE_MS) for dummy in range(RUNS)]
            peak(backend)  # reset the peak to what is held now (nothing)
            hold = burst(url, HOLD, HOLD_MS)
            hold["backend_peak"] = peak(backend)
            valid = [p["seconds"] for p in pages if p["valid"]]
            results[str(streams)] = {
                "pages": pages, "hold": hold,
                "page_median_s": round(statistics.median(valid), 3) if len(valid) == RUNS else None,
                "in_flight_one_connection": hold["backend_peak"] if hold["valid"] else None}
            r = results[str(streams)]
            print("streams %3d: page of %d x %d ms: median %s s%s; one connection held %s of %d at once%s"
                  % (streams, PAGE, PAGE_MS, r["page_median_s"], "" if r["page_median_s"] else " (INVALID run)",
                     r["in_flight_one_connection"], HOLD, "" if hold["valid"] else " (INVALID)"), flush=True)
    finally:
        clean()
        for name in os.listdir(dyn):
            os.remove(os.path.join(dyn, name))
        os.rmdir(dyn)
    chosen = choose(results)
    rule = ("the smallest value whose median page time is within %.1f x Traefik's default (%d)"
            % (CHOICE_FACTOR, TRAEFIK_DEFAULT))
    print("chosen: %s (%s)" % (chosen, rule))
    if chosen:
        print("computed: behind 100 connections per IP, one client's bound = 100 x %d = %d requests "
              "(Traefik's default: 100 x %d = %d)" % (chosen, 100 * chosen, TRAEFIK_DEFAULT, 100 * TRAEFIK_DEFAULT))
    out = {"machine": info, "workload": {"page": PAGE, "page_ms": PAGE_MS, "runs": RUNS, "hold": HOLD,
                                         "hold_ms": HOLD_MS, "streams": list(STREAMS)},
           "results": results, "chosen": chosen, "rule": rule}
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    path = os.path.join(ROOT, "benchmarks", "results", "traefik_h2_streams-%s.json" % time.strftime("%Y%m%dT%H%M%S"))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("saved", os.path.relpath(path, ROOT))
    return 0 if chosen else 1


if __name__ == "__main__":
    sys.exit(main())
