"""ops/compose.yaml: Compose accepts it (`docker compose config` or `docker-compose config`,
when either is installed: Debian's `docker-compose` package), and its wiring holds: every
long-running service has a health check, every dependency waits on a condition (healthy, or a
one-shot's success), the daemons share one PostgreSQL state store and one set of settings, the
variables they set are settings that exist and validate, Prometheus loads the rules and finds
every daemon, Grafana gets the datasource the dashboard names. Nothing here starts a container:
no image can be pulled on this machine (ops/README.md says what was and was not run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_files import DEPLOY, REPO, compose, unknown_setting_variables

#: What the required ${VAR:?} variables are set to when the file is read here.
SECRETS = {"POSTGRES_PASSWORD": "pw-for-the-test", "GRAFANA_ADMIN_PASSWORD": "admin-pw"}
ONE_SHOTS = {"keys", "topics"}
DAEMONS = ("daemon", "canary")


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return compose(SECRETS)


def _compose_binary() -> list[str] | None:
    """`docker compose` (v2 plugin) or `docker-compose` (v1), whichever answers."""
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def _config(binary: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run(
        [*binary, "-f", "compose.yaml", "config"],
        cwd=DEPLOY,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compose_accepts_the_file_and_requires_the_secrets() -> None:
    binary = _compose_binary()
    if binary is None:
        pytest.skip(
            "no Compose binary: neither `docker compose` (the v2 plugin) nor `docker-compose` "
            "(apt-get install docker-compose) is installed"
        )
    ok = _config(binary, SECRETS)
    assert ok.returncode == 0, ok.stderr
    rendered = yaml.safe_load(ok.stdout)
    assert set(rendered["services"]) == set(compose(SECRETS)["services"])
    url = rendered["services"]["daemon"]["environment"]["HARNESS_R1_STATE_URL"]
    assert SECRETS["POSTGRES_PASSWORD"] in url
    missing = _config(binary, {"GRAFANA_ADMIN_PASSWORD": "x"})
    assert missing.returncode != 0
    assert "POSTGRES_PASSWORD" in missing.stderr + missing.stdout


def test_the_required_secrets_have_no_default() -> None:
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        compose({"GRAFANA_ADMIN_PASSWORD": "x"})
    with pytest.raises(KeyError, match="GRAFANA_ADMIN_PASSWORD"):
        compose({"POSTGRES_PASSWORD": "x"})


def test_the_services_are_all_there(spec: dict[str, Any]) -> None:
    assert set(spec["services"]) == {
        "kafka",
        "postgres",
        "keys",
        "topics",
        "daemon",
        "canary",
        "prometheus",
        "grafana",
    }


def test_every_long_running_service_has_a_health_check(spec: dict[str, Any]) -> None:
    for name, service in spec["services"].items():
        if name in ONE_SHOTS:
            assert service["restart"] == "no", name
            continue
        check = service.get("healthcheck") or {}
        assert not check.get("disable"), name
        test = check.get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
        assert service.get("restart") == "unless-stopped", name


def test_every_dependency_waits_on_a_condition(spec: dict[str, Any]) -> None:
    services = spec["services"]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs the long form"
        for dependency, how in depends.items():
            assert dependency in services, (name, dependency)
            expected = (
                "service_completed_successfully" if dependency in ONE_SHOTS else "service_healthy"
            )
            assert how == {"condition": expected}, (name, dependency, how)


def test_the_start_order(spec: dict[str, Any]) -> None:
    services = spec["services"]
    assert set(services["daemon"]["depends_on"]) == {"kafka", "postgres", "keys", "topics"}
    # the workers start after the ingesting daemon, so that it is the one holding the lease
    assert {"daemon", "postgres"} <= set(services["canary"]["depends_on"])
    assert set(services["topics"]["depends_on"]) == {"kafka"}
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}


def test_the_daemons_share_one_postgresql_store_and_one_set_of_settings(
    spec: dict[str, Any],
) -> None:
    services = spec["services"]
    daemon, canary, topics = (services[n] for n in ("daemon", "canary", "topics"))
    assert daemon["environment"] == canary["environment"] == topics["environment"]
    env = daemon["environment"]
    url = env["HARNESS_R1_STATE_URL"]
    assert url == (
        f"postgresql+psycopg://harness:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/harness"
    )
    pg = services["postgres"]["environment"]
    assert (pg["POSTGRES_USER"], pg["POSTGRES_DB"]) == ("harness", "harness")
    assert env["HARNESS_R1_KAFKA_BOOTSTRAP"] == "kafka:9092"
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "PLAINTEXT://kafka:9092" in advertised
    for name in ("daemon", "canary", "topics", "keys"):
        assert services[name]["image"] == daemon["image"], name
        assert services[name]["build"] == {"context": "..", "dockerfile": "ops/Dockerfile"}
    assert topics["command"] == ["topics", "create"]
    assert (REPO / services["daemon"]["build"]["dockerfile"]).is_file()


def test_kafka_runs_in_kraft_mode_on_one_node(spec: dict[str, Any]) -> None:
    kafka = spec["services"]["kafka"]
    env = kafka["environment"]
    assert kafka["image"].startswith("apache/kafka:")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert not any("ZOOKEEPER" in key for key in env)
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1
    assert "kafka-data:/var/lib/kafka/data" in kafka["volumes"]
    assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"


def test_the_canary_workers_scale(spec: dict[str, Any]) -> None:
    canary = spec["services"]["canary"]
    assert canary["deploy"]["replicas"] >= 1
    assert "ports" not in canary and "container_name" not in canary
    # each replica keeps its own model cache (the image's anonymous volume)
    assert not any(v.endswith(":/var/lib/harness-r1/cache") for v in canary["volumes"])
    for name in DAEMONS:
        limits = spec["services"][name]["deploy"]["resources"]["limits"]
        assert float(limits["cpus"]) >= 2 and limits["memory"].endswith("G")


def test_the_keys_are_made_once_and_mounted_read_only(spec: dict[str, Any]) -> None:
    services = spec["services"]
    keys = services["keys"]
    assert "keys:/keys" in keys["volumes"]
    script = keys["command"][0]
    assert script.startswith('test -f "/keys/${KEY_ID}.key" || harness-r1 keys generate')
    for name in DAEMONS:
        env = services[name]["environment"]
        assert "keys:/keys:ro" in services[name]["volumes"]
        assert env["HARNESS_R1_SIGNING_KEY"] == f"/keys/{keys['environment']['KEY_ID']}.key"
        assert env["HARNESS_R1_KEYS_DIR"] == "/keys"


def test_the_variables_are_settings_that_validate(
    spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness_r1.daemon.settings import Settings

    env = spec["services"]["daemon"]["environment"]
    assert unknown_setting_variables(list(env)) == []
    for name in list(os.environ):
        if name.startswith("HARNESS_R1_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("HARNESS_R1_DATA", str(tmp_path))  # /data exists in the container only
    settings = Settings()
    assert settings.state_url == env["HARNESS_R1_STATE_URL"]
    assert settings.loop.canary_workers == 1
    assert settings.metrics.port == 9464


def test_the_health_checks_ask_the_metrics_port(spec: dict[str, Any]) -> None:
    for name in DAEMONS:
        service = spec["services"][name]
        port = service["environment"]["HARNESS_R1_METRICS__PORT"]
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])
    assert spec["services"]["daemon"]["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_prometheus_loads_the_rules_and_finds_every_daemon(spec: dict[str, Any]) -> None:
    prometheus = spec["services"]["prometheus"]
    assert "./prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules.yml"]
    # The rules are another file of the kit; this fails only if it is missing.
    assert (DEPLOY / "prometheus" / "rules.yml").is_file()
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "harness-r1"]
    [dns] = job["dns_sd_configs"]
    assert set(dns["names"]) == set(DAEMONS)
    port = spec["services"]["daemon"]["environment"]["HARNESS_R1_METRICS__PORT"]
    assert str(dns["port"]) == port


def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    checked = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"],
        cwd=DEPLOY / "prometheus",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "rule files found" in checked.stdout + checked.stderr


def _datasource_uids(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        source = node.get("datasource")
        if isinstance(source, dict) and "uid" in source:
            found.add(source["uid"])
        for value in node.values():
            found |= _datasource_uids(value)
    elif isinstance(node, list):
        for value in node:
            found |= _datasource_uids(value)
    return found


def test_grafana_gets_the_datasource_and_the_dashboard(spec: dict[str, Any]) -> None:
    grafana = spec["services"]["grafana"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"]}
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    provisioning = DEPLOY / "grafana" / "provisioning"
    [datasource] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert datasource["url"] == "http://prometheus:9090" and datasource["type"] == "prometheus"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "harness-r1.yml").read_text())[
        "providers"
    ]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    # The dashboard is another file of the kit; this fails only if it is missing or names
    # another datasource.
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "harness-r1.json").read_text())
    assert _datasource_uids(dashboard) == {datasource["uid"]}


def test_every_bind_mount_of_the_kit_exists(spec: dict[str, Any]) -> None:
    for name, service in spec["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), (name, volume)


def test_the_variable_check_catches_a_misspelt_name() -> None:
    names = [
        "HARNESS_R1_LOOP__BATCH_SZIE",  # nested field misspelt
        "HARNESS_R1_SIGNINGKEY",  # flat field misspelt: the loader would ignore it
        "HARNESS_R1_CACHE__DIR",  # a flat field is not a group
        "HARNESS_R1_LOOP__K",
        "HARNESS_R1_CONFIG",
        "POSTGRES_PASSWORD",
    ]
    assert unknown_setting_variables(names) == names[:3]
