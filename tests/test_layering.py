"""Imports only go down: runtime/ and codegen/ never import Tensor, autograd, ops or nn; nothing imports torch."""
from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
UPPER = ("jitorch._tensor", "jitorch._dispatch", "jitorch.autograd", "jitorch.ops", "jitorch.nn", "jitorch.fx",
         "jitorch._creation", "jitorch.optim")


def _imports(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", node.level


def _resolve(pkg, module, level):
    if level == 0:
        return module
    parts = pkg.split(".")
    base = parts[: len(parts) - level + 1]
    return ".".join(base + ([module] if module else []))


def test_runtime_and_codegen_do_not_import_upper_layers():
    offenders = []
    for folder, pkg in (("runtime", "jitorch.runtime"), ("codegen", "jitorch.codegen")):
        for path in (ROOT / folder).rglob("*.py"):
            for module, level in _imports(path):
                target = _resolve(pkg, module, level)
                if target.startswith(UPPER) or target in ("jitorch",) or target.split(".")[0] in ("runtime",
                                                                                                   "codegen"):
                    offenders.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not offenders, "\n".join(offenders)


def test_no_library_module_imports_torch():
    offenders = []
    for folder in ("jitorch", "runtime", "codegen"):
        for path in (ROOT / folder).rglob("*.py"):
            for module, level in _imports(path):
                if level == 0 and module.split(".")[0] == "torch":
                    offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    remap = {v: k for k, v in config["package-dir"].items()}
    found = set()
    for init in ROOT.glob("**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] not in ("jitorch", "runtime", "codegen"):
            continue
        top = remap.get(rel.parts[0], rel.parts[0])
        found.add(".".join([top] + list(rel.parts[1:])))
    assert found == listed, f"unlisted: {sorted(found - listed)}, stale: {sorted(listed - found)}"


def test_import_jitorch_leaves_slow_optional_modules_unloaded():
    # `import jitorch` once took 2 s: SciPy's special functions (~300 ms) loaded for the IR interpreter's erf, and
    # ml_dtypes 0.7.0 (1.3 s). Both are paid only on first use now; a new eager import here would bring it back.
    import subprocess
    import sys

    probe = ("import sys, jitorch, ml_dtypes; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'torch', 'cupy', 'matplotlib')));"
             "print(ml_dtypes.__version__)")
    loaded, version = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                     check=True).stdout.splitlines()
    assert loaded == "[]", f"import jitorch loaded {loaded}"
    assert tuple(int(p) for p in version.split(".")[:2]) < (0, 7), f"ml_dtypes {version}: see pyproject's pin"
