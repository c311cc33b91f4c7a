"""The examples in the docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

#: the top-level evalset module's own examples run in tests/evalset/test_python_api.py
PACKAGES = ("stan_free_models", "adaptive", "services", "evalset")
#: modules that cannot be imported outside their tool (alembic runs the migrations' env)
SKIP = ("services.store.migrations",)


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if info.name.startswith(SKIP):
                continue
            module = importlib.import_module(info.name)
            if doctest.DocTestFinder().find(module) and any(
                t.examples for t in doctest.DocTestFinder().find(module)
            ):
                names.append(info.name)
    return names


MODULES = modules_with_examples()


def test_the_examples_are_found():
    # a refactor that drops the examples (or this finder) shows up here
    assert len(MODULES) >= 15, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
