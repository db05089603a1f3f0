"""``torch.distributions`` as VAE, RL and Bayesian code uses it, written once against ``lib`` and run with torch and
jitorch on the same inputs: log_prob/entropy/moments and their gradients (random upstream gradients) for the common
families in float32, KL pairs across families, the SAC squashed Gaussian, a masked PPO policy, a VAE's KL and
reconstruction terms, gradients with respect to the value, reparameterized-sample gradients (exact where the
family is a location family, loose statistics otherwise), and torch's errors for mismatched parameter shapes.
Sampling streams differ between the libraries, so samples are compared only by shape, dtype and statistics.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree

_rng = np.random.default_rng(0)


def _u(*shape, lo=-2.0, hi=2.0):
    return _rng.uniform(lo, hi, shape)


LOC, SCALE, VALUE = _u(3, 4), _u(3, 4, lo=0.3, hi=2.0), _u(3, 4)
PROBS, LOGITS = _u(3, 4, lo=0.05, hi=0.95), _u(3, 5)
CONC, CONC2 = _u(3, 4, lo=0.5, hi=3.0), _u(3, 4, lo=0.5, hi=3.0)
SIMPLEX, FACTOR, FACTOR2, LOGITS2 = _rng.dirichlet(np.ones(4), 3), _u(3, 4, 2), _u(3, 4, 2), _u(3, 5)
TRIL = np.tril(_u(3, 3, 3))
TRIL[:, range(3), range(3)] = np.abs(TRIL[:, range(3), range(3)]) + 0.5
TRIL2 = np.tril(_u(3, 3, 3))
TRIL2[:, range(3), range(3)] = np.abs(TRIL2[:, range(3), range(3)]) + 0.7


def leaf(lib, a, dtype):
    return lib.tensor(np.asarray(a, dtype=dtype), requires_grad=True)


def grads(lib, out, leaves, seed):
    """Gradients of ``out`` with a random upstream gradient; unused leaves give zeros of shape (1,)."""
    upstream = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    got = lib.autograd.grad(out, leaves, lib.tensor(upstream, dtype=out.dtype), allow_unused=True,
                            retain_graph=True)
    return [g if g is not None else lib.zeros(1) for g in got]


def families(lib, dtype):
    """(distribution, its parameters, a value in its support) for each family research code reaches for."""
    D = lib.distributions
    t = lambda a: lib.tensor(np.asarray(a, dtype=dtype))  # noqa: E731
    p = {k: leaf(lib, v, dtype) for k, v in dict(loc=LOC, scale=SCALE, probs=PROBS, logits=LOGITS, conc=CONC,
                                                    conc2=CONC2, simplex=SIMPLEX, factor=FACTOR, tril=TRIL).items()}
    cov = p["tril"] @ p["tril"].mT
    return {
        "normal": (D.Normal(p["loc"], p["scale"]), [p["loc"], p["scale"]], t(VALUE)),
        "independent": (D.Independent(D.Normal(p["loc"], p["scale"]), 1), [p["loc"], p["scale"]], t(VALUE)),
        "mvn_tril": (D.MultivariateNormal(p["loc"][:, :3], scale_tril=p["tril"]), [p["loc"], p["tril"]],
                     t(VALUE[:, :3])),
        "mvn_cov": (D.MultivariateNormal(p["loc"][:, :3], covariance_matrix=cov), [p["loc"], p["tril"]],
                    t(VALUE[:, :3])),
        "mvn_precision": (D.MultivariateNormal(p["loc"][:, :3], precision_matrix=cov), [p["loc"], p["tril"]],
                          t(VALUE[:, :3])),
        "lowrank": (D.LowRankMultivariateNormal(p["loc"], p["factor"], p["scale"]),
                    [p["loc"], p["factor"], p["scale"]], t(VALUE)),
        "categorical": (D.Categorical(logits=p["logits"]), [p["logits"]], lib.tensor([0, 4, 2])),
        "categorical_probs": (D.Categorical(probs=p["simplex"]), [p["simplex"]], lib.tensor([[0, 3, 2], [1, 1, 1]])),
        "one_hot": (D.OneHotCategorical(logits=p["logits"]), [p["logits"]],
                    lib.nn.functional.one_hot(lib.tensor([0, 4, 2]), 5).to(p["logits"].dtype)),
        "bernoulli": (D.Bernoulli(probs=p["probs"]), [p["probs"]], t(VALUE > 0)),
        "bernoulli_logits": (D.Bernoulli(logits=p["loc"]), [p["loc"]], t(VALUE > 0)),
        "beta": (D.Beta(p["conc"], p["conc2"]), [p["conc"], p["conc2"]], t(PROBS)),
        "gamma": (D.Gamma(p["conc"], p["scale"]), [p["conc"], p["scale"]], t(CONC2)),
        "dirichlet": (D.Dirichlet(p["conc"]), [p["conc"]], t(SIMPLEX)),
        "laplace": (D.Laplace(p["loc"], p["scale"]), [p["loc"], p["scale"]], t(VALUE)),
        "student_t": (D.StudentT(p["conc"] + 2, p["loc"], p["scale"]), [p["conc"], p["loc"], p["scale"]], t(VALUE)),
        "uniform": (D.Uniform(p["loc"] - 4.5, p["loc"] + 4.5), [p["loc"]], t(VALUE)),
        "mixture": (D.MixtureSameFamily(D.Categorical(logits=p["logits"][:, :4]), D.Normal(p["loc"], p["scale"])),
                    [p["logits"], p["loc"], p["scale"]], t(VALUE[:, 0])),
    }


def family_sweep(lib, dtype):
    out = {}
    for i, (name, (d, params, value)) in enumerate(families(lib, dtype).items()):
        lp = d.log_prob(value)
        row = {"log_prob": lp, "d_log_prob": grads(lib, lp, params, seed=i),
               "shapes": [list(d.batch_shape), list(d.event_shape)]}
        for attr in ("entropy", "mean", "variance", "stddev", "mode"):
            try:
                x = getattr(d, attr)
                x = x() if callable(x) else x
            except NotImplementedError:
                row[attr] = "NotImplementedError"
                continue
            row[attr] = x
            if x.requires_grad:
                row["d_" + attr] = grads(lib, x, params, seed=100 + i)
        expanded = d.expand((2,) + tuple(d.batch_shape))
        row["expanded"] = [list(expanded.batch_shape), expanded.log_prob(value)]
        lib.manual_seed(0)
        sample = d.sample((2,))
        row["sample"] = [list(sample.shape), str(sample.dtype).split(".")[-1]]
        out[name] = row
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_family_log_probs_moments_and_gradients_match_torch(dtype):
    tol = 2e-5 if dtype == np.float32 else 1e-9
    assert_close_tree(family_sweep(torch, dtype), family_sweep(jitorch, dtype), rtol=tol, atol=tol)


def kl_sweep(lib):
    D = lib.distributions
    p = {k: leaf(lib, v, np.float64) for k, v in dict(
        l=LOC, s=SCALE, l2=VALUE, s2=SCALE[::-1].copy(), c=CONC, c2=CONC2, L=TRIL, L2=TRIL2, f=FACTOR, f2=FACTOR2,
        lg=LOGITS, lg2=LOGITS2, p=PROBS).items()}
    cov2 = p["f2"] @ p["f2"].mT + lib.diag_embed(p["s2"])
    normal, normal2 = D.Normal(p["l"], p["s"]), D.Normal(p["l2"], p["s2"])
    pairs = {
        "normal": (normal, normal2),
        "independent": (D.Independent(normal, 1), D.Independent(normal2, 1)),
        "mvn": (D.MultivariateNormal(p["l"][:, :3], scale_tril=p["L"]),
                D.MultivariateNormal(p["l2"][:, :3], covariance_matrix=p["L2"] @ p["L2"].mT)),
        "lowrank": (D.LowRankMultivariateNormal(p["l"], p["f"], p["s"]),
                    D.LowRankMultivariateNormal(p["l2"], p["f2"], p["s2"])),
        "lowrank_mvn": (D.LowRankMultivariateNormal(p["l"], p["f"], p["s"]), D.MultivariateNormal(p["l2"], cov2)),
        "mvn_lowrank": (D.MultivariateNormal(p["l2"], cov2), D.LowRankMultivariateNormal(p["l"], p["f"], p["s"])),
        "categorical": (D.Categorical(logits=p["lg"]), D.Categorical(logits=p["lg2"])),
        "one_hot": (D.OneHotCategorical(logits=p["lg"]), D.OneHotCategorical(probs=p["lg2"].softmax(-1))),
        "bernoulli": (D.Bernoulli(probs=p["p"]), D.Bernoulli(logits=p["l2"])),
        "beta": (D.Beta(p["c"], p["c2"]), D.Beta(p["c2"], p["c"])),
        "gamma": (D.Gamma(p["c"], p["s"]), D.Gamma(p["c2"], p["s2"])),
        "dirichlet": (D.Dirichlet(p["c"]), D.Dirichlet(p["c2"])),
        "laplace": (D.Laplace(p["l"], p["s"]), D.Laplace(p["l2"], p["s2"])),
        "uniform": (D.Uniform(p["l"] - 3, p["l"] + 3), D.Uniform(p["l"] - 4, p["l"] + 4)),
        "uniform_normal": (D.Uniform(p["l"] - 1, p["l"] + 1), normal2),
        "uniform_gamma": (D.Uniform(p["s"], p["s"] + 1), D.Gamma(p["c"], p["s2"])),
        "normal_laplace": (normal, D.Laplace(p["l2"], p["s2"])),
        "laplace_normal": (D.Laplace(p["l"], p["s"]), normal2),
        "gamma_normal": (D.Gamma(p["c"], p["s"]), normal2),
        "beta_normal": (D.Beta(p["c"], p["c2"]), normal2),
        "beta_uniform": (D.Beta(p["c"], p["c2"]), D.Uniform(p["l"] - 3, p["l"] + 3)),
        "exponential_gamma": (D.Exponential(p["s"]), D.Gamma(p["c"], p["s2"])),
        "transformed": tuple(D.TransformedDistribution(n, [D.transforms.AffineTransform(1.0, 2.0)])
                             for n in (normal, normal2)),
    }
    leaves = list(p.values())
    out = {}
    for i, (name, (a, b)) in enumerate(pairs.items()):
        kl = D.kl_divergence(a, b)
        out[name] = [kl, grads(lib, kl, leaves, seed=i)]
    for name, (a, b) in {"normal_gamma": (normal, D.Gamma(p["c"], p["s"])),
                         "mixture": (D.MixtureSameFamily(D.Categorical(logits=p["lg"][:, :4]), normal),
                                     D.Normal(p["l2"][:, 0], p["s2"][:, 0]))}.items():
        try:
            D.kl_divergence(a, b)
        except NotImplementedError as e:
            out[name] = f"NotImplementedError: {e}"
    return out


def test_kl_pairs_and_their_gradients_match_torch():
    # Gamma terms go through digamma/lgamma: SciPy and ATen differ in the last bits.
    assert_close_tree(kl_sweep(torch), kl_sweep(jitorch), rtol=1e-7, atol=1e-9)


def rl_and_vae_terms(lib):
    D, T = lib.distributions, lib.distributions.transforms
    f32 = lambda a: lib.tensor(np.asarray(a, dtype=np.float32))  # noqa: E731
    mu, log_std = leaf(lib, LOC, np.float32), leaf(lib, SCALE * 0.3, np.float32)
    base = D.Normal(mu, log_std.exp())
    squashed = D.TransformedDistribution(base, [T.TanhTransform(cache_size=1)])
    u = mu + log_std.exp() * f32(VALUE)  # the SAC actor's reparameterized action, fixed noise
    action = T.TanhTransform(cache_size=1)(u)
    actor_loss = (0.2 * squashed.log_prob(action).sum(-1) - action.sum(-1) * 1.3).mean()
    scaled = D.TransformedDistribution(D.Independent(base, 1), T.ComposeTransform(
        [T.TanhTransform(), T.AffineTransform(f32(0.5), 2.0)]))
    scaled_lp = scaled.log_prob(f32(np.tanh(VALUE) * 2 + 0.5))
    # PPO with invalid actions masked to -inf; actions come back from the buffer as floats.
    logits = leaf(lib, LOGITS, np.float32)
    mask = lib.tensor([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=lib.bool)
    policy = D.Categorical(logits=logits.masked_fill(~mask, float("-inf")))
    taken = f32([3.0, 0.0, 4.0])
    ppo_loss = (policy.log_prob(taken) * f32([0.3, -1.2, 0.7])).sum() + 0.01 * policy.entropy().sum()
    # A VAE's KL to the prior and its Bernoulli / continuous-Bernoulli reconstruction terms.
    q = D.Normal(mu, (0.5 * log_std).exp())
    kl = D.kl_divergence(q, D.Normal(0.0, 1.0)).sum(-1)
    kl_ind = D.kl_divergence(D.Independent(q, 1), D.Independent(D.Normal(lib.zeros_like(mu), 1.0), 1))
    rec = D.Independent(D.Bernoulli(logits=mu * 2 - 1), 1).log_prob(f32(VALUE > 0))
    rec_cb = D.ContinuousBernoulli(logits=mu * 2 - 1).log_prob(f32(PROBS)).sum(-1)
    elbo = (rec + rec_cb - kl - kl_ind).mean()
    return {"sac": [actor_loss, lib.autograd.grad(actor_loss, [mu, log_std], retain_graph=True)],
            "scaled": [scaled_lp, grads(lib, scaled_lp, [mu, log_std], seed=1), list(scaled.event_shape)],
            "ppo": [policy.log_prob(taken), policy.entropy(), policy.probs, lib.autograd.grad(ppo_loss, logits)],
            "vae": [kl, kl_ind, rec, rec_cb, lib.autograd.grad(elbo, [mu, log_std])]}


def test_sac_ppo_and_vae_terms_match_torch():
    assert_close_tree(rl_and_vae_terms(torch), rl_and_vae_terms(jitorch), rtol=2e-5, atol=2e-5)


def value_and_sample_gradients(lib):
    D = lib.distributions
    x, p = leaf(lib, VALUE, np.float64), leaf(lib, PROBS, np.float64)
    t = lambda a: lib.tensor(np.asarray(a))  # noqa: E731
    out = []
    for d, v in [(D.Normal(t(LOC), t(SCALE)), x), (D.StudentT(t(CONC), t(LOC), t(SCALE)), x),
                 (D.Beta(t(CONC), t(CONC2)), p), (D.LowRankMultivariateNormal(t(LOC), t(FACTOR), t(SCALE)), x),
                 (D.TransformedDistribution(D.Normal(t(LOC), t(SCALE)), [D.transforms.SigmoidTransform()]), p),
                 (D.MixtureSameFamily(D.Categorical(logits=t(LOGITS[:, :4])), D.Normal(t(LOC), t(SCALE))),
                  x[:, 0])]:
        lp = d.log_prob(v)
        out += [lp, grads(lib, lp, [x, p], seed=len(out))]
    normal = D.Normal(leaf(lib, LOC, np.float64), leaf(lib, SCALE, np.float64))
    out.append(grads(lib, normal.cdf(x), [x, normal.loc, normal.scale], seed=7))
    out.append(grads(lib, normal.icdf(p), [p, normal.loc, normal.scale], seed=8))
    # d(sum of samples)/d(loc) is the number of samples for location families, whatever the draws.
    for make in (lambda l, s: D.Normal(l, s), lambda l, s: D.Laplace(l, s), lambda l, s: D.Uniform(l, l + s),
                 lambda l, s: D.MultivariateNormal(l, scale_tril=lib.diag_embed(s))):
        loc, scale = leaf(lib, LOC, np.float64), leaf(lib, SCALE, np.float64)
        out.append(lib.autograd.grad(make(loc, scale).rsample((50,)).sum(), loc)[0])
    return out


def test_value_gradients_and_rsample_location_gradients_match_torch():
    assert_close_tree(value_and_sample_gradients(torch), value_and_sample_gradients(jitorch), rtol=1e-9, atol=1e-10)


def test_reparameterized_gradient_statistics_agree_loosely():
    """Implicit-reparameterization gradients (Gamma, Beta, Dirichlet) averaged over many draws: statistics only."""
    means = []
    for lib in (torch, jitorch):
        D, row = lib.distributions, []
        for make in (lambda c, r: D.Gamma(c, r), lambda c, r: D.Beta(c, r), lambda c, r: D.Dirichlet(c)):
            conc, rate = leaf(lib, CONC, np.float64), leaf(lib, CONC2, np.float64)
            lib.manual_seed(1)
            x = make(conc, rate).rsample((20000,))
            row += [g.numpy() for g in lib.autograd.grad(x.mean(0).sum(), [conc, rate], allow_unused=True)
                    if g is not None]
        means.append(row)
    for th, jt in zip(*means):
        np.testing.assert_allclose(jt, th, rtol=0.1, atol=0.03)


@pytest.mark.parametrize("build, message", [
    (lambda lib: lib.distributions.Normal(lib.zeros(3), lib.ones(2)),
     r"^The size of tensor a \(3\) must match the size of tensor b \(2\) at non-singleton dimension 0$"),
    (lambda lib: lib.broadcast_tensors(lib.zeros(2, 1, 3), lib.zeros(4, 1), lib.zeros(2, 5, 1)),
     r"^The size of tensor a \(4\) must match the size of tensor b \(5\) at non-singleton dimension 1$"),
    (lambda lib: lib.broadcast_shapes((2, 3), (4, 1, 3), (1, 5, 1)),
     r"^Attempting to broadcast a dimension of length 5 at -2! Mismatching argument at index 2 had \(1, 5, 1\); "
     r"but expected shape should be broadcastable to \[4, 2, 3\]$"),
    (lambda lib: lib.broadcast_shapes(3, (4,)),
     r"^Attempting to broadcast a dimension of length 4 at -1! Mismatching argument at index 1 had \(4,\); "
     r"but expected shape should be broadcastable to \[3\]$"),
    (lambda lib: lib.broadcast_shapes((-1,)), r"^Attempting to broadcast a dimension with negative length!$"),
])
def test_parameter_shape_errors_match_torch(build, message):
    for lib in (torch, jitorch):
        with pytest.raises(ValueError if "negative" in message else RuntimeError, match=message):
            build(lib)
    assert tuple(jitorch.broadcast_shapes(3, 1, (2, 1))) == tuple(torch.broadcast_shapes(3, 1, (2, 1)))


@pytest.mark.parametrize("kwarg, what", [("scale_tril", "scale_tril matrix"),
                                         ("covariance_matrix", "covariance_matrix"),
                                         ("precision_matrix", "precision_matrix")])
def test_multivariate_normal_matrix_rank_error_names_the_argument(kwarg, what):
    for lib in (torch, jitorch):
        with pytest.raises(ValueError, match=f"^{what} must be at least two-dimensional, with optional leading "
                                             "batch dimensions$"):
            lib.distributions.MultivariateNormal(lib.zeros(3), **{kwarg: lib.ones(3)})
