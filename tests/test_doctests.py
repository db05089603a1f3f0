"""Every module's docstring examples run and print what they show (style: public docs carry runnable examples)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import jitorch
import jitorch.codegen
import jitorch.runtime

# runtime/ and codegen/ are mapped into the package by package-dir, so they are walked from their own paths.
MODULES = sorted({m.name for pkg in (jitorch, jitorch.runtime, jitorch.codegen)
                  for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")})


@pytest.mark.parametrize("name", MODULES)
def test_module_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):  # globals: a copy of the module's, as pytest --doctest-modules
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (output above)"
