"""More of ``test_compile_model_sweep.py``'s compiled-vs-eager-vs-torch checks, on models that stress the tracer:
``nn.Transformer`` with dropout in train mode (compiled dropout draws eager's masks from the same seed), a GRU
classifier whose forward branches on ``.item()`` (a graph break), a spiking network (a time loop, custom autograd
Functions with surrogate gradients, fake quantization), an LSTM encoder-decoder with Bahdanau attention over packed
sequences, and a class-conditional diffusion UNet (GroupNorm, attention, interpolate) trained on its min-SNR loss."""
from __future__ import annotations

import numpy as np
import torch

import jitorch
from compile_sweep_helpers import (Case, check_forward, check_reduce_overhead_step, check_training, explain_forward,
                                   models)
from sweep_helpers import assert_runs_match
from test_sweep_diffusion import IMAGES as DIFF_IMAGES, LABELS as DIFF_LABELS, make_diffusion
from test_sweep_seq2seq import PAD, VOCAB, make_batch, make_seq2seq, make_transformer
from test_sweep_spiking import T as SPIKE_T, X as SPIKE_X, _net as make_spiking


def _adam(lr, **kw):
    return lambda lib, params, capturable: lib.optim.Adam(params, lr=lr, capturable=capturable, **kw)


def _sgd(lr, momentum=0.9):
    return lambda lib, params, capturable: lib.optim.SGD(params, lr=lr, momentum=momentum)


def _token_loss(lib, logits, target):
    return lib.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=PAD,
                                           label_smoothing=0.1)


# -- nn.Transformer with dropout 0.2 in every layer, attention dropout included -------------------------------------
def _transformer_with_dropout(lib):
    model = make_transformer(lib)
    for m in model.modules():
        if isinstance(m, lib.nn.Dropout):
            m.p = 0.2
        if isinstance(m, lib.nn.MultiheadAttention):
            m.dropout = 0.2
    return model


def _transformer_inputs(lib, step):
    src, _, trg = make_batch(step, sort=False)
    return lib.tensor(src), lib.tensor(trg[:, :-1])


def _transformer_loss(lib, out, step=None):
    return _token_loss(lib, out, lib.tensor(make_batch(0, sort=False)[2][:, 1:]))


TRANSFORMER = Case(build=_transformer_with_dropout, inputs=lambda lib, step: _transformer_inputs(lib, 0),
                   loss=_transformer_loss, optimizer=_sgd(0.05), seeded=True, rtol=1e-4,
                   atol=1e-5)


def test_transformer_with_dropout_in_train_mode_draws_eagers_masks_when_compiled():
    ref, eager, mc = models(TRANSFORMER)
    check_forward(TRANSFORMER, ref, eager, mc)  # eval: no dropout, so torch's output too
    jitorch.manual_seed(7)
    eager.train()
    want = eager(*TRANSFORMER.inputs(jitorch, 0))
    jitorch.manual_seed(7)
    mc.train()
    got = jitorch.compile(mc)(*TRANSFORMER.inputs(jitorch, 0))
    assert_runs_match(want, got, rtol=1e-5, atol=1e-6, what="train-mode forward, same seed")
    jitorch.manual_seed(8)
    other = jitorch.compile(mc)(*TRANSFORMER.inputs(jitorch, 0))
    assert not np.allclose(other.detach().numpy(), got.detach().numpy())  # dropout does act in train mode
    check_training(TRANSFORMER, torch_too=False)  # the libraries' generators draw different masks
    explain_forward(TRANSFORMER, eager)


def test_transformer_with_dropout_whole_step_under_reduce_overhead_matches_eager():
    check_reduce_overhead_step(TRANSFORMER)


# -- a GRU classifier that branches on a value read with .item() -----------------------------------------------------
def make_gated_gru(lib):
    nn = lib.nn

    class GatedGRU(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(6, 12, num_layers=2, batch_first=True)
            self.norm = nn.LayerNorm(12)
            self.head = nn.Linear(12, 3)

        def forward(self, x):
            out, h = self.gru(x)
            feat = out[:, -1]
            if feat.abs().mean().item() > 0.2:  # data-dependent: a graph break, both branches taken below
                feat = self.norm(feat)
            else:
                feat = feat * 2
            return self.head(feat) + h[0].sum(-1, keepdim=True) * 0.1

    lib.manual_seed(0)
    return GatedGRU()


# scales chosen so the three steps take both branches of the .item() test
_GRU_X = np.random.default_rng(4).standard_normal((3, 5, 7, 6)).astype(np.float32) * np.array([3, 0.05, 3],
                                                                                              np.float32)[:, None,
                                                                                                          None, None]
_GRU_Y = np.array([0, 1, 2, 1, 0])
GRU = Case(build=make_gated_gru, inputs=lambda lib, step: (lib.tensor(_GRU_X[step]),),
           loss=lambda lib, out: lib.nn.functional.cross_entropy(out, lib.tensor(_GRU_Y)), optimizer=_adam(1e-2),
           state_atol=1e-5, rtol=1e-4, atol=1e-5)


def test_gru_with_a_graph_break_on_item_compiles_and_trains_like_eager():
    ref, eager, mc = models(GRU)
    with torch.no_grad():
        means = [float(ref.gru(torch.tensor(x))[0][:, -1].abs().mean()) for x in _GRU_X]
    assert min(means) < 0.2 < max(means), means  # both branches are exercised
    check_forward(GRU, ref, eager, mc)
    check_training(GRU)
    report = explain_forward(GRU, eager)
    assert report.graph_break_count >= 1 and "item" in str(report), str(report)


def test_gru_with_a_graph_break_whole_step_under_reduce_overhead_matches_eager():
    cf = check_reduce_overhead_step(GRU)
    assert cf.fallback_reason is not None and "item()" in cf.fallback_reason  # a capture would freeze the branch


# -- a spiking network: time loop, custom Functions with surrogate gradients, fake quantization ----------------------
SPIKING = Case(build=make_spiking, inputs=lambda lib, step: (lib.tensor(SPIKE_X * (1 + 0.2 * step)),),
               loss=lambda lib, out: lib.nn.functional.cross_entropy(out, lib.tensor(SPIKE_T)), optimizer=_sgd(0.1))


def test_spiking_network_with_custom_functions_compiles_and_trains_like_eager():
    ref, eager, mc = models(SPIKING)
    check_forward(SPIKING, ref, eager, mc)
    check_training(SPIKING)
    explain_forward(SPIKING, eager)


def test_spiking_network_whole_step_under_reduce_overhead_matches_eager():
    check_reduce_overhead_step(SPIKING)


# -- an LSTM encoder-decoder with attention over packed sequences, teacher forcing fixed per step --------------------
_TEACHER = np.random.default_rng(5).uniform(size=9) < 0.5


def _seq2seq_inputs(lib, step):
    src, lengths, trg = make_batch(step, sort=False)
    return lib.tensor(src), lib.tensor(lengths), lib.tensor(trg), _TEACHER


def _seq2seq_loss(lib, out):
    return _token_loss(lib, out[0][:, 1:], lib.tensor(make_batch(0, sort=False)[2][:, 1:]))


SEQ2SEQ = Case(build=make_seq2seq, inputs=lambda lib, step: _seq2seq_inputs(lib, 0), loss=_seq2seq_loss,
               optimizer=_adam(1e-2), rtol=1e-4, atol=1e-5, state_atol=3e-5)


def test_lstm_seq2seq_with_packed_sequences_compiles_and_trains_like_eager():
    ref, eager, mc = models(SEQ2SEQ)
    check_forward(SEQ2SEQ, ref, eager, mc)
    check_training(SEQ2SEQ)
    explain_forward(SEQ2SEQ, eager)


def test_lstm_seq2seq_whole_step_under_reduce_overhead_matches_eager():
    check_reduce_overhead_step(SEQ2SEQ)


# -- a diffusion UNet trained on its min-SNR-weighted epsilon loss ---------------------------------------------------
def _diffusion_loss_module(lib):
    class DiffusionLoss(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.diffusion = make_diffusion(lib)

        def forward(self, x0, t, y, noise):
            return self.diffusion.loss(x0, t, y, noise)[0]

    return DiffusionLoss()


_DIFF_T = np.random.default_rng(6).integers(0, 100, (3, len(DIFF_LABELS)))
_DIFF_NOISE = np.random.default_rng(7).standard_normal((3,) + DIFF_IMAGES.shape).astype(np.float32)
DIFFUSION = Case(build=_diffusion_loss_module, loss=lambda lib, out: out, optimizer=_adam(2e-3),
                 inputs=lambda lib, step: (lib.tensor(DIFF_IMAGES), lib.tensor(_DIFF_T[step]),
                                           lib.tensor(DIFF_LABELS), lib.tensor(_DIFF_NOISE[step])),
                 rtol=1e-4, atol=1e-5, torch_rtol=1e-3, torch_atol=1e-4, state_atol=1e-5)


def test_diffusion_unet_compiles_and_trains_like_eager():
    ref, eager, mc = models(DIFFUSION)
    check_forward(DIFFUSION, ref, eager, mc)
    check_training(DIFFUSION)
    explain_forward(DIFFUSION, eager)


def test_diffusion_unet_whole_step_under_reduce_overhead_matches_eager():
    check_reduce_overhead_step(DIFFUSION)


def test_writes_into_views_of_a_buffer_after_graph_breaks_train_like_eager_and_torch():
    """The seq2seq decoder's ``outputs[:, t] = logits`` after a graph break: the flush made the view without
    autograd, and it was marked as made under no_grad, so the write with grad raised torch's no_grad-view error."""
    w0 = np.random.default_rng(8).standard_normal((4, 4)).astype(np.float32)
    x0 = np.random.default_rng(9).standard_normal((3, 4)).astype(np.float32)
    g0 = np.random.default_rng(10).standard_normal((3, 4)).astype(np.float32)

    def run(lib, compiled):
        w = lib.tensor(w0, requires_grad=True)

        def decode(x):
            out, tok = lib.zeros(3, 4), x[0]
            for t in range(3):
                h = tok @ w
                out[t] = h
                tok = x[t] if h.sum().item() > 0 else h  # a graph break per step
            return out

        fn = jitorch.compile(decode) if compiled else decode
        results = []
        for _ in range(2):  # the recording call and a replay
            out = fn(lib.tensor(x0))
            out.backward(lib.tensor(g0))
            results += [out, w.grad.clone()]
            w.grad = None
        return results

    want = run(jitorch, False)
    assert_runs_match(want, run(jitorch, True), rtol=1e-6, atol=1e-6, what="compiled vs eager")
    assert_runs_match(run(torch, False), want, rtol=1e-5, atol=1e-6, what="eager vs torch")


def test_dropout_in_a_captured_reduce_overhead_step_draws_fresh_masks_in_eagers_order():
    """The transformer's step is not captured (nn.Transformer reads its mask back to detect causality), so an MLP
    with dropout after an in-place ReLU: each replay draws new masks from the generator, as eager does."""
    def run(compiled):
        jitorch.manual_seed(0)
        nn = jitorch.nn
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(inplace=True), nn.Dropout(0.3), nn.Linear(32, 4),
                              nn.Dropout(0.1))
        opt = jitorch.optim.Adam(model.parameters(), lr=1e-2, capturable=compiled)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        fn = jitorch.compile(step, mode="reduce-overhead") if compiled else step
        rng, losses = np.random.default_rng(0), []
        jitorch.manual_seed(5)
        for _ in range(5):
            losses.append(fn(jitorch.tensor(rng.standard_normal((16, 8)).astype(np.float32)),
                             jitorch.tensor(rng.integers(0, 4, 16))))
        if compiled:
            assert fn.fallback_reason is None  # captured and replayed
        return losses, dict(model.named_parameters()), jitorch.rand(3)  # the generator advanced as eager's

    want, got = run(False), run(True)
    assert_runs_match(want, got, rtol=1e-5, atol=1e-6, what="captured dropout steps vs eager")


def test_checkpointed_dropout_blocks_compiled_train_like_eager():
    """Non-reentrant activation checkpointing around dropout: the recomputation in the backward must draw the
    forward's masks. A compiled backward drew fresh ones (other gradients, the generator advanced twice per step);
    such a call now runs eagerly, and explain says why."""
    from jitorch.utils.checkpoint import checkpoint

    def run(compiled):
        jitorch.manual_seed(0)
        nn = jitorch.nn
        blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.3), nn.Linear(32, 16))
                                for _ in range(2)])

        def forward(x):
            for block in blocks:
                x = x + checkpoint(block, x, use_reentrant=False)
            return x

        fn = jitorch.compile(forward) if compiled else forward
        rng, results = np.random.default_rng(12), []
        jitorch.manual_seed(1)
        for _ in range(2):
            out = fn(jitorch.tensor(rng.standard_normal((8, 16)).astype(np.float32)))
            out.backward(jitorch.tensor(rng.standard_normal((8, 16)).astype(np.float32)))
            results += [out, {n: p.grad.clone() for n, p in blocks.named_parameters()}]
            blocks.zero_grad()
        results.append(jitorch.rand(3))  # the generator advanced as eager's
        return results, jitorch.compiler.explain(forward)(jitorch.ones(8, 16)) if compiled else None

    (want, _), (got, report) = run(False), run(True)
    assert_runs_match(want, got, rtol=1e-5, atol=1e-6, what="checkpointed dropout, compiled vs eager")
    assert "backward draws random numbers" in str(report)
