"""Several sources on one desk (SPEC section 12), on real servers: two nats-servers, one of them
with two accounts, mirrored as three sources by one dashboard."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from dlq_dashboard.alerts.mail import alert_message
from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.db.models import Entry, FailureGroup
from dlq_dashboard.nats.bridge import Bridge
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.sources import Source, sources_of

from . import support


def dead_letter(subject: str, seq: int) -> tuple[str, bytes, dict]:
    return f"dlq.{subject}", b'{"n": %d}' % seq, support.dlq_headers(subject, **{"Dlq-Error": f"failed {seq}"})


def test_without_dlq_config_there_is_one_default_source_made_of_the_environment():
    settings = load_settings({"NATS_URL": "nats://127.0.0.1:4222", "DLQ_STREAM": "DEAD"})
    assert sources_of(settings) == (Source(name="default", nats_urls=("nats://127.0.0.1:4222",), stream="DEAD"),)


def test_a_bad_sources_file_stops_the_start_naming_the_file_the_source_and_the_key(tmp_path):
    path = support.sources_file(tmp_path, [{"name": "orders", "nats_url": "http://x", "stream": "DLQ"}])
    with pytest.raises(ConfigError) as caught:
        load_settings({"DLQ_CONFIG": path})
    assert str(caught.value) == (f"DLQ_CONFIG={path!r} is not valid: source 'orders', key 'nats_url': "
                                 "'http://x' is not valid: it is not a nats://, tls://, ws:// or wss:// URL")


def test_three_sources_are_mirrored_each_over_its_own_connection(three_sources, shared_server, nats_server,
                                                                 make_app, database_url):
    app = make_app(sources=load_settings({"DLQ_CONFIG": three_sources}).sources)
    support.start_sources(app)
    rt = runtime_of(app)
    assert list(rt.feeds) == ["orders", "billing", "shipping"]
    asyncio.run(support.publish_many(support.account_url(shared_server, "a"), [dead_letter("orders.created", 1)]))
    asyncio.run(support.publish_many(support.account_url(shared_server, "b"),
                                     [dead_letter("orders.created", 2), dead_letter("billing.charged", 3)]))
    asyncio.run(support.publish_many(nats_server.url, [dead_letter("shipping.sent", 4)]))

    def stored():
        with rt.engine.connect() as conn:
            return sorted(conn.execute(select(Entry.source, Entry.original_subject)).all())

    support.wait_for(lambda: len(stored()) == 4, message="the four dead letters")
    assert stored() == [("billing", "billing.charged"), ("billing", "orders.created"),
                        ("orders", "orders.created"), ("shipping", "shipping.sent")]
    with rt.engine.connect() as conn:
        groups = sorted(conn.execute(select(FailureGroup.source, FailureGroup.subject)).all())
    # The same failure in two sources is two groups.
    assert groups == [("billing", "billing.charged"), ("billing", "orders.created"),
                      ("orders", "orders.created"), ("shipping", "shipping.sent")]


@pytest.mark.parametrize("mirror_process", [False, True], ids=["mirror_in_process", "mirror_process"])
def test_with_several_sources_each_alert_text_names_its_groups_source(three_sources, shared_server, nats_server,
                                                                     make_app, receiver, mirror_process):
    """Three sources' same failure reached the channel as three identical "New failure group on
    orders.created" lines: the mirror raised its alerts with its source's own settings, which
    know of no other source, so the text never named one (python app.py's mirror process too)."""
    hook = receiver()
    app = make_app(sources=load_settings({"DLQ_CONFIG": three_sources}).sources, webhook_urls=(hook.url,),
                   public_url="https://dlq.example.com")
    if mirror_process:
        rt = runtime_of(app).start(mirror_process=True)
        support.wait_for(lambda: all(feed.mirror.leader and all(p.epoch for p in feed.mirror.progress.values())
                                     for feed in rt.feeds.values()), timeout=30, message="every source's mirror")
    else:
        support.start_sources(app)
    asyncio.run(support.publish_many(support.account_url(shared_server, "a"), [dead_letter("orders.created", 1)]))
    asyncio.run(support.publish_many(support.account_url(shared_server, "b"), [dead_letter("orders.created", 1)]))
    asyncio.run(support.publish_many(nats_server.url, [dead_letter("shipping.sent", 1)]))
    support.wait_for(lambda: len(hook.alerts("group.new")) == 3, timeout=30, message="the three group.new alerts")
    texts = {alert["group"]["source"]: alert["text"] for _, alert in hook.alerts("group.new")}
    assert texts == {
        "orders": 'New failure group on orders.created, (no reason) (source orders): "failed &lt;n&gt;" (1 entry so far) '
                  f"https://dlq.example.com/groups/{_group_of(app, 'orders')}",
        "billing": 'New failure group on orders.created, (no reason) (source billing): "failed &lt;n&gt;" (1 entry so far) '
                   f"https://dlq.example.com/groups/{_group_of(app, 'billing')}",
        "shipping": 'New failure group on shipping.sent, (no reason) (source shipping): "failed &lt;n&gt;" (1 entry so far) '
                    f"https://dlq.example.com/groups/{_group_of(app, 'shipping')}"}
    # An e-mail's subject and first line are the text: they name the source too.
    _, billing = [(h, a) for h, a in hook.alerts("group.new") if a["group"]["source"] == "billing"][0]
    mail = alert_message(json.dumps(billing), billing["id"], "oncall@example.com", "dlq@example.com")
    assert "(source billing)" in mail["Subject"] and "(source billing)" in mail.get_content().splitlines()[0]


def _group_of(app, source: str) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(FailureGroup.id).where(FailureGroup.source == source)).scalar_one()


def test_a_sources_connection_names_it_in_its_log_lines(tmp_path, caplog):
    settings = support.make_settings(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.nats.bridge"):
        bridge = Bridge(settings, ["nats://127.0.0.1:1"], "billing").start()
        try:
            support.wait_for(lambda: any(r.name == "dlq_dashboard.nats.bridge" for r in caplog.records),
                             message="the bridge's first warning")
        finally:
            bridge.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.nats.bridge"]
    assert lines and all(line.startswith("NATS of source billing: ") for line in lines)


# --- the start of `python app.py` with DLQ_CONFIG ----------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _bad_files(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(what is wrong, the file's text, the start of what follows "DLQ_CONFIG='<file>' is not valid: ")."""
    good = 'name = "orders"\nnats_url = "nats://127.0.0.1:4222"\nstream = "DLQ"\n'
    return [
        ("not TOML", "[[sources]\nname = 1\n", "it is not TOML (Expected ']]' at the end of an array declaration "
                                                 "(at line 1, column 10))"),
        ("an unknown key", f"[[sources]]\n{good}colour = \"red\"\n",
         "source 'orders', key 'colour': not a key of a source (known: advisory_stream, "),
        ("a bad URL", '[[sources]]\nname = "orders"\nnats_url = "http://nats:4222"\nstream = "DLQ"\n',
         "source 'orders', key 'nats_url': 'http://nats:4222' is not valid: it is not a nats://, tls://, ws:// or wss:// "
         "URL"),
        ("a port out of range", '[[sources]]\nname = "orders"\nnats_url = "nats://nats:65536"\nstream = "DLQ"\n',
         "source 'orders', key 'nats_url': 'nats://nats:65536' is not valid: its port is not a number from 1 to 65535"),
        ("no stream", '[[sources]]\nname = "orders"\nnats_url = "nats://127.0.0.1:4222"\n',
         "source 'orders', key 'stream': name the dead-letter stream it mirrors"),
        ("a name used twice", f"[[sources]]\n{good}[[sources]]\n{good.replace('DLQ', 'DLQ2')}",
         "source 'orders', key 'name': the name is used twice (the [[sources]] tables 1 and 2)"),
        ("a missing creds file", f"[[sources]]\n{good}creds = \"orders.creds\"\n",
         f"source 'orders', key 'creds': 'orders.creds' ({tmp_path / 'orders.creds'}) is not a file"),
        ("a missing tls_ca file", f"[[sources]]\n{good}tls_ca = \"/etc/nowhere/ca.pem\"\n",
         "source 'orders', key 'tls_ca': '/etc/nowhere/ca.pem' is not a file"),
        ("an old name that is not a name", f"[[sources]]\n{good}renamed_from = [\"old\", \"a:b\"]\n",
         "source 'orders', key 'renamed_from': use the source's old name or a list of them, each 1 to 40 letters, "
         "digits, '_' or '-'"),
        ("an old name still configured",
         f"[[sources]]\n{good}renamed_from = \"billing\"\n[[sources]]\n"
         f"{good.replace('DLQ', 'DLQ2').replace('orders', 'billing')}",
         "source 'orders', key 'renamed_from': 'billing' is a configured source; name a source no longer in this "
         "file"),
        ("an old name claimed twice",
         f"[[sources]]\n{good}renamed_from = \"old\"\n[[sources]]\n"
         f"{good.replace('DLQ', 'DLQ2').replace('orders', 'billing')}renamed_from = [\"older\", \"old\"]\n",
         "source 'billing', key 'renamed_from': source 'orders' already names 'old'; an old name goes to one source"),
    ]


def test_renamed_from_is_read_as_a_name_or_a_list_of_names_and_each_bad_one_is_named(tmp_path):
    from dlq_dashboard.sources import SourcesError, load_sources, renamed_sources

    path = tmp_path / "sources.toml"
    path.write_text('[[sources]]\nname = "two"\nnats_url = "nats://h:4222"\nstream = "DLQ"\nrenamed_from = "one"\n'
                    '[[sources]]\nname = "b"\nnats_url = "nats://h:4222"\nstream = "D2"\nrenamed_from = ["x", "y"]\n')
    two, b = load_sources(str(path))
    assert (two.renamed_from, b.renamed_from) == (("one",), ("x", "y"))
    assert renamed_sources([two, b]) == {"one": "two", "x": "b", "y": "b"}
    for what, text, said in _bad_files(tmp_path):
        if "old name" in what:
            path.write_text(text)
            with pytest.raises(SourcesError) as raised:
                load_sources(str(path))
            assert str(raised.value) == said, what


def _app_py(tmp_path: Path, environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", "0"], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **environ},
                          capture_output=True, text=True, timeout=90)


@pytest.mark.slow
def test_a_bad_sources_file_stops_python_app_py_with_one_line_naming_the_file_the_source_and_the_key(tmp_path):
    for what, text, said in _bad_files(tmp_path):
        path = tmp_path / "sources.toml"
        path.write_text(text)
        result = _app_py(tmp_path, {"DLQ_CONFIG": str(path)})
        assert result.returncode == 2, (what, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (what, result.stderr)
        assert lines[0].startswith(f"error: DLQ_CONFIG={str(path)!r} is not valid: {said}"), (what, lines[0])


@pytest.mark.slow
def test_a_sources_file_that_cannot_be_read_stops_python_app_py_in_one_line(tmp_path):
    result = _app_py(tmp_path, {"DLQ_CONFIG": str(tmp_path)})  # a folder: it cannot be read as a file
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: DLQ_CONFIG={str(tmp_path)!r} is not valid: the file cannot be read (Is a directory); "
        "use a TOML file of [[sources]] tables, each with name, nats_url and stream"]


def test_the_variables_a_sources_file_replaces_are_named_when_they_are_set_beside_it(three_sources):
    from dlq_dashboard.config import Settings
    from dlq_dashboard.sources import unused_variables

    assert unused_variables(load_settings({"NATS_URL": "nats://h:4222", "DLQ_STREAM": "D"}), Settings()) == []
    settings = load_settings({"DLQ_CONFIG": three_sources, "NATS_URL": "nats://h:4222", "DLQ_STREAM": "D",
                              "DLQ_REPUBLISH_RATE": "5"})
    assert unused_variables(settings, Settings()) == ["NATS_URL", "DLQ_STREAM"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_python_app_py_prints_a_line_per_source_and_warns_that_nats_url_is_not_used(tmp_path, three_sources,
                                                                                    shared_server, nats_server):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("DLQ_", "NATS_", "DATABASE_URL"))},
           "DLQ_CONFIG": three_sources, "NATS_URL": "nats://127.0.0.1:1", "SECRET_KEY": "sources-start",
           "PYTHONUNBUFFERED": "1"}
    stdout_path, stderr_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", "0"], cwd=tmp_path, env=env,
                                stdout=stdout, stderr=stderr, preexec_fn=support.ends_with_this_process())
    try:
        def served() -> bool:
            assert proc.poll() is None, stderr_path.read_text(errors="replace")
            return "DLQ Dashboard at " in stdout_path.read_text()

        support.wait_for(served, timeout=60, message="app.py to serve")
        support.wait_for(lambda: "this process mirrors DLQ_SHIPPING" in stderr_path.read_text(), timeout=30,
                         message="the third source mirrored")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    lines = stdout_path.read_text().splitlines()
    port = shared_server.port
    # No bundled server (the sources name theirs), one line a source without its password, then the address.
    assert lines[:3] == [f"Source orders: stream DLQ on nats://127.0.0.1:{port}",
                         f"Source billing: stream DLQ on nats://127.0.0.1:{port}",
                         f"Source shipping: stream DLQ_SHIPPING on {nats_server.url}"], lines
    assert lines[3].startswith("DLQ Dashboard at http://127.0.0.1:")
    stderr = stderr_path.read_text()
    assert "DLQ_CONFIG names the sources, so NATS_URL is not used (each source's keys in the file are)" in stderr
    assert "pa@" not in stderr + stdout_path.read_text() and "pb@" not in stderr
    assert "nats://127.0.0.1:1:" not in stderr and "nats://127.0.0.1:1;" not in stderr  # never tried


def test_two_accounts_of_one_server_may_each_have_a_stream_of_the_same_name(tmp_path):
    for name in ("orders.creds", "billing.creds"):
        (tmp_path / name).write_text("-----BEGIN NATS USER JWT-----\n")
    url = ["nats://nats-a1:4222", "nats://nats-a2:4222"]
    path = support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": url, "creds": "orders.creds", "stream": "DLQ"},
        {"name": "billing", "nats_url": url, "creds": "billing.creds", "stream": "DLQ"}])
    sources = load_settings({"DLQ_CONFIG": path}).sources
    assert [(s.name, s.creds, s.stream) for s in sources] == [
        ("orders", str(tmp_path / "orders.creds"), "DLQ"), ("billing", str(tmp_path / "billing.creds"), "DLQ")]
    # The same server as the same user is the same account: its stream once.
    path = support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": url, "creds": "orders.creds", "stream": "DLQ"},
        {"name": "billing", "nats_url": url[1], "creds": "orders.creds", "stream": "DLQ"}])
    with pytest.raises(ConfigError, match="source 'billing', key 'stream': source 'orders' already mirrors stream"):
        load_settings({"DLQ_CONFIG": path})
