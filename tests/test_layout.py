"""The shape of the code: dependencies run one way, no import cycle, modules a newcomer can read,
and a consumer library that services install without the web stack."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dlq_consumer", "dlq_dashboard")
MAX_LINES = 500

# Which layers a layer may import (its own included). Read top-down: web -> actions / entries ->
# ingest / db / nats. "base" is config, times, errors, numbers, flags, masking, redaction, files,
# scopes, sources, teams, mailing, sign_in, children, unpacking, surrogates, controls and actors;
# "consumer" is dlq_consumer.
LOWER = {
    "base": set(),
    "consumer": set(),
    "db": {"base"},
    "nats": {"base"},
    # Alerts are raised in the mirror's transactions and sent by a thread of the runtime.
    "alerts": {"db", "base"},
    "ingest": {"alerts", "db", "nats", "base", "consumer"},
    # A revision may compute what it stores with the code that computes it at ingest (group keys).
    "migrations": {"ingest", "alerts", "db", "base", "consumer"},
    "entries": {"ingest", "alerts", "db", "base", "consumer"},
    "accounts": {"db", "base"},
    "actions": {"entries", "ingest", "alerts", "db", "nats", "base", "consumer"},
    # What a reader may see (access/visible.py): over the entries, the jobs and the audit.
    "access": {"actions", "entries", "accounts", "ingest", "alerts", "db", "nats", "base", "consumer"},
    "runtime": {"actions", "entries", "ingest", "alerts", "db", "nats", "base", "consumer"},
    "web": {"runtime", "access", "actions", "entries", "accounts", "ingest", "alerts", "db", "nats", "base",
            "consumer"},
    "demo": {"runtime", "accounts", "nats", "base", "consumer"},
    "app": {"web", "runtime", "access", "actions", "entries", "accounts", "ingest", "alerts", "db", "nats", "base",
            "consumer", "demo"},
}


def layer_of(module: str) -> str:
    """The layer a module belongs to, by where it lives."""
    parts = module.split(".")
    if parts[0] == "dlq_consumer":
        return "consumer"
    if len(parts) == 1 or parts[1] == "cli":
        return "app"  # the factory and the admin commands it registers
    if parts[1:3] == ["db", "migrations"]:
        return "migrations"
    return {"config": "base", "times": "base", "errors": "base", "numbers": "base", "flags": "base",
            "masking": "base", "redaction": "base", "files": "base", "scopes": "base", "sources": "base",
            "teams": "base", "mailing": "base", "sign_in": "base", "children": "base", "unpacking": "base",
            "surrogates": "base", "actors": "base", "controls": "base"}.get(parts[1], parts[1])


def modules() -> dict[str, Path]:
    """Every module of the two packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """The project modules a module imports: inside functions and under ``if TYPE_CHECKING:``
    too, since a cycle hidden there is one all the same."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # "from package import module" imports that module; "from module import name" the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append(target)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, list[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()
            if not name.endswith("db.migrations.env")}  # run by Alembic, not imported


def layer_violations(graph) -> list[str]:
    """Imports that reach up, or sideways into a layer not below."""
    return [f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
            for module, targets in graph.items() for target in targets
            if layer_of(target) != layer_of(module) and layer_of(target) not in LOWER[layer_of(module)]]


def find_cycles(edges: dict[str, set[str]]) -> list[str]:
    """Every import cycle a depth-first walk meets, as "a -> b -> a"."""
    cycles, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return cycles


def test_every_module_imports_only_its_own_layer_or_the_layers_below(graph):
    assert sum(len(targets) for targets in graph.values()) > 300  # the walk sees the imports
    assert layer_violations(graph) == []


def test_no_import_cycle_not_even_through_a_lazy_or_a_type_only_import(graph):
    assert find_cycles({module: set(targets) for module, targets in graph.items()}) == []


def test_the_checks_catch_an_upward_import_and_a_cycle():
    upward = {"dlq_dashboard.db.engine": ["dlq_dashboard.web.pages"]}
    assert layer_violations(upward) == ["dlq_dashboard.db.engine (db) imports dlq_dashboard.web.pages (web)"]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]


def test_no_module_is_longer_than_a_newcomer_reads_in_one_go():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_importing_the_consumer_library_loads_no_web_or_database_stack():
    code = ("import sys, dlq_consumer; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'flask', 'werkzeug', 'jinja2', 'sqlalchemy', "
            "'dlq_dashboard', 'alembic'}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_lower_layers_import_without_the_web_stack():
    # The mirror and the actions run without Flask: a benchmark or a worker can load them alone.
    code = ("import sys, dlq_dashboard.ingest.mirror, dlq_dashboard.actions.republish, dlq_dashboard.runtime; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'flask', 'werkzeug', 'jinja2'}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _requirements(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith(("#", "-r"))]


def test_the_package_dependencies_and_extras_match_the_requirements_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = _requirements(ROOT / "requirements.txt")
    # `pip install .` gives a working dlq-dashboard command; `[dashboard]` names the same list.
    assert project["dependencies"] == requirements
    assert extras["dashboard"] == requirements
    # The consumer library needs nats-py and jsonschema, at the dashboard's pins, and nothing else.
    assert extras["consumer"] == [r for r in requirements if r.startswith(("nats-py", "jsonschema"))]
