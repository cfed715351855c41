"""Architecture fitness rules beside the import graph's: small modules, short signatures, one
`Target` factory and one probe-client factory, no type-checker silence over another object's private
attributes.

Static (nothing is imported): every module under ``llmdoctor/`` and ``checks/`` is parsed. Where
the house does not meet a rule yet, the offenders are listed by name, and the list may only
shrink: a new offender fails, one that was fixed fails until its line goes (so the allowance
cannot outlive the debt), the list's length is asserted, and a listed offender still has a
ceiling (other helpers are editing them now, so their exact sizes are not pinned).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600
MAX_PARAMETERS = 10

#: Modules over MAX_LINES, with the most lines each may have until it is split (issue 24).
LONG_MODULES: dict[str, int] = {}
#: Functions over MAX_PARAMETERS (``path:qualname``), with the most each may take (issue 24,
#: typed specs at the front door). Count at 8a204ff: 16 (check, replay, run_and_exit and
#: compare_estimates, 36, 12, 12 and 11 then, take typed specs since: 5, 5, 6 and 7); none left
#: since `ProbeClient.__init__` (17 at 8234df8) takes a typed `ClientSettings`: 8.
LONG_SIGNATURES: dict[str, int] = {}
#: ``# type: ignore`` over another object's private attribute, by module: none left (the layered
#: client dropped httpcore's pool._network_backend).
PRIVATE_IGNORES: dict[str, int] = {}

#: The modules at the package root: the run's core (front-door types, the context, the runner, the
#: vocabulary a check is written in) and the features that drive a whole run. Everything else lives in
#: a package that names its layer (measurements, probes, analysis, diagnosis, logs, inputs, checklist,
#: reporting, render, cli, sim): a new module goes there, not here (issue 24; 51 at e20d0bf).
ROOT_MODULES = {
    "causes", "check", "context", "deadline", "doctor", "findings", "fleet", "limits", "options",
    "plan", "proxies", "redact", "runner", "serde", "sidebyside", "target", "watch",
}
MAX_ROOT_MODULES = 18
#: What each layer must not import, whatever the import's place (top, function, ``TYPE_CHECKING``):
#: the measurement data types import nothing of the package above them; analysis and the renderers
#: read measurements, never the probes that take them.
LAYERS: dict[str, tuple[str, ...]] = {
    "llmdoctor.measurements": ("llmdoctor.",),  # nothing of the package outside itself
    "llmdoctor.analysis": ("llmdoctor.probes",),
    "llmdoctor.render": ("llmdoctor.probes",),
}
#: Imports across a layer rule that the house still has (``importer -> imported``): this list may only
#: shrink. The probe handles (``BASELINE``, ``PREFILL``) and ``AnyProbe`` are how the analysis names
#: the measurement it reads; `Confidence` is a finding's, read by the fit's quality.
LAYER_DEBTS = {
    "llmdoctor.analysis.costs -> llmdoctor.probes.catalog",
    "llmdoctor.analysis.costs -> llmdoctor.probes.contract",
    "llmdoctor.analysis.measures -> llmdoctor.probes.catalog",
    "llmdoctor.analysis.measures -> llmdoctor.probes.contract",
    "llmdoctor.measurements.stats -> llmdoctor.findings",
}


def _files() -> Iterator[tuple[str, str]]:
    """(path relative to the root, source) of every module of the package and of checks/."""
    for base in ("llmdoctor", "checks"):
        for path in sorted((ROOT / base).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many parameters a caller can pass: every named one but self/cls, and *args and **kwargs."""
    a = fn.args
    named = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def _lines(source: str) -> int:
    return len(source.splitlines())


def _long_signatures() -> dict[str, int]:
    return {f"{path}:{name}": _parameters(fn) for path, source in _files()
            for name, fn in _functions(ast.parse(source)) if _parameters(fn) > MAX_PARAMETERS}


def _shrinks(found: dict[str, int], allowed: dict[str, int], what: str) -> None:
    new = {k: v for k, v in found.items() if k not in allowed}
    grown = {k: (v, allowed[k]) for k, v in found.items() if k in allowed and v > allowed[k]}  # over its ceiling
    fixed = sorted(set(allowed) - set(found))
    assert not new, f"{what}: new offenders {new}"
    assert not grown, f"{what}: offenders over their ceiling (now, ceiling) {grown}"
    assert not fixed, f"{what}: fixed, remove from the allow-list: {fixed}"


def test_no_module_is_over_600_lines() -> None:
    found = {path: _lines(source) for path, source in _files() if _lines(source) > MAX_LINES}
    _shrinks(found, LONG_MODULES, f"modules over {MAX_LINES} lines")
    assert len(LONG_MODULES) == 0


def test_no_function_takes_over_10_parameters() -> None:
    _shrinks(_long_signatures(), LONG_SIGNATURES, f"functions over {MAX_PARAMETERS} parameters")
    assert len(LONG_SIGNATURES) == 0


# Another object's private attribute: ``x._name`` where x is not self or cls (dunders are public).
_PRIVATE = re.compile(r"\b(?!self\b|cls\b)[A-Za-z_][\w]*(?:\(\))?\._[A-Za-z0-9]\w*(?<!__)\b")


def _private_ignores() -> dict[str, int]:
    found: dict[str, int] = {}
    for path, source in _files():
        for line in source.splitlines():
            code, _, comment = line.partition("#")
            if "type: ignore" in comment and _PRIVATE.search(code):
                found[path] = found.get(path, 0) + 1
    return found


def test_no_type_ignore_on_private_attributes() -> None:
    _shrinks(_private_ignores(), PRIVATE_IGNORES, "`# type: ignore` on another object's private attribute")
    assert len(PRIVATE_IGNORES) == 0


def _calls(name: str, skip: str) -> list[str]:
    """Where a call of `name` (a bare name or an attribute) is made, outside module `skip`."""
    found = []
    for path, source in _files():
        if path == skip:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if called == name:
                    found.append(f"{path}:{node.lineno}")
    return found


def test_a_target_is_made_only_by_the_factory() -> None:
    """`llmdoctor.target.build_target` (or `TargetSpec.build`) is the one way a `Target` is made."""
    makers = _calls("Target", "llmdoctor/target.py")
    assert makers == [], f"a Target built outside llmdoctor/target.py's factory: {makers}"


def test_a_probe_client_is_made_only_by_its_factory() -> None:
    """`ProbeClient.for_run` (its settings from `ClientSettings.of`) makes the client of the CLI's preflight
    and of the run: nothing else in the package calls the constructor."""
    assert _calls("ProbeClient", "llmdoctor/probes/client.py") == []
    assert len(_calls("for_run", "llmdoctor/probes/client.py")) >= 2  # the preflight and Context.client


def test_the_rules_see_what_they_must() -> None:
    """Guards against a vacuous pass: the scanners find what is known to be there."""
    assert sum(1 for _ in _files()) >= 150
    fn = ast.parse("def f(self, a, /, b, *c, d, **e): pass").body[0]
    assert isinstance(fn, ast.FunctionDef) and _parameters(fn) == 5
    assert _PRIVATE.search("pool._network_backend = x") and _PRIVATE.search("httpx.Client()._transport")
    assert not _PRIVATE.search("self._since_filter(stamp)") and not _PRIVATE.search("obj.__dict__")
    tree = ast.parse("class A:\n    def m(self):\n        def inner(): pass\n")
    assert [name for name, _ in _functions(tree)] == ["A.m", "A.m.inner"]
    src = "from llmdoctor.target import Target\nt = Target(base_url='x')\n"
    assert any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Target" for n in ast.walk(ast.parse(src)))


def _module_name(path: str) -> str:
    parts = path[: -len(".py")].split("/")
    if parts[0] == "checks":
        parts = ["llmdoctor", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_imports(source: str) -> set[str]:
    """Every module of the package `source` imports, wherever the import is (``TYPE_CHECKING`` included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("llmdoctor."))
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("llmdoctor."):
            found.add(node.module or "")
    return found


def _layer_crossings() -> set[str]:
    crossings = set()
    for path, source in _files():
        name = _module_name(path)
        for layer, banned in LAYERS.items():
            if name != layer and not name.startswith(layer + "."):
                continue
            for target in _package_imports(source):
                if target.startswith(banned) and not (target == layer or target.startswith(layer + ".")):
                    crossings.add(f"{name} -> {target}")
    return crossings


def test_the_root_holds_only_the_core() -> None:
    found = {p.stem for p in (ROOT / "llmdoctor").glob("*.py") if not p.name.startswith("__")}
    assert found - ROOT_MODULES == set(), "new root modules: put them in the package of their layer"
    assert ROOT_MODULES - found == set(), "gone from the root: remove them from ROOT_MODULES"
    assert len(ROOT_MODULES) <= MAX_ROOT_MODULES


def test_the_layers_import_only_downwards() -> None:
    crossings = _layer_crossings()
    assert crossings - LAYER_DEBTS == set(), "imports across a layer rule (see LAYERS)"
    assert LAYER_DEBTS - crossings == set(), "fixed: remove them from LAYER_DEBTS"
    assert len(LAYER_DEBTS) <= 5


def test_the_layer_rules_see_what_they_must() -> None:
    """Guards against a vacuous pass: the layer scanner names modules and finds the imports it must."""
    assert _module_name("checks/ld001_reachability.py") == "llmdoctor.checks.ld001_reachability"
    assert _module_name("llmdoctor/render/__init__.py") == "llmdoctor.render"
    nested = "if TYPE_CHECKING:\n    from llmdoctor.probes.x import A\ndef f():\n    import llmdoctor.y\n"
    assert _package_imports(nested) == {"llmdoctor.probes.x", "llmdoctor.y"}
    waterfall = (ROOT / "llmdoctor" / "analysis" / "waterfall.py").read_text(encoding="utf-8")
    assert "llmdoctor.measurements.timing" in _package_imports(waterfall)
    assert "llmdoctor.measurements" in LAYERS and "llmdoctor.probes" in LAYERS["llmdoctor.analysis"]

