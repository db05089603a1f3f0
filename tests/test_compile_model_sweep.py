"""``jitorch.compile`` on the research models of the sweeps (``test_sweep_*.py``), against eager jitorch from the same
weights and against torch: the compiled forward, three optimizer steps through the compiled module, the whole step
under ``mode="reduce-overhead"`` (capturable Adam/AdamW), and ``compiler.explain``. Here: a LLaMA-style decoder with the
loss inside the model (AdamW), a conv VAE with BatchNorm in train mode, a MobileNet with in-place activations and
BatchNorm, and a GCN/GraphSAGE/GAT network over a sparse adjacency and scatter reductions. The models with dropout,
a graph break on ``.item()``, recurrences and custom autograd Functions are in ``test_compile_model_sweep_more.py``."""
from __future__ import annotations

import numpy as np
import pytest

import jitorch
from compile_sweep_helpers import (Case, check_forward, check_reduce_overhead_step, check_training, explain_forward,
                                   models)
from sweep_helpers import assert_runs_match
from test_sweep_gnn import _gnn, _graph_batch
from test_sweep_llm import BLOCK, make_llm, token_stream
from test_sweep_modern_cnn import make_mobilenet
from test_sweep_vae import IMAGES, B as VAE_B, Z as VAE_Z, make_vae


def _adamw(lr, wd=0.1):
    return lambda lib, params, capturable: lib.optim.AdamW(params, lr=lr, weight_decay=wd, capturable=capturable)


def _adam(lr):
    return lambda lib, params, capturable: lib.optim.Adam(params, lr=lr, capturable=capturable)


def _sgd(lr, momentum=0.9):
    return lambda lib, params, capturable: lib.optim.SGD(params, lr=lr, momentum=momentum)


# -- a LLaMA-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, tied embeddings ---------------
_TOKENS = token_stream()
_STARTS = np.random.default_rng(1).integers(len(_TOKENS) - BLOCK, size=(3, 4))


def _llm_inputs(lib, step):
    x = np.stack([_TOKENS[i: i + BLOCK] for i in _STARTS[step]]).astype(np.int64)
    y = np.stack([_TOKENS[i + 1: i + 1 + BLOCK] for i in _STARTS[step]]).astype(np.int64)
    return lib.tensor(x), lib.tensor(y)


def _llm_case(rope, attn):
    return Case(build=lambda lib: make_llm(lib, rope=rope, attn=attn), inputs=_llm_inputs,
                loss=lambda lib, out: out[1], optimizer=_adamw(3e-3), torch_atol=1e-4, state_atol=1e-5)


@pytest.mark.parametrize("rope, attn", [("complex", "sdpa"), ("rotate_half", "manual")])
def test_llm_compiles_and_trains_like_eager(rope, attn):
    case = _llm_case(rope, attn)
    ref, eager, mc = models(case)
    check_forward(case, ref, eager, mc)
    check_training(case)
    explain_forward(case, eager)


def test_llm_whole_adamw_step_under_reduce_overhead_matches_eager():
    cf = check_reduce_overhead_step(_llm_case("rotate_half", "sdpa"))
    assert cf.fallback_reason is None  # captured, not run through the default path


# -- a conv VAE: BatchNorm2d in train mode, LeakyReLU, ConvTranspose2d, reparameterisation on given noise -------------
_EPS = np.random.default_rng(2).standard_normal((3, VAE_B, VAE_Z)).astype(np.float32)


def _vae_loss(lib, out):
    logits, mu, logvar, _ = out
    recon = lib.nn.functional.binary_cross_entropy_with_logits(logits, lib.tensor(IMAGES), reduction="sum") / VAE_B
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).mean(0).clamp(min=0.05).sum()
    return recon + 0.5 * kl


VAE = Case(build=make_vae, inputs=lambda lib, step: (lib.tensor(IMAGES), lib.tensor(_EPS[step])), loss=_vae_loss,
           optimizer=_adam(3e-3), rtol=1e-4, atol=1e-5, torch_rtol=1e-3, torch_atol=1e-4, state_atol=1e-5)


def test_vae_with_batchnorm_in_train_mode_compiles_and_trains_like_eager():
    ref, eager, mc = models(VAE)
    check_forward(VAE, ref, eager, mc)  # eval: BatchNorm on its running statistics
    ref, eager, mc = models(VAE)
    check_forward(VAE, ref, eager, mc, train=True)  # train: batch statistics, running ones updated
    assert_runs_match(dict(eager.named_buffers()), dict(mc.named_buffers()), rtol=1e-6, what="running stats")
    check_training(VAE)  # running statistics compared as part of the state
    explain_forward(VAE, eager)


def test_vae_whole_adam_step_under_reduce_overhead_matches_eager():
    assert check_reduce_overhead_step(VAE).fallback_reason is None  # captured, not run through the default path


# -- a MobileNetV3 stack: in-place ReLU6/Hardswish/SiLU on activations, squeeze-excitation, BatchNorm -----------------
_IMAGES = np.random.default_rng(3).standard_normal((3, 4, 3, 32, 32)).astype(np.float32)
MOBILENET = Case(build=make_mobilenet, inputs=lambda lib, step: (lib.tensor(_IMAGES[step]),),
                 loss=lambda lib, out: lib.nn.functional.cross_entropy(out, lib.tensor(np.array([0, 1, 2, 3]))),
                 optimizer=_sgd(0.05), rtol=1e-4, atol=1e-5, torch_rtol=1e-3, torch_atol=1e-4)


def test_mobilenet_with_inplace_activations_compiles_and_trains_like_eager():
    ref, eager, mc = models(MOBILENET)
    check_forward(MOBILENET, ref, eager, mc)
    check_training(MOBILENET)
    explain_forward(MOBILENET, eager)


def test_mobilenet_whole_sgd_step_under_reduce_overhead_matches_eager():
    assert check_reduce_overhead_step(MOBILENET).fallback_reason is None  # captured, not run through the default path


# -- a graph network: GCN over a sparse adjacency, GraphSAGE mean, GIN, GAT softmax by scatter_reduce -----------------
_X, _EDGES, _BATCH, _Y = _graph_batch()


def _gnn_build(lib):
    return _gnn(lib, lib.tensor(_EDGES), lib.tensor(_BATCH), _X.shape[0])


GNN = Case(build=_gnn_build, inputs=lambda lib, step: (lib.tensor(_X * (1 + 0.1 * step)),),
           loss=lambda lib, out: lib.nn.functional.cross_entropy(out, lib.tensor(_Y)), optimizer=_sgd(0.1))


def test_gnn_with_sparse_adjacency_and_scatter_reductions_compiles_and_trains_like_eager():
    ref, eager, mc = models(GNN)
    check_forward(GNN, ref, eager, mc)
    check_training(GNN)
    explain_forward(GNN, eager)


def test_gnn_whole_sgd_step_under_reduce_overhead_matches_eager():
    cf = check_reduce_overhead_step(GNN)
    assert "reads tensor values" in cf.fallback_reason  # bincount's output size: the default compiled path runs it


# -- an SNGAN discriminator: spectral norm as forward pre-hooks (power iteration buffers) and as a parametrization ----
def _sn_discriminator(lib, kind):
    nn = lib.nn
    sn = nn.utils.spectral_norm if kind == "hook" else nn.utils.parametrizations.spectral_norm
    return nn.Sequential(sn(nn.Conv2d(3, 8, 3, 2, 1)), nn.LeakyReLU(0.2, inplace=True), sn(nn.Conv2d(8, 8, 3, 2, 1)),
                         nn.LeakyReLU(0.2), nn.Flatten(), sn(nn.Linear(8 * 4 * 4, 1)))


_FAKES = np.random.default_rng(11).standard_normal((3, 4, 3, 16, 16)).astype(np.float32)


@pytest.mark.parametrize("kind", ["hook", "parametrization"])
def test_spectral_norm_discriminator_compiles_and_trains_like_eager(kind):
    case = Case(build=lambda lib: _sn_discriminator(lib, kind), inputs=lambda lib, step: (lib.tensor(_FAKES[step]),),
                loss=lambda lib, out: lib.nn.functional.softplus(-out).mean(), state_atol=1e-6,
                optimizer=lambda lib, params, capturable: lib.optim.Adam(params, lr=2e-4, betas=(0.0, 0.9),
                                                                          capturable=capturable))
    ref, eager, mc = models(case)
    check_forward(case, ref, eager, mc)
    check_training(case)  # the power iteration's u (and v) buffers are compared as part of the state
    if kind == "hook":  # hooks make every call eager, and explain says so instead of reporting nothing
        report = jitorch.compiler.explain(eager)(*case.inputs(jitorch, 0))
        assert report.graph_count == 0 and "hooks" in report.break_reasons[0], str(report)
    else:
        assert explain_forward(case, eager).graph_break_count == 0
