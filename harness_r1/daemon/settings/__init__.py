"""Settings: read once at the entry point, passed down as plain objects.

Sources, highest priority first: keyword arguments, `HARNESS_R1_*` environment variables
(nested groups with `__`, e.g. `HARNESS_R1_LOOP__BATCH_SIZE=16`), a YAML file
(`Settings.from_file(path)` or `HARNESS_R1_CONFIG=path`), then the defaults below. Sources
merge field by field, so a YAML file can hold the deployment's settings and one environment
variable can still override a single nested value.

The defaults are not restated here: each field of the loop, gate, guard and target groups
takes its default from the domain config it configures (LoopConfig, GateConfig, GuardConfig,
RunConfig, SamplingConfig), and the CLI's options default to these settings.

The flat fields (data, cache, state_url, kafka_bootstrap, topics, keys) predate the nested
groups and keep their names and `HARNESS_R1_<FIELD>` variables; the CLI reads them today.
"""

from harness_r1.daemon.settings.errors import ENV_PREFIX, MASK, SettingsError, describe_error
from harness_r1.daemon.settings.groups import (
    GateOptions,
    KafkaOptions,
    LoopOptions,
    MetricsOptions,
    SandboxOptions,
    SchedulerOptions,
)
from harness_r1.daemon.settings.model import Settings, load_settings
from harness_r1.daemon.settings.reference import settings_reference
from harness_r1.daemon.settings.sources import CONFIG_ENV, read_config_file

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "GateOptions",
    "KafkaOptions",
    "LoopOptions",
    "MASK",
    "MetricsOptions",
    "SandboxOptions",
    "SchedulerOptions",
    "Settings",
    "SettingsError",
    "describe_error",
    "load_settings",
    "read_config_file",
    "settings_reference",
]
