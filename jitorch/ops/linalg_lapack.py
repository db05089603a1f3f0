"""The rows whose kernels call ``xp.linalg`` (LAPACK on the CPU, cuSOLVER through CuPy): inverse, solve,
determinants, Cholesky, QR, Hermitian eigen decompositions, SVD and the pseudo-inverse, with PyTorch's errors for
failed factorizations (``_lapack``) and their backwards as matrix-calculus formulas in jitorch ops (so second
derivatives work).

Split from ``linalg.py`` (the products and norms), which re-exports the rows.

>>> import jitorch
>>> a = jitorch.tensor([[2.0, 0.0], [0.0, 4.0]], requires_grad=True)
>>> jitorch.linalg.inv(a).sum().backward()
>>> a.grad
tensor([[-0.2500, -0.1250],
        [-0.1250, -0.0625]])
"""
from __future__ import annotations

import numpy as np

from .table import Opaque, defop
# linalg imports this module at its end, once these are defined.
from .linalg import _HALF, MATMUL, LinAlgError, _apply, _h


def _lapack(xp, op, fn, *arrays):
    """Call an ``xp.linalg`` routine, translating its failure into PyTorch's error for ``op``."""
    for a in arrays:
        if a.dtype.kind not in "fc" or a.dtype.name in _HALF:
            from .._dispatch import TORCH_TYPE_NAMES

            raise RuntimeError(f"{op}: Low precision dtypes not supported. Got {TORCH_TYPE_NAMES[a.dtype.name]}"
                               if a.dtype.name in _HALF else
                               f"{op}: Expected a floating point or complex tensor as input. Got "
                               f"{TORCH_TYPE_NAMES[a.dtype.name]}")
    try:
        return fn(*arrays)
    except np.linalg.LinAlgError as e:
        shape = tuple(arrays[0].shape)
        from .linalg_factor import explain_failure

        explained = explain_failure(xp, op, arrays[0])
        if explained is not None:
            raise explained from None
        if "definite" in str(e):
            raise LinAlgError(f"{op}: The factorization could not be completed because the input of shape {shape} "
                              "is not positive-definite.") from None
        if "ingular" in str(e):
            raise LinAlgError(f"{op}: The input matrix of shape {shape} is singular, the inversion could not be "
                              "completed.") from None
        raise LinAlgError(f"{op}: The algorithm failed to converge on the input of shape {shape} ({e}).") from None


def _inv_backward(ctx, g):
    inv = _h(ctx.out)
    return -_apply(MATMUL, _apply(MATMUL, inv, g), inv)


INV = defop("linalg_inv", lambda xp, a: _lapack(xp, "linalg.inv", xp.linalg.inv, a), _inv_backward,
            Opaque("LAPACK"), saves="outputs", grad_name="LinalgInvExBackward0")


def _solve_backward(ctx, g):
    a, _ = ctx.inputs
    gb = _apply(SOLVE, _h(a), g)
    ga = -_apply(MATMUL, gb, _h(ctx.out)) if ctx.needs_grad(0) else None
    return ga, gb if ctx.needs_grad(1) else None


SOLVE = defop("linalg_solve", lambda xp, a, b: _lapack(xp, "linalg.solve", xp.linalg.solve, a, b), _solve_backward,
              Opaque("LAPACK"), saves="both", grad_name="LinalgSolveExBackward0")


def _cofactor(a, det):
    """``det(A) * inv(A)^H``, through the SVD when some matrix is singular (the adjugate still exists there)."""
    if not bool((det == 0).any()):
        return (det.conj().unsqueeze(-1).unsqueeze(-1)) * _h(_apply(INV, a))
    u, s, vh = _apply(SVD, a, full_matrices=False)
    ones = s.new_ones(s.shape[:-1] + (1,))
    from .. import _movement

    left = _movement.cat([ones, s.narrow(-1, 0, s.shape[-1] - 1)], -1).cumprod(-1)
    right = _movement.cat([ones, s.flip(-1).narrow(-1, 0, s.shape[-1] - 1)], -1).cumprod(-1).flip(-1)
    phase = (_apply(DET, u) * _apply(DET, vh)).unsqueeze(-1).unsqueeze(-1)
    return phase * _apply(MATMUL, u * (left * right).unsqueeze(-2), vh)


def _det_backward(ctx, g):
    (a,) = ctx.inputs
    return g.unsqueeze(-1).unsqueeze(-1) * _cofactor(a, ctx.out)


DET = defop("linalg_det", lambda xp, a: _lapack(xp, "linalg.det", xp.linalg.det, a), _det_backward, Opaque("LAPACK"),
            saves="both", grad_name="LinalgDetBackward0")


def _slogdet_backward(ctx, g_sign, g_logabs):
    (a,) = ctx.inputs
    g = g_logabs
    if a.is_complex():
        # A complex sign moves with Im(tr(A^-1 dA)): its adjoint is -i Im(conj(g_sign) sign), as PyTorch's.
        sign = ctx.outputs[0]
        g = g - 1j * (g_sign.conj() * sign).imag
    return g.unsqueeze(-1).unsqueeze(-1) * _h(_apply(INV, a))


SLOGDET = defop("linalg_slogdet", lambda xp, a: _lapack(xp, "linalg.slogdet", xp.linalg.slogdet, a),
                _slogdet_backward, Opaque("LAPACK"), saves="both", nout=2,
                grad_name="LinalgSlogdetBackward0")


def _cholesky_kernel(xp, a, upper):
    lower = _lapack(xp, "linalg.cholesky", xp.linalg.cholesky, a)
    return xp.swapaxes(lower, -1, -2).conj().copy() if upper else lower


def _cholesky_backward(ctx, g):
    # A = L L^H:  gA = sym(L^{-H} phi(L^H gL) L^{-1}), phi = lower triangle with a halved diagonal.
    low = ctx.out
    if ctx.attrs["upper"]:
        low, g = _h(low), _h(g)
    p = _apply(MATMUL, _h(low), g).tril()
    p = p - 0.5 * p.diagonal(0, -2, -1).diag_embed()
    low_inv = _apply(INV, low)
    s = _apply(MATMUL, _apply(MATMUL, _h(low_inv), p), low_inv)
    return 0.5 * (s + _h(s))


CHOLESKY = defop("linalg_cholesky", _cholesky_kernel, _cholesky_backward, Opaque("LAPACK"), saves="outputs",
                 grad_name="LinalgCholeskyExBackward0")


def _qr_kernel(xp, a, mode):
    if mode == "r":
        r = _lapack(xp, "linalg.qr", lambda x: xp.linalg.qr(x, mode="r"), a)
        return xp.zeros((0,), dtype=a.dtype), r
    return _lapack(xp, "linalg.qr", lambda x: xp.linalg.qr(x, mode=mode), a)


def _qr_backward_tall(q, r, gq, gr):
    # m >= n:  gA = (gQ + Q copyltu(M)) R^{-H},  M = R gR^H - gQ^H Q.
    m = _apply(MATMUL, r, _h(gr)) - _apply(MATMUL, _h(gq), q)
    lower = m.tril(-1)
    # LAPACK keeps diag(R) real, so only the real part of M's diagonal is a free direction (PyTorch's syminvadj).
    diag = m.diagonal(0, -2, -1)
    hermitian = lower + _h(lower) + (diag.real if m.is_complex() else diag).diag_embed()
    b = gq + _apply(MATMUL, q, hermitian)
    return _h(_apply(SOLVE, r, _h(b)))


def _qr_backward(ctx, gq, gr):
    q, r = ctx.outputs
    mode = ctx.attrs["mode"]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please "
                           "use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    m, n = q.shape[-2], r.shape[-1]
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    if m >= n:
        return _qr_backward_tall(q, r, gq, gr)
    # Wide A = Q [X | Y] with X = Q R1 square: the Y block enters through gQ.
    from .. import _movement

    r1, r2 = r.narrow(-1, 0, m), r.narrow(-1, m, n - m)
    gr1, gr2 = gr.narrow(-1, 0, m), gr.narrow(-1, m, n - m)
    y = _apply(MATMUL, q, r2)
    gx = _qr_backward_tall(q, r1, gq + _apply(MATMUL, y, _h(gr2)), gr1)
    return _movement.cat([gx, _apply(MATMUL, q, gr2)], -1)


QR = defop("linalg_qr", _qr_kernel, _qr_backward, Opaque("LAPACK"), saves="outputs", nout=2,
           grad_name="LinalgQrBackward0")


def _eye_mask(n, like):
    from .. import _creation

    return _creation.eye(n, dtype=like.dtype, device=like.device).bool()


def flows(grad):
    """Whether a vectors' gradient takes part: nonzero, or zero but differentiated further (the zero cotangent of
    the double-vjp trick behind ``jvp``, ``hvp`` and forward AD). Skipping a zero one keeps repeated eigen/singular
    values (0/0) out of value-only losses, as torch's undefined gradients do."""
    return grad.requires_grad or bool(grad.any())


def _eigh_backward(ctx, g_values, g_vectors):
    values, vectors = ctx.outputs
    inner = g_values.diag_embed()
    if flows(g_vectors):
        eye = _eye_mask(values.shape[-1], values)
        vhgv = _apply(MATMUL, _h(vectors), g_vectors)
        skew = 0.5 * (vhgv - _h(vhgv))
        gap = (values.unsqueeze(-2) - values.unsqueeze(-1)).where(~eye, 1.0)
        inner = inner + (skew / gap).where(~eye, 0.0)
    return _apply(MATMUL, _apply(MATMUL, vectors, inner), _h(vectors))


EIGH = defop("linalg_eigh", lambda xp, a, uplo: _lapack(xp, "linalg.eigh", lambda x: xp.linalg.eigh(x, UPLO=uplo), a),
             _eigh_backward, Opaque("LAPACK"), saves="outputs", nout=2, grad_name="LinalgEighBackward0")


def _eigvalsh_backward(ctx, g):
    (a,) = ctx.inputs
    _, vectors = _apply(EIGH, a, uplo=ctx.attrs["uplo"])
    return _apply(MATMUL, vectors * g.unsqueeze(-2), _h(vectors))


EIGVALSH = defop("linalg_eigvalsh",
                 lambda xp, a, uplo: _lapack(xp, "linalg.eigvalsh", lambda x: xp.linalg.eigvalsh(x, UPLO=uplo), a),
                 _eigvalsh_backward, Opaque("LAPACK"), saves="inputs", grad_name="LinalgEighBackward0")


def _svd_kernel(xp, a, full_matrices):
    return _lapack(xp, "linalg.svd", lambda x: xp.linalg.svd(x, full_matrices=full_matrices), a)


def _svd_backward(ctx, gu, gs, gvh):
    u, s, vh = ctx.outputs
    k = s.shape[-1]
    if ctx.attrs["full_matrices"]:  # the extra singular vectors are arbitrary: PyTorch ignores their gradient
        u, gu, vh, gvh = u.narrow(-1, 0, k), gu.narrow(-1, 0, k), vh.narrow(-2, 0, k), gvh.narrow(-2, 0, k)
    m, n = u.shape[-2], vh.shape[-1]
    has_u, has_v = flows(gu), flows(gvh)
    ga = gs.diag_embed()
    if has_u or has_v:
        eye = _eye_mask(k, s)
        s2 = s * s
        gap = (s2.unsqueeze(-2) - s2.unsqueeze(-1)).where(~eye, 1.0)
        uhgu = _apply(MATMUL, _h(u), gu)
        vhgv = _apply(MATMUL, vh, _h(gvh))
        term = (uhgu - _h(uhgu)) * s.unsqueeze(-2) + s.unsqueeze(-1) * (vhgv - _h(vhgv))
        ga = ga + (term / gap).where(~eye, 0.0)
    if m > n and has_u:  # (I - U U^H) gU S^{-1}: the part of gU outside span(U)
        gus = gu / s.unsqueeze(-2)
        ga = _apply(MATMUL, _apply(MATMUL, u, ga) + gus - _apply(MATMUL, u, _apply(MATMUL, _h(u), gus)), vh)
    elif m < n and has_v:
        sgvh = gvh / s.unsqueeze(-1)
        ga = _apply(MATMUL, u, _apply(MATMUL, ga, vh) + sgvh - _apply(MATMUL, _apply(MATMUL, sgvh, _h(vh)), vh))
    else:
        ga = _apply(MATMUL, _apply(MATMUL, u, ga), vh)
    return ga


SVD = defop("linalg_svd", _svd_kernel, _svd_backward, Opaque("LAPACK"), saves="outputs", nout=3,
            grad_name="LinalgSvdBackward0")


def _svdvals_backward(ctx, g):
    (a,) = ctx.inputs
    u, _, vh = _apply(SVD, a, full_matrices=False)
    return _apply(MATMUL, u * g.unsqueeze(-2), vh)


SVDVALS = defop("linalg_svdvals",
                lambda xp, a: _lapack(xp, "linalg.svdvals", lambda x: xp.linalg.svd(x, compute_uv=False), a),
                _svdvals_backward, Opaque("LAPACK"), saves="inputs", grad_name="LinalgSvdBackward0")


def _pinv_kernel(xp, a, atol, rtol):
    u, s, vh = _lapack(xp, "linalg.pinv", lambda x: xp.linalg.svd(x, full_matrices=False), a)
    biggest = s.max(axis=-1, keepdims=True) if s.shape[-1] else xp.zeros(s.shape[:-1] + (1,), s.dtype)
    keep = s > xp.maximum(atol, rtol * biggest)
    inv_s = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(s.dtype)
    return xp.matmul(xp.swapaxes(vh, -1, -2).conj() * inv_s[..., None, :], xp.swapaxes(u, -1, -2).conj())


def _pinv_backward(ctx, g):
    # Golub & Pereyra: dP = -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P, turned into a gradient.
    (a,) = ctx.inputs
    p = ctx.out
    ph, gh = _h(p), _h(g)

    def mm(x, y):
        return _apply(MATMUL, x, y)

    return (-mm(mm(ph, g), ph)
            + mm(gh - mm(a, mm(p, gh)), mm(p, ph))
            + mm(mm(ph, p), gh - mm(mm(gh, p), a)))


PINV = defop("linalg_pinv", _pinv_kernel, _pinv_backward, Opaque("LAPACK"), saves="both",
             grad_name="LinalgPinvBackward0")
