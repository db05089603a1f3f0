"""Graphviz output for :meth:`Graph.to_dot`, and SVG rendering when the ``dot`` program is installed."""
from __future__ import annotations

import shutil
import subprocess

__all__ = ["graph_to_dot", "dot_to_svg"]

_COLORS = {"placeholder": "lightblue", "get_attr": "khaki", "call_function": "white", "call_method": "white",
           "call_module": "lightgreen", "output": "lightpink"}


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_to_dot(graph, name: str = "graph") -> str:
    """DOT text: one record per node (name, opcode, target), one edge per input.

    >>> import jitorch
    >>> from jitorch.fx import symbolic_trace
    >>> print(symbolic_trace(lambda x: x.relu()).graph.to_dot())  # doctest: +NORMALIZE_WHITESPACE
    digraph "graph" {
      node [shape=box, style=filled, fontname="monospace"];
      "x" [label="x\\nplaceholder", fillcolor=lightblue];
      "relu" [label="relu\\ncall_method: relu", fillcolor=white];
      "output" [label="output\\noutput", fillcolor=lightpink];
      "x" -> "relu";
      "relu" -> "output";
    }
    """
    from .node import _target_name

    lines = [f"digraph {_quote(name)} {{", '  node [shape=box, style=filled, fontname="monospace"];']
    for n in graph.nodes:
        label = f"{n.name}\\n{n.op}"
        if n.op not in ("placeholder", "output"):
            label += f": {_target_name(n.target)}"
        meta = n.meta.get("tensor_meta")
        if meta is not None and hasattr(meta, "shape"):
            label += f"\\n{tuple(meta.shape)} {meta.dtype}"
        lines.append(f"  {_quote(n.name)} [label={_quote(label).replace(chr(92) * 2 + 'n', chr(92) + 'n')}, "
                     f"fillcolor={_COLORS[n.op]}];")
    for n in graph.nodes:
        for inp in n.all_input_nodes:
            lines.append(f"  {_quote(inp.name)} -> {_quote(n.name)};")
    lines.append("}")
    return "\n".join(lines)


def dot_to_svg(dot_text: str) -> str:
    """Render DOT text to SVG with Graphviz's ``dot`` program (``dot -Tsvg``, the text on its standard input).

    Raises RuntimeError when ``dot`` is not on PATH or fails; the message carries what ``dot`` printed.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("rendering SVG needs Graphviz's 'dot' program on PATH (install Graphviz, e.g. "
                           "`apt-get install graphviz`); use Graph.to_dot() for the DOT text")
    proc = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"Graphviz's dot failed with exit code {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout
