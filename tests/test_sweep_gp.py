"""Gaussian-process regression written by hand, run with ``lib=torch`` and ``lib=jitorch`` on the same data.

An RBF kernel through ``cdist`` (its zero diagonal included: the gradient of a zero distance), a jittered Cholesky,
the negative log marginal likelihood by ``cholesky_solve`` and the factor's diagonal, ``logdet`` and ``slogdet`` in
the same loss, five Adam steps on the log hyperparameters; the predictive mean and covariance by
``linalg.solve_triangular`` (lower, upper, ``left=False``, ``unitriangular``) and the legacy ``triangular_solve``;
``MultivariateNormal(scale_tril=...)`` log-probabilities, entropy, covariance, precision, the KL to a
``covariance_matrix`` one and gradients of the log-probability to the hyperparameters; batched Cholesky,
``cholesky_ex`` and ``cholesky_inverse``. Sampling is random in both libraries: only ``rsample``'s shape is compared.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, to_numpy

pytestmark = pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")

_RNG = np.random.default_rng(0)
X = _RNG.uniform(-3, 3, (20, 2)).astype(np.float32)
Y = (np.sin(X[:, 0]) + 0.1 * _RNG.standard_normal(20)).astype(np.float32)
XS = _RNG.uniform(-3, 3, (7, 2)).astype(np.float32)
YS = np.random.default_rng(1).standard_normal((4, 7)).astype(np.float32)


def _gp(lib):
    nn = lib.nn

    class GP(nn.Module):
        def __init__(self):
            super().__init__()
            self.log_lengthscale = nn.Parameter(lib.zeros(2))
            self.log_signal = nn.Parameter(lib.tensor(0.0))
            self.log_noise = nn.Parameter(lib.tensor(-1.0))

        def kernel(self, a, b):
            ls = self.log_lengthscale.exp()
            return self.log_signal.exp() ** 2 * lib.exp(-0.5 * lib.cdist(a / ls, b / ls).pow(2))

        def gram(self, x, jitter=1e-5):
            return self.kernel(x, x) + (self.log_noise.exp() ** 2 + jitter) * lib.eye(x.shape[0])
    return GP()


def _run(lib):
    gp = _gp(lib)
    x, y, xs = lib.tensor(X), lib.tensor(Y), lib.tensor(XS)
    opt = lib.optim.Adam(gp.parameters(), lr=0.05)
    out = {}
    for step in range(5):
        opt.zero_grad()
        K = gp.gram(x)
        L = lib.linalg.cholesky(K)
        alpha = lib.cholesky_solve(y.unsqueeze(-1), L)
        nll = 0.5 * (y.unsqueeze(-1) * alpha).sum() + L.diagonal().log().sum() + 0.5 * 20 * math.log(2 * math.pi)
        sign, logabsdet = lib.linalg.slogdet(K)
        # Zero in value, but each term sends its own gradient through logdet, slogdet and the factor.
        zero = 0.5 * lib.logdet(K) - L.diagonal().log().sum() + 0.5 * logabsdet - 0.5 * lib.slogdet(K)[1]
        (nll + zero).backward()
        out[f"losses{step}"] = [nll, zero, sign, logabsdet]
        out[f"grads{step}"] = [p.grad.clone() for p in gp.parameters()]
        opt.step()
    out["params"] = [p.detach().clone() for p in gp.parameters()]

    K = gp.gram(x, jitter=0.0)
    L = lib.linalg.cholesky(K)
    Ks = gp.kernel(x, xs)
    v = lib.linalg.solve_triangular(L, Ks, upper=False)
    alpha = lib.linalg.solve_triangular(L.mT, lib.linalg.solve_triangular(L, y[:, None], upper=False), upper=True)
    mean = (Ks.T @ alpha).squeeze(-1)
    cov = gp.kernel(xs, xs) - v.T @ v
    out["predictive"] = [mean, cov]
    out["solves"] = [lib.linalg.solve_triangular(L.mT, Ks.T, upper=True, left=False),
                     lib.linalg.solve_triangular(L, Ks, upper=False, unitriangular=True),
                     lib.triangular_solve(Ks, L, upper=False).solution]

    D = lib.distributions
    mvn = D.MultivariateNormal(mean, scale_tril=lib.linalg.cholesky(cov + 1e-3 * lib.eye(7)))
    ys = lib.tensor(YS)
    out["mvn"] = [mvn.log_prob(ys), mvn.entropy(), mvn.covariance_matrix, mvn.precision_matrix]
    out["rsample_shape"] = list(mvn.rsample((3,)).shape)
    out["log_prob_grads"] = list(lib.autograd.grad(mvn.log_prob(ys).sum(), list(gp.parameters())))
    prior = D.MultivariateNormal(lib.zeros(7), covariance_matrix=cov.detach() + 1e-3 * lib.eye(7))
    out["prior"] = [prior.log_prob(ys), prior.scale_tril, D.kl_divergence(mvn, prior)]
    Kd = K.detach()
    out["factor"] = [lib.linalg.cholesky(lib.stack([Kd, 2 * Kd])), lib.cholesky_inverse(L.detach()),
                     lib.linalg.cholesky_ex(Kd).L]
    return to_numpy(out)


def test_gaussian_process_training_and_prediction_match_torch():
    assert_close_tree(_run(torch), _run(jitorch), rtol=1e-4, atol=1e-5)
