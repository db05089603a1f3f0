"""Shared helpers for the benchmarks: single-threaded setup, timing, machine facts and result files.

Import this module before NumPy or torch are imported anywhere else in the process: ``single_thread()`` sets the
thread-count environment variables, which BLAS and OpenMP read only once, when they load.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import timeit
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "JITORCH_NUM_THREADS")


def single_thread():
    """Pin BLAS/OpenMP (NumPy, torch) and jitorch's kernel threads to one thread so the libraries compare per core."""
    for var in _THREAD_VARS:
        os.environ.setdefault(var, "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    if "jitorch" in sys.modules:
        sys.modules["jitorch"].set_num_threads(int(os.environ["JITORCH_NUM_THREADS"]))


def _calibrate(timer, target_s):
    """Loop count for which one sample of ``timer`` takes about ``target_s`` (like ``timeit``'s autorange)."""
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= target_s:
            return number
        # Grow towards the target in one or two steps instead of doubling from 1.
        number = max(number * 2, int(number * target_s / max(elapsed, 1e-9) * 1.2))


def measure(fns, repeats=31, target_s=0.01):
    """Median seconds per call of each zero-argument callable in ``fns`` (a dict name -> fn).

    Each sample loops until it takes about ``target_s``, so timer resolution and loop overhead stay negligible. The
    samples of the different callables are interleaved, so slow drifts of the machine (frequency, neighbours on a
    shared host) hit all of them alike; the median over ``repeats`` samples resists short outliers.
    """
    timers, numbers, samples = {}, {}, {}
    for name, fn in fns.items():
        fn()  # warm up caches and lazily built state before the loop count is chosen
        timers[name] = timeit.Timer(fn)
        numbers[name] = _calibrate(timers[name], target_s)
        samples[name] = []
    for _ in range(repeats):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(numbers[name]) / numbers[name])
    return {name: {"median_s": statistics.median(s), "min_s": min(s), "number": numbers[name], "repeats": repeats}
            for name, s in samples.items()}


def _cpu_model():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    # x86 names the model; ARM kernels often only give the implementer and part numbers.
    if "model name" in fields:
        return fields["model name"]
    arm = [f"{k} {fields[k]}" for k in ("CPU implementer", "CPU part", "Hardware") if k in fields]
    return ", ".join(arm) or platform.processor() or "unknown"


def machine_facts():
    """What the numbers depend on: CPU, cores, library versions, thread settings."""
    import numpy

    facts = {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "threads_env": {var: os.environ.get(var) for var in _THREAD_VARS},
        # Other processes on the host skew absolute times (less so the interleaved ratios); record how busy it was.
        "load_average_1_5_15min": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        facts["torch"] = torch.__version__
        facts["torch_threads"] = torch.get_num_threads()
    return facts


def format_table(rows, columns):
    """A GitHub markdown table; ``columns`` is a list of (header, key, format) and rows are dicts."""
    header = "| " + " | ".join(h for h, _, _ in columns) + " |"
    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|"
    lines = [header, rule]
    for row in rows:
        cells = []
        for _, key, fmt in columns:
            value = row.get(key)
            cells.append("n/a" if value is None else format(value, fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(name, rows, facts, table, notes=""):
    """Write ``results/<name>-<date>.json`` and ``.md``; returns the two paths."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{datetime.date.today().isoformat()}"
    json_path, md_path = RESULTS_DIR / f"{stem}.json", RESULTS_DIR / f"{stem}.md"
    json_path.write_text(json.dumps({"benchmark": name, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                                     "machine": facts, "results": rows}, indent=2) + "\n")
    fact_lines = "\n".join(f"- {k}: {v}" for k, v in facts.items())
    md_path.write_text(f"# {name} ({datetime.date.today().isoformat()})\n\n{notes}\n\n## Machine\n\n{fact_lines}\n\n"
                       f"## Results\n\n{table}\n")
    return json_path, md_path


def report(name, rows, columns, notes, **facts):
    """Print the table and notes, write both with the machine facts (plus ``facts``) to ``results/``; the table."""
    table = format_table(rows, columns)
    print(table)
    print(notes)
    print("wrote", *write_results(name, rows, dict(machine_facts(), **facts), table, notes))
    return table


def torch_cuda():
    """``(torch, note)`` when torch with CUDA is importable, else ``(None, why not)``: the GPU peers' guard."""
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    if not torch.cuda.is_available():
        return None, "torch without CUDA"
    return torch, f"torch {torch.__version__}"
