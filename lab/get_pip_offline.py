"""Stand-in for the get-pip bootstrap script that ansible-test downloads from a
site this machine cannot reach. ansible-test runs it in a fresh venv with pip
install arguments (pip==X and friends); this installs CPython's bundled pip
with ensurepip, then lets that pip install the requested versions from the
package index. Installed by tests/lab/lab.sh into ~/.ansible/test/cache/.
"""
import ensurepip
import os
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
# ansible-test runs this with a trimmed environment: keep the machine's CA bundle
for bundle in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
    if bundle and os.path.exists(bundle):
        args = ["--cert", bundle] + args
        break
ensurepip.bootstrap()
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
