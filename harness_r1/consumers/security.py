"""Kafka client security settings (TLS, SASL), kept apart from the clients themselves so that
reading settings does not import kafka-python (~0.25 s): only building a client does."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """How clients authenticate and encrypt: passed to EVERY client this module builds
    (consumers, producers, admin clients; the daemon's, the CLI's and the agents' overlay
    client alike), so no connection is left plaintext by accident.

    protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS: what managed
    Kafka services use). SASL needs a mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), a
    username and a password. TLS: ssl_cafile verifies the brokers (the system store when
    None), ssl_certfile/ssl_keyfile present a client certificate (mutual TLS).
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security protocol {self.protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ValueError(
                    f"{self.protocol} needs sasl_mechanism, one of {', '.join(SASL_MECHANISMS)}; "
                    f"got {self.sasl_mechanism!r}"
                )
            if not self.sasl_username or not self.sasl_password:
                raise ValueError(f"{self.protocol} needs sasl_username and sasl_password")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise ValueError(
                f"SASL credentials are set but security protocol is {self.protocol}, which does "
                "not use them: set it to SASL_SSL (or SASL_PLAINTEXT)"
            )
        if not self.uses_tls and (self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile):
            raise ValueError(
                f"TLS files are set but security protocol is {self.protocol}: set it to SSL or "
                "SASL_SSL"
            )

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_config(self) -> dict[str, Any]:
        """The kafka-python configuration keys for this security setup."""
        config: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            config["sasl_mechanism"] = self.sasl_mechanism
            config["sasl_plain_username"] = self.sasl_username
            config["sasl_plain_password"] = self.sasl_password
        if self.uses_tls:
            config["ssl_check_hostname"] = self.ssl_check_hostname
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, key):
                    config[key] = getattr(self, key)
        return config


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "KafkaSecurity", "is_loopback"]
