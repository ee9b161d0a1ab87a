"""The installed command: the wheel built from the checkout, installed in a fresh venv outside it,
runs ``dlq-dashboard`` against a real nats-server (a 200 from /login, a dead letter listed) and
its admin commands, with templates, static files and migrations from inside the package."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats
import pytest
import requests

from dlq_dashboard.nats.server import free_port, listens_on

from . import support

ROOT = Path(__file__).resolve().parent.parent
# What a clean clone holds and the build needs; a checkout's own build output stays out.
IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", "instance",
                                 ".pytest_cache", "bench", "tests", "docs")

pytestmark = [pytest.mark.installed, pytest.mark.slow]


def build_wheel(tmp_path: Path) -> Path:
    """``pip wheel`` over a copy of the checkout (the build writes build/ and *.egg-info into the
    tree it builds), by the setuptools and wheel of requirements-dev.txt: an isolated build would
    download setuptools from the package index at every run."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(dist), str(source)], check=True, capture_output=True, timeout=180)
    (wheel,) = dist.glob("dlq_dashboard-*.whl")
    return wheel


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without PYTHONPATH (the checkout must not be importable) or settings of
    the test run."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NATS_URL", "DATABASE_URL", "SECRET_KEY") and not k.startswith("DLQ_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def install(tmp_path: Path) -> tuple[Path, Path]:
    """A venv (over the system's site-packages, so the dependencies are not downloaded again)
    with the wheel installed; returns (wheel, venv's bin folder).

    The venv has no pip of its own (installing one is most of a venv's making): the venv's
    python runs the system's pip, which installs into the venv it runs in."""
    tmp_path.mkdir()
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    bin_dir = venv / "bin"
    # --no-index: every dependency the wheel declares must already be there (pip checks them).
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=180, cwd=tmp_path, env=clean_env())
    return wheel, bin_dir


def check_the_wheel_carries_the_templates_static_files_migrations_and_demo_schemas(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    # static/vendor (axe-core) serves the tests only: the README says the wheel leaves it out.
    testing_only = [f"dlq_dashboard/{p.relative_to(ROOT)}" for p in (ROOT / "static" / "vendor").rglob("*")]
    wanted = [f"dlq_dashboard/{p.relative_to(ROOT)}" for folder in ("templates", "static")
              for p in (ROOT / folder).rglob("*") if p.is_file() and "vendor" not in p.parts]
    package = ROOT / "dlq_dashboard"
    wanted += [f"dlq_dashboard/{p.relative_to(package)}" for pattern in ("db/migrations/**/*.py", "demo/schemas/*.json")
               for p in package.glob(pattern) if "__pycache__" not in p.parts]
    assert len(wanted) > 30 and testing_only
    assert sorted(set(wanted) - names) == [] and sorted(set(testing_only) & names) == []


def check_the_installed_package_is_the_one_in_the_venv_not_the_checkout(installed, tmp_path):
    _, bin_dir = installed
    code = ("import dlq_dashboard as d, json; "
            "print(json.dumps([d.__file__, d.resource_folder('templates'), d.resource_folder('static')]))")
    result = subprocess.run([str(bin_dir / "python"), "-c", code], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=True)
    venv = bin_dir.parent.resolve()
    for path in json.loads(result.stdout):
        assert Path(path).resolve().is_relative_to(venv), path


def check_the_installed_command_and_its_admin_commands_answer_help(installed, tmp_path):
    _, bin_dir = installed
    wanted = ((["--help"], "--nats-port"), (["users", "--help"], "create"), (["tokens", "--help"], "revoke"),
              (["entries", "--help"], "republish"), (["purge", "--help"], "--older-than"))

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([str(bin_dir / "dlq-dashboard"), *args], cwd=tmp_path, env=clean_env(),
                              capture_output=True, text=True, timeout=60)

    with ThreadPoolExecutor(len(wanted)) as pool:  # five process starts side by side
        results = list(pool.map(run, [args for args, _ in wanted]))
    for (args, expected), result in zip(wanted, results):
        assert result.returncode == 0, (args, result.stderr)
        assert expected in result.stdout, (args, result.stdout)
    assert not (tmp_path / "instance").exists(), "help opened a database"


def check_the_installed_command_serves_the_login_page_and_lists_a_dead_letter(installed, tmp_path, nats_server):
    _, bin_dir = installed
    command = str(bin_dir / "dlq-dashboard")
    cwd = tmp_path / "run"
    cwd.mkdir()
    env = clean_env(NATS_URL=nats_server.url)

    async def create_stream():
        nc = await nats.connect(nats_server.url)
        await nc.jetstream().add_stream(name="DLQ", subjects=["dlq.>"])
        await nc.close()

    support.run(create_stream())
    created = subprocess.run([command, "tokens", "create", "ci", "--role", "viewer"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    # The default DATABASE_URL and instance/ are relative to the current directory.
    assert (cwd / "instance" / "dlq.sqlite3").is_file()

    port = free_port()
    log = open(tmp_path / "dashboard.log", "wb")
    try:
        proc = subprocess.Popen([command, "--port", str(port)], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=support.ends_with_this_process())
    finally:
        log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        def login_page():
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                answered = requests.get(f"{base}/login", timeout=5).status_code == 200
            except requests.ConnectionError:
                return False
            return answered and listens_on(proc.pid, port) is not False  # not another's on the port

        support.wait_for(login_page, timeout=30, message="a 200 from /login")
        assert requests.get(f"{base}/static/app.css", timeout=5).status_code == 200
        support.run(support.publish_many(nats_server.url, [
            ("dlq.orders.created", b'{"order": 29}', support.dlq_headers(Dlq_Reason="fatal", Dlq_Error="boom"))]))

        def listed():
            response = requests.get(f"{base}/api/entries", headers=support.bearer(token), timeout=5)
            assert response.status_code == 200, response.text
            return response.json()["entries"]

        entries = support.wait_for(listed, timeout=20, message="the dead letter listed")
        assert [(e["original_subject"], e["reason"], e["payload_text"]) for e in entries] == \
            [("orders.created", "fatal", '{"order": 29}')]
        assert "Created the first user: admin / " in (tmp_path / "dashboard.log").read_text()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, (tmp_path / "dashboard.log").read_text()


@pytest.mark.timeout(240)
def test_the_wheel_installed_in_a_fresh_venv_runs_the_dashboard_and_its_admin_commands(tmp_path, nats_server):
    # One test, so that the wheel is built once even when the suite runs in several processes.
    installed = install(tmp_path / "install")
    check_the_wheel_carries_the_templates_static_files_migrations_and_demo_schemas(installed)
    for name in ("venv-check", "help", "serve"):
        (tmp_path / name).mkdir()
    check_the_installed_package_is_the_one_in_the_venv_not_the_checkout(installed, tmp_path / "venv-check")
    check_the_installed_command_and_its_admin_commands_answer_help(installed, tmp_path / "help")
    check_the_installed_command_serves_the_login_page_and_lists_a_dead_letter(installed, tmp_path / "serve", nats_server)
