"""Settings are defined once, in `gateway.config`: the serve flags, the `GATEWAY_*` variables, their
checks and the README's synopsis all follow from that definition."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import build_parser, serve_config
from gateway.config import SETTINGS, Config, ConfigError
from gateway.domain.security import MECHANISMS

ROOT = Path(__file__).resolve().parents[1]

# Names users' scripts and deployments rely on: renaming a field must not rename them unnoticed.
PUBLISHED_FLAGS = {
    "--host", "--kafka-port", "--native-port", "--admin-port", "--data-dir", "--redis-url", "--advertised-host",
    "--advertised-port", "--node-id", "--lease-ms", "--auto-create-topics", "--default-partitions",
    "--redis-fsync", "--max-frame-bytes", "--max-connections", "--idle-timeout", "--tcp-keepalive",
    "--fetch-max-bytes", "--connection-buffer-bytes", "--auth", "--sasl-mechanisms", "--super-users",
    "--acl-cache-seconds", "--tls-cert-file", "--tls-key-file", "--log-level",
}
PUBLISHED_VARIABLES = {"GATEWAY_" + f.removeprefix("--").replace("-", "_").upper() for f in PUBLISHED_FLAGS} | {
    "GATEWAY_ADMIN_TOKEN", "GATEWAY_WATERMARK_SNAPSHOT_MARKS", "GATEWAY_RETENTION_CHECK_INTERVAL",
    "GATEWAY_TXN_DEFAULT_TIMEOUT_MS", "GATEWAY_TXN_MAX_TIMEOUT_MS", "GATEWAY_TXN_REAPER_INTERVAL",
    "GATEWAY_WATERMARK_SNAPSHOT_INTERVAL",
}


def serve_parser() -> argparse.ArgumentParser:
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def serve_flags() -> set[str]:
    return {o for a in serve_parser()._actions for o in a.option_strings if o not in ("-h", "--help")}


def readme_synopsis() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(gateway serve .*?)```", text, re.S)
    assert block, "README.md has no `gateway serve` synopsis"
    return block.group(1)


def test_serve_flags_are_the_settings():
    assert serve_flags() == {s.option for s in SETTINGS.values() if s.option}
    assert PUBLISHED_FLAGS <= serve_flags()
    assert PUBLISHED_VARIABLES <= {s.env for s in SETTINGS.values()}


def test_readme_synopsis_names_every_flag_and_shows_true_defaults():
    synopsis = readme_synopsis()
    named = set(re.findall(r"--[a-z][a-z-]*", synopsis))
    assert named - serve_flags() == set(), "the synopsis names flags that do not exist"
    assert serve_flags() - named == set(), "the synopsis leaves flags out"
    by_option = {s.option: s for s in SETTINGS.values()}
    for option, value in re.findall(r"(--[a-z][a-z-]*) ([^\s\]]+)", synopsis):
        if value.isupper() or "|" in value or value.endswith(",..."):
            continue  # a placeholder, not a value
        setting = by_option[option]
        assert setting.parse(value) == setting.default, f"the synopsis shows {option} {value}: not its default"


def test_help_shows_each_default_and_variable():
    text = " ".join(serve_parser().format_help().split())
    assert "Kafka protocol port (default 9092; env GATEWAY_KAFKA_PORT)" in text
    assert "(default 104857600 = 100 MiB; env GATEWAY_MAX_FRAME_BYTES)" in text
    assert "--auto-create-topics true|false" in text and "--redis-fsync always|everysec|no" in text


def test_a_flag_beats_its_variable_which_beats_the_default():
    args = serve_parser().parse_args(["--kafka-port", "19092", "--auth", "true", "--idle-timeout", "2.5"])
    environ = {"GATEWAY_KAFKA_PORT": "29092", "GATEWAY_NATIVE_PORT": "26650", "GATEWAY_AUTO_CREATE_TOPICS": "false",
               "GATEWAY_DATA_DIR": "/srv/gw", "GATEWAY_ADMIN_TOKEN": "t0ken", "UNRELATED": "x"}
    config = serve_config(args, environ)
    assert (config.kafka_port, config.native_port, config.admin_port) == (19092, 26650, 8080)
    assert config.auth is True and config.auto_create_topics is False and config.idle_timeout == 2.5
    assert config.data_dir == Path("/srv/gw") and config.admin_token == "t0ken"
    assert serve_config(serve_parser().parse_args([]), {}) == Config()


def test_booleans_read_as_they_always_have():
    for word in ("1", "true", "TRUE", "yes", "on"):
        assert Config.from_env({"GATEWAY_AUTH": word}).auth is True
    for word in ("0", "false", "no", "off", ""):
        assert Config.from_env({"GATEWAY_AUTH": word}).auth is False


@pytest.mark.parametrize(("environ", "message"), [
    ({"GATEWAY_KAFKA_PORT": "70000"}, "--kafka-port (GATEWAY_KAFKA_PORT) must be between 0 and 65535, not 70000"),
    ({"GATEWAY_ADMIN_PORT": "http"}, "--admin-port (GATEWAY_ADMIN_PORT) must be an integer, not 'http'"),
    ({"GATEWAY_AUTH": "ture"}, "--auth (GATEWAY_AUTH) must be true or false, not 'ture'"),
    ({"GATEWAY_MAX_FRAME_BYTES": "0"}, "--max-frame-bytes (GATEWAY_MAX_FRAME_BYTES) must be above 0, not 0"),
    ({"GATEWAY_IDLE_TIMEOUT": "-1"}, "--idle-timeout (GATEWAY_IDLE_TIMEOUT) must be at least 0, not -1"),
    ({"GATEWAY_IDLE_TIMEOUT": "nan"}, "--idle-timeout (GATEWAY_IDLE_TIMEOUT) must be at least 0, not nan"),
    ({"GATEWAY_REDIS_FSYNC": "sometimes"}, "--redis-fsync (GATEWAY_REDIS_FSYNC) must be one of always, everysec, no"),
    ({"GATEWAY_SASL_MECHANISMS": "PLAIN,GSSAPI"}, "--sasl-mechanisms (GATEWAY_SASL_MECHANISMS) must be a "
                                                  "comma-separated list of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"GATEWAY_LOG_LEVEL": "loud"}, "--log-level (GATEWAY_LOG_LEVEL) must be a logging level"),
    ({"GATEWAY_TLS_KEY_FILE": "key.pem"}, "--tls-key-file (GATEWAY_TLS_KEY_FILE) needs --tls-cert-file"),
    ({"GATEWAY_TXN_DEFAULT_TIMEOUT_MS": "1000000"}, "--txn-default-timeout-ms (GATEWAY_TXN_DEFAULT_TIMEOUT_MS) "
                                                    "must be at most --txn-max-timeout-ms"),
    # Kafka 4.4's GroupCoordinatorConfig checks on group.streams.{,min.,max.}session.timeout.ms
    ({"GATEWAY_GROUP_STREAMS_SESSION_TIMEOUT_MS": "44999"},
     "--group-streams-session-timeout-ms (GATEWAY_GROUP_STREAMS_SESSION_TIMEOUT_MS) must be greater than or "
     "equal to --group-streams-min-session-timeout-ms (GATEWAY_GROUP_STREAMS_MIN_SESSION_TIMEOUT_MS) (45000)"),
    ({"GATEWAY_GROUP_STREAMS_MAX_SESSION_TIMEOUT_MS": "40000"},
     "--group-streams-max-session-timeout-ms (GATEWAY_GROUP_STREAMS_MAX_SESSION_TIMEOUT_MS) must be greater than "
     "or equal to --group-streams-min-session-timeout-ms"),
    ({"GATEWAY_GROUP_STREAMS_MIN_SESSION_TIMEOUT_MS": "0"},
     "--group-streams-min-session-timeout-ms (GATEWAY_GROUP_STREAMS_MIN_SESSION_TIMEOUT_MS) must be above 0"),
])
def test_a_bad_value_is_refused_naming_its_flag_and_variable(environ, message):
    with pytest.raises(ConfigError) as caught:
        Config.from_env(environ)
    assert str(caught.value).startswith(message)
    flag = SETTINGS[next(iter(environ)).removeprefix("GATEWAY_").lower()].option
    with pytest.raises(ConfigError):  # the same value given as a flag, or in code
        serve_config(serve_parser().parse_args([flag, next(iter(environ.values()))]), {})


def test_code_gets_the_same_checks():
    with pytest.raises(ConfigError, match=r"--native-port \(GATEWAY_NATIVE_PORT\) must be between"):
        Config(native_port=-1)
    assert Config(kafka_port=0, redis_fsync="always", log_level="debug").redis_fsync == "always"
    with pytest.raises(ConfigError, match=r"--group-streams-session-timeout-ms .* must be more than the streams "
                                          r"heartbeat interval \(5000\), not 5000"):
        Config(group_streams_min_session_timeout_ms=1000, group_streams_session_timeout_ms=5000)


def test_serve_stops_at_a_bad_value_with_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    proc = subprocess.run([sys.executable, "-m", "gateway", "serve", "--redis-fsync", "sometimes"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "gateway serve: error: --redis-fsync (GATEWAY_REDIS_FSYNC) must be one of always, everysec, no, not 'sometimes'"
    ]


def test_the_admin_token_is_a_variable_alone_and_kept_out_of_sight():
    token = SETTINGS["admin_token"]
    assert token.option is None and "--admin-token" not in serve_flags()
    assert "s3cret" not in repr(Config(admin_token="s3cret"))


def test_the_mechanisms_offered_by_default_are_every_one_known():
    assert SETTINGS["sasl_mechanisms"].default.split(",") == list(MECHANISMS)
