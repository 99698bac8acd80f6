"""``linkerd-config check``'s decisions from tables (``extension.checks`` over what was read),
and its output in Linkerd's ``CheckOutput`` shape; ``_extension-metadata`` answers without a
cluster. Linkerd's own CLI reads the output in ``tests/integration/test_gitops_readers.py``."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime
import io
import json
import subprocess
import sys

import pytest

from linkerd_config import extension
from linkerd_config.cli import build_parser
from linkerd_config.extension import Check, CheckedCluster, checks
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.status.plan import ConfigStatus, Problem, WorkloadLine
from linkerd_config.settings import parse
from tests.support.anchors import trust_anchor

NOW = datetime.datetime.now(datetime.UTC)
"""The checks' clock: now, because the certificates below are made now (valid from 5 min ago)."""


def stamp(seconds_ago: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


CA = base64.b64encode(trust_anchor("webhook.ca").encode()).decode()
CRD: Json = {
    "spec": {
        "versions": [
            {"name": "v1alpha1", "served": True, "storage": False},
            {"name": "v1alpha2", "served": True, "storage": True},
        ],
        "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"caBundle": CA}}},
    }
}
LEASE: Json = {
    "spec": {
        "holderIdentity": "linkerd-config-7d9f-x",
        "renewTime": stamp(2),
        "leaseDurationSeconds": 15,
    }
}
POD: Json = {"metadata": {"name": "linkerd-config-7d9f-x"},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
HOOKS: list[Json] = [{"webhooks": [{"name": "m", "clientConfig": {"caBundle": CA}}]}]
READY: Json = {"type": "Ready", "status": "True", "reason": "Ready", "message": "ok"}
HALTED_READY: Json = {"type": "Ready", "status": "False", "reason": "RolloutHalted",
                      "message": "halted"}  # fmt: skip
STALLED: Json = {"type": "Stalled", "status": "True", "reason": "RolloutHalted", "message": "h"}


def seen(**changes: object) -> CheckedCluster:
    base = CheckedCluster(NOW, CRD, LEASE, [POD], HOOKS, {"lc": ""}, [healthy()])
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def healthy(**changes: object) -> ConfigStatus:
    return ConfigStatus(
        **{"name": "lc", "proxy_version": "edge-26.8.5", "conditions": (READY,), **changes}  # type: ignore[arg-type]
    )


def results(found: list[Check]) -> dict[str, str]:
    return {c.description: c.result for c in found}


def test_a_healthy_controller_passes_every_check() -> None:
    found = checks(seen())
    assert set(results(found).values()) == {"success"}, [c for c in found if c.error]
    assert len(found) == 10  # 5 of the controller, 5 of the LinkerdConfig


CASES: list[tuple[str, dict[str, object], str, str]] = [
    ("no CRD", {"crd": None}, "the LinkerdConfig CRD serves v1alpha1, v1alpha2", "error"),
    ("v1alpha1 not served",
     {"crd": {"spec": {"versions": [{"name": "v1alpha2", "served": True, "storage": True}]}}},
     "the LinkerdConfig CRD serves v1alpha1, v1alpha2", "error"),
    ("no leader ever", {"lease": None}, "the controller has a leader", "error"),
    ("the leader gone",
     {"lease": {"spec": {**LEASE["spec"], "renewTime": stamp(120)}}},
     "the controller has a leader", "error"),
    ("run locally: no pod", {"pods": []}, "the controller's pods are ready", "warning"),
    ("a pod not ready", {"pods": [{"metadata": {"name": "p"}, "status": {}}]},
     "the controller's pods are ready", "warning"),
    ("webhooks off", {"webhooks": [], "dry_run": {}},
     "the webhooks are registered with a valid caBundle", "warning"),
    ("an expired or foreign caBundle",
     {"webhooks": [{"webhooks": [{"name": "m", "clientConfig": {"caBundle": "bm9wZQ=="}}]}]},
     "the webhooks are registered with a valid caBundle", "error"),
    ("the webhooks not answering", {"dry_run": {"lc": "500 failed calling webhook"}},
     "the webhooks answer the API server (a dry run through them)", "error"),
    ("a halted rollout",
     {"reports": [healthy(halted=("deployment/a/b: refused",),
                          conditions=(HALTED_READY, STALLED))]},
     "LinkerdConfig lc: no rollout halted or rolled back", "error"),
    ("stale pods while rolling",
     {"reports": [healthy(stale=(WorkloadLine(Workload("Deployment", "a", "b"), "stale",
                                              {"proxy": 2}),))]},
     "LinkerdConfig lc: the data plane runs proxy edge-26.8.5 and its trust bundle", "warning"),
    ("not Ready while rolling",
     {"reports": [healthy(conditions=({**READY, "status": "Unknown", "reason": "RollingOut"},))]},
     "LinkerdConfig lc: Ready", "warning"),
    ("invalid", {"reports": [healthy(problem=Problem("InvalidConfig", "spec.x: bad"))]},
     "LinkerdConfig lc: its ConfigMaps in sync", "error"),
    ("a ConfigMap missing", {"reports": [healthy(missing=("linkerd-config",),
                                                 drifted=("linkerd-config",))]},
     "LinkerdConfig lc: its ConfigMaps in sync", "error"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "description", "result"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_each_trouble_is_its_check_s_error_or_warning(
    changes: dict[str, object], description: str, result: str
) -> None:
    found = checks(seen(**changes))
    assert results(found)[description] == result, found
    failing = [c for c in found if c.error]
    assert all(c.hint for c in failing)  # each with a hint


def test_the_json_is_linkerd_s_check_output_and_an_error_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    halted = seen(reports=[healthy(halted=("deployment/a/b: refused",))])
    monkeypatch.setattr(extension, "gather", lambda *_: _done(halted))
    args = argparse.Namespace(output="json", as_user=None, as_group=["[]"])  # as linkerd passes
    code = extension.check_command(parse(["--kubeconfig", "/dev/null"], env={}), args)
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["success"] is False
    (category,) = document["categories"]
    assert category["categoryName"] == "linkerd-config-controller"  # not Linkerd's own
    failed = [c["description"] for c in category["checks"] if c["result"] == "error"]
    assert failed == ["LinkerdConfig lc: no rollout halted or rolled back"]
    for check in category["checks"]:
        assert set(check) <= {"description", "hint", "error", "result"}
        assert check["result"] in ("success", "warning", "error")
        assert ("error" in check) == (check["result"] != "success")


async def _done(value: CheckedCluster) -> CheckedCluster:
    return value


def test_extension_metadata_answers_at_once_with_no_cluster() -> None:
    out = io.StringIO()
    assert extension.metadata_command(out) == 0
    assert json.loads(out.getvalue()) == {"name": "linkerd-config", "checks": "always"}
    done = subprocess.run(
        [sys.executable, "-m", "linkerd_config", "_extension-metadata"],
        env={"KUBECONFIG": "/nonexistent", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "linkerd-config", "checks": "always"}


def test_the_flags_linkerd_check_passes_are_taken() -> None:
    """As edge-26.8.3's ``getExtensionCheckFlags`` passes them: every flag with a value
    (``--as-group=[]``, pflag's empty list, included) and ``--output=json``."""
    args = build_parser().parse_args(
        ["check", "--kubeconfig=/k", "--linkerd-namespace=linkerd", "--verbose=false",
         "--proxy=false", "--wait=5m0s", "--as-group=[]", "--output=json"]
    )  # fmt: skip
    assert (args.output, args.kubeconfig, args.linkerd_namespace) == ("json", "/k", "linkerd")
    assert args.as_group == ["[]"] and args.as_user is None  # no impersonation asked
