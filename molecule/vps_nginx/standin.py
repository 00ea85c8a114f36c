#!/usr/bin/env python3
"""Stand-ins on Molecule vps_nginx's NAS (run there with python3):

  standin.py udp-echo ADDR:PORT LOG
                                 QUIC's place on UDP ADDR:PORT: each datagram echoed back (from ADDR, the
                                 address nginx's connected UDP socket expects the answer from), a JSON line in LOG
                                 saying whom it came from and whether it starts with "PROXY" (nginx puts a
                                 PROXY header in front of the first datagram of a UDP session with proxy_protocol)
  standin.py picky PORT LOG      an HTTP server that takes a PROXY header only from the made-up client the
                                 module's probe sends (198.51.100.7) and a request without a header, and resets
                                 a connection whose header names any other client: a fault the tests inject, so
                                 that the check through nginx fails after the change (the module's rollback)
"""
import json
import socket
import struct
import sys
import threading


def log(path, entry):
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def udp_echo(where, path):
    address, port = where.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((address, int(port)))
    while True:
        data, peer = s.recvfrom(65535)
        log(path, {"from": peer[0], "proxy": data.startswith(b"PROXY"), "first": data[:64].decode("latin-1")})
        s.sendto(data, peer)


def picky_one(conn, peer, path):
    with conn:
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data and b"\x16\x03" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            return
        header = data.split(b"\r\n", 1)[0] if data.startswith(b"PROXY ") else b""
        ok = b"\x16\x03" not in data and (not header or header.startswith(b"PROXY TCP4 198.51.100.7 "))
        log(path, {"from": peer[0], "header": header.decode("latin-1"), "answered": ok})
        if ok:
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        else:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset


def picky(where, path):
    port = int(where)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    while True:
        conn, peer = s.accept()
        threading.Thread(target=picky_one, args=(conn, peer, path), daemon=True).start()


if __name__ == "__main__":
    {"udp-echo": udp_echo, "picky": picky}[sys.argv[1]](sys.argv[2], sys.argv[3])
