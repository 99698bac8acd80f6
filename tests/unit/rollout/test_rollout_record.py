"""The rollout's memory lives on the workloads: pacing and counting from their restart record,
and what survives a deleted ConfigMap. Pure functions, simple dicts."""

from __future__ import annotations

import json
from typing import Any

import yaml

from linkerd_config.kube.client import APPLICATION_JSON, APPLY_PATCH, encode_body
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    apply_body,
    from_preserved,
    preserved_copy,
    restored,
    unmanaged_part,
)
from linkerd_config.linkerd.mesh import DesiredProxy
from linkerd_config.linkerd.spec.crd import Target

Obj = dict[str, Any]


def workload(annotations: dict[str, str] | None) -> Obj:
    return {"spec": {"template": {"metadata": {"annotations": annotations or {}}}}}


def test_the_restart_patch_records_hash_and_time_and_guards_with_the_version() -> None:
    patch = mesh.restart_patch("abc", "42", 1_700_000_000.25)
    assert patch["metadata"] == {"resourceVersion": "42"}
    annotations = patch["spec"]["template"]["metadata"]["annotations"]
    assert annotations[mesh.RESTARTED_FOR_ANNOTATION] == "abc"
    assert annotations[mesh.RESTARTED_AT_ANNOTATION] == "2023-11-14T22:13:20.250000Z"
    assert mesh.restart_times([workload(annotations)], "abc") == [1_700_000_000.25]


def test_only_this_configurations_records_count() -> None:
    stamp = mesh.RESTARTED_AT_ANNOTATION
    objs = [
        workload({mesh.RESTARTED_FOR_ANNOTATION: "abc", stamp: "2026-01-01T00:00:00.5Z"}),
        workload({mesh.RESTARTED_FOR_ANNOTATION: "old", stamp: "2026-01-01T00:00:09Z"}),
        workload({mesh.RESTARTED_FOR_ANNOTATION: "abc"}),  # no time: counted, at 0
        workload(None),
    ]
    assert sorted(mesh.restart_times(objs, "abc")) == [0.0, 1767225600.5]
    assert mesh.already_restarted(objs[0], "abc")
    assert not mesh.already_restarted(objs[1], "abc")


def test_a_pass_waits_for_the_interval_after_the_last_restart() -> None:
    assert mesh.pace(None, now=100.0, batch=10, interval=5.0) == mesh.Pace(10, 0.0)
    assert mesh.pace(98.0, now=100.0, batch=10, interval=5.0) == mesh.Pace(0, 3.0)
    assert mesh.pace(95.0, now=100.0, batch=10, interval=5.0) == mesh.Pace(10, 0.0)


def test_what_we_did_not_write_round_trips_through_the_preserved_copy() -> None:
    target = Target("linkerd", "linkerd-config")
    cm = {
        "metadata": {
            "labels": {
                "linkerd.io/control-plane-ns": "linkerd",
                "app.kubernetes.io/managed-by": "linkerd-config",
            },
            "annotations": {
                "linkerd.io/created-by": "linkerd/cli edge-19.12.1",
                "config.linkerd.io/config-hash": "abc",
                "config.linkerd.io/linkerdconfig": "x",
            },
        },
        "data": {"global": "{}", "proxy": "{}", "install": '{"cliVersion":"edge-19.12.1"}'},
    }
    part = unmanaged_part(cm, ["global", "proxy"])
    assert part.data == {"install": '{"cliVersion":"edge-19.12.1"}'}
    assert part.labels == {"linkerd.io/control-plane-ns": "linkerd"}
    assert part.annotations == {"linkerd.io/created-by": "linkerd/cli edge-19.12.1"}
    copy_ = preserved_copy(target, part, "x")
    assert copy_["metadata"]["name"] == "linkerd-config-preserved"
    assert from_preserved(copy_) == part
    assert from_preserved(None) is None
    desired = Desired(
        target, {"global": "{g}", "proxy": "{p}"}, "h1", "Spec", DesiredProxy("edge-19.12.3")
    )
    back = restored(desired, part, "x")
    assert back["data"] == {**part.data, "global": "{g}", "proxy": "{p}"}  # whole, in one step
    assert back["metadata"]["annotations"] == {
        **part.annotations,
        "config.linkerd.io/linkerdconfig": "x",
        "config.linkerd.io/config-hash": "h1",
    }
    assert back["metadata"]["labels"] == part.labels  # the installer's; none of ours


def test_an_installers_managed_by_label_is_kept_and_ours_is_never_set() -> None:
    """Issue 61, finding 9: a Helm install's ``app.kubernetes.io/managed-by: Helm`` stays
    (Helm checks it before an upgrade); the label as an earlier release of ours set it is not
    kept as someone else's."""
    helm = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"}}, "data": {}}
    assert unmanaged_part(helm, []).labels == {"app.kubernetes.io/managed-by": "Helm"}
    ours = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "linkerd-config"}}}
    assert unmanaged_part(ours, []).labels == {}
    desired = Desired(
        Target("linkerd", "linkerd-config"), {"values": "x"}, "h1", "Spec", DesiredProxy("v")
    )
    assert apply_body(desired, "x")["metadata"].get("labels", {}) == {}


def test_an_apply_body_carries_any_string_a_yaml_parser_would_refuse_or_fold() -> None:
    hostile = "del:\x7f c1:\x85\x9f ls:\u2028 nbsp:\xa0 emoji:\U0001f680 tab:\t"
    body = {"data": {"v": hostile}}
    encoded = encode_body(body, APPLY_PATCH)
    for raw in ("\x7f", "\x85", "\x9f", "\u2028"):
        assert raw.encode() not in encoded  # escaped, not raw
    assert yaml.safe_load(encoded) == body  # and any YAML reader gets the string back
    assert json.loads(encoded) == body
    assert json.loads(encode_body(body, APPLICATION_JSON)) == body


def test_the_injector_is_asked_about_the_pod_the_owner_would_create() -> None:
    template = {
        "metadata": {"labels": {"app": "web"}, "annotations": {"linkerd.io/inject": "enabled"}},
        "spec": {"containers": [{"name": "web", "image": "web:1"}]},
    }
    deployment = {"metadata": {"name": "web"}, "spec": {"template": template}}
    pod = mesh.candidate_pod(mesh.Workload("Deployment", "emojivoto", "web"), deployment)
    assert pod["metadata"]["namespace"] == "emojivoto"
    assert pod["metadata"]["name"] == "web-linkerd-config-dry-run"
    assert pod["metadata"]["annotations"] == {"linkerd.io/inject": "enabled"}
    assert pod["spec"] == template["spec"]

    bare = {
        "metadata": {
            "name": "solo",
            "labels": {"app": "solo"},
            "annotations": {mesh.PROXY_VERSION_ANNOTATION: "edge-19.12.1", "keep": "me"},
        },
        "spec": {
            "nodeName": "kwok-node-0",
            "initContainers": [{"name": "linkerd-init", "image": "proxy-init:v1"}],
            "containers": [
                {"name": "solo", "image": "solo:1"},
                {"name": mesh.PROXY_CONTAINER, "image": "proxy:edge-19.12.1"},
            ],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "linkerd-identity-end-entity", "emptyDir": {"medium": "Memory"}},
                {"name": "linkerd-proxy-init-xtables-lock", "emptyDir": {}},
            ],
        },
    }
    pod = mesh.candidate_pod(mesh.Workload("Pod", "default", "solo"), bare)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["solo"]  # the injector adds it
    # Issue 58 (helper-2's finding on the real injector): a kept linkerd-init made it skip
    # the pod as already injected (HasExistingSidecars), and the rollout waited for ever.
    assert pod["spec"]["initContainers"] == []
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data"]
    assert "nodeName" not in pod["spec"]
    assert pod["metadata"]["annotations"] == {"keep": "me"}
    assert bare["spec"]["nodeName"] == "kwok-node-0"  # the cached source is not modified
