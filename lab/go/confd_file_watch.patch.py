"""Replace confd v0.16.0's file-backend watchChanges with the fixed form.

Upstream's goroutine outlives the wait: once the watcher and the output
channel are closed it reads the closed Errors channel and sends on the closed
output channel -> "panic: send on closed channel" on the first values.yaml
event (seen in the lab). k3d's fork does not crash there. This keeps the
behaviour the fork documents (a fresh watcher per wait, return on the first
write/create/remove event) and lets the goroutine end with the wait.
"""
import os
import re
import sys

path = sys.argv[1]
src = open(path).read()
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "confd_file_watch.go.in")) as f:
    fixed = f.read().split("\n", 1)[1]
new, n = re.subn(r"func \(c \*Client\) watchChanges\(.*?\n}\n", fixed, src, count=1, flags=re.S)
if n != 1:
    sys.exit("watchChanges not found in %s" % path)
open(path, "w").write(new)
