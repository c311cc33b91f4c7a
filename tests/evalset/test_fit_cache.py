"""The fit cache (evalset/fit_cache.py): a second command on the same judgments reads the fit
the first one made, and anything the fit depends on makes a new one."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import evalset
import evalset.analyses
import evalset.fit_cache
import evalset.loco
from evalset.analyses import analyze, preset_config
from evalset.fit_cache import SUFFIX, FitCache, default_cache
from services.cli import main

NCM = Path(__file__).resolve().parents[2] / "data" / "chateval_ncm" / "judgments.csv"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 12 prompts of the ChatEval NCM judgments (about 600 rows)."""
    frame = pl.read_csv(NCM)
    prompts = frame["item_id"].unique(maintain_order=True).to_list()[:12]
    path = tmp_path_factory.mktemp("ncm") / "judgments.csv"
    frame.filter(pl.col("item_id").is_in(prompts)).write_csv(path)
    return path


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder, with the code's fingerprint of the test's start (a source edited
    while the test runs would make a later fit miss: test_a_code_change_misses)."""
    folder = tmp_path / "fits"
    monkeypatch.setenv("EVALSET_FIT_CACHE_DIR", str(folder))
    monkeypatch.delenv("EVALSET_FIT_CACHE_MAX_MB", raising=False)
    code = evalset.fit_cache.code_fingerprint()
    monkeypatch.setattr(evalset.fit_cache, "code_fingerprint", lambda: code)
    return folder


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Count the calls of ``module.name`` (still calling it)."""
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    assert main(argv) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_significance_then_items_fit_once(small, cache_dir, monkeypatch, capsys):
    fits = _counting(monkeypatch, evalset.analyses, "fit_analysis")
    argv = ["--data", str(small), "--format", "csv"]
    first, err = _run(["significance", *argv], capsys)
    assert len(fits) == 1 and "fit cache" not in err
    again, err = _run(["significance", *argv], capsys)
    assert again == first, "the cached fit's rows differ from the fitted one's"
    assert len(fits) == 1, "the second significance fitted again"
    assert "read from the fit cache" in err
    items, err = _run(["items", *argv], capsys)
    assert len(fits) == 1 and "read from the fit cache" in err
    assert items.count("\n") > 10
    # another seed is another fit; the cache off fits every time, with the same rows
    _run(["significance", *argv, "--seed", "1"], capsys)
    assert len(fits) == 2
    monkeypatch.setenv("EVALSET_FIT_CACHE_DIR", "")
    off, err = _run(["significance", *argv], capsys)
    assert off == first and len(fits) == 3 and "fit cache" not in err


class _Fake:
    """Stands in for a fit: what it was fitted from."""

    def __init__(self, **what: Any) -> None:
        self.what = what


def _fake_fits(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fit(judgments: pl.DataFrame, **kwargs: Any) -> _Fake:
        calls.append(kwargs)
        return _Fake(height=judgments.height, **kwargs)

    monkeypatch.setattr(evalset.analyses, "fit_analysis", fit)
    return calls


def _two_dimensions(small: Path) -> pl.DataFrame:
    frame = evalset.read(small)
    return pl.concat([frame, frame.with_columns(dimension=pl.lit("fluency"))])


def test_what_the_fit_depends_on_misses(small, cache_dir, monkeypatch):
    calls = _fake_fits(monkeypatch)
    judgments = _two_dimensions(small)
    cache = default_cache()
    config = preset_config("default", method="fast")

    def fit(frame: pl.DataFrame = judgments, dimension: str = "overall", **kw: Any) -> Any:
        return analyze(frame, dimension=dimension, config=kw.get("config", config), cache=cache)

    first = fit()
    assert len(calls) == 1 and fit().what == first.what and len(calls) == 1
    flipped = judgments.with_columns(
        winner=pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("tie")).otherwise("winner")
    )
    assert flipped["winner"][0] != judgments["winner"][0]
    fit(flipped)  # one judgment changed
    fit(dimension="fluency")
    fit(config=preset_config("default", method="fast", num_draws=500))
    fit(config=preset_config("default", method="fast", seed=3))
    fit(config=preset_config("paper", method="fast"))
    assert len(calls) == 6
    # the other dimension's rows do not matter to this one's fit; the progress bar does not either
    fit(judgments.filter(pl.col("dimension") == "overall"))
    fit(config=preset_config("default", method="fast", progress=True))
    assert len(calls) == 6
    assert len(list(cache_dir.glob(f"*{SUFFIX}"))) == 6


def test_empty_folder_turns_it_off(small, monkeypatch, tmp_path):
    calls = _fake_fits(monkeypatch)
    monkeypatch.setenv("EVALSET_FIT_CACHE_DIR", "")
    assert default_cache() is None
    judgments = evalset.read(small)
    for _ in range(2):
        analyze(judgments, cache=default_cache())
    assert len(calls) == 2
    monkeypatch.setenv("EVALSET_FIT_CACHE_DIR", str(tmp_path / "f"))
    monkeypatch.setenv("EVALSET_FIT_CACHE_MAX_MB", "0")
    with pytest.raises(ValueError, match="EVALSET_FIT_CACHE_MAX_MB"):
        default_cache()


def test_a_corrupt_entry_is_fitted_again_and_rewritten(small, cache_dir, monkeypatch):
    calls = _fake_fits(monkeypatch)
    judgments = evalset.read(small)
    analyze(judgments, cache=default_cache())
    (entry,) = cache_dir.glob(f"*{SUFFIX}")
    for garbage in (b"", b"not a pickle", entry.read_bytes()[:100], pickle.dumps({"format": 1})):
        entry.write_bytes(garbage)
        result = analyze(judgments, cache=default_cache())
        assert isinstance(result, _Fake)
    assert len(calls) == 5
    assert pickle.loads(entry.read_bytes())["value"].what == result.what
    analyze(judgments, cache=default_cache())
    assert len(calls) == 5


def test_the_bound_evicts_the_least_recently_used(tmp_path):
    cache = FitCache(tmp_path, max_bytes=2500)
    for age, key in enumerate(["a", "b", "c"]):
        cache.put(key, b"x" * 1000)
        os.utime(cache.path(key), (1000 + age, 1000 + age))
    # three do not fit: the oldest went when the third came
    assert sorted(p.stem for p in tmp_path.glob(f"*{SUFFIX}")) == ["b", "c"]
    assert cache.get("b") == b"x" * 1000  # b used now: c is the least recently used
    cache.put("d", b"y" * 1000)
    assert sorted(p.stem for p in tmp_path.glob(f"*{SUFFIX}")) == ["b", "d"]
    cache.put("huge", b"z" * 5000)  # larger than the bound: not kept
    assert cache.get("huge") is None and cache.get("d") == b"y" * 1000


def test_prune_reuses_its_tier_fits_but_the_service_path_does_not(
    small, cache_dir, monkeypatch, capsys
):
    import adaptive.prompts.pruning
    from adaptive.prompts.pruning import PruneConfig
    from evalset.pruning import prune_judgments

    fits = _counting(monkeypatch, adaptive.prompts.pruning, "fit_tiers")
    argv = ["prune", "--data", str(small), "--format", "csv", "--tiers", "1"]
    first, _ = _run([*argv, "--keep", "6"], capsys)
    again, err = _run([*argv, "--keep", "6"], capsys)
    assert again == first and len(fits) == 1 and "read from the fit cache" in err
    _run([*argv, "--keep", "4"], capsys)  # another plan from the same fits
    assert len(fits) == 1
    _run([*argv, "--keep", "6", "--seed", "2"], capsys)
    assert len(fits) == 2
    # without a cache (the service's call) every prune fits and nothing is written
    entries = sorted(cache_dir.iterdir())
    config = PruneConfig(keep=6, num_tiers=1)
    rows = prune_judgments(evalset.read(small), config)
    assert len(fits) == 3 and sorted(cache_dir.iterdir()) == entries
    assert pl.DataFrame(rows).write_csv() == pl.read_csv(first.encode()).write_csv()


def test_loco_folds_are_read_back(small, cache_dir, monkeypatch):
    from adaptive.prompts.loco import LocoConfig
    from evalset.loco import loco_dimensions, loco_folds

    calls: list[int] = []

    def run(data: Any, config: Any, **kwargs: Any) -> tuple[list[str], str]:
        calls.append(kwargs["workers"])
        return [f"fold {config.seed}"], "info"

    monkeypatch.setattr(evalset.loco, "run_loco", run)
    ((_, _, data),) = loco_dimensions(evalset.read(small))
    notes: list[str] = []
    config = LocoConfig(num_random=2)
    first = loco_folds(data, config, cache=default_cache(), log=notes.append)
    # the folds are the same serially and on Ray: the workers are not part of the key
    assert loco_folds(data, config, workers=2, cache=default_cache(), log=notes.append) == first
    assert calls == [1] and len(notes) == 1 and "fit cache" in notes[0]
    loco_folds(data, LocoConfig(num_random=3), cache=default_cache())
    loco_folds(data, config, cache=None)
    assert len(calls) == 3


def test_a_code_change_misses(tmp_path, monkeypatch):
    package = tmp_path / "src" / "fitting_code"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(evalset.fit_cache, "SOURCES", ("fitting_code",))
    cache = FitCache(tmp_path / "fits", max_bytes=1 << 20)
    cache.put(cache.key("analysis", "same inputs"), "fitted with SCALE = 1.0")
    (package / "model.py").write_text("SCALE = 2.0\n")
    edited = FitCache(tmp_path / "fits", max_bytes=1 << 20)  # the next command's
    assert edited.key("analysis", "same inputs") != cache.key("analysis", "same inputs")
    assert edited.get(edited.key("analysis", "same inputs")) is None
    # a file's name goes in as well as its text: a new module changes it too
    before = evalset.fit_cache.code_fingerprint()
    (package / "extra.py").write_text("")
    assert evalset.fit_cache.code_fingerprint() != before


def test_a_folder_others_can_write_to_is_not_used(tmp_path):
    from evalset.fit_cache import fetch

    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)  # another user could leave a pickle here
    cache = FitCache(folder, max_bytes=1 << 20)
    notes: list[str] = []
    calls: list[int] = []
    for _ in range(2):
        fetch(cache, "analysis", lambda: ("inputs",), lambda: calls.append(1), log=notes.append)
    assert len(calls) == 2 and list(folder.iterdir()) == []
    assert "others can write to it" in notes[0]
    folder.chmod(0o700)
    for _ in range(2):
        fetch(cache, "analysis", lambda: ("inputs",), lambda: calls.append(1) or "fit")
    assert len(calls) == 3
