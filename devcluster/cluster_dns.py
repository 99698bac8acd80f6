"""The real node's cluster DNS: a small responder for ``cluster.local``, read from the API.

Linkerd's proxies find the control plane by name (``linkerd-identity-headless.linkerd.svc.
cluster.local.``, ``linkerd-dst-headless...``, ``linkerd-policy...``) and a workload its peers
by Service name, so pods need what CoreDNS answers in a cluster. Only that is answered here,
in the same way: ``<service>.<namespace>.svc.cluster.local`` has the Service's ClusterIP, or
for a headless Service the addresses of its EndpointSlices' ready endpoints (each lookup asks
the API server, so nothing is stale); other names under ``cluster.local`` do not exist
(NXDOMAIN); a name that exists has no record of another type than A (an empty answer, as
for AAAA here). Names outside ``cluster.local`` are forwarded to the host's resolver.

The kubelet points pods at it (``clusterDNS``); it listens on the node's address, port 53,
UDP, as a component of the control plane (``python -m devcluster.cluster_dns``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import socketserver
import ssl
import struct
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOMAIN = "cluster.local"
TTL = 5
TYPE_A = 1
CLASS_IN = 1
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3
Lookup = Callable[[str, str], list[str] | None]
"""(service, namespace) -> its addresses, or None when there is no such Service."""


@dataclass(frozen=True)
class Question:
    name: str
    """Lower case, without the final dot."""
    qtype: int
    qclass: int
    end: int
    """Where the question section ends in the query."""


def parse_question(query: bytes) -> Question:
    """The first question of a DNS query (RFC 1035 4.1.2); ValueError if malformed."""
    if len(query) < 12 or struct.unpack("!H", query[4:6])[0] < 1:
        raise ValueError("no question")
    labels, at = [], 12
    while True:
        if at >= len(query):
            raise ValueError("truncated name")
        length = query[at]
        at += 1
        if length == 0:
            break
        if length > 63 or at + length > len(query):
            raise ValueError("bad label")
        labels.append(query[at : at + length].decode("ascii", "replace").lower())
        at += length
    if at + 4 > len(query):
        raise ValueError("truncated question")
    qtype, qclass = struct.unpack("!HH", query[at : at + 4])
    return Question(".".join(labels), qtype, qclass, at + 4)


def answer(query: bytes, lookup: Lookup) -> bytes | None:
    """The reply to a query for a name under ``cluster.local``; None for any other name
    (to be forwarded)."""
    question = parse_question(query)
    if question.name != DOMAIN and not question.name.endswith("." + DOMAIN):
        return None
    labels = question.name.removesuffix(DOMAIN).rstrip(".").split(".")
    addresses: list[str] | None = None
    rcode = NXDOMAIN
    if len(labels) == 3 and labels[2] == "svc":
        try:
            addresses = lookup(labels[0], labels[1])
        except (OSError, ValueError):
            rcode = SERVFAIL
        else:
            rcode = NOERROR if addresses is not None else NXDOMAIN
    records = (
        addresses if question.qtype == TYPE_A and question.qclass == CLASS_IN and addresses else []
    )
    (ident,) = struct.unpack("!H", query[:2])
    rd = query[2] & 0x01
    flags = 0x8000 | 0x0400 | (rd << 8) | 0x0080 | rcode  # response, authoritative, RA
    header = struct.pack("!HHHHHH", ident, flags, 1, len(records), 0, 0)
    body = query[12 : question.end]
    for address in records:
        body += struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL, 4)
        body += ipaddress.IPv4Address(address).packed
    return header + body


def services_lookup(server: str, context: ssl.SSLContext) -> Lookup:
    """Addresses from the API server: the ClusterIP, or a headless Service's ready endpoints."""

    def get(path: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(server + path, context=context, timeout=3) as r:
                body: dict[str, Any] = json.loads(r.read())
                return body
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def lookup(service: str, namespace: str) -> list[str] | None:
        svc = get(f"/api/v1/namespaces/{namespace}/services/{service}")
        if svc is None:
            return None
        spec = svc.get("spec")
        cluster_ip = spec.get("clusterIP") if isinstance(spec, dict) else None
        if cluster_ip and cluster_ip != "None":
            return [str(cluster_ip)]
        slices = get(
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
            f"?labelSelector=kubernetes.io%2Fservice-name%3D{service}"
        )
        found: list[str] = []
        for item in (slices or {}).get("items") or []:
            if item.get("addressType") != "IPv4":
                continue
            for endpoint in item.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready") is not False:
                    found += [a for a in endpoint.get("addresses", []) if a not in found]
        return found

    return lookup


def forward(query: bytes, upstream: tuple[str, int], timeout: float = 3.0) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(query, upstream)
        try:
            return sock.recv(65535)
        except TimeoutError:
            return None


def query(name: str, qtype: int = TYPE_A, ident: int = 0x1D5) -> bytes:
    """A recursive query for one name."""
    qname = b"".join(bytes([len(x)]) + x.encode() for x in name.rstrip(".").split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1)


def addresses(reply: bytes) -> tuple[int, list[str]]:
    """A reply's response code and the IPv4 addresses of its A records (as ``answer`` writes
    them: the question's name compressed)."""
    rcode = reply[3] & 0x0F
    (count,) = struct.unpack("!H", reply[6:8])
    at = parse_question(reply).end
    found = []
    for _ in range(count):
        rtype, _cls, _ttl, length = struct.unpack("!HHIH", reply[at + 2 : at + 12])
        if rtype == TYPE_A and length == 4:
            found.append(str(ipaddress.IPv4Address(reply[at + 12 : at + 16])))
        at += 12 + length
    return rcode, found


def resolve(server: str, name: str, timeout: float = 2.0) -> list[str]:
    """The A records ``server`` gives for ``name`` (empty when none or no answer)."""
    reply = forward(query(name), (server, 53), timeout)
    return addresses(reply)[1] if reply else []


def host_nameserver(resolv_conf: Path = Path("/etc/resolv.conf")) -> str | None:
    """The host's first IPv4 nameserver (where names outside the cluster are forwarded)."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                if ipaddress.ip_address(parts[1]).version == 4:
                    return parts[1]
            except ValueError:
                continue
    return None


def serve(listen: tuple[str, int], lookup: Lookup, upstream: tuple[str, int] | None) -> None:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            query, sock = self.request
            try:
                reply = answer(query, lookup)
            except ValueError:
                return  # not a query we can read: no answer, as a resolver would drop it
            if reply is None and upstream is not None:
                reply = forward(query, upstream)
            if reply is not None:
                sock.sendto(reply, self.client_address)

    socketserver.ThreadingUDPServer.allow_reuse_address = True
    with socketserver.ThreadingUDPServer(listen, Handler) as server:
        server.daemon_threads = True
        print(f"cluster DNS for {DOMAIN} on {listen[0]}:{listen[1]}", flush=True)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.cluster_dns")
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--ca", required=True, type=Path)
    parser.add_argument("--cert", required=True, type=Path)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--listen", required=True, help="address:port")
    args = parser.parse_args(argv)
    context = ssl.create_default_context(cafile=str(args.ca))
    context.load_cert_chain(args.cert, args.key)
    host, _, port = args.listen.rpartition(":")
    upstream = host_nameserver()
    serve(
        (host, int(port)),
        services_lookup(args.server, context),
        (upstream, 53) if upstream and upstream != host else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
