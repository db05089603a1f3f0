"""torch's errors for a node's saved values: freed by an earlier backward, an inference tensor saved, a saved tensor
changed in place since the forward (``autograd.graph`` re-exports these names).

>>> import jitorch
>>> x = jitorch.ones(2, requires_grad=True)
>>> y = x.exp(); _ = y.add_(1)
>>> try:
...     y.sum().backward()
... except RuntimeError as e:
...     print(str(e)[:80])
one of the variables needed for gradient computation has been modified by an inp
"""
from __future__ import annotations

import re

__all__ = ["INFERENCE_SAVED_MSG"]

_FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have already "
    "been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). "
    "Specify retain_graph=True if you need to backward through the graph a second time or if you need to access "
    "saved tensors after calling backward."
)


# An inference tensor has no version counter: a backward could not tell whether it was changed in place since.
INFERENCE_SAVED_MSG = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use it in "
    "autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`."
)


def _version_error(t, saved_version, node_name, current=None, producer=None, output_nr=0):
    """torch's message for a saved tensor changed in place. It names the tensor's producer (``producer``, output
    ``output_nr``, for a saved output; else its current ``grad_fn``), not the node being run (``node_name``)."""
    if producer is None:
        producer, output_nr = t.grad_fn, t._output_nr
    made_by = ""
    if producer is not None:
        name = producer.name()
        name = re.sub(r"Backward\d*$", "", name)
        made_by = f", which is output {output_nr} of {name},"
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{t.type()} {list(t.shape)}]{made_by} is at version {t._version if current is None else current}; "
        f"expected version {saved_version} instead. Hint: enable anomaly detection to find the operation that "
        "failed to compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
    )
