"""Settings are read from the environment once; a bad value is refused in one line."""

import pytest

from dlq_dashboard.config import ConfigError, Settings, load_settings


def test_defaults_follow_the_spec():
    s = load_settings({})
    assert s.database_url == "sqlite:///instance/dlq.sqlite3"
    assert s.dlq_stream == "DLQ" and s.dlq_subjects == ("dlq.>",)
    assert s.capture_advisories is True and s.delete_on_close is False
    assert s.republish_rate == 200 and s.bundled_nats is True
    assert s.stream_replicas == 1
    assert s.webhook_urls == () and s.webhook_secret is None and s.alert_threshold == 100
    assert s.public_url is None
    assert s.retention == 30 * 86400


def test_every_variable_is_read():
    s = load_settings({"NATS_URL": "nats://a:4222, nats://b:4222", "DATABASE_URL": "sqlite:////tmp/x.db",
                       "DLQ_STREAM": "DEAD", "DLQ_SUBJECTS": "dead.>,failed.*",
                       "DLQ_CAPTURE_ADVISORIES": "false", "DLQ_DELETE_ON_CLOSE": "yes",
                       "DLQ_REPUBLISH_RATE": "0", "SECRET_KEY": "k", "NATS_USER": "u", "NATS_PASSWORD": "p",
                       "DLQ_REPLICAS": "3", "DLQ_WEBHOOK_URL": "https://a.example/hook, http://b:8080/x",
                       "DLQ_WEBHOOK_SECRET": "s3cret", "DLQ_ALERT_THRESHOLD": "25",
                       "DLQ_PUBLIC_URL": "https://dlq.example.com/"})
    assert s.nats_urls == ("nats://a:4222", "nats://b:4222")
    assert s.dlq_stream == "DEAD" and s.dlq_subjects == ("dead.>", "failed.*")
    assert s.capture_advisories is False and s.delete_on_close is True and s.republish_rate == 0
    assert (s.nats_user, s.nats_password, s.secret_key) == ("u", "p", "k")
    assert s.stream_replicas == 3
    assert s.webhook_urls == ("https://a.example/hook", "http://b:8080/x") and s.webhook_secret == "s3cret"
    assert s.alert_threshold == 25 and s.public_url == "https://dlq.example.com"


@pytest.mark.parametrize("variable,value", [
    ("NATS_URL", "localhost:4222"),
    ("DLQ_STREAM", "has space"),
    ("DLQ_STREAM", "dots.are.not.allowed"),
    ("DLQ_SUBJECTS", "dlq.>.x"),
    ("DLQ_SUBJECTS", "a..b"),
    ("DLQ_CAPTURE_ADVISORIES", "maybe"),
    ("DLQ_DELETE_ON_CLOSE", "2"),
    ("DLQ_REPUBLISH_RATE", "-5"),
    ("DLQ_REPUBLISH_RATE", "fast"),
    ("DLQ_REPLICAS", "0"),
    ("DLQ_REPLICAS", "6"),
    ("DLQ_REPLICAS", "three"),
    ("DLQ_SCHEMAS", "/no/such/folder"),
    ("NATS_CREDS", "/no/such/file.creds"),
    ("DATABASE_URL", "not a url"),
    ("NATS_URL", "nats://nats.example:99999"),  # taken, to fail at every connection attempt
    ("NATS_URL", "nats://:4222"),
    ("NATS_URL", "nats://a:4222,nats://b:0"),
    ("DATABASE_URL", "mysql://dlq@db.example/dlq"),  # was a traceback about MySQLdb
    ("DATABASE_URL", "postgresql+psycopg2://dlq@db.example/dlq"),
    ("DLQ_WEBHOOK_URL", "notaurl"),
    ("DLQ_WEBHOOK_URL", "ftp://example.com/hook"),
    ("DLQ_WEBHOOK_URL", "https://example.com:port/hook"),
    ("DLQ_ALERT_THRESHOLD", "0"),
    ("DLQ_ALERT_THRESHOLD", "many"),
    ("DLQ_PUBLIC_URL", "dlq.example.com"),
    ("DLQ_PUBLIC_URL", "https://dlq.example.com/?x=1"),
    ("DLQ_RETENTION", "abc"),
    ("DLQ_RETENTION", "30"),
    ("DLQ_RETENTION", "-1d"),
    ("DLQ_RETENTION", "1.5d"),
    ("DLQ_RETENTION", "²d"),  # a digit to str.isdigit, not to int()
    ("DLQ_LOGIN_FAILURES_PER_NAME_AND_ADDRESS", "0"),
    ("DLQ_LOGIN_FAILURES_PER_ADDRESS", "many"),
    ("DLQ_LOGIN_FAILURES_PER_NAME", "-1"),
    ("DLQ_LOGIN_SLOWDOWN_MAX", "30"),
    ("DLQ_LOGIN_SLOWDOWN_MAX", "2h"),
    ("DLQ_LOGIN_FAILURE_WINDOW", "0"),
    ("DLQ_LOGIN_FAILURE_WINDOW", "2d"),
])
def test_a_bad_value_is_refused_with_one_line_naming_the_variable(variable, value):
    with pytest.raises(ConfigError) as raised:
        load_settings({variable: value})
    message = str(raised.value)
    assert message.startswith(f"{variable}=") and "\n" not in message
    assert "use" in message  # says what it accepts


def test_the_login_throttle_is_configured_like_everything_else():
    defaults = load_settings({})
    assert (defaults.login_failures_per_name_and_address, defaults.login_failures_per_address,
            defaults.login_failures_per_name, defaults.login_slowdown_max, defaults.login_failure_window) == (
        5, 20, 20, 30.0, 300.0)
    s = load_settings({"DLQ_LOGIN_FAILURES_PER_NAME_AND_ADDRESS": "3", "DLQ_LOGIN_FAILURES_PER_ADDRESS": "50",
                       "DLQ_LOGIN_FAILURES_PER_NAME": "10", "DLQ_LOGIN_SLOWDOWN_MAX": "1m",
                       "DLQ_LOGIN_FAILURE_WINDOW": "1h"})
    assert (s.login_failures_per_name_and_address, s.login_failures_per_address, s.login_failures_per_name,
            s.login_slowdown_max, s.login_failure_window) == (3, 50, 10, 60.0, 3600.0)
    with pytest.raises(ConfigError, match=r"^DLQ_LOGIN_SLOWDOWN_MAX='2h' is not valid: use a duration from 1s "
                                          r"to 1h, such as 30s or 5m$"):
        load_settings({"DLQ_LOGIN_SLOWDOWN_MAX": "2h"})


def test_the_web_layer_reads_no_setting_of_its_own_from_the_flask_config_or_the_environment():
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "dlq_dashboard"
    # Flask's and Flask-WTF's own options (PERMANENT_SESSION_LIFETIME, WTF_CSRF_METHODS) are theirs.
    flasks = {"PERMANENT_SESSION_LIFETIME", "WTF_CSRF_METHODS"}
    found = []
    for path in package.rglob("*.py"):
        if path.name == "config.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os":
                found.append(f"{path.relative_to(package)}: os.environ")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getenv":
                found.append(f"{path.relative_to(package)}: os.getenv")
            if isinstance(node, (ast.Subscript, ast.Call)):
                target = node.value if isinstance(node, ast.Subscript) else node.func
                if isinstance(node, ast.Call) and isinstance(target, ast.Attribute) and target.attr == "get":
                    target, key = target.value, node.args[0] if node.args else None
                else:
                    key = node.slice if isinstance(node, ast.Subscript) else None
                if isinstance(target, ast.Attribute) and target.attr == "config" and isinstance(key, ast.Constant) \
                        and key.value not in flasks:
                    found.append(f"{path.relative_to(package)}: config[{key.value!r}]")
    assert found == []


def test_replicas_are_a_whole_number_from_1_to_5():
    assert [load_settings({"DLQ_REPLICAS": v}).stream_replicas for v in ("1", "3", " 5 ")] == [1, 3, 5]
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_REPLICAS": "7"})
    assert str(raised.value) == "DLQ_REPLICAS='7' is not valid: use a whole number from 1 to 5"


def test_flags_override_the_environment():
    s = load_settings({"DLQ_STREAM": "A"}, dlq_stream="B")
    assert s.dlq_stream == "B"


@pytest.mark.slow
def test_the_app_refuses_to_start_with_a_bad_value(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "app.py"], env={"PATH": "/usr/bin:/bin", "DLQ_REPUBLISH_RATE": "x",
                                                             "HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=60,
                            cwd=__import__("os").path.dirname(__import__("os").path.dirname(__file__)))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: DLQ_REPUBLISH_RATE='x' is not valid")


def test_settings_are_immutable():
    with pytest.raises(Exception):
        Settings().dlq_stream = "X"


def test_the_admin_cli_refuses_a_bad_value_in_one_line_too(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(__file__))
    result = subprocess.run([sys.executable, "-m", "flask", "--app", os.path.join(root, "app.py"), "users", "list"],
                            env={**os.environ, "DLQ_STREAM": "no spaces allowed"}, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "error: DLQ_STREAM='no spaces allowed' is not valid: use a stream name of letters, digits, '-' and '_'")


def test_retention_is_a_duration_and_zero_keeps_forever():
    assert [load_settings({"DLQ_RETENTION": v}).retention for v in ("90s", "15m", "12h", "30d", " 7D ", "0")] == [
        90, 900, 43200, 30 * 86400, 7 * 86400, 0]
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_RETENTION": "abc"})
    assert str(raised.value) == ("DLQ_RETENTION='abc' is not valid: use a duration such as 30d, 12h or 90s, "
                                 "or 0 to keep resolved entries forever")


@pytest.mark.parametrize("raw, quoted, lacks", [
    ("order_id", "'order_id'", "has no '=' and is not a JSON Pointer (they start with '/')"),
    ("Cust=/customer/id, order_id", "'order_id'", "has no '=' and is not a JSON Pointer (they start with '/')"),
    ("Cust=", "'Cust='", "has no JSON Pointer after its '='"),
])
def test_a_list_field_without_its_pointer_is_quoted_with_what_it_lacks(raw, quoted, lacks):
    with pytest.raises(ConfigError) as raised:
        load_settings({"DLQ_LIST_FIELDS": raw})
    assert str(raised.value) == f"DLQ_LIST_FIELDS={raw!r} is not valid: the item {quoted} {lacks}; write Label=/pointer or /pointer"
    with pytest.raises(ConfigError) as raised:  # a pointer that is not one is quoted as it was
        load_settings({"DLQ_LIST_FIELDS": "Cust=bad"})
    assert "'bad' is not a JSON Pointer to a field" in str(raised.value)
