"""``kube.tls.import_aiohttp_without_system_cas``: aiohttp imported without loading the system
CA bundle into the two default contexts it makes at import (which nothing here uses), the
environment left as it was, and a context asked for the system roots afterwards still gets
them. Each case runs in a fresh interpreter: aiohttp is imported once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, ssl, sys
from linkerd_config.kube.tls import import_aiohttp_without_system_cas
import_aiohttp_without_system_cas()
import_aiohttp_without_system_cas()  # a second call does nothing
import aiohttp.connector as connector
print(json.dumps({
    "aiohttp_verified": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
    "aiohttp_unverified": connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509_ca"],
    "default_after": ssl.create_default_context().cert_store_stats()["x509_ca"],
    "env": os.environ.get("SSL_CERT_FILE"),
}))
"""


def probe(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def system_bundle_size() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import ssl; print(ssl.create_default_context()"
         ".cert_store_stats()['x509_ca'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(done.stdout)


@pytest.mark.parametrize("bundle_env", ["unset", "set"])
def test_aiohttp_defaults_hold_no_cas_and_the_system_roots_stay_usable(bundle_env: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    expected_env = None
    if bundle_env == "set":
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        if not os.path.isfile(bundle):
            pytest.skip(f"no {bundle} on this machine")
        env["SSL_CERT_FILE"] = expected_env = bundle
    roots = system_bundle_size()
    answer = probe(env)
    assert answer["aiohttp_verified"] == 0
    assert answer["aiohttp_unverified"] == 0
    assert answer["env"] == expected_env
    assert answer["default_after"] == roots
