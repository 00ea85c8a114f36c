#!/usr/bin/env python
"""A slow but alive DNS server: answers every query with one A record after
a fixed delay (no kernel here has netem). Run inside the network namespace
of the lab's DNS server node (nsenter -n) on a port of its own; the
benchmark redirects the node's DNS ports to it with nftables for the step,
so the load balancer's upstream answers everything, late.

  slowdns.py --port PORT --delay SECONDS [--seconds LIMIT]

Exits on SIGTERM, or after LIMIT seconds (default 600): a bounded helper. Prints one JSON
line on exit: queries received and answered. Says "ready PORT" once it serves."""
import argparse
import asyncio
import json
import signal
import struct


def answer(query):
    """The reply to a DNS query packet: its ID and question, one A record."""
    if len(query) < 12:
        return None
    return (query[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0) + query[12:]
            + b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([10, 99, 0, 10]))


class Slow(asyncio.DatagramProtocol):
    def __init__(self, delay):
        self.delay, self.received, self.answered, self.transport = delay, 0, 0, None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.received += 1
        reply = answer(data)
        if reply is not None:
            asyncio.get_running_loop().call_later(self.delay, self.send, reply, addr)

    def send(self, reply, addr):
        self.transport.sendto(reply, addr)
        self.answered += 1


async def serve(port, delay, seconds):
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(lambda: Slow(delay), local_addr=("0.0.0.0", port))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready %d" % transport.get_extra_info("sockname")[1], flush=True)  # the port (0 asks for any)
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    finally:
        transport.close()
    return proto


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay", type=float, required=True)
    ap.add_argument("--seconds", type=float, default=600)
    a = ap.parse_args()
    proto = asyncio.run(serve(a.port, a.delay, a.seconds))
    print(json.dumps({"received": proto.received, "answered": proto.answered}), flush=True)


if __name__ == "__main__":
    main()
