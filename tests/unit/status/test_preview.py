"""``plan`` and ``status`` decisions over plain cluster data (no API server): the edition
of the ConfigMap, the verdict on each pod, the passes of a rollout, and the text people read."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import io
import json
import time
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from linkerd_config.inspection import CommandError, read_linkerdconfig, render_plan, render_status
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import apply_body, current_data, desired_config
from linkerd_config.linkerd.formats.config_diff import ABSENT, Change, certificates, diff, key_diff
from linkerd_config.linkerd.spec.conversion import to_hub
from linkerd_config.linkerd.spec.crd import READY, target_of
from linkerd_config.linkerd.status.plan import (
    RESTARTING,
    ClusterView,
    plan,
    status,
)
from tests.support.preview_views import APPS, DEFAULTS, NEW, OLD, pod, view
from tests.support.samples import SECOND_TRUST_ANCHOR, install_configmap, modern_install, sample

Json = dict[str, Any]


def applied(config: Json, configmap: Json) -> Json:
    """``configmap`` as the controller leaves it once ``config`` is reconciled."""
    target = target_of(config)
    desired = desired_config(config, current_data({target.name: configmap}, target))
    ours = apply_body(desired, config["metadata"]["name"])
    done = copy.deepcopy(configmap)
    done["data"].update(ours["data"])
    done["metadata"].setdefault("annotations", {}).update(ours["metadata"]["annotations"])
    return done


# -- the diff --------------------------------------------------------------------------------


def test_a_diff_lists_leaves_by_path_and_walks_added_mappings() -> None:
    before = {"a": {"b": 1, "c": [1, 2]}, "gone": True}
    after = {"a": {"b": 2, "c": [1, 2], "d": {"e": "x"}}}
    assert diff(before, after) == [
        Change("a.b", 1, 2),
        Change("a.d.e", ABSENT, "x"),
        Change("gone", True, ABSENT),
    ]
    assert [c.op for c in diff(before, after)] == ["changed", "added", "removed"]


def test_a_key_rewritten_with_the_same_content_is_one_whole_key_change() -> None:
    assert key_diff('{"a":1,"b":2}', '{"b":2,"a":1}') == [
        Change("", "13 bytes", "13 bytes, the same content")
    ]
    assert key_diff("same", "same") == []
    assert key_diff(None, "a: 1\n") == [Change("a", ABSENT, 1)]  # YAML values parsed


def test_a_certificate_bundle_reads_as_its_certificates() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "root.linkerd.cluster.local")])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(Encoding.PEM).decode()
    (described,) = certificates(pem)
    assert described.startswith("CN=root.linkerd.cluster.local (expires 2027-01-01T00:00:00Z")
    (change,) = key_diff('{"anchor": "old"}', json.dumps({"anchor": pem}))
    assert change.path == "anchor" and change.after == [described]


# -- verdicts --------------------------------------------------------------------------------


def test_every_candidate_pod_gets_one_verdict_with_why() -> None:
    desired = mesh.DesiredProxy(NEW, excluded_namespaces=frozenset({"kube-system"}))
    disabled = {"metadata": {"labels": {mesh.WEBHOOKS_LABEL: "disabled"}}}
    pinned_ns = {"metadata": {"annotations": {mesh.PIN_ANNOTATION: OLD}}}
    cases = {
        "stale": (pod("a", "p"), None),
        "up-to-date": (pod("a", "p", NEW), None),
        "pinned": (pod("a", "p", **{mesh.PIN_ANNOTATION: OLD}), None),
        "pinned-ns": (pod("a", "p"), pinned_ns),
        "disabled": (pod("a", "p"), disabled),
        "never-injected": (pod("kube-system", "p"), None),
    }
    verdicts = {k: desired.verdict(p, ns) for k, (p, ns) in cases.items()}
    assert {k: v.state for k, v in verdicts.items() if v} == {
        "stale": "stale",
        "up-to-date": "up-to-date",
        "pinned": "pinned",
        "pinned-ns": "pinned",
        "disabled": "excluded",
        "never-injected": "excluded",
    }
    assert verdicts["stale"].reason == f"proxy version {OLD} → {NEW}"  # type: ignore[union-attr]
    assert verdicts["pinned-ns"].reason.endswith("on its namespace")  # type: ignore[union-attr]
    assert "kube-system" in verdicts["never-injected"].reason  # type: ignore[union-attr]
    not_running = pod("a", "p")
    not_running["status"] = {"phase": "Pending"}
    assert desired.verdict(not_running, None) is None


def test_a_pinned_pod_is_still_stale_when_its_trust_root_changed() -> None:
    desired = mesh.DesiredProxy(NEW, trust_root_sha256="new")
    p = pod("a", "p", **{mesh.PIN_ANNOTATION: OLD, mesh.TRUST_ROOT_ANNOTATION: "old"})
    verdict = desired.verdict(p, None)
    assert verdict == mesh.PodState("stale", "trust root changed")


# -- plan ------------------------------------------------------------------------------------


def test_plan_shows_the_parsed_change_and_the_restarts_by_pass() -> None:
    config = sample("edge_19.12.3.yaml")
    result = plan(config, view(deployments=APPS), DEFAULTS)
    assert result.problem is None and result.changes
    (proxy,) = [k for k in result.keys if k.key == "proxy"]
    assert Change("proxyVersion", OLD, NEW) in proxy.changes
    assert [(str(w.workload), w.batch) for w in result.restarts] == [
        ("deployment/emojivoto/emoji", 1),
        ("deployment/emojivoto/voting", 1),
        ("deployment/emojivoto/web", 2),
    ]
    assert result.restarts[0].reasons == {f"proxy version {OLD} → {NEW}": 2}
    text = render_plan(result)
    assert f'~ proxyVersion: "{OLD}" → "{NEW}"' in text
    assert "in 2 pass(es) of at most 2, 5s apart" in text
    assert "pass 2:\n    deployment/emojivoto/web (2 pod(s)): proxy version" in text
    assert "3 workload(s) to restart" in text


def test_the_spec_overrides_the_batch_and_a_paused_plan_says_held() -> None:
    config = sample("edge_19.12.3.yaml")
    config["spec"]["rollout"] = {"maxRestartsPerPass": 5, "restartInterval": "1m", "paused": True}
    result = plan(config, view(deployments=APPS), DEFAULTS)
    assert {w.batch for w in result.restarts} == {1}
    assert (result.batch_size, result.interval, result.paused) == (5, 60.0, True)
    assert "held while spec.rollout.paused is true" in render_plan(result)
    done = applied(config, install_configmap())
    created = {"creationTimestamp": "2026-01-01T00:00:00Z"}
    stored = {**config, "metadata": {**config["metadata"], **created}}
    held = plan(config, view(configmap=done, configs=[stored], deployments=APPS), DEFAULTS)
    assert held.restarts and not held.changes  # applying it restarts nothing while paused
    assert "No changes while paused: the ConfigMaps match; 3 workload(s) to restart once" in (
        render_plan(held)
    )


def test_a_plan_already_applied_changes_nothing() -> None:
    config = sample("edge_19.12.3.yaml")
    done = applied(config, install_configmap())
    stored = {
        **config,
        "metadata": {**config["metadata"], "creationTimestamp": "2026-01-01T00:00:00Z"},
    }
    result = plan(config, view(configmap=done, configs=[stored], deployments={
        ("emojivoto", "web"): (2, NEW)}), DEFAULTS)  # fmt: skip
    assert result.problem is None
    assert not result.changes, (result.keys, result.metadata, result.restarts)
    assert [(str(w.workload), w.state) for w in result.kept] == [
        ("deployment/emojivoto/web", "up-to-date")
    ]
    assert "No changes" in render_plan(result)


def test_workloads_already_restarted_for_the_configuration_are_rolling_not_planned() -> None:
    config = sample("edge_19.12.3.yaml")
    first = plan(config, view(deployments=APPS), DEFAULTS)
    restarted = {
        "emojivoto/web": {
            "spec": {"template": {"metadata": {"annotations": {
                mesh.RESTARTED_FOR_ANNOTATION: first.config_hash}}}}}
    }  # fmt: skip
    result = plan(config, view(deployments=APPS, records=restarted), DEFAULTS)
    assert [str(w.workload) for w in result.restarts] == [
        "deployment/emojivoto/emoji",
        "deployment/emojivoto/voting",
    ]
    assert [(str(w.workload), w.state) for w in result.kept] == [
        ("deployment/emojivoto/web", RESTARTING)
    ]


def test_an_invalid_or_conflicting_linkerdconfig_has_no_plan() -> None:
    bad = sample("edge_19.12.3.yaml")
    bad["spec"]["proxy"]["proxyVersion"] = "not a version"
    result = plan(bad, view(), DEFAULTS)
    assert result.problem is not None and result.problem.reason == "Invalid"
    assert "spec.proxy.proxyVersion" in result.problem.message
    assert "cannot be applied (Invalid)" in render_plan(result)

    nameless = sample("edge_19.12.3.yaml")
    nameless["metadata"] = "not a mapping"
    result = plan(nameless, view(), DEFAULTS)
    assert result.problem is not None
    assert result.problem.message.startswith("metadata.name: is required")

    owner = sample("edge_19.12.3.yaml")
    owner["metadata"] = {"name": "older", "creationTimestamp": "2020-01-01T00:00:00Z"}
    rival = sample("edge_19.12.3.yaml")
    result = plan(rival, view(configs=[owner]), DEFAULTS)
    assert result.problem is not None and "already managed by LinkerdConfig 'older'" in (
        result.problem.message
    )


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (123, "must be a string"),
        ("UPPER", "'UPPER' is not a DNS-1123 subdomain"),
        ("a/b", "'a/b' is not a DNS-1123 subdomain"),
        ("a" * 254, "is longer than 253 characters"),
    ],
)
def test_a_name_the_api_server_would_refuse_has_no_plan(name: Any, says: str) -> None:
    """The API server refuses these names before any webhook is asked; plan said the object
    would apply and listed its restarts."""
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["name"] = name
    result = plan(config, view(configmap=install_configmap(), deployments=APPS), DEFAULTS)
    assert result.problem is not None and result.problem.reason == "Invalid"
    assert result.problem.message.startswith(f"metadata.name: {says}")


# -- status ----------------------------------------------------------------------------------


def test_status_counts_by_namespace_and_fails_while_stale() -> None:
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    done = applied(config, install_configmap())
    config["status"] = {"conditions": [{"type": READY, "status": "False", "reason": "Paused"}]}
    disabled = {"quiet": {"metadata": {"name": "quiet", "labels": {
        mesh.WEBHOOKS_LABEL: "disabled"}}}}  # fmt: skip
    apps = {**APPS, ("quiet", "dns"): (1, OLD), ("emojivoto", "ok"): (1, NEW)}
    (report,) = status(view(configmap=done, configs=[config], deployments=apps,
                            namespaces=disabled), DEFAULTS)  # fmt: skip
    assert report.namespaces["emojivoto"] == {"up-to-date": 1, "stale": 6, "pinned": 0,
                                              "excluded": 0}  # fmt: skip
    assert report.namespaces["quiet"]["excluded"] == 1
    assert report.drifted == ()
    assert report.failing == ["6 stale pod(s) in 3 workload(s)", "Ready is False (Paused)"]
    text = render_status(report)
    assert "Not healthy: 6 stale pod(s)" in text and "deployment/emojivoto/web" in text

    config["status"] = {"conditions": [{"type": READY, "status": "True", "reason": "Ready"}]}
    fine = {("emojivoto", "web"): (2, NEW)}
    (report,) = status(view(configmap=done, configs=[config], deployments=fine), DEFAULTS)
    assert report.failing == [] and render_status(report).rstrip().endswith("Healthy")


@pytest.mark.parametrize(
    "stored", ["weird", {"conditions": "x"}, {"conditions": [None, "Ready"]}, {"conditions": 7}]
)
def test_status_reads_a_status_the_schema_would_refuse_as_none_without_a_traceback(
    stored: Any,
) -> None:
    """An object stored before the schema typed its status (or by another tool) crashed
    ``status`` on its first condition; it reads as having none."""
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    done = applied(config, install_configmap())
    config["status"] = stored
    (report,) = status(view(configmap=done, configs=[config], deployments=APPS), DEFAULTS)
    assert "no Ready condition yet: has the controller seen it?" in report.failing
    assert "Not healthy" in render_status(report)


def test_status_says_when_the_configmap_is_not_what_the_linkerdconfig_says() -> None:
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    (report,) = status(view(configs=[config]), DEFAULTS)
    assert report.drifted == ("linkerd-config",)
    assert "ConfigMap(s) linkerd-config not as configured" in report.failing


# -- reading the file ------------------------------------------------------------------------


def test_the_file_must_hold_exactly_one_linkerdconfig(tmp_path: Any) -> None:
    one = "apiVersion: config.linkerd.io/v1alpha1\nkind: LinkerdConfig\nmetadata: {name: a}\n"
    assert read_linkerdconfig("-", io.StringIO(one))["metadata"]["name"] == "a"
    with pytest.raises(CommandError, match="holds 2 LinkerdConfig"):
        read_linkerdconfig("-", io.StringIO(one + "---\n" + one))
    with pytest.raises(CommandError, match="holds 0 LinkerdConfig"):
        read_linkerdconfig("-", io.StringIO("kind: ConfigMap\n"))
    with pytest.raises(CommandError, match="is not YAML"):
        read_linkerdconfig("-", io.StringIO("a: [\n"))
    with pytest.raises(CommandError, match="cannot read"):
        read_linkerdconfig(str(tmp_path / "missing.yaml"))


def test_a_hostile_file_is_refused_in_one_bounded_read() -> None:
    """Anchors and aliases (an alias bomb of a few hundred bytes took 24 s), a key twice:
    refused with the place named, as the controller reads an installed ConfigMap."""
    head = "apiVersion: config.linkerd.io/v1alpha1\nkind: LinkerdConfig\nmetadata: {name: a}\n"
    bomb = head + "spec:\n  a: &a [x, x, x, x, x, x, x, x, x]\n  b: &b [*a, *a, *a, *a, *a]\n"
    started = time.perf_counter()
    with pytest.raises(CommandError, match="standard input"):
        read_linkerdconfig("-", io.StringIO(bomb))
    with pytest.raises(CommandError, match="appears twice"):
        read_linkerdconfig("-", io.StringIO(head + "spec: {}\nspec: {}\n"))
    assert time.perf_counter() - started < 5  # a generous bound: milliseconds in fact


def test_plan_of_a_self_referencing_spec_is_invalid_not_a_crash() -> None:
    config = sample("edge_19.12.3.yaml")
    loop: dict[str, Any] = {}
    loop["again"] = loop
    config["spec"]["proxy"]["resource"] = loop
    result = plan(config, view(), DEFAULTS)
    assert result.problem is not None and result.problem.reason == "Invalid"


def test_plan_reads_a_file_as_the_api_server_stores_it() -> None:
    """Nulls are pruned (``canary: {count: null}`` crashed plan) and 80.0 is 80."""
    config = sample("edge_19.12.3.yaml")
    config["spec"]["rollout"] = {"canary": {"count": None}, "maxRestartsPerPass": 2.0}
    config["spec"]["proxy"]["adminPort"] = 4191.0
    result = plan(config, view(), DEFAULTS)
    assert result.problem is None, result.problem
    assert result.batch_size == 2


def test_a_bare_pod_is_planned_for_eviction() -> None:
    bare = pod("emojivoto", "bare")  # no owner: evicted, so PodDisruptionBudgets hold
    config = sample("edge_19.12.3.yaml")
    result = plan(config, view(extra_pods=[bare]), DEFAULTS)
    assert [(str(w.workload), w.batch) for w in result.restarts] == [("pod/emojivoto/bare", 1)]


def test_a_new_trust_anchor_in_the_values_format_reads_as_certificates_and_restarts() -> None:
    """edge-26.8.3's own ConfigMaps; pods stamped with the installed bundle's hash."""
    installed = {cm["metadata"]["name"]: cm for cm in modern_install()}
    unchanged = {"apiVersion": "config.linkerd.io/v1alpha1", "kind": "LinkerdConfig",
                 "metadata": {"name": "linkerd"}, "spec": {}}  # fmt: skip
    target = target_of(unchanged)
    now = desired_config(unchanged, current_data(installed, target)).proxy
    assert now.trust_root_sha256 is not None
    stamped = [
        pod(
            "emojivoto",
            f"web-{i}",
            now.version,
            **{mesh.TRUST_ROOT_ANNOTATION: now.trust_root_sha256},
        )
        for i in range(2)
    ]
    unchanged["spec"] = {"proxy": {"proxyVersion": now.version}}  # what is installed
    rotated = copy.deepcopy(unchanged)
    rotated["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": SECOND_TRUST_ANCHOR}}
    cluster = ClusterView(
        configs=[], configmaps={f"linkerd/{n}": cm for n, cm in installed.items()},
        pods=stamped, namespaces={}, replicasets={}, workloads={}, config_namespace="linkerd",
    )  # fmt: skip
    result = plan(rotated, cluster, DEFAULTS)
    assert result.problem is None, result.problem
    (bundle,) = [k for k in result.keys if k.key == "ca-bundle.crt"]
    assert bundle.configmap == "linkerd/linkerd-identity-trust-roots"
    (change,) = bundle.changes
    assert change.after == certificates(SECOND_TRUST_ANCHOR)
    assert change.before == certificates(
        installed["linkerd-identity-trust-roots"]["data"]["ca-bundle.crt"]
    )
    assert {w.reasons["trust root changed"] for w in result.restarts} == {1}  # two bare pods
    assert "ConfigMap linkerd/linkerd-identity-trust-roots:\n  ca-bundle.crt:" in render_plan(
        result
    )
    assert plan(unchanged, cluster, DEFAULTS).restarts == ()  # the same bundle: no restart


def test_a_paused_workload_is_skipped_in_plan_and_status_with_why() -> None:
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    paused = {
        "metadata": {"name": "web", "namespace": "emojivoto", "generation": 1},
        "spec": {"replicas": 2, "paused": True},
        "status": {"observedGeneration": 1},
    }
    cluster = view(deployments=APPS, records={"emojivoto/web": paused})
    result = plan(config, cluster, DEFAULTS)
    assert "deployment/emojivoto/web" not in [str(w.workload) for w in result.restarts]
    (skipped,) = [w for w in result.kept if w.state == "skipped"]
    assert str(skipped.workload) == "deployment/emojivoto/web"
    assert skipped.reasons == {"skipped: paused (spec.paused)": 2}
    done = applied(config, install_configmap())
    (report,) = status(
        view(configmap=done, configs=[config], deployments=APPS, records={"emojivoto/web": paused}),
        DEFAULTS,
    )
    lines = {str(w.workload): w for w in report.stale}
    assert lines["deployment/emojivoto/web"].state == "skipped"
    assert lines["deployment/emojivoto/emoji"].state == "stale"


def test_plan_and_status_of_a_v1alpha2_linkerdconfig_show_linkerds_values_by_path() -> None:
    """Issue 26: values only v1alpha2 states are planned like the old ones, as the paths of
    Linkerd's values; the status then reads the cluster through the same object."""
    installed = {cm["metadata"]["name"]: cm for cm in modern_install()}
    values = yaml.safe_load(installed["linkerd-config"]["data"]["values"])
    version = values["linkerdVersion"]
    empty = {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "metadata": {"name": "linkerd"},
        "spec": {},
    }
    root = desired_config(empty, current_data(installed, target_of(empty))).proxy.trust_root_sha256
    config: Json = {
        "apiVersion": "config.linkerd.io/v1alpha2",
        "kind": "LinkerdConfig",
        "metadata": {"name": "linkerd"},
        "spec": {
            "values": {
                "proxy": {
                    "image": {"version": version},
                    "nativeSidecar": not values["proxy"]["nativeSidecar"],
                    "defaultInboundPolicy": "all-authenticated",
                    "accessLog": "json",
                    "runtime": {"workers": {"minimum": 2}},
                }
            }
        },
    }
    cluster = ClusterView(
        configs=[], configmaps={f"linkerd/{n}": cm for n, cm in installed.items()},
        pods=[pod("emojivoto", "web-0", version, **{mesh.TRUST_ROOT_ANNOTATION: root})],
        namespaces={}, replicasets={},
        workloads={}, config_namespace="linkerd",
    )  # fmt: skip
    result = plan(config, cluster, DEFAULTS)
    assert result.problem is None, result.problem
    (key,) = result.keys
    assert (key.configmap, key.key) == ("linkerd/linkerd-config", "values")
    assert {c.path: (c.before, c.after) for c in key.changes} == {
        "proxy.nativeSidecar": (
            values["proxy"]["nativeSidecar"],
            not values["proxy"]["nativeSidecar"],
        ),
        "proxy.defaultInboundPolicy": (
            values["proxy"]["defaultInboundPolicy"],
            "all-authenticated",
        ),
        "proxy.accessLog": (values["proxy"].get("accessLog", ABSENT), "json"),
        # Installed as "" (the injector falls back on linkerdVersion); stated, so written.
        "proxy.image.version": (values["proxy"]["image"]["version"], version),
        "proxy.runtime.workers.minimum": (values["proxy"]["runtime"]["workers"]["minimum"], 2),
    }
    text = render_plan(result)
    assert '~ proxy.defaultInboundPolicy: "all-unauthenticated" → "all-authenticated"' in text
    assert result.restarts == ()  # the proxy version is what is installed: nothing is stale

    done = copy.deepcopy(installed["linkerd-config"])
    to_hub_config = applied(to_hub(config), done)
    cluster = dataclasses.replace(
        cluster,
        # As the caches hold it: the hub (their transform).
        configs=[to_hub({**config, "status": {"conditions": [{"type": READY, "status": "True"}]}})],
        configmaps={**cluster.configmaps, "linkerd/linkerd-config": to_hub_config},
    )
    (reported,) = status(cluster, DEFAULTS)
    assert reported.problem is None and reported.drifted == (), reported
    assert reported.proxy_version == version and reported.failing == [], reported
    assert plan(config, cluster, DEFAULTS).keys == ()


def test_an_endless_file_is_read_no_further_than_the_bound() -> None:
    """plan -f /dev/zero (or a huge file): one byte past the bound is read, then refused."""
    with pytest.raises(CommandError, match=r"/dev/zero is larger than 262144 bytes"):
        read_linkerdconfig("/dev/zero")
