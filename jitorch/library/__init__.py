"""``torch.library``: custom operators written in Python, reached as ``jitorch.ops.<namespace>.<name>``.

``custom_op`` turns a type-annotated function into an operator: autograd through ``register_autograd`` (a generated
``autograd.Function``), fake and meta tensors through ``register_fake``, device kernels through ``register_kernel``,
and ONE node in ``jitorch.fx`` traces, ``make_fx`` graphs and ``jitorch.compile``'s graphs (the compiled code calls
it as an opaque row). ``Library`` / ``define`` / ``impl`` register operators from schema strings; ``opcheck`` tests the
registrations.

>>> import jitorch
>>> from jitorch import Tensor
>>> @jitorch.library.custom_op("doc_library::scaled_add", mutates_args=())
... def scaled_add(x: Tensor, y: Tensor, alpha: float = 1.0) -> Tensor:
...     return x + alpha * y
>>> scaled_add.register_autograd(lambda ctx, g: (g, g * ctx.alpha, None),
...                              setup_context=lambda ctx, inputs, output: setattr(ctx, "alpha", inputs[2]))
>>> x = jitorch.ones(2, requires_grad=True)
>>> y = jitorch.ops.doc_library.scaled_add(x, jitorch.ones(2), 3.0)
>>> y, jitorch.autograd.grad(y.sum(), x)
(tensor([4., 4.], grad_fn=<GeneratedBackwardFor_doc_library_scaled_add_defaultBackward>), (tensor([1., 1.]),))
"""
from __future__ import annotations

from ._custom_op import CustomOpDef, custom_op
from ._library import Library, define, impl, impl_abstract, register_autograd, register_fake, register_kernel
from ._opcheck import OpCheckError, opcheck
from ._schema import infer_schema

__all__ = ["custom_op", "CustomOpDef", "Library", "define", "impl", "impl_abstract", "register_autograd",
           "register_fake", "register_kernel", "opcheck", "OpCheckError", "infer_schema"]
