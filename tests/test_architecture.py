"""The core stays pure: no web, database or Ray imports in the statistical packages."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"fastapi", "sqlalchemy", "starlette", "uvicorn", "psycopg", "ray", "httpx"}
# Ray is allowed in exactly one module: the one that fans work out
ALLOWED = {("adaptive/prompts/parallel.py", "ray")}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_packages_do_not_import_web_database_or_ray():
    offenders = []
    for package in ("stan_free_models", "adaptive"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name in imported_roots(path) & FORBIDDEN:
                if (rel, name) not in ALLOWED:
                    offenders.append(f"{rel} imports {name}")
    assert offenders == []


def test_models_do_not_import_the_decision_layer_or_services():
    for path in sorted((ROOT / "stan_free_models").rglob("*.py")):
        assert not imported_roots(path) & {"adaptive", "services"}, path


# ---------------------------------------------------------------- issue 14: boundaries

PACKAGES = ("adaptive", "services", "stan_free_models", "evalset")
#: modules held to the 600-line rule: the packages, and the tests, scripts, research and
#: benchmarks that read like them
LINE_LIMITED = (
    "adaptive/**/*.py",
    "stan_free_models/**/*.py",
    "services/**/*.py",
    "evalset/**/*.py",
    "tests/**/*.py",
    "scripts/**/*.py",
    "research/**/*.py",
    "benchmarks/**/*.py",
)
MAX_LINES = 600


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """Project modules that ``path`` imports, wherever and however: in function bodies (a
    function-level import hides a cycle, it does not break it), under ``if TYPE_CHECKING``
    (a type-only import still ties the two modules together), relative imports, and dotted
    module names written as strings (the tables ``importlib.import_module`` loads from: the
    CLI's commands, the API's routers, lazy attributes)."""
    tree = ast.parse(path.read_text())
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    docstrings = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*parts, module] if module else parts)
            for alias in node.names:
                full = f"{module}.{alias.name}"
                found.add(full if full in modules else module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                found.add(node.value)
    return (found & modules) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each back edge of a depth-first walk (none iff the graph has none)."""
    visiting: list[str] = []
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycles.append(visiting[visiting.index(module) :] + [module])
            return
        visiting.append(module)
        for target in sorted(graph[module]):
            visit(target)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    return cycles


def test_the_import_graph_counts_every_kind_of_import(tmp_path):
    """The edges a graph of runtime imports alone missed: type-only, function-level,
    relative, and modules loaded by name."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""pkg.c"""\nCOMMANDS = {"pkg.b": ("b",)}\n')
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import T\n"
        "def f():\n    from . import d\n"
    )
    modules = {"pkg", "pkg.b", "pkg.c", "pkg.d"}
    assert _imports(package / "__init__.py", modules, tmp_path) == {"pkg.b"}
    assert _imports(package / "b.py", modules, tmp_path) == {"pkg.c", "pkg.d"}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]


def test_the_import_graph_has_no_cycle():
    paths = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph = {m: _imports(p, set(paths)) for m, p in paths.items()}
    assert graph["services.cli"] >= {"services.cli.bt", "services.cli.server"}  # by name
    cycles = [" -> ".join(cycle) for cycle in _cycles(graph)]
    assert cycles == [], "\n".join(cycles)


#: thread-starting names; locks (threading.RLock serialising runs of a cached sampler),
#: thread-local storage (NumPyro's handler stack, stan_free_models/threadsafe.py) and the
#: calling thread's id (adaptive/estimation/compile_clock.py) are not threads
THREAD_NAMES = {"Thread", "Timer", "ThreadPoolExecutor", "ProcessPoolExecutor", "start_new_thread"}
THREAD_MODULES = {"concurrent", "multiprocessing", "_thread"}
THREADING_ALLOWED = {
    "Lock",
    "RLock",
    "Event",
    "Condition",
    "Semaphore",
    "BoundedSemaphore",
    "local",
    "get_ident",
}


def _core_files(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def _thread_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in THREAD_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in THREAD_MODULES:
                found.append(node.module)
            elif node.module == "threading":
                found += [a.name for a in node.names if a.name not in THREADING_ALLOWED]
        elif isinstance(node, ast.Attribute):
            if node.attr in THREAD_NAMES:
                found.append(node.attr)
            elif (
                isinstance(node.value, ast.Name)
                and node.value.id == "threading"
                and node.attr not in THREADING_ALLOWED
            ):
                found.append(f"threading.{node.attr}")
    return found


def test_the_core_starts_no_threads():
    """Threads (the re-estimation worker, pools) belong to the services; the core is called."""
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _core_files("stan_free_models", "adaptive")
        for name in _thread_uses(ast.parse(path.read_text()))
    ]
    assert offenders == []


#: calls that read files: builtins, pathlib, and the readers of numpy, polars, pandas, json, pickle
FILE_READ_ATTRS = {"read_text", "read_bytes", "loadtxt", "genfromtxt", "fromfile", "memmap"}
FILE_LOAD_MODULES = {"np", "numpy", "json", "pickle", "joblib", "io"}


def _file_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append("open()")
        elif isinstance(func, ast.Attribute):
            base = func.value.id if isinstance(func.value, ast.Name) else None
            if (
                func.attr in FILE_READ_ATTRS
                or func.attr.startswith(("read_", "scan_"))
                or (base in FILE_LOAD_MODULES and func.attr in ("load", "open"))
            ):
                found.append(f"{ast.unparse(func)}()")
    return found


def test_the_recommender_and_the_models_read_no_files():
    """Data arrive as arrays; the store, the CLI and the scripts read files and hand arrays in."""
    offenders = [
        f"{path.relative_to(ROOT)}: {call}"
        for path in _core_files("adaptive/recommend", "stan_free_models")
        for call in _file_reads(ast.parse(path.read_text()))
    ]
    assert offenders == []


#: string keys of name-keyed judgment rows (the common schema's name columns)
NAME_KEYS = {"item_id", "system_a", "system_b", "system_name", "prompt_name", "prompt_id"}
#: parameters or fields that carry system / prompt names when annotated with ``str``
NAME_FIELDS = {"systems", "prompts", "items", "system_names", "prompt_names", "item_ids"}
#: files that still handle names, each with why; new ones fail the test
NAMES_KEPT = {
    # simulated judgment rows in the common schema, for tests and examples (named on purpose)
    "stan_free_models/simulate.py",
}


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _name_handling(tree: ast.AST) -> list[str]:
    found = []
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and node.value in NAME_KEYS
            and id(node) not in docstrings
        ):
            found.append(repr(node.value))
        elif isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            name = node.arg if isinstance(node, ast.arg) else ast.unparse(node.target)
            named = name in NAME_FIELDS or name.endswith("_names")
            if named and "str" in ast.unparse(node.annotation):
                found.append(f"{name}: {ast.unparse(node.annotation)}")
    return found


def test_the_recommender_and_the_models_handle_no_names():
    """Numbers in the core, names at the edge (STYLE.md rule 5): no system or prompt names."""
    offenders = {
        path.relative_to(ROOT).as_posix(): found
        for path in _core_files("adaptive/recommend", "stan_free_models")
        if (found := _name_handling(ast.parse(path.read_text())))
    }
    assert {rel: found for rel, found in offenders.items() if rel not in NAMES_KEPT} == {}


def test_no_module_is_over_600_lines():
    paths = sorted({p for pattern in LINE_LIMITED for p in ROOT.glob(pattern)})
    assert paths
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


#: the one module of tests/ that test modules may import (conftest.py is pytest's, not theirs)
TEST_SHARED = "tests.factories"


def _test_module_imports(tree: ast.AST) -> list[str]:
    """Modules of tests/ other than tests/factories.py that ``tree`` imports, relative ones too."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            targets = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.ImportFrom) and node.module == "tests":
            targets = [f"tests.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module]
        else:
            continue
        found += [
            t
            for t in targets
            if (t.startswith(".") or t.split(".")[0] == "tests") and t != TEST_SHARED
        ]
    return found


def test_no_test_module_imports_another_test_module():
    """Shared simulators, servers and helpers live in tests/factories.py: a test module imported
    by another runs its module-level code twice and ties the two files together."""
    assert _test_module_imports(
        ast.parse(
            "from tests.services.api.test_api import judgments\nfrom tests import conftest\nfrom . import x"
        )
    ) == ["tests.services.api.test_api", "tests.conftest", "."]
    assert _test_module_imports(ast.parse("from tests.factories import simulate")) == []
    offenders = {
        path.relative_to(ROOT).as_posix(): found
        for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "research").rglob("*.py")])
        if (found := _test_module_imports(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_every_internal_import_names_something_that_exists():
    """Function-level imports run only when their function does: check them all here,
    so a name moved to another module cannot leave a caller that fails at run time."""
    import importlib

    roots = set(PACKAGES)
    missing = []
    for package in (*PACKAGES, "scripts", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                if node.module.split(".")[0] not in roots:
                    continue
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if hasattr(module, alias.name):
                        continue
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ModuleNotFoundError:
                        rel = path.relative_to(ROOT).as_posix()
                        missing.append(f"{rel}:{node.lineno} {node.module}.{alias.name}")
    assert missing == []


def test_the_compile_key_is_read_by_name_never_by_position():
    """The graded response model's compile key is a named tuple (inference.ModelKey): a read
    like ``static[8]`` silently means another setting when a field is added."""
    import re

    from stan_free_models.inference import GRMData, ModelKey, _static_key

    positional = re.compile(r"\bstatic\[\d")
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if positional.search(line)
    ]
    assert not hits, "\n".join(hits)
    data = GRMData(
        comparison=np.zeros(1, np.int32),
        item=np.zeros(1, np.int32),
        y=np.zeros(1, np.int32),
        weight=np.ones(1, np.float32),
        num_comparisons=1,
        num_items=1,
        num_categories=3,
    )
    key = _static_key(data)
    assert isinstance(key, ModelKey) and key.num_cells is None and key.priors.b_scale == 2.0
    assert hash(key) == hash(tuple(key))  # the same compile key as before it had names


# ---------------------------------------------------------------- issue 44: adaptive's families

#: adaptive's families, lowest layer first: a module imports only from its own family and the
#: families before it (type-only and function-level imports count: ``_imports``)
ADAPTIVE_LAYERS = (
    "core",
    "stopping",
    "prompts",
    "estimation",
    "leaderboards",
    "annotation",
    "judge",
    "recommend",
    "simulation",
)


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "adaptive" and len(parts) > 1 else None


def test_every_adaptive_module_lives_in_a_family():
    """No module is left flat in adaptive/: each belongs to a family package that is layered."""
    flat = sorted(p.name for p in (ROOT / "adaptive").glob("*.py") if p.name != "__init__.py")
    assert flat == []
    families = sorted(p.name for p in (ROOT / "adaptive").iterdir() if (p / "__init__.py").exists())
    assert families == sorted(ADAPTIVE_LAYERS)
    stray = sorted(
        p.parent.relative_to(ROOT).as_posix()
        for p in (ROOT / "adaptive").rglob("*.py")
        if not (p.parent / "__init__.py").exists()
    )
    assert stray == []


def test_adaptive_families_import_downward_only():
    """The family graph has no circle: every import into another family points down a layer."""
    paths = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    rank = {family: i for i, family in enumerate(ADAPTIVE_LAYERS)}
    upward = []
    graph: dict[str, set[str]] = {family: set() for family in ADAPTIVE_LAYERS}
    for module, path in sorted(paths.items()):
        source = _family(module)
        if source is None:
            continue
        for target in sorted(_imports(path, set(paths))):
            family = _family(target)
            if family is None or family == source:
                continue
            graph[source].add(family)
            if rank[family] > rank[source]:
                upward.append(f"{module} ({source}) imports {target} ({family})")
    assert upward == []
    cycles = [" -> ".join(cycle) for cycle in _cycles(graph)]
    assert cycles == [], "\n".join(cycles)


# ---------------------------------------------------------------- the service's house


#: the HTTP door: its schemas (``services/schemas*.py``) and routes; the store below them
#: takes rows checked by the core's own checks
def _http(module: str) -> bool:
    return module.startswith("services.schemas") or _under(module, "services.api")


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {m: _imports(p, set(paths)) for m, p in paths.items()}


def _under(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_evalset_never_imports_the_services():
    """The use cases sit below the doors: the CLI and the API import evalset, never back."""
    graph = _graph()
    up = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if _under(module, "evalset")
        for target in sorted(targets)
        if _under(target, "services")
    ]
    assert up == []


def test_the_store_imports_no_http_schema():
    """The store checks rows with the core's checks; the HTTP schemas sit above it."""
    graph = _graph()
    up = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if _under(module, "services.store")
        for target in sorted(targets)
        if _http(target)
    ]
    assert up == []


#: calls that make an empty mutable container or a bounded cache: at module level, a cache
#: that outlives every object that should own it (the store, the service's runtime)
CACHE_MAKERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "LRU"}
CACHE_DECORATORS = {"lru_cache", "cache", "cached"}


def _module_caches(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        empty = isinstance(value, ast.Dict | ast.List | ast.Set) and not ast.unparse(value)[1:-1]
        made = (
            isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in CACHE_MAKERS
        )
        if empty or made:
            found.append(ast.unparse(node).split("=")[0].strip())
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for d in node.decorator_list:
                name = ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1]
                if name in CACHE_DECORATORS:
                    found.append(f"@{name} {node.name}")
    return found


def test_the_cache_finder_finds_module_caches():
    tree = ast.parse(
        "A = {'k': 1}\n_c: OrderedDict[str, int] = OrderedDict()\n_d = {}\n"
        "X = LRU(3)\n@functools.lru_cache(maxsize=2)\ndef f(): ...\n"
    )
    assert _module_caches(tree) == ["_c: OrderedDict[str, int]", "_d", "X", "@lru_cache f"]


def test_no_module_global_mutable_cache():
    """Caches belong to the object that lives as long as they should (a store, the service's
    runtime: ``services/lru.py``), so a test's or a replica's state never leaks into another."""
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _core_files("services", "evalset")
        for name in _module_caches(ast.parse(path.read_text()))
    ]
    assert offenders == []
