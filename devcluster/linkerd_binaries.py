"""Find or build Linkerd's real binaries: the ``controller`` (for ``proxy-injector``) and the CLI.

The same rules as the control-plane binaries: prebuilt ones from ``LINKERD_BIN_DIR``
(``<dir>/<tag>/controller``, ``<dir>/<tag>/linkerd``), else our cache, else a build. A build
needs Linkerd's source at the release tag:

* ``LINKERD2_SOURCE`` names a directory holding ``linkerd2-<tag>.tar.gz`` (``git archive``
  exports, checked against the sha256 pinned in ``pinned``) or an unpacked
  ``linkerd2-<tag>/``, or names one such tarball; CI and developers point it at
  ``../shared/vendor/linkerd2/`` (the Makefile does when that exists);
* else ``git clone --depth 1 --branch <tag>`` of Linkerd's public repository.

Linkerd's Go module is then built as it is (its dependencies come from the Go module proxy),
with its version stamped the way Linkerd's own build does. The one change is edge-19.12.3's
CronJob informer (see ``pinned.LINKERD_INJECTOR_PATCH``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from devcluster import pinned
from devcluster.binaries import (
    BinaryUnavailableError,
    Progress,
    build_lock,
    cache_root,
    go_build,
    go_toolchain,
    run_with_progress,
)
from devcluster.pinned import LinkerdRelease

SOURCE_ENV = "LINKERD2_SOURCE"
PREBUILT_ENV = "LINKERD_BIN_DIR"
VERSION_PACKAGE = "github.com/linkerd/linkerd2/pkg/version"

_CHARTS_GENERATOR = "pkg/charts/static/generate.go"
# binary name -> main package inside Linkerd's module
_PACKAGES = {
    "controller": "./controller/cmd",
    "linkerd": "./cli",
    "strict-values": "./linkerd-config-strict-values",
    "yaml-to-json": "./linkerd-config-yaml-to-json",
}
# A reader of linkerd-config's values as Linkerd's own type, strictly (an unknown key or a
# wrong type is an error, where the injector would drop or fail): placed in the source tree,
# built against the release's own module.
_STRICT_VALUES_MAIN = """package main

import (
\t"fmt"
\t"os"

\tl5dcharts "github.com/linkerd/linkerd2/pkg/charts/linkerd2"
\t"sigs.k8s.io/yaml"
)

func main() {
\tdata, err := os.ReadFile(os.Args[1])
\tif err != nil {
\t\tfmt.Fprintln(os.Stderr, err)
\t\tos.Exit(2)
\t}
\tvar values l5dcharts.Values
\tif err := yaml.UnmarshalStrict(data, &values); err != nil {
\t\tfmt.Fprintln(os.Stderr, err)
\t\tos.Exit(1)
\t}
\tout, err := yaml.Marshal(&values)
\tif err != nil {
\t\tfmt.Fprintln(os.Stderr, err)
\t\tos.Exit(2)
\t}
\tos.Stdout.Write(out)
}
"""


# How Linkerd's generic reader takes a YAML text (what Helm applies to values, and what
# config.Values reads before its struct): sigs.k8s.io/yaml's YAMLToJSON (go.yaml.in/yaml/v2
# into interface{}, keys made strings), at the version Linkerd pins. Reads a JSON list of texts
# on stdin; writes one answer each: the JSON (or the error), YAMLToJSONStrict's error, whether
# making keys strings merged two keys (fewer JSON members than YAML entries), and each value's
# Go type beside its text (YAMLToJSON's JSON has 1000 for int 1000 and float 1000 alike).
_YAML_TO_JSON_MAIN = """package main

import (
    "encoding/json"
    "fmt"
    "io"
    "os"
    "strconv"

    yamlv2 "go.yaml.in/yaml/v2"
    "sigs.k8s.io/yaml"
)

type answer struct {
    JSON        json.RawMessage `json:"json,omitempty"`
    Error       string          `json:"error,omitempty"`
    StrictError string          `json:"strictError,omitempty"`
    Merged      bool            `json:"merged"`
    Typed       interface{}     `json:"typed,omitempty"`
}

func main() {
    data, err := io.ReadAll(os.Stdin)
    if err != nil {
        fmt.Fprintln(os.Stderr, err)
        os.Exit(2)
    }
    var texts []string
    if err := json.Unmarshal(data, &texts); err != nil {
        fmt.Fprintln(os.Stderr, err)
        os.Exit(2)
    }
    answers := make([]answer, len(texts))
    for i, text := range texts {
        answers[i] = read([]byte(text))
    }
    out, err := json.Marshal(answers)
    if err != nil {
        fmt.Fprintln(os.Stderr, err)
        os.Exit(2)
    }
    os.Stdout.Write(out)
}

func read(text []byte) (a answer) {
    out, err := yaml.YAMLToJSON(text)
    if err != nil {
        a.Error = err.Error()
    } else {
        a.JSON = out
    }
    if _, err := yaml.YAMLToJSONStrict(text); err != nil {
        a.StrictError = err.Error()
    }
    var raw interface{}
    if yamlv2.Unmarshal(text, &raw) != nil || a.Error != "" {
        return a
    }
    var generic interface{}
    if json.Unmarshal(out, &generic) != nil {
        return a
    }
    a.Merged = entries(raw) != entries(generic)
    a.Typed = typed(raw)
    return a
}

func entries(v interface{}) int {
    n := 0
    switch t := v.(type) {
    case map[interface{}]interface{}:
        for _, c := range t {
            n += 1 + entries(c)
        }
    case map[string]interface{}:
        for _, c := range t {
            n += 1 + entries(c)
        }
    case []interface{}:
        for _, c := range t {
            n += entries(c)
        }
    }
    return n
}

func typed(v interface{}) interface{} {
    switch t := v.(type) {
    case map[interface{}]interface{}:
        out := map[string]interface{}{}
        for k, c := range t {
            out[keyString(k)] = typed(c)
        }
        return out
    case []interface{}:
        out := make([]interface{}, len(t))
        for i, c := range t {
            out[i] = typed(c)
        }
        return out
    case nil:
        return []string{"null", ""}
    case bool:
        return []string{"bool", strconv.FormatBool(t)}
    case int:
        return []string{"int", strconv.Itoa(t)}
    case int64:
        return []string{"int", strconv.FormatInt(t, 10)}
    case uint64:
        return []string{"uint64", strconv.FormatUint(t, 10)}
    case float64:
        return []string{"float64", strconv.FormatFloat(t, 'g', -1, 64)}
    case string:
        return []string{"string", t}
    }
    return []string{fmt.Sprintf("%T", v), fmt.Sprint(v)}
}

// keyString is sigs.k8s.io/yaml's (v1.6.0, convertToJSONableObject); an unsupported key is
// YAMLToJSON's error, so never typed.
func keyString(k interface{}) string {
    switch t := k.(type) {
    case string:
        return t
    case int:
        return strconv.Itoa(t)
    case int64:
        return strconv.FormatInt(t, 10)
    case float64:
        s := strconv.FormatFloat(t, 'g', -1, 32)
        switch s {
        case "+Inf":
            return ".inf"
        case "-Inf":
            return "-.inf"
        case "NaN":
            return ".nan"
        }
        return s
    case bool:
        return strconv.FormatBool(t)
    }
    return fmt.Sprintf("%T:%v", k, k)
}
"""
_MAINS = {"strict-values": _STRICT_VALUES_MAIN, "yaml-to-json": _YAML_TO_JSON_MAIN}


def release(tag: str) -> LinkerdRelease:
    try:
        return pinned.LINKERD_RELEASES[tag]
    except KeyError:
        known = ", ".join(sorted(pinned.LINKERD_RELEASES))
        raise BinaryUnavailableError(f"no pinned Linkerd release {tag!r}; known: {known}") from None


def _bin_dir(rel: LinkerdRelease) -> Path:
    # The commit is part of the key: a re-pinned tag builds afresh.
    return cache_root() / f"linkerd-{rel.tag}-{rel.commit[:12]}" / "bin"


def _find(rel: LinkerdRelease, name: str) -> Path | None:
    candidates = []
    prebuilt = os.environ.get(PREBUILT_ENV)
    if prebuilt:
        candidates.append(Path(prebuilt) / rel.tag / name)
    candidates.append(_bin_dir(rel) / name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def ensure_linkerd(tag: str, name: str = "controller", progress: Progress = print) -> Path:
    """The path of Linkerd ``tag``'s ``controller`` or ``linkerd`` CLI, built if missing."""
    rel = release(tag)
    if name not in _PACKAGES or (name != "controller" and not rel.builds_cli):
        raise BinaryUnavailableError(f"Linkerd {tag}: no {name!r} binary is built")
    found = _find(rel, name)
    if found is not None:
        return found
    with build_lock(f"build-linkerd-{rel.tag}"):
        found = _find(rel, name)
        if found is None:
            _build(rel, name, progress)
            found = _find(rel, name)
    if found is None:  # pragma: no cover - _build raises first
        raise BinaryUnavailableError(f"Linkerd {tag} {name} was built but cannot be found")
    return found


def _build(rel: LinkerdRelease, name: str, progress: Progress) -> None:
    go = go_toolchain(
        f"Linkerd {rel.tag} {name}",
        f"set {PREBUILT_ENV} to a folder holding {rel.tag}/{name}",
    )
    out_dir = _bin_dir(rel)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = _source_tree(rel, out_dir.parent / "src", progress)
    if rel.needs_cronjob_patch:
        _patch_cronjob_informer(src)
    if name in _MAINS:
        main = src / _PACKAGES[name] / "main.go"
        main.parent.mkdir(exist_ok=True)
        main.write_text(_MAINS[name])
    tags = ""
    if (src / _CHARTS_GENERATOR).is_file():
        # Releases before Go embed (such as edge-19.12.3) read Helm charts from the source
        # tree unless built as Linkerd's Dockerfile does: generate the static file system,
        # then build with the "prod" tag.
        _run(go, src, ["generate", "./" + str(Path(_CHARTS_GENERATOR).parent)], progress)
        tags = "prod"
    go_build(
        go,
        src,
        f"Linkerd {rel.tag} {name}",
        _PACKAGES[name],
        f"-X {VERSION_PACKAGE}.Version={rel.tag}",
        out_dir / name,
        progress,
        tags=tags,
    )


def _run(go: str, src: Path, args: list[str], progress: Progress) -> None:
    progress(f"go {' '.join(args)} in {src.name}")
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    done = subprocess.run(
        [go, *args], cwd=src, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BinaryUnavailableError(
            f"go {' '.join(args)} failed in {src}: {(done.stdout + done.stderr)[-2000:]}"
        )


def _source_tree(rel: LinkerdRelease, dest: Path, progress: Progress) -> Path:
    """A private, writable copy of the release's source (the build may touch go.sum)."""
    tree = dest / f"linkerd2-{rel.tag}"
    if (tree / "go.mod").is_file():
        return tree
    # Everything lands in a staging folder first: a build interrupted mid-unpack never
    # leaves a half tree that the check above would take for a whole one.
    shutil.rmtree(dest, ignore_errors=True)
    staging = dest / ".staging"
    staging.mkdir(parents=True)
    staged = staging / tree.name
    given = os.environ.get(SOURCE_ENV)
    if given:
        origin = Path(given)
        archive = origin if origin.is_file() else origin / rel.archive_name
        unpacked = origin / f"linkerd2-{rel.tag}"
        if archive.is_file():
            _unpack(rel, archive, staging, progress)
        elif (unpacked / "go.mod").is_file():
            progress(f"copying Linkerd {rel.tag} source from {unpacked}")
            shutil.copytree(unpacked, staged, symlinks=True)
        else:
            raise BinaryUnavailableError(
                f"{SOURCE_ENV}={given} holds neither {rel.archive_name} nor "
                f"linkerd2-{rel.tag}/ (point it at a folder of Linkerd source releases, "
                "such as ../shared/vendor/linkerd2)"
            )
    else:
        _clone(rel, staged, progress)
    if not (staged / "go.mod").is_file():
        raise BinaryUnavailableError(f"Linkerd {rel.tag} source has no go.mod at {staged}")
    staged.rename(tree)
    staging.rmdir()
    return tree


def _unpack(rel: LinkerdRelease, archive: Path, dest: Path, progress: Progress) -> None:
    digest = hashlib.sha256()
    with archive.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != rel.sha256:
        raise BinaryUnavailableError(
            f"{archive} has sha256 {digest.hexdigest()}, not the pinned {rel.sha256} of "
            f"Linkerd {rel.tag}: refusing to build from it"
        )
    progress(f"unpacking {archive} (sha256 verified)")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def _clone(rel: LinkerdRelease, staged: Path, progress: Progress) -> None:
    git = shutil.which("git")
    if git is None:
        raise BinaryUnavailableError(
            f"cannot fetch Linkerd {rel.tag}: no git on PATH and {SOURCE_ENV} is not set "
            "(set it to a folder holding linkerd2-<tag>.tar.gz)"
        )
    progress(f"cloning {pinned.LINKERD_REPOSITORY} at {rel.tag} ({SOURCE_ENV} not set)")
    cmd = [git, "clone", "--quiet", "--depth", "1", "--branch", rel.tag]
    done = subprocess.run(
        [*cmd, pinned.LINKERD_REPOSITORY, str(staged)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BinaryUnavailableError(
            f"git clone of Linkerd {rel.tag} failed ({done.stderr.strip()}); set "
            f"{SOURCE_ENV} to a folder holding {rel.archive_name} instead"
        )
    head = subprocess.run(
        [git, "-C", str(staged), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if head != rel.commit:
        raise BinaryUnavailableError(
            f"Linkerd's tag {rel.tag} is commit {head}, not the pinned {rel.commit}"
        )


def _patch_cronjob_informer(tree: Path) -> None:
    main = tree / "controller" / "cmd" / "proxy-injector" / "main.go"
    old, new = pinned.LINKERD_INJECTOR_PATCH
    text = main.read_text()
    if new in text and old not in text:
        return  # already applied to this private copy
    if text.count(old) != 1:
        raise BinaryUnavailableError(f"{main}: expected one {old!r} to patch; the source differs")
    main.write_text(text.replace(old, new))


# -- the data plane --------------------------------------------------------------------------

DATAPLANE_ENV = "LINKERD_DATAPLANE_SOURCE"
"""A folder as ``../shared/vendor/linkerd2-dataplane/``: the pinned sources, patches and
recipe, and ``bin/`` with ``SHA256SUMS`` (the Makefile points it there when that exists)."""
SUMS_FILE = "SHA256SUMS"
_GO_BINARIES = {  # binary -> (source folder, main package)
    "linkerd2-proxy-init": ("linkerd2-proxy-init", "./proxy-init"),
    "linkerd2-proxy-identity": ("", "./proxy-identity"),  # "": the edge release itself
}
_RUST_BINARIES = {  # binary -> (source folder, patch, RUSTFLAGS before the path remapping)
    "linkerd2-proxy": (
        "linkerd2-proxy",
        "linkerd2-proxy-v2.366.0.patch",
        "-A deprecated --cfg tokio_unstable",
    ),
    "linkerd-policy-controller": (
        "",
        "linkerd2-edge-26.8.3-policy-controller.patch",
        "--cfg tokio_unstable",
    ),
}


def dataplane_bin_dir() -> Path:
    """Keyed by the release and every pinned input: a re-pinned source builds afresh."""
    plane = pinned.LINKERD_DATAPLANE
    key = hashlib.sha256("".join(s.sha256 for s in plane.sources).encode()).hexdigest()[:12]
    return cache_root() / f"linkerd-dataplane-{plane.release.tag}-{key}" / "bin"


def ensure_dataplane(progress: Progress = print) -> dict[str, Path]:
    """Linkerd's data-plane binaries (``pinned.LINKERD_DATAPLANE.binaries``), in the cache.

    The prebuilt ones in ``$LINKERD_DATAPLANE_SOURCE/bin`` are copied when its ``SHA256SUMS``
    states every pinned source at its pinned sum, the files there have those sums, and every
    binary has the sum stated; otherwise they are built from the pinned sources by their
    recipe (``RECIPE.txt``), once (a cold build took 24 minutes on 2 cores, niced, beside
    other tests)."""
    plane = pinned.LINKERD_DATAPLANE
    out = dataplane_bin_dir()
    wanted = {name: out / name for name in plane.binaries}
    if all(os.access(path, os.X_OK) for path in wanted.values()):
        return wanted
    with build_lock("linkerd-dataplane"):
        if all(os.access(path, os.X_OK) for path in wanted.values()):
            return wanted
        given = os.environ.get(DATAPLANE_ENV)
        if not given:
            raise BinaryUnavailableError(
                f"Linkerd's data plane: {DATAPLANE_ENV} is not set; point it at a folder "
                "holding its pinned sources (such as ../shared/vendor/linkerd2-dataplane)"
            )
        vendor = Path(given)
        problem = prebuilt_problem(vendor)
        if problem is None:
            progress(f"copying Linkerd's data plane from {vendor / 'bin'} (sha256 verified)")
            _install_binaries({name: vendor / "bin" / name for name in plane.binaries}, out)
        else:
            progress(f"not using {vendor / 'bin'}: {problem}; building from the sources")
            _build_dataplane(vendor, out, progress)
    return wanted


def read_sums(path: Path) -> dict[str, str]:
    """``sha256sum``'s lines (``<hex>  <name>``, ``*`` for binary mode) as name -> sum."""
    sums: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, _, name = line.partition(" ")
            sums[name.strip().lstrip("*")] = digest.strip()
    return sums


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def prebuilt_problem(vendor: Path) -> str | None:
    """Why ``vendor/bin`` must not be used (None: it may): the first of a missing
    ``SHA256SUMS``, a pinned source it states otherwise than pinned or that differs on disk,
    a binary it does not state or whose file differs."""
    sums_path = vendor / SUMS_FILE
    if not sums_path.is_file():
        return f"no {SUMS_FILE}"
    sums = read_sums(sums_path)
    for source in pinned.LINKERD_DATAPLANE.sources:
        stated = sums.get(source.file)
        if stated != source.sha256:
            return f"{SUMS_FILE} states {source.file} as {stated}, not the pinned {source.sha256}"
        if not (vendor / source.file).is_file():
            return f"{source.file} is missing"
        if file_sha256(vendor / source.file) != source.sha256:
            return f"{source.file} does not have its pinned sha256"
    for name in pinned.LINKERD_DATAPLANE.binaries:
        binary = vendor / "bin" / name
        stated = sums.get(f"bin/{name}")
        if stated is None:
            return f"{SUMS_FILE} does not state bin/{name}"
        if not binary.is_file():
            return f"bin/{name} is missing"
        if file_sha256(binary) != stated:
            return f"bin/{name} does not have the sha256 {SUMS_FILE} states"
    return None


def _install_binaries(files: dict[str, Path], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        tmp = out / f".{name}.tmp"
        shutil.copyfile(path, tmp)
        tmp.chmod(0o755)
        tmp.replace(out / name)


def _build_dataplane(vendor: Path, out: Path, progress: Progress) -> None:
    """The recipe (``RECIPE.txt``): the trees side by side, each Cargo workspace patched to
    the kubert checkouts, the two Rust builds (the proxy with the cheaper profile the
    vendored one was built with: no fat LTO, no debug info) and the two Go builds."""
    plane = pinned.LINKERD_DATAPLANE
    for source in plane.sources:
        path = vendor / source.file
        if not path.is_file() or file_sha256(path) != source.sha256:
            raise BinaryUnavailableError(
                f"cannot build Linkerd's data plane: {path} is missing or does not have its "
                f"pinned sha256 {source.sha256}"
            )
    cargo = shutil.which("cargo")
    go = go_toolchain("Linkerd's data plane", f"set {DATAPLANE_ENV} to a folder with bin/")
    if cargo is None:
        raise BinaryUnavailableError(
            "cannot build Linkerd's data plane: no cargo on PATH (install Rust stable), or set "
            f"{DATAPLANE_ENV} to a folder whose bin/ and {SUMS_FILE} match the pins"
        )
    src = out.parent / "src"
    edge = _dataplane_sources(vendor, src, progress)
    built = out.parent / "built"
    built.mkdir(parents=True, exist_ok=True)
    remap = f"--remap-path-prefix={src}=/src --remap-path-prefix={Path.home() / '.cargo'}=/cargo"
    for name, (folder, _patch, rustflags) in _RUST_BINARIES.items():
        tree = src / folder if folder else edge
        env = dict(os.environ, RUSTUP_TOOLCHAIN="stable", CARGO_INCREMENTAL="0")
        env["RUSTFLAGS"] = f"{rustflags} {remap}"
        if name == "linkerd2-proxy":
            env.update(CARGO_PROFILE_RELEASE_LTO="false", CARGO_PROFILE_RELEASE_DEBUG="0")
        progress(f"building {name} with cargo (first run only; cached in {out})")
        started = time.monotonic()
        run_with_progress([cargo, "fetch", "--locked"], tree, env, f"{name} fetch", progress)
        cmd = [cargo, "build", "--release", "--locked", "-p", name, "--bin", name]
        run_with_progress(cmd, tree, env, name, progress, unit="lines")
        _run_tool(["strip", "-o", str(built / name), str(tree / "target/release" / name)])
        progress(f"built {name} in {time.monotonic() - started:.0f}s")
    stamp = f"-X {VERSION_PACKAGE}.Version={plane.release.tag}"
    for name, (folder, package) in _GO_BINARIES.items():
        tree = src / folder if folder else edge
        go_build(go, tree, name, package, stamp, built / name, progress)
    _install_binaries({name: built / name for name in plane.binaries}, out)


def _dataplane_sources(vendor: Path, src: Path, progress: Progress) -> Path:
    """The recipe's layout under ``src`` (made once, patched, in a staging folder first);
    returns the edge release's tree."""
    plane = pinned.LINKERD_DATAPLANE
    edge = src / f"linkerd2-{plane.release.tag}"
    if (src / ".complete").is_file():
        return edge
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for source in plane.sources:
        if not source.folder:
            continue
        progress(f"unpacking {source.file} (sha256 verified) as {source.folder}/")
        staging = src / f".{source.folder}"
        with tarfile.open(vendor / source.file) as tar:
            tar.extractall(staging, filter="data")
        (top,) = list(staging.iterdir())
        top.rename(src / source.folder)
        staging.rmdir()
    given = os.environ.get(SOURCE_ENV)
    archive = Path(given) / plane.release.archive_name if given else None
    if archive is None or not archive.is_file():
        raise BinaryUnavailableError(
            f"cannot build Linkerd's data plane: {SOURCE_ENV} must name a folder holding "
            f"{plane.release.archive_name} (the policy controller and proxy-identity are in it)"
        )
    _unpack(plane.release, archive, src, progress)
    for folder, patch, _flags in _RUST_BINARIES.values():
        tree = src / folder if folder else edge
        _run_tool(["patch", "-p1", "--forward", "-i", str(vendor / patch)], cwd=tree)
    (src / ".complete").write_text("")
    return edge


def _run_tool(argv: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BinaryUnavailableError(
            f"{' '.join(argv[:3])} failed (exit {done.returncode}): "
            f"{(done.stdout + done.stderr).strip()[-2000:]}"
        )
