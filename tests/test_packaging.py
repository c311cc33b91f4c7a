"""The packaging matches use: a fresh virtualenv with ``pip install .`` and no extras runs
every call of docs/python_api.md and every command but ``serve``; the service's packages,
Ray and PostgreSQL's driver are not there; ``pip install ".[serve]"`` adds the service.

One virtualenv for the module (pip's cache keeps its install to a minute or two); the
tests run in file order and the last one adds the ``serve`` extra to it. Every program runs
in a work folder outside the repository, so ``import evalset`` finds the installed package,
not the checkout (checked).
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.cli import COMMANDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python_api.md"
#: what a wheel is built from (pyproject.toml's packages.find and its readme)
SOURCES = ("pyproject.toml", "README.md", "adaptive", "evalset", "services", "stan_free_models")
#: import names of every optional extra's packages, none of which a core install has
EXTRA_MODULES = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "psycopg": "postgres",
    "ray": "ray",
}
#: the service's command: it needs the serve extra (the store's commands run on the core)
SERVE_COMMANDS = ("serve",)
MTBENCH = "data/mtbench/judgments.csv"  # 3,355 judgments, 30 pairs: the commands' data
NCM = "data/chateval_ncm/judgments.csv"  # with items.csv and responses.csv: texts for a batch
MRBENCH = "data/mrbench/ratings.csv"
PNG = b"\x89PNG\r\n\x1a\n"

#: runs statements of the documentation one by one in one namespace (in the core venv) and
#: writes what each returned: argv[1] the statements (JSON), argv[2] the report
DOC_RUNNER = r"""
import ast, json, sys, traceback
from pathlib import Path

namespace, report = {}, []
for source in json.loads(Path(sys.argv[1]).read_text()):
    entry = {"source": source}
    (node,) = ast.parse(source).body
    try:
        if isinstance(node, ast.Expr):
            value = eval(source, namespace)
        else:
            exec(source, namespace)
            targets = node.targets if isinstance(node, ast.Assign) else []
            value = namespace[targets[0].id] if targets else None
        kind = type(value)
        entry["type"] = f"{kind.__module__}.{kind.__qualname__}"
        if hasattr(value, "height"):
            entry["height"] = value.height
        if isinstance(value, Path):
            entry["head"] = value.read_bytes()[:8].hex() if value.exists() else None
    except Exception:
        entry["error"] = traceback.format_exc()
    report.append(entry)
import evalset
Path(sys.argv[2]).write_text(json.dumps({"report": report, "evalset": evalset.__file__}))
"""

#: runs commands through ``services.cli.main`` in one process (imports and compiled
#: programs shared, as a notebook would): argv[1] the commands (JSON), argv[2] the report
CLI_RUNNER = r"""
import contextlib, io, json, sys, traceback
from pathlib import Path

from services.cli import main

report = []
for argv in json.loads(Path(sys.argv[1]).read_text()):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except Exception:
            rc, err = "exception", io.StringIO(traceback.format_exc())
    report.append({"argv": argv, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()})
Path(sys.argv[2]).write_text(json.dumps(report))
"""


@dataclass(frozen=True)
class Install:
    """A virtualenv with the project installed from a copy of the checkout, and a work folder
    (with ``data`` linked in) to run its programs in."""

    venv: Path
    source: Path
    work: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        return env

    def run(self, *argv: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """``argv`` in the work folder; a bare program name is the venv's (python, evalset)."""
        program = self.venv / "bin" / str(argv[0])
        command = [str(program if program.exists() else argv[0]), *map(str, argv[1:])]
        return subprocess.run(
            command,
            cwd=self.work,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def run_plan(self, name: str, runner: str, plan: list[Any]) -> Any:
        """Write ``runner`` (a script) and ``plan`` (JSON) to the work folder, run the script
        in the venv on them and return the JSON report it writes."""
        (self.work / f"{name}_plan.json").write_text(json.dumps(plan))
        (self.work / f"{name}_runner.py").write_text(runner)
        argv = ("python", f"{name}_runner.py", f"{name}_plan.json", f"{name}_report.json")
        out = self.run(*argv, timeout=1800)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads((self.work / f"{name}_report.json").read_text())

    def pip_install(self, target: str) -> None:
        # pip's own cache is used: the second install of a package is a copy
        done = self.run("python", "-m", "pip", "install", "-q", target, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]

    def has_modules(self, names) -> dict[str, bool]:
        code = (
            "import json, sys, importlib.util as u; "
            "print(json.dumps({n: u.find_spec(n) is not None for n in sys.argv[1:]}))"
        )
        done = self.run("python", "-c", code, *names)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Install:
    """``pip install .`` (no extras) of a copy of the checkout into a fresh virtualenv."""
    base = tmp_path_factory.mktemp("packaging")
    source, work = base / "source", base / "work"
    source.mkdir()
    work.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=skip)
        else:
            shutil.copy2(ROOT / name, source / name)
    (work / "data").symlink_to(ROOT / "data")
    venv = base / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr
    install = Install(venv=venv, source=source, work=work)
    install.pip_install(str(source))
    return install


# ---------------------------------------------------------------- docs/python_api.md


def documented_names(doc: str) -> dict[str, str]:
    """Every ``evalset`` function the page documents, with its first parameter where the
    table gives it: the table's rows, the ``evalset.f(...)`` calls, the plotting functions."""
    names = {m[0]: m[1] for m in re.findall(r"^\| `(\w+)\((\w*)", doc, re.M)}
    calls = re.findall(r"\bevalset\.(\w+)\(", doc)
    plots = re.findall(r"`(?:evalset\.)?(plot_\w+)`", doc)
    for name in calls + plots:
        names.setdefault(name, "")
    return names


def documented_statements(doc: str) -> list[str]:
    """The page's Python, statement by statement: its code blocks, then the complete calls
    it quotes inline (`evalset.f(...)`)."""
    statements = []
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        statements += [ast.unparse(node) for node in ast.parse(block).body]
    for call in re.findall(r"`(evalset\.\w+\([^`]*\))`", doc):
        try:
            ast.parse(call, mode="eval")
        except SyntaxError:
            continue  # a signature such as `evalset.fit(data, ...)`, not a call
        statements.append(ast.unparse(ast.parse(call)))
    return statements


def called(statement: str) -> set[str]:
    """The ``evalset.f`` functions a statement calls."""
    return {
        node.func.attr
        for node in ast.walk(ast.parse(statement))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "evalset"
    }


def test_the_page_s_calls_are_found_in_it():
    """The reading of the page itself (without a venv): its table, blocks and inline calls."""
    doc = DOC.read_text()
    names = documented_names(doc)
    statements = documented_statements(doc)
    assert {"read", "decisions", "inference_data", "plot_forest", "plot_progress"} <= set(names)
    assert names["decisions"] == "data" and names["inference_data"] == "fit"
    assert "idata = evalset.inference_data(fit)" in statements
    assert "evalset.plot_item_information(fit, 'items.png')" in statements


def test_every_documented_call_runs_on_the_core_install(core: Install):
    doc = DOC.read_text()
    names = documented_names(doc)
    statements = documented_statements(doc)
    done = set().union(*map(called, statements))
    # what the page documents without a call of its own: on its data frame (and a file name)
    for name in sorted(set(names) - done):
        if name.startswith("plot_"):
            statements.append(f"evalset.{name}(df, {name + '.png'!r})")
        else:
            assert names[name] == "data", f"evalset.{name} is documented but never called"
            statements.append(f"evalset.{name}(df)")
    result = core.run_plan("doc", DOC_RUNNER, statements)
    assert result["evalset"].startswith(str(core.venv)), "imported the checkout, not the install"
    errors = [f"{e['source']}\n{e['error']}" for e in result["report"] if "error" in e]
    assert errors == [], "\n".join(errors)
    assert set(names) <= set().union(*(called(e["source"]) for e in result["report"]))

    for entry in result["report"]:
        functions = called(entry["source"])
        if not functions or "=" in entry["source"].split("(")[0]:
            continue
        (name,) = functions
        if name.startswith("plot_"):  # a Path to the picture
            assert entry["type"] == "pathlib.PosixPath" and entry["head"] == PNG.hex(), entry
            continue
        # a table: polars, one row per thing
        assert entry["type"] == "polars.dataframe.frame.DataFrame", entry
        size = re.search(r"\bsize=(\d+)", entry["source"])
        if size:  # a batch: at most that many tasks, none when no open comparison can close
            assert entry["height"] <= int(size.group(1)), entry
        else:
            assert entry["height"] > 0, entry
    kinds = {e["source"].split(" =")[0]: e["type"] for e in result["report"]}
    assert kinds["fit"] == "adaptive.estimation.pipeline.Analysis"  # as the page's table says
    assert kinds["idata"].startswith("arviz.") and kinds["idata"].endswith("InferenceData")


# ---------------------------------------------------------------- the command line


def cli_commands() -> list[list[str]]:
    """Every command but the service's, on bundled data with small settings; the plot kinds
    are the command's own choices."""
    plot = [a for a in _parser_of("plot")._actions if a.dest == "kind"]
    kinds = sorted(plot[0].choices) if plot else []
    assert kinds, "evalset plot has no kinds"
    quiet = ["--format", "json", "--quiet"]
    return [
        ["decisions", "--data", MTBENCH, "--format", "json"],
        ["answer", "--data", MTBENCH, "--question", "top-k:3", "--format", "json"],
        ["significance", "--data", MTBENCH, "--draws", "400", *quiet],
        ["items", "--data", MTBENCH, "--draws", "400", *quiet],
        ["bt", "--data", MTBENCH, "--by", "pooled", "--method", "fast", *quiet],
        ["elo", "--data", MTBENCH, "--rounds", "20", "--format", "json"],
        ["annotators", "--data", MTBENCH, "--method", "fast", "--assume-a-first", *quiet],
        ["agreement", "--data", MTBENCH, "--report", "annotators", *quiet],
        # gold.csv: the first MT-Bench judgments' answers as gold (written beside the data)
        ["gold", "--data", MTBENCH, "--gold", "gold.csv", *quiet],
        ["damr", "--data", MRBENCH, "--method", "mle", *quiet],
        # no --workers: without Ray the folds run serially
        ["loco", "--data", MTBENCH, "--grid", "5,10", "--num-random", "3", *quiet],
        ["prune", "--data", MTBENCH, "--keep", "10", *quiet],
        # repeats allowed: the prompt unit serves none of NCM's open comparisons, whose
        # unused prompts cannot close them
        ["recommend", "--data", NCM, "--size", "8", "--unit", "judgment", "--format", "csv"],
        ["replay", "--data", MTBENCH, "--seeds", "1", *quiet],
        *(
            ["plot", kind, "--data", MTBENCH, "--plot", f"cli_{kind}.png", *quiet]
            + (["--assume-a-first"] if kind == "annotators" else [])
            for kind in kinds
        ),
    ]


def _parser_of(command: str):
    from services.cli import build_parser

    parser = build_parser(command)
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return sub.choices[command]


def test_every_command_but_the_services_runs_on_the_core_install(core: Install):
    help_text = core.run("evalset", "--help")
    assert help_text.returncode == 0, help_text.stderr
    every = {c for commands in COMMANDS.values() for c in commands}
    assert every <= set(re.findall(r"\b[a-z]+\b", help_text.stdout)), help_text.stdout

    commands = cli_commands()
    with (ROOT / MTBENCH).open() as f, (core.work / "gold.csv").open("w") as out:
        cells: dict[tuple[str, frozenset[str]], list[str]] = {}
        for row in list(csv.DictReader(f))[:40]:
            key = (row["item_id"], frozenset((row["system_a"], row["system_b"])))
            cells.setdefault(key, [row["item_id"], row["system_a"], row["system_b"], row["winner"]])
        csv.writer(out).writerows([["item_id", "system_a", "system_b", "answer"], *cells.values()])
    report = core.run_plan("cli", CLI_RUNNER, commands)
    failed = [f"{r['argv']}: {r['rc']}\n{r['stderr'][-2000:]}" for r in report if r["rc"] != 0]
    assert failed == [], "\n".join(failed)
    by_command = {r["argv"][0]: r for r in report}
    for r in report:
        # a table on stdout, but for the matrices, drawn from the judgments themselves
        if "json" in r["argv"] and r["argv"][:2] != ["plot", "matrices"]:
            rows = json.loads(r["stdout"])
            assert isinstance(rows, list) and rows and isinstance(rows[0], dict), r["argv"]
        if r["argv"][0] == "plot":
            assert (core.work / r["argv"][r["argv"].index("--plot") + 1]).read_bytes()[:8] == PNG
    decisions = json.loads(by_command["decisions"]["stdout"])
    assert {d["decision"] for d in decisions} <= {"B better", "A better", "equivalent", "undecided"}
    assert all(0 <= r["p_b_better"] <= 1 for r in json.loads(by_command["significance"]["stdout"]))
    loco = json.loads(by_command["loco"]["stdout"])  # every policy at every k, and the full set
    assert {(r["policy"], r["k"]) for r in loco if r["policy"] != "full"} == {
        (policy, k) for policy in ("random", "prompt", "prompt_model") for k in (5, 10)
    }

    # the batch goes out to a survey and its answers come back, through the installed script
    batch = list(csv.DictReader(by_command["recommend"]["stdout"].splitlines()))
    assert len(batch) == 8 and all(t["prompt"] for t in batch)
    (core.work / "batch.csv").write_text(by_command["recommend"]["stdout"])
    export = core.run("evalset", "crowd", "export", "--platform", "survey", "--tasks", "batch.csv",
                      "-o", "crowd_batch")  # fmt: skip
    assert export.returncode == 0, export.stderr
    with open(core.work / "crowd_batch" / "tasks.csv") as f:
        tasks = [t["task_id"] for t in csv.DictReader(f)]
    with open(core.work / "answers.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["PROLIFIC_PID", "SESSION_ID", "task_id", "choice"])
        writer.writerows(["p1", "s1", t, c] for t, c in zip(tasks, ["First", "Second", "Tie"] * 3))
    back = core.run("evalset", "crowd", "import", "answers.csv", "--tasks",
                    "crowd_batch/tasks.csv", "-o", "answers_judgments.csv")  # fmt: skip
    assert back.returncode == 0, back.stderr
    with open(core.work / "answers_judgments.csv") as f:
        judgments = list(csv.DictReader(f))
    assert len(judgments) == 8 and {j["winner"] for j in judgments} == {"a", "b", "tie"}

    # the store's commands run on the core (SQLite)
    store = ["--project", "p", "--database-url", "sqlite:///store.db"]
    imported = core.run("evalset", "import", MTBENCH, "--create", "--format", "json", *store)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["inserted"] == 3355
    tokens = core.run("evalset", "token", "list", "--format", "json", *store)
    assert tokens.returncode == 0, tokens.stderr
    assert [t["label"] for t in json.loads(tokens.stdout)] == ["import"]
    exported = core.run("evalset", "export", *store)
    assert exported.returncode == 0, exported.stderr
    assert len(list(csv.DictReader(exported.stdout.splitlines()))) == 3355

    ran = {r["argv"][0] for r in report} | {"crowd", "import", "token", "export"}
    assert ran == every - set(SERVE_COMMANDS), "a command is not run here"


def test_the_core_install_has_no_extra_and_says_which_one_a_command_needs(core: Install):
    assert not any(core.has_modules(EXTRA_MODULES).values())
    # pyproject.toml names these extras (a rename there must be made here too)
    extras = re.findall(r"^(\w+) = \[", (ROOT / "pyproject.toml").read_text(), re.M)
    assert set(EXTRA_MODULES.values()) | {"all", "dev"} <= set(extras)

    out = core.run("evalset", "serve")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.strip().endswith("pip install 'adaptive-evalset[serve]'"), out.stderr

    out = core.run("evalset", "loco", "--data", MTBENCH, "--workers", "2")
    assert out.returncode == 2 and "pip install 'adaptive-evalset[ray]'" in out.stderr, out.stderr
    library = core.run("python", "-c", "from adaptive.prompts.parallel import map_items; "
                       "map_items(max, 0, [1, 2], workers=2)")  # fmt: skip
    assert library.returncode == 1
    assert "pip install 'adaptive-evalset[ray]'" in library.stderr.splitlines()[-1]


def test_the_serve_extra_adds_the_service(core: Install):
    core.pip_install(f"{core.source}[serve]")
    has = core.has_modules(EXTRA_MODULES)
    assert has == {name: extra == "serve" for name, extra in EXTRA_MODULES.items()}

    served = core.run("evalset", "serve", "--help")
    assert served.returncode == 0 and "--port" in served.stdout, served.stderr
    app = core.run(
        "python", "-c", "from services.api import create_app; print(create_app.__name__)"
    )
    assert app.returncode == 0 and app.stdout.strip() == "create_app", app.stderr
