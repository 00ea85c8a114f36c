"""Read an nginx config independently of the collection's own parser
(crossplane, nginx's own config parser for Python), so that a bug in the
module's reading of nginx.conf cannot blind the tests too."""
import os
import tempfile

import crossplane


def parse(text):
    """The directives of one nginx config file, as crossplane parses it."""
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(text)
    try:
        payload = crossplane.parse(f.name, single=True, check_ctx=False, check_args=False, comments=False)
    finally:
        os.unlink(f.name)
    if payload["errors"]:
        raise ValueError(payload["errors"])
    return payload["config"][0]["parsed"]


def _find(directives, name):
    return [d for d in directives if d["directive"] == name]


def _arg(block, name):
    found = _find(block, name)
    return " ".join(found[0]["args"]) if found else None


def summary(text):
    """{worker_connections, worker_rlimit_nofile, udp: {port: {...}}, tcp: {port: {...}}}."""
    conf = parse(text)
    events = _find(conf, "events")[0]["block"]
    out = {"worker_connections": int(_arg(events, "worker_connections")),
           "worker_rlimit_nofile": _arg(conf, "worker_rlimit_nofile"), "udp": {}, "tcp": {}}
    if out["worker_rlimit_nofile"] is not None:
        out["worker_rlimit_nofile"] = int(out["worker_rlimit_nofile"])
    for stream in _find(conf, "stream"):
        for server in _find(stream["block"], "server"):
            listen = _find(server["block"], "listen")[0]["args"]
            limit = _find(server["block"], "limit_conn")
            entry = {"proxy_responses": _arg(server["block"], "proxy_responses"),
                     "proxy_timeout": _arg(server["block"], "proxy_timeout"),
                     "proxy_protocol": _arg(server["block"], "proxy_protocol"),
                     "limit_conn": int(limit[0]["args"][1]) if limit else None}
            out["udp" if "udp" in listen[1:] else "tcp"][listen[0]] = entry
    return out


def worker_open_file_limits(container):
    """Soft open-file limits of nginx's current workers, read from /proc."""
    # A worker can exit between pgrep and the read (nginx reloads while k3d
    # recreates the container): its files are gone, so errors are dropped
    # and only numbers are kept.
    script = ("for p in $(pgrep -f 'nginx: worker process'); do grep -q 'shutting down' /proc/$p/cmdline "
              "2>/dev/null && continue; grep 'Max open files' /proc/$p/limits 2>/dev/null | awk '{print $4}'; done")
    rc, out = container.exec_run(["sh", "-c", script], stderr=False)
    return sorted(set(int(x) for x in out.decode().split() if x.isdigit()))
