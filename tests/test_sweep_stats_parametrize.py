"""Statistics utilities and parametrizations as research code uses them, written once against ``lib`` and run with
torch and jitorch from the same NumPy data.

``quantile``/``nanquantile`` under every interpolation (scalar and tensor ``q``, ``dim``/``keepdim``, float64, NaN
slices) and their errors, ``histc``/``histogram``, ``bucketize``/``searchsorted`` (``right=``, ``side=``, ``sorter``,
``out_int32``), ``cov``/``corrcoef`` with frequency and analytic weights, ``cdist`` for each ``p`` and compute mode with
its gradients, ``kthvalue``, ``mode``, ``nanmean``/``nansum``; then ``nn.utils.parametrize`` (a custom symmetric
parametrization, a ``right_inverse``, stacking, ``cached``, ``remove_parametrizations``) and the built-in
``orthogonal`` / ``weight_norm`` / ``spectral_norm`` parametrizations, state-dict keys included. Sweeps elsewhere:
Fourier neural operators, complex networks and word2vec in ``test_sweep_fno_sparse_prune.py``, pruning in
``test_sweep_prune.py``."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.parametrizations  # noqa: F401 - torch's submodules load on import
import torch.nn.utils.parametrize  # noqa: F401

import jitorch
from sweep_helpers import assert_close_tree, assert_runs_match

_RNG = np.random.default_rng(1)
X = _RNG.standard_normal((5, 7)).astype(np.float32)
X_NAN = X.copy()
X_NAN[1, 2] = X_NAN[0, 0] = np.nan
X_NAN[3, :] = np.nan
X64 = _RNG.standard_normal((4, 6))
Y = _RNG.standard_normal((6, 7)).astype(np.float32)
X_INT = _RNG.integers(0, 4, (5, 7))
BOUNDARIES = np.array([-1.0, 0.0, 0.0, 0.5, 2.0], np.float32)


def _errors_match(run):
    """Both libraries raise the same exception type with the same message."""
    with pytest.raises(Exception) as expected:
        run(torch)
    with pytest.raises(Exception) as got:
        run(jitorch)
    assert type(got.value).__name__ == type(expected.value).__name__
    assert str(got.value) == str(expected.value)


# -- quantiles --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.33, [0.0, 0.25, 1.0]])
def test_quantiles_match_torch(interpolation, q):
    def run(lib):
        out = []
        for dim, keepdim in [(None, False), (1, False), (0, True), (-1, True)]:
            qq = lib.tensor(q) if isinstance(q, list) else q
            x = lib.tensor(X, requires_grad=True)
            y = lib.quantile(x, qq, dim=dim, keepdim=keepdim, interpolation=interpolation)
            y.sum().backward()
            q64 = lib.tensor(q, dtype=lib.float64) if isinstance(q, list) else q
            out += [y, x.grad,
                    lib.nanquantile(lib.tensor(X_NAN), qq, dim=dim, keepdim=keepdim, interpolation=interpolation),
                    lib.quantile(lib.tensor(X_NAN), qq, dim=dim, keepdim=keepdim, interpolation=interpolation),
                    lib.quantile(lib.tensor(X64), q64, dim=dim, keepdim=keepdim, interpolation=interpolation)]
        return out + [lib.quantile(lib.tensor(X).t(), qq, dim=0), lib.tensor(X)[:, ::2].quantile(qq, dim=1)]

    assert_runs_match(run(torch), run(jitorch), rtol=1e-6)


@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
@pytest.mark.parametrize("case", ["scalar_range", "tensor_range", "interpolation", "int_input", "q_dtype", "q_2d",
                                  "empty"])
def test_quantile_errors_match_torch(fn, case):
    """ATen's checks are shared: every message says ``quantile()``, and a float ``q`` out of range names its value."""
    def run(lib):
        f = getattr(lib, fn)
        x = lib.tensor(X)
        {"scalar_range": lambda: f(x, 1.5),
         "tensor_range": lambda: f(x, lib.tensor([0.5, -0.1])),
         "interpolation": lambda: f(x, 0.5, interpolation="median"),
         "int_input": lambda: f(lib.tensor([1, 2, 3]), 0.5),
         "q_dtype": lambda: f(x, lib.tensor(0.5, dtype=lib.float64)),
         "q_2d": lambda: f(x, lib.tensor([[0.5]])),
         "empty": lambda: f(lib.zeros(0), 0.5)}[case]()

    _errors_match(run)


# -- histograms, buckets, searchsorted --------------------------------------------------------------------------------
def _histograms(lib):
    x = lib.tensor(X)
    out = [lib.histc(x, bins=5), lib.histc(x, bins=4, min=-1, max=1), lib.histc(lib.tensor(X64), 10),
           lib.histc(lib.zeros(0)), lib.histc(lib.tensor([1.0, 1.0]), bins=3), x.histc(3, 0, 0),
           lib.histc(lib.tensor([0.0, 1.0, 2.0, 1.0]), bins=4, min=0, max=3), lib.histc(x.t(), 6)]
    out += list(lib.histogram(x, bins=4))
    out += list(lib.histogram(x, bins=lib.tensor([-1.0, 0.0, 2.0]), density=True))
    return out + list(lib.histogram(x, 3, range=(0.0, 1.0), weight=x.abs()))


def test_histograms_match_torch():
    assert_runs_match(_histograms(torch), _histograms(jitorch))


def _buckets(lib):
    b, x = lib.tensor(BOUNDARIES), lib.tensor(X)
    s = lib.tensor(np.sort(X, 1))
    return [lib.bucketize(x, b), lib.bucketize(x, b, right=True), lib.bucketize(x, b, out_int32=True),
            lib.bucketize(lib.tensor(0.0), b), lib.searchsorted(s, x), lib.searchsorted(s, x, right=True),
            lib.searchsorted(s, x, side="right"), lib.searchsorted(b, x), lib.searchsorted(b, 0.0),
            lib.searchsorted(x, x, sorter=lib.argsort(x, 1)), lib.searchsorted(b, x, out_int32=True),
            lib.searchsorted(s.t().contiguous().t(), x[:, :3]),
            lib.searchsorted(lib.tensor([1, 3, 5]), lib.tensor([2, 5])),
            lib.searchsorted(lib.zeros(0), x), lib.bucketize(x, lib.zeros(0)),
            lib.searchsorted(b, lib.tensor([np.nan, np.inf, -np.inf]))]


def test_bucketize_and_searchsorted_match_torch():
    assert_close_tree(_buckets(torch), _buckets(jitorch))


# -- covariance, distances, order statistics --------------------------------------------------------------------------
AWEIGHTS = _RNG.random(7).astype(np.float32)


def _covariances(lib):
    x = lib.tensor(X, requires_grad=True)
    c, r = lib.cov(x), lib.corrcoef(x)
    (c.sum() + r.sum()).backward()
    fw, aw = lib.tensor([1, 2, 1, 3, 1, 1, 2]), lib.tensor(AWEIGHTS)
    return [c, r, x.grad, lib.cov(x, correction=0), lib.cov(x, fweights=fw), lib.cov(x, aweights=aw),
            lib.cov(x, fweights=fw, aweights=aw, correction=2), lib.cov(x[0]), lib.corrcoef(x[0]),
            lib.cov(lib.tensor(X64)), lib.corrcoef(lib.tensor(X64)), lib.cov(lib.tensor([[1, 2, 3], [2, 4, 7]])),
            lib.cov(x.t())]


def test_cov_and_corrcoef_match_torch():
    assert_runs_match(_covariances(torch), _covariances(jitorch), rtol=1e-5)


@pytest.mark.parametrize("case", ["bool_input", "bool_corrcoef", "bool_fweights", "float_fweights", "bool_aweights",
                                  "3d"])
def test_cov_errors_match_torch(case):
    def run(lib):
        x = lib.tensor(X[:2, :3])
        {"bool_input": lambda: lib.cov(x > 0), "bool_corrcoef": lambda: lib.corrcoef(x > 0),
         "bool_fweights": lambda: lib.cov(x, fweights=lib.tensor([True, True, False])),
         "float_fweights": lambda: lib.cov(x, fweights=lib.tensor([1.0, 2.0, 1.0])),
         "bool_aweights": lambda: lib.cov(x, aweights=lib.tensor([True, True, False])),
         "3d": lambda: lib.cov(x[None])}[case]()

    _errors_match(run)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, float("inf"), 0.5])
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_cdist_and_its_gradients_match_torch(p, mode):
    def run(lib):
        a, b = lib.tensor(X, requires_grad=True), lib.tensor(Y, requires_grad=True)
        d = lib.cdist(a, b, p=p, compute_mode=mode)
        (d * lib.arange(6.0)).sum().backward()
        batched = lib.cdist(lib.tensor(X).unsqueeze(0).expand(2, 5, 7), lib.tensor(Y)[None], p=p)
        return [d, a.grad, b.grad, batched, lib.cdist(lib.tensor(X64), lib.tensor(X64[:2]), p=p)]

    assert_runs_match(run(torch), run(jitorch), rtol=1e-4)


@pytest.mark.parametrize("case", ["float_double", "double_float_mm", "half", "half_float", "inf_norm_mixed"])
def test_cdist_refuses_mixed_and_half_dtypes_as_torch(case):
    """jitorch promoted mixed inputs (a float64 query against float32 embeddings) where torch raises."""
    def run(lib):
        a, b = lib.tensor(X), lib.tensor(Y)
        {"float_double": lambda: lib.cdist(a, b.double()),
         "double_float_mm": lambda: lib.cdist(a.double(), b, compute_mode="use_mm_for_euclid_dist"),
         "half": lambda: lib.cdist(a.half(), b.half(), p=1),
         "half_float": lambda: lib.cdist(a.half(), b),
         "inf_norm_mixed": lambda: lib.cdist(a, b.double(), p=float("inf"))}[case]()

    _errors_match(run)


def test_cdist_of_halves_through_the_matrix_product_as_torch():
    def run(lib):
        return lib.cdist(lib.tensor(X).half(), lib.tensor(Y).half(), compute_mode="use_mm_for_euclid_dist")

    assert_runs_match(run(torch), run(jitorch), rtol=2e-3)


def _order_statistics(lib):
    x = lib.tensor(X, requires_grad=True)
    v, i = lib.kthvalue(x, 3, dim=1)
    v.sum().backward()
    xf = lib.tensor(X_INT.astype(np.float32), requires_grad=True)
    mv, mi = lib.mode(xf, 1)
    mv.sum().backward()
    xi = lib.tensor(X_INT)
    return [v, i, x.grad, tuple(lib.kthvalue(x, 2, 0, keepdim=True)), tuple(lib.kthvalue(xi, 4)),
            tuple(lib.kthvalue(lib.tensor(X_NAN), 2)), tuple(lib.kthvalue(lib.tensor(3.0), 1)),
            tuple(x.t().kthvalue(5)), mv, mi, xf.grad, tuple(lib.mode(xi)), tuple(lib.mode(xi, 0)),
            tuple(lib.mode(xi, 1, keepdim=True)), tuple(lib.mode(lib.tensor([1, 1, 2, 2]))),
            tuple(lib.mode(lib.tensor(5)))]


def test_kthvalue_and_mode_match_torch():
    assert_close_tree(_order_statistics(torch), _order_statistics(jitorch))


@pytest.mark.parametrize("k, dim", [(8, -1), (0, 1), (2, 0)])
def test_kthvalue_range_error_names_the_wrapped_dim(k, dim):
    def run(lib):
        lib.kthvalue(lib.tensor(X) if dim != 0 or k != 2 else lib.tensor(3.0), k, dim)

    with pytest.raises(RuntimeError) as expected:
        run(torch)
    with pytest.raises(RuntimeError) as got:
        run(jitorch)
    assert str(got.value).startswith(str(expected.value))


def _nan_reductions(lib):
    x = lib.tensor(X_NAN, requires_grad=True)
    m, s = lib.nanmean(x, 1), lib.nansum(x, 0)
    (m.nan_to_num().sum() + s.sum()).backward()
    return [m, s, x.grad, lib.nanmean(x), lib.nansum(x), lib.nanmean(x, (0, 1), keepdim=True),
            lib.nansum(lib.tensor(X_INT)), lib.nansum(lib.tensor(X_INT), 1), lib.nanmean(lib.tensor(X64)),
            lib.nansum(x, dtype=lib.float64), lib.nansum(lib.zeros(0)), lib.nanmean(lib.zeros(0)), lib.nanmedian(x)]


def test_nanmean_and_nansum_match_torch():
    assert_runs_match(_nan_reductions(torch), _nan_reductions(jitorch))


# -- parametrizations -------------------------------------------------------------------------------------------------
PW = _RNG.standard_normal((6, 4)).astype(np.float32)
PB = _RNG.standard_normal(6).astype(np.float32)
SQ = _RNG.standard_normal((5, 5)).astype(np.float32)
PX = _RNG.standard_normal((3, 4)).astype(np.float32)


def _linear(lib, w=PW):
    m = lib.nn.Linear(w.shape[1], w.shape[0])
    m.weight.data.copy_(lib.tensor(w))
    m.bias.data.copy_(lib.tensor(PB[:w.shape[0]]))
    return m


def _layout(m):
    return [sorted(m.state_dict()), [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()]]


def _custom_parametrizations(lib):
    P = lib.nn.utils.parametrize

    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, X):
            return X.triu()

    class Positive(lib.nn.Module):
        def forward(self, X):
            return X.exp()

        def right_inverse(self, X):
            return X.log()

    m = _linear(lib, SQ)
    P.register_parametrization(m, "weight", Symmetric())
    out = [_layout(m), m.weight, P.is_parametrized(m), P.is_parametrized(m, "bias"), type(m).__name__]
    y = m(lib.tensor(SQ))
    y.sum().backward()
    out += [y, m.parametrizations.weight.original.grad]
    with P.cached():
        out.append(m.weight is m.weight)
    m.weight = lib.tensor(SQ + SQ.T)  # through right_inverse
    out += [m.weight, m.parametrizations.weight.original]
    P.remove_parametrizations(m, "weight", leave_parametrized=True)
    out += [_layout(m), m.weight, type(m).__name__]
    m2 = _linear(lib, SQ)
    m2.bias.data.abs_()
    P.register_parametrization(m2, "bias", Positive())
    P.register_parametrization(m2, "bias", Positive())  # stacked: original is log(log(b))
    out += [m2.parametrizations.bias.original, m2.bias, _layout(m2)]
    P.remove_parametrizations(m2, "bias", leave_parametrized=False)
    return out + [m2.bias, _layout(m2)]


def test_custom_parametrizations_match_torch():
    assert_close_tree(_custom_parametrizations(torch), _custom_parametrizations(jitorch), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", [{}, {"orthogonal_map": "cayley"}, {"orthogonal_map": "householder"},
                                {"use_trivialization": False}])
def test_orthogonal_parametrization_trains_as_torch(kw):
    """A square weight: a wide or tall one completes its base with random columns, which the generators differ on."""
    def run(lib):
        m = _linear(lib, SQ)
        lib.nn.utils.parametrizations.orthogonal(m, **kw)
        q = m.weight
        out = [_layout(m), q, q @ q.T]
        opt = lib.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            m(lib.tensor(SQ[:2])).pow(2).sum().backward()
            opt.step()
        return out + [m.weight, m.state_dict()]

    assert_close_tree(run(torch), run(jitorch), rtol=1e-4, atol=1e-5)


def _weight_norms(lib):
    out = []
    for dim in [0, 1, None, -1]:
        m = _linear(lib)
        lib.nn.utils.parametrizations.weight_norm(m, dim=dim)
        m(lib.tensor(PX)).pow(2).sum().backward()
        w = m.parametrizations.weight
        out += [_layout(m), m.weight, w.original0, w.original1, w.original0.grad, w.original1.grad]
    m = _linear(lib)
    lib.nn.utils.weight_norm(m)  # the deprecated hook form: weight_g / weight_v parameters
    out += [_layout(m), m.weight_g, m.weight_v, m.weight]
    lib.nn.utils.remove_weight_norm(m)
    return out + [_layout(m), m.weight]


@pytest.mark.filterwarnings("ignore:.*weight_norm.*deprecated")
def test_weight_norm_parametrizations_match_torch():
    assert_close_tree(_weight_norms(torch), _weight_norms(jitorch), rtol=1e-5, atol=1e-6)


_REF_SN = torch.nn.Linear(4, 6)
torch.nn.utils.parametrizations.spectral_norm(_REF_SN)
SN_STATE = {k: v.detach().numpy().copy() for k, v in _REF_SN.state_dict().items()}
_REF_SN_OLD = torch.nn.Linear(4, 6)
torch.nn.utils.spectral_norm(_REF_SN_OLD)
SN_OLD_STATE = {k: v.detach().numpy().copy() for k, v in _REF_SN_OLD.state_dict().items()}


def _spectral_norms(lib):
    m = _linear(lib)
    lib.nn.utils.parametrizations.spectral_norm(m)
    out = [_layout(m)]
    m.load_state_dict({k: lib.tensor(v) for k, v in SN_STATE.items()})
    out += [m(lib.tensor(PX)), m(lib.tensor(PX))]  # each training call runs a power iteration
    m.eval()
    out += [m(lib.tensor(PX)), m.parametrizations.weight[0]._u, m.parametrizations.weight[0]._v]
    old = _linear(lib)
    lib.nn.utils.spectral_norm(old)
    out.append(_layout(old))
    old.load_state_dict({k: lib.tensor(v) for k, v in SN_OLD_STATE.items()})
    out += [old(lib.tensor(PX)), old.weight_u]
    old.eval()
    out.append(old(lib.tensor(PX)))
    lib.nn.utils.remove_spectral_norm(old)
    return out + [_layout(old)]


def test_spectral_norm_parametrizations_match_torch():
    assert_close_tree(_spectral_norms(torch), _spectral_norms(jitorch), rtol=1e-4, atol=1e-5)


def test_parametrization_errors_match_torch():
    def changes_shape(lib):
        class Rows(lib.nn.Module):
            def forward(self, X):
                return X[:2]

        lib.nn.utils.parametrize.register_parametrization(_linear(lib), "weight", Rows())

    with pytest.raises(ValueError, match="may not change the shape of the tensor"):
        changes_shape(torch)
    with pytest.raises(ValueError, match="may not change the shape of the tensor"):
        changes_shape(jitorch)
    _errors_match(lambda lib: lib.nn.utils.parametrize.remove_parametrizations(_linear(lib), "weight"))
