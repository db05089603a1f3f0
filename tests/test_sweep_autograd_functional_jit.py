"""Higher-order autograd and scripting as research code writes them, run with ``lib=torch`` and ``lib=jitorch``.

``autograd.functional`` (Jacobians/Hessians of multi-input functions in every strategy, ``vjp``/``jvp``/``hvp``/
``vhp``, torch's refusals of forward-mode Jacobians), forward AD (nested levels refused, a custom Function's ``jvp``
used, its absence refused), products through eigen/singular vectors (their backwards taking part when the double-vjp
trick differentiates a zero cotangent), optimizer-in-backward through ``register_post_accumulate_grad_hook`` (a hook
returning a value refused), and ``torch.jit.script``/``trace`` modules saved with ``.save`` and read back with
``jit.load``.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree

LIBS = (torch, jitorch)
_rng = np.random.default_rng(0)
A = _rng.standard_normal((3, 3)).astype(np.float32)
B = _rng.standard_normal(3).astype(np.float32)
M = _rng.standard_normal((3, 5))
SYM = _rng.standard_normal((4, 4))
SYM = SYM + SYM.T
C4 = _rng.standard_normal((4, 4))
X = _rng.standard_normal((2, 4)).astype(np.float32)


def _both(fn, **tol):
    assert_close_tree(fn(torch), fn(jitorch), **tol)


def _error(fn, lib):
    with pytest.raises(Exception) as info:
        fn(lib)
    return type(info.value).__name__, str(info.value)


def _same_error(fn):
    assert _error(fn, jitorch) == _error(fn, torch)


# -- autograd.functional ----------------------------------------------------------------------------------------


def _pair(x, y):
    return (x.sin() * y).sum(0), x @ y


@pytest.mark.parametrize("kw", [{}, {"vectorize": True}, {"create_graph": True},
                                {"vectorize": True, "strategy": "forward-mode"}])
def test_jacobian_of_two_inputs_and_outputs(kw):
    _both(lambda lib: lib.autograd.functional.jacobian(_pair, (lib.tensor(A), lib.tensor(B)), **kw))


@pytest.mark.parametrize("kw", [{}, {"vectorize": True},
                                {"vectorize": True, "outer_jacobian_strategy": "forward-mode"}])
def test_hessian_of_two_inputs(kw):
    def loss(x, y):
        return (x.exp() * y).sum() + (x ** 2).sum() * y.sum()
    _both(lambda lib: lib.autograd.functional.hessian(loss, (lib.tensor(A), lib.tensor(B)), **kw))


@pytest.mark.parametrize("kw", [{"create_graph": True, "vectorize": True}, {"strict": True, "vectorize": True}, {}])
def test_forward_mode_jacobian_refusals_are_torchs(kw):
    # forward mode needs vectorize=True and refuses create_graph and strict, as torch
    _same_error(lambda lib: lib.autograd.functional.jacobian(lambda x: x.sin(), lib.tensor(B),
                                                            strategy="forward-mode", **kw))


@pytest.mark.parametrize("kw", [{}, {"create_graph": True, "vectorize": True}])
def test_forward_over_reverse_hessian_refusals_are_torchs(kw):
    _same_error(lambda lib: lib.autograd.functional.hessian(lambda x: x.sin().sum(), lib.tensor(B),
                                                           outer_jacobian_strategy="forward-mode", **kw))
    _same_error(lambda lib: lib.autograd.functional.hessian(lambda x: x.sum(), lib.tensor(B),
                                                           outer_jacobian_strategy="fwd"))


def test_products_of_two_input_functions():
    def run(lib):
        af = lib.autograd.functional
        x, y = lib.tensor(A), lib.tensor(A[::-1].copy())
        u = (lib.ones(3, 3), lib.ones(3, 3) * 2)
        scalar = lambda x, y: (x.sin() * y.cos()).sum()  # noqa: E731
        return {"vjp": af.vjp(lambda x, y: (x * y).sum(1) + x.sum(1), (x, y), lib.tensor(B)),
                "jvp": af.jvp(lambda x, y: (x * y).sum(1) + x.sum(1), (x, y), u),
                "hvp": af.hvp(scalar, (x, y), u), "vhp": af.vhp(scalar, (x, y), u)}
    _both(run)


def _svd_loss(lib, z):
    u, s, vh = lib.linalg.svd(z, full_matrices=False)
    return ((u * s.sqrt()) @ vh * lib.tensor(M * 0.5)).sum()


def _eigh_loss(lib, z):
    w, q = lib.linalg.eigh(z)
    return ((q * w.exp()) @ q.t() * lib.tensor(C4)).sum()


def _eig_loss(lib, z):
    w, q = lib.linalg.eig(z)
    return ((q * w.exp()) @ lib.linalg.inv(q)).real.mul(lib.tensor(C4)).sum()


@pytest.mark.parametrize("loss,x", [(_svd_loss, M), (_eigh_loss, SYM), (_eig_loss, SYM + np.triu(SYM)),
                                    (lambda lib, z: (lib.linalg.svdvals(z) ** 2).sum(), M)])
@pytest.mark.parametrize("product", ["jvp", "hvp", "vhp"])
def test_products_through_eigen_and_singular_vectors(loss, x, product):
    # jvp/hvp differentiate the backward at a zero cotangent: the vectors' gradient terms must not be skipped
    v = np.cos(np.arange(x.size)).reshape(x.shape)
    _both(lambda lib: getattr(lib.autograd.functional, product)(lambda z: loss(lib, z), lib.tensor(x), lib.tensor(v)),
          rtol=1e-6, atol=1e-8)


def test_forward_ad_through_singular_vectors():
    def run(lib):
        fwad = lib.autograd.forward_ad
        with fwad.dual_level():
            z = fwad.make_dual(lib.tensor(M), lib.tensor(np.sin(np.arange(15)).reshape(3, 5)))
            u, s, vh = lib.linalg.svd(z, full_matrices=False)
            return fwad.unpack_dual((u * s) @ vh).tangent
    _both(run, rtol=1e-6, atol=1e-8)


def test_nested_forward_ad_levels_are_refused():
    def run(lib):
        fwad = lib.autograd.forward_ad
        with fwad.dual_level():
            with fwad.dual_level():
                pass
    _same_error(run)


def _scaled_product(lib):
    class ScaledProduct(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, k):
            ctx.save_for_forward(x, y)
            ctx.save_for_backward(x, y)
            ctx.k = k
            return x * y * k, x + 1

        @staticmethod
        def jvp(ctx, tx, ty, tk):  # the tangent of a non-dual tensor input is zeros, of a number None (torch's)
            x, y = ctx.saved_tensors
            return (tx * y + x * ty) * ctx.k * 10, tx  # (not the backward's: the jvp must be the one used)

        @staticmethod
        def backward(ctx, g1, g2):
            x, y = ctx.saved_tensors
            return g1 * y * ctx.k + g2, g1 * x * ctx.k, None
    return ScaledProduct


def test_forward_ad_uses_a_custom_functions_jvp():
    def run(lib):
        fwad, fn = lib.autograd.forward_ad, _scaled_product(lib)
        primal = lib.tensor([1.0, 2.0], requires_grad=True)
        with fwad.dual_level():
            x = fwad.make_dual(primal, lib.tensor([1.0, 0.5]))
            a, b = fn.apply(x, lib.tensor([3.0, 4.0]), 2.0)
            out = [fwad.unpack_dual(a).tangent, fwad.unpack_dual(b).tangent]
            a, b = fn.apply(x, fwad.make_dual(lib.tensor([3.0, 4.0]), lib.tensor([2.0, 2.0])), 2.0)
            out.append(fwad.unpack_dual(a.sin() * b).tangent)
            (out[-1].sum() + a.sum()).backward()  # reverse mode through the tangent and the output
        return out, primal.grad
    _both(run)


def test_forward_ad_through_a_custom_function_without_jvp_is_refused():
    def run(lib):
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        fwad = lib.autograd.forward_ad
        with fwad.dual_level():
            x = fwad.make_dual(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 0.5]))
            unrelated = Double.apply(lib.ones(2, requires_grad=True)) + x  # no tangent flows through it: fine
            fwad.unpack_dual(unrelated)
            return fwad.unpack_dual(Double.apply(x)).tangent
    _same_error(run)


# -- optimizer in backward ----------------------------------------------------------------------------------------


def test_optimizer_in_backward_hooks():
    def run(lib):
        model = lib.nn.Linear(4, 3)
        model.load_state_dict({"weight": lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)),
                               "bias": lib.zeros(3)})
        optims = {p: lib.optim.SGD([p], lr=0.1, momentum=0.9) for p in model.parameters()}

        def step(p):
            optims[p].step()
            optims[p].zero_grad()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(step)
        for _ in range(3):
            model(lib.tensor(X)).pow(2).sum().backward()
        return model.weight, model.bias, model.weight.grad is None
    _both(run)


def test_post_accumulate_grad_hook_returning_a_value_is_refused():
    def run(lib):
        x = lib.tensor(A, requires_grad=True)
        x.register_post_accumulate_grad_hook(lambda p: p.grad * 2)
        (x * 2).sum().backward()
    _same_error(run)


# -- torch.jit ----------------------------------------------------------------------------------------------------


def _init_net(net, lib):
    net.fc = lib.nn.Linear(4, 3)
    net.fc.load_state_dict({"weight": lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)),
                            "bias": lib.tensor([0.1, -0.2, 0.3])})


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        _init_net(self, torch)

    def forward(self, x):
        return self.fc(x).relu() * 2.0


class JitorchNet(jitorch.nn.Module):
    """At module level: jitorch's ``jit.load`` unpickles the class (a TorchScript archive carries the code)."""

    def __init__(self):
        super().__init__()
        _init_net(self, jitorch)

    def forward(self, x):
        return self.fc(x).relu() * 2.0


@pytest.mark.parametrize("how", ["script", "trace"])
def test_scripted_module_save_and_load_round_trip(how, tmp_path):
    def run(lib):
        path = str(tmp_path / f"{lib.__name__}.pt")
        net = (TorchNet if lib is torch else JitorchNet)().eval()
        x = lib.tensor(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            m = lib.jit.script(net) if how == "script" else lib.jit.trace(net, x)
        m.save(path)  # (a path: torch's ScriptModule.save takes no file object)
        buf = io.BytesIO()
        lib.jit.save(m, buf, _extra_files={"meta.txt": "v1"})
        buf.seek(0)
        extra = {"meta.txt": ""}
        loaded, loaded2 = lib.jit.load(path), lib.jit.load(buf, _extra_files=extra, map_location="cpu")
        return loaded(x), loaded2(x), extra, sorted(loaded.state_dict()), loaded.training
    _both(run)


def test_jit_load_of_a_state_dict_is_refused():
    for lib in LIBS:
        buf = io.BytesIO()
        lib.save({"w": lib.ones(2)}, buf)
        buf.seek(0)
        with pytest.raises(RuntimeError):
            lib.jit.load(buf)


def test_jit_save_of_a_local_module_class_says_why():
    class Local(jitorch.nn.Module):  # TorchScript would compile it; jitorch pickles, which needs the class importable
        def forward(self, x):
            return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(RuntimeError, match="saved by pickling it"):
            jitorch.jit.save(jitorch.jit.script(Local()), io.BytesIO())
