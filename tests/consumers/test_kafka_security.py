"""Kafka security settings reach every client, and inconsistent ones fail at load.

No broker here requires SASL (tansu's user store is not reachable with in-memory storage), so
these tests check the configuration each kafka-python client is built with, and that a real
kafka-python client accepts it (its constructor validates the keys and the mechanism)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaProducer

from harness_r1.consumers.kafka_client import KafkaSettings, client_config
from harness_r1.consumers.security import KafkaSecurity
from harness_r1.daemon.settings import KafkaOptions, SettingsError, load_settings
from harness_r1.daemon.wiring import kafka_settings


def test_sasl_ssl_settings_reach_the_client_config(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a connection is made\n")
    options = KafkaOptions(
        security_protocol="sasl_ssl",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="daemon",
        sasl_password="s3cret",
        ssl_cafile=ca,
    )
    config = client_config(KafkaSettings("broker.example:9093", security=options.security()))
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("daemon", "s3cret")
    assert config["ssl_cafile"] == str(ca) and config["ssl_check_hostname"] is True
    assert "s3cret" not in repr(options.security())


def test_the_daemon_and_cli_settings_carry_security(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "d.yaml"
    config.write_text(
        "kafka_bootstrap: kafka.internal:9092\n"
        "kafka:\n  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n"
        "  sasl_username: u\n  sasl_password: p\n",
        encoding="utf-8",
    )
    kafka = kafka_settings(load_settings(config))
    assert client_config(kafka)["security_protocol"] == "SASL_PLAINTEXT"
    warning = kafka.plaintext_warning()
    assert warning is not None and "kafka.internal:9092" in warning


def test_plaintext_warning_only_off_this_host() -> None:
    assert KafkaSettings("127.0.0.1:9092").plaintext_warning() is None
    assert KafkaSettings("localhost:9092,[::1]:9092").plaintext_warning() is None
    assert "10.0.0.5:9092" in (KafkaSettings("10.0.0.5:9092").plaintext_warning() or "")
    tls = KafkaSettings("10.0.0.5:9093", security=KafkaSecurity(protocol="SSL"))
    assert tls.plaintext_warning() is None


@pytest.mark.parametrize(
    ("yaml_kafka", "message"),
    [
        ("  sasl_password: p\n", "SASL credentials are set but security protocol is PLAINTEXT"),
        ("  security_protocol: SASL_SSL\n", "SASL_SSL needs sasl_mechanism"),
        (
            "  security_protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n",
            "needs sasl_username and sasl_password",
        ),
        ("  ssl_cafile: /tmp/ca.pem\n", "TLS files are set but security protocol is PLAINTEXT"),
        ("  security_protocol: TLS\n", "security_protocol"),
    ],
)
def test_inconsistent_security_fails_at_load(tmp_path: Path, yaml_kafka: str, message: str) -> None:
    config = tmp_path / "d.yaml"
    config.write_text("kafka:\n" + yaml_kafka, encoding="utf-8")
    with pytest.raises(SettingsError, match=message):
        load_settings(config)


def test_kafka_python_accepts_the_sasl_configuration() -> None:
    """kafka-python validates SASL settings in its constructor (mechanism known, credentials
    present) before it connects; a bootstrap nobody listens on then fails as unreachable,
    not as a configuration error."""
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u",
        sasl_password="p",
    )
    settings = KafkaSettings(
        "127.0.0.1:1",
        request_timeout_ms=500,
        send_timeout_s=1.0,
        fetch_max_wait_ms=100,
        security=security,
    )
    config = {**client_config(settings), "api_version": (2, 5)}
    producer = KafkaProducer(**config)
    try:
        assert producer.config["sasl_mechanism"] == "SCRAM-SHA-512"
    finally:
        producer.close(timeout=1)
