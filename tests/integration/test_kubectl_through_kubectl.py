"""``kubectl linkerd-config`` through the real kubectl (the pinned 1.34.4 build): kubectl
finds the plugin on PATH as users install it (the package's ``kubectl-linkerd_config`` entry
point), passes it ``-n``, ``--context`` and ``-o``, and asks ``kubectl_complete-linkerd_config``
for completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from tests.support import scenario
from tests.support.samples import SAMPLES, load

SAMPLE = SAMPLES / "edge_19.12.3.yaml"
V1ALPHA2_SAMPLE = (
    Path(__file__).resolve().parents[2] / "manifests/samples/v1alpha2/edge_19.12.3.yaml"
)
PLUGINS = Path(sys.executable).parent  # where the package's entry points are installed


def kubectl(
    cp: LocalControlPlane, *args: str, kubeconfig: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{PLUGINS}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kubeconfig or str(cp.kubeconfig),
    }
    return subprocess.run(
        [str(cp.binary("kubectl")), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


async def test_plan_status_and_completion_through_kubectl(
    private_control_plane: LocalControlPlane,
) -> None:
    cp = private_control_plane
    listed = kubectl(cp, "plugin", "list")
    assert f"{PLUGINS}/kubectl-linkerd_config" in listed.stdout, listed

    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as kube:
        await scenario.install_crd_as_manifests_have_it(kube)
        await scenario.install_linkerd_edge_19_12_1(kube)

        # plan: kubectl's -n and -o yaml; Terraform's exit code 2 for changes.
        planned = kubectl(cp, "linkerd-config", "plan", "-f", str(SAMPLE), "-n", "linkerd",
                          "-o", "yaml")  # fmt: skip
        assert planned.returncode == 2, planned
        answer = yaml.safe_load(planned.stdout)
        assert answer["linkerdConfig"] == load(SAMPLE)["metadata"]["name"] and answer["valid"]
        changed = {c["path"] for key in answer["configMapChanges"] for c in key["changes"]}
        assert "proxyVersion" in changed, answer["configMapChanges"]
        # Another namespace holds no Linkerd: the plan says so, exit 1.
        elsewhere = kubectl(cp, "linkerd-config", "plan", "-f", str(SAMPLE), "--namespace=mesh")
        assert elsewhere.returncode == 1, elsewhere

        # status: the stored (v1alpha2) object, as JSON; not Ready (no controller): exit 2.
        v1alpha2 = load(V1ALPHA2_SAMPLE)
        await kube.request("POST", LINKERD_CONFIGS.path(), body=v1alpha2, fenced=False)
        status = kubectl(cp, "linkerd-config", "status", "--context", "local", "-o", "json")
        assert status.returncode == 2, status
        (report,) = json.loads(status.stdout)
        assert report["linkerdConfig"] == v1alpha2["metadata"]["name"], report

        # KUBECONFIG as a list, as kubectl takes it (a file that does not exist skipped).
        listed = f"{cp.kubeconfig.parent / 'absent'}{os.pathsep}{cp.kubeconfig}"
        merged = kubectl(cp, "linkerd-config", "status", "-o", "json", kubeconfig=listed)
        assert merged.returncode == 2, merged
        assert [r["linkerdConfig"] for r in json.loads(merged.stdout)] == [report["linkerdConfig"]]

        missing = kubectl(cp, "linkerd-config", "status", "--context", "no-such-context")
        assert missing.returncode == 1
        assert "no-such-context" in missing.stderr, missing

    # completion, as the shell asks kubectl and kubectl asks the plugin.
    completed = kubectl(cp, "__complete", "linkerd-config", "st")
    assert completed.stdout.splitlines()[0] == "status", completed
    flags = kubectl(cp, "__complete", "linkerd-config", "status", "-o", "")
    assert flags.stdout.splitlines()[:3] == ["text", "json", "yaml"], flags
