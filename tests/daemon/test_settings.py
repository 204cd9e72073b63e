"""Daemon settings: sources and their order, nested groups, secrets, messages that say how to
fix a bad value, and the flat fields the CLI already reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness_r1.daemon.settings import (
    CONFIG_ENV,
    MASK,
    SchedulerOptions,
    Settings,
    SettingsError,
    load_settings,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Only what a test sets: the machine's own HARNESS_R1_* variables would leak in."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("HARNESS_R1_"):
            monkeypatch.delenv(name)
    return monkeypatch


def write_yaml(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_of_the_nested_groups() -> None:
    settings = Settings()
    assert settings.kafka.group_id == "harness-r1-daemon"
    assert settings.kafka.max_poll_records == 500
    assert settings.kafka.dead_letter_topic == "harness-r1.dead-letter"
    assert (settings.loop.batch_size, settings.loop.batch_window_s, settings.loop.k) == (8, 300, 4)
    assert (settings.loop.max_pending_batches, settings.loop.rollout_fraction) == (16, 0.5)
    assert settings.scheduler.grpo_min_groups == 8
    assert (settings.guard.min_episodes, settings.guard.max_episodes) == (20, 400)
    assert (settings.metrics.host, settings.metrics.port) == ("127.0.0.1", 9464)


def test_init_beats_env_beats_yaml_beats_defaults(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = write_yaml(
        tmp_path / "daemon.yaml",
        {
            "loop": {"batch_size": 3, "k": 7, "batch_window_s": 60},
            "kafka": {"group_id": "from-yaml"},
            "release_topic": "yaml-releases",
        },
    )
    clean_env.setenv("HARNESS_R1_LOOP__K", "5")
    clean_env.setenv("HARNESS_R1_LOOP__BATCH_SIZE", "4")
    clean_env.setenv("HARNESS_R1_RELEASE_TOPIC", "env-releases")

    settings = Settings.from_file(config, loop={"batch_size": 2})

    assert settings.loop.batch_size == 2  # init
    assert settings.loop.k == 5  # environment over YAML
    assert settings.loop.batch_window_s == 60  # YAML over the default
    assert settings.loop.canary_workers == 1  # default
    assert settings.kafka.group_id == "from-yaml"
    assert settings.release_topic == "env-releases"  # a flat field, same order


def test_nested_env_without_a_file(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HARNESS_R1_SCHEDULER__RETENTION_DAYS", "7")
    clean_env.setenv("HARNESS_R1_METRICS__LOG_FORMAT", "Console")
    clean_env.setenv("HARNESS_R1_LOOP__MAX_STEPS", "12")
    settings = Settings()
    assert settings.scheduler.retention_days == 7
    assert settings.metrics.log_format == "console"
    assert settings.loop.max_steps == 12


def test_config_file_from_env_and_explicit_file_wins(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    from_env = write_yaml(tmp_path / "env.yaml", {"guard": {"min_episodes": 30}})
    explicit = write_yaml(tmp_path / "explicit.yaml", {"guard": {"min_episodes": 40}})
    clean_env.setenv(CONFIG_ENV, str(from_env))
    assert Settings().guard.min_episodes == 30
    assert Settings.from_file(explicit).guard.min_episodes == 40
    assert load_settings(None).guard.min_episodes == 30


def test_relative_paths_in_yaml_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "bench").mkdir()
    config = write_yaml(tmp_path / "conf" / "d.yaml", {"cache": "cache", "data": "bench"})
    settings = Settings.from_file(config)
    assert settings.cache == tmp_path / "conf" / "cache"
    assert settings.data == tmp_path / "conf" / "bench"


def test_secrets_are_masked_and_never_in_repr(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = write_yaml(tmp_path / "d.yaml", {"loop": {"engineer_api_key": "sk-yaml-secret"}})
    clean_env.setenv("HARNESS_R1_KAFKA__SASL_PASSWORD", "hunter2-env-secret")
    clean_env.setenv("HARNESS_R1_KAFKA__SECURITY_PROTOCOL", "sasl_ssl")
    clean_env.setenv("HARNESS_R1_KAFKA__SASL_MECHANISM", "scram-sha-512")
    clean_env.setenv("HARNESS_R1_KAFKA__SASL_USERNAME", "daemon")
    clean_env.setenv("HARNESS_R1_CACHE", str(tmp_path / "cache"))
    settings = Settings.from_file(config)

    masked = settings.masked()
    assert masked["kafka"]["sasl_password"] == MASK
    assert masked["loop"]["engineer_api_key"] == MASK
    assert masked["loop"]["target_api_key"] is None
    assert masked["cache"] == str(tmp_path / "cache")  # paths as strings
    dumped = json.dumps(masked)
    for text in (dumped, repr(settings), str(settings), repr(settings.kafka)):
        assert "hunter2-env-secret" not in text
        assert "sk-yaml-secret" not in text
    assert settings.kafka.sasl_password is not None
    assert settings.kafka.sasl_password.get_secret_value() == "hunter2-env-secret"
    assert "hunter2-env-secret" not in repr(settings.kafka.security())


def test_bad_value_names_the_field_and_how_to_fix_it(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HARNESS_R1_LOOP__BATCH_SIZE", "0")
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    expected = (
        "loop.batch_size: must be >= 1 (got 0); "
        "set HARNESS_R1_LOOP__BATCH_SIZE or loop.batch_size in the YAML"
    )
    assert expected in caught.value.problems
    assert expected in str(caught.value)
    assert isinstance(caught.value, SystemExit)


def test_every_bad_value_is_listed_at_once(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = write_yaml(
        tmp_path / "d.yaml",
        {
            "loop": {"engineer_backend": "gpt9", "rollout_fraction": 1.0},
            "guard": {"min_episodes": 50, "max_episodes": 10},
            "metrics": {"prot": 9000},
            "scheduler": {"grpo_cron": "* * *"},
        },
    )
    clean_env.setenv("HARNESS_R1_KAFKA__SASL_PASSWORD", "x")
    clean_env.setenv("HARNESS_R1_METRICS__PORT", "70000")
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert message.startswith(f"invalid settings (config file {config}):")
    problems = "\n".join(caught.value.problems)
    assert "loop.engineer_backend: must be one of 'template', 'smollm2', 'openai'" in problems
    assert "(got 'gpt9')" in problems
    assert "loop.rollout_fraction: must be < 1.0 (got 1.0)" in problems
    assert "guard: max_episodes=10 is below min_episodes=50" in problems
    assert "fix HARNESS_R1_GUARD__* or the guard section of the YAML" in problems
    assert "metrics.prot: unknown setting" in problems
    assert "known here: host, log_format, log_level, port" in problems
    assert "metrics.port: must be <= 65535 (got 70000)" in problems
    assert "scheduler.grpo_cron: '* * *'" in problems
    assert "e.g. '0 3 * * *'" in problems


def test_secret_values_are_not_echoed_in_errors(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "d.yaml", {"kafka": {"sasl_password": 123456789}})
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    assert "kafka.sasl_password: must be a string (got **********)" in str(caught.value)
    assert "123456789" not in str(caught.value)


def test_openai_backends_need_a_server(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HARNESS_R1_LOOP__ENGINEER_BACKEND", "openai")
    with pytest.raises(SettingsError, match="engineer 'openai' needs engineer_url"):
        load_settings(None)
    clean_env.setenv("HARNESS_R1_LOOP__ENGINEER_URL", "http://127.0.0.1:8000/v1")
    clean_env.setenv("HARNESS_R1_LOOP__ENGINEER_MODEL", "engineer")
    assert load_settings(None).loop.engineer_backend == "openai"


def test_graded_invalid_rewards_reach_the_loop_and_need_a_penalty(
    clean_env: pytest.MonkeyPatch,
) -> None:
    from harness_r1.daemon.wiring import loop_config

    clean_env.setenv("HARNESS_R1_LOOP__GRADED_INVALID", "1")
    with pytest.raises(SettingsError, match="set a negative loop.invalid_reward"):
        load_settings(None)  # with 0 nothing would be graded
    clean_env.setenv("HARNESS_R1_LOOP__INVALID_REWARD", "-0.25")
    options = loop_config(load_settings(None)).options
    assert options.graded_invalid and options.invalid_reward == -0.25
    clean_env.delenv("HARNESS_R1_LOOP__GRADED_INVALID")
    assert not loop_config(load_settings(None)).options.graded_invalid  # the paper's flat reward


def test_cron_accepts_crontab_and_null() -> None:
    assert SchedulerOptions(grpo_cron=" 0 3 * * * ").grpo_cron == "0 3 * * *"
    assert Settings().scheduler.grpo_cron is None


def test_unreadable_or_odd_config_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings(tmp_path / "missing.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="holds a list, not a mapping"):
        load_settings(listed)
    broken = tmp_path / "broken.yaml"
    broken.write_text("loop: [unclosed\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_settings(broken)
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert load_settings(empty).loop.k == 4


def test_flat_fields_still_work(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HARNESS_R1_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    clean_env.setenv("HARNESS_R1_CACHE", str(tmp_path / "cache"))
    clean_env.setenv("HARNESS_R1_DATA", str(tmp_path))
    clean_env.setenv("HARNESS_R1_CONTROL_TOPIC", "ctl")
    clean_env.setenv("HARNESS_R1_TRAJECTORY_TOPIC", "traj")
    clean_env.setenv("HARNESS_R1_KEYS_DIR", str(tmp_path / "keys"))
    settings = Settings()
    assert settings.require_bootstrap() == "127.0.0.1:9092"
    assert settings.kafka.group_id == "harness-r1-daemon"  # no clash with the nested group
    assert (settings.control_topic, settings.trajectory_topic) == ("ctl", "traj")
    assert settings.release_topic == "harness-r1.overlay-releases"
    assert settings.keys_dir == tmp_path / "keys"
    assert settings.data_root() == tmp_path
    assert settings.registry_url() == f"sqlite:///{tmp_path / 'cache' / 'state.db'}"
    assert settings.jobstore_url() == settings.registry_url()
    with pytest.raises(SystemExit, match="HARNESS_R1_SIGNING_KEY"):
        settings.require_signing_key()
    key = tmp_path / "k.pem"
    key.write_text("pem", encoding="utf-8")
    assert Settings(signing_key=key, state_url="sqlite://").require_signing_key() == key
    assert Settings(state_url="sqlite://").registry_url() == "sqlite://"
    with pytest.raises(SystemExit, match="HARNESS_R1_KAFKA_BOOTSTRAP"):
        Settings(kafka_bootstrap=None).require_bootstrap()


def test_a_missing_data_dir_says_where_to_point_it(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("HARNESS_R1_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    assert caught.value.problems == [
        f"data: {tmp_path / 'nowhere'} is not a directory; point it at a data root with "
        "alfworld/, dbbench/, webshop/; set HARNESS_R1_DATA or data in the YAML"
    ]


def test_the_defaults_are_the_domain_configs_own() -> None:
    """One source of defaults: settings left alone give the loop, gate, guard and target
    exactly the configs those modules default to."""
    from harness_r1.daemon.loop_config import LoopConfig
    from harness_r1.daemon.wiring import loop_config
    from harness_r1.harness.runtime import RunConfig
    from harness_r1.models.base import SamplingConfig

    settings = Settings()
    assert loop_config(settings) == LoopConfig()
    assert settings.loop.history_turns == RunConfig(agent_id="x").history_turns
    assert settings.loop.max_new_tokens == SamplingConfig().max_new_tokens


def test_sandbox_options_reach_the_canary_workers(clean_env: pytest.MonkeyPatch) -> None:
    """The defaults are the sandbox's own; a non-root deployment accepts a shared uid with
    one variable, and the episode hook budget can be lifted with null."""
    from harness_r1.harness.runtime import RunConfig
    from harness_r1.sandbox.sandbox_config import SandboxConfig

    assert Settings().sandbox.sandbox_config() == SandboxConfig()
    assert Settings().sandbox.episode_hook_budget_s == RunConfig().hook_budget_s
    clean_env.setenv("HARNESS_R1_SANDBOX__ACCEPT_SHARED_UID", "true")
    clean_env.setenv("HARNESS_R1_SANDBOX__MAX_WORKER_KILLS", "5")
    settings = Settings(sandbox={"episode_hook_budget_s": None})
    config = settings.sandbox.sandbox_config()
    assert config.accept_shared_uid and config.max_worker_kills == 5
    assert settings.sandbox.episode_hook_budget_s is None


def test_the_gate_profile_selects_the_attribution_limits(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """default: no limits (today's behaviour); advisory from the settings file: forced share
    at most 0.1, nothing won without the model, reaching the loop's gate, the template teacher
    and the engineer's prompt; a limit set beside the profile wins over it."""
    from harness_r1.daemon.wiring import build_proposer, loop_config

    default = Settings()
    assert default.gate.profile == "default" and default.gate.limits() == {}
    gate = loop_config(default).gate
    assert (gate.max_forced_share, gate.max_patch_alone_success) == (None, None)
    assert not build_proposer(default).teacher.config.advisory  # type: ignore[attr-defined]

    config = write_yaml(tmp_path / "daemon.yaml", {"gate": {"profile": "advisory"}})
    advisory = load_settings(config)
    gate = loop_config(advisory).gate
    assert (gate.max_forced_share, gate.max_patch_alone_success) == (0.1, 0.0)
    assert build_proposer(advisory).teacher.config.advisory  # type: ignore[attr-defined]

    clean_env.setenv("HARNESS_R1_GATE__MAX_FORCED_SHARE", "0.25")
    mixed = load_settings(config)
    assert mixed.gate.limits() == {"max_forced_share": 0.25, "max_patch_alone_success": 0.0}
    with pytest.raises(SettingsError, match="gate.profile"):
        load_settings(write_yaml(tmp_path / "bad.yaml", {"gate": {"profile": "strict"}}))


def test_the_guard_group_is_the_guards_own_config(clean_env: pytest.MonkeyPatch) -> None:
    """The guard's settings are declared once, on `deploy.GuardConfig`: the settings group is
    that class, an unknown key in it is named like any other, and the loop gets it as is."""
    from harness_r1.daemon.wiring import loop_config
    from harness_r1.deploy import GuardConfig

    settings = Settings(guard={"min_episodes": 30})
    assert type(settings.guard) is GuardConfig and settings.guard.min_episodes == 30
    assert loop_config(settings).guard is settings.guard
    clean_env.setenv("HARNESS_R1_GUARD__MIN_EPISODE", "30")
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    problems = "\n".join(caught.value.problems)
    assert "guard.min_episode: unknown setting; remove HARNESS_R1_GUARD__MIN_EPISODE" in problems
    assert "known here: alpha, max_episodes, method, min_detectable_effect" in problems
