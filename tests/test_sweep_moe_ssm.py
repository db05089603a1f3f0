"""Mixture-of-experts layers, run with ``lib=torch`` and ``lib=jitorch`` from the same weights and tokens.

A Switch/top-2 layer (router softmax in float32, ``topk``, the load-balancing and router z-losses, capacity from a
``cumsum`` over the one-hot choices, dispatch by ``nonzero``/``index_select``, experts in a ``ModuleList``, the
gather-back by ``zeros_like(...).index_add`` and by ``scatter_add_``, ``bincount`` of the kept choices); the
noisy top-k gate with its ``SparseDispatcher`` (sorted ``nonzero``, ``split`` by part sizes, ``Normal.cdf`` load
estimate, log-space combine); GShard's einsum dispatch/combine tensors. Training steps under AdamW and
``clip_grad_norm_``, and each layer under ``jitorch.compile`` against eager jitorch. The recurrent and state-space
models are in ``test_sweep_ssm_recurrence.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

D, H, E = 8, 16, 4
_rng = np.random.default_rng(0)
TOKENS = _rng.standard_normal((2, 12, D)).astype(np.float32)
UPSTREAM = _rng.standard_normal((2, 12, D)).astype(np.float32)
NOISE = _rng.standard_normal((12, E)).astype(np.float32)


def _switch_moe(lib, top_k=2, capacity_factor=1.25):
    nn = lib.nn
    F = nn.functional

    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2 = nn.Linear(D, H), nn.Linear(H, D)

        def forward(self, x):
            return self.w2(F.gelu(self.w1(x)))

    class SwitchMoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(D, E, bias=False)
            self.experts = nn.ModuleList([Expert() for _ in range(E)])

        def forward(self, x):
            b, l, d = x.shape
            x = x.reshape(-1, d)
            logits = self.router(x)
            probs = F.softmax(logits, dim=-1, dtype=lib.float32)
            gate_vals, gate_idx = lib.topk(probs, top_k, dim=-1)
            gate_vals = gate_vals / gate_vals.sum(-1, keepdim=True)
            mask = F.one_hot(gate_idx, num_classes=E)  # (tokens, k, experts)
            aux = (mask[:, 0].float().mean(0) * probs.mean(0)).sum() * E
            z_loss = lib.logsumexp(logits, -1).pow(2).mean()
            capacity = int(capacity_factor * x.shape[0] * top_k / E)
            flat_mask = mask.permute(1, 0, 2).reshape(-1, E)  # every token's first choice before any second one
            position = lib.cumsum(flat_mask, dim=0) * flat_mask - 1
            keep = ((position < capacity) & (flat_mask > 0)).reshape(top_k, -1, E).permute(1, 0, 2)
            kept = keep.any(-1)
            counts = lib.bincount(gate_idx[kept].flatten(), minlength=E)
            out = lib.zeros_like(x)
            for e, expert in enumerate(self.experts):
                token, slot = lib.nonzero((gate_idx == e) & kept, as_tuple=True)
                if token.numel() == 0:
                    continue
                y = expert(lib.index_select(x, 0, token)) * gate_vals[token, slot].unsqueeze(-1)
                out = out.index_add(0, token, y)
            residual = lib.zeros_like(x)
            token, slot = kept.nonzero(as_tuple=True)
            weight = gate_vals[token, slot].unsqueeze(-1)
            residual.scatter_add_(0, token.unsqueeze(-1).expand(-1, d), x[token] * weight)
            return out.view(b, l, d) + residual.view(b, l, d), aux, z_loss, counts, position.max()

    lib.manual_seed(0)
    return SwitchMoE()


def _train_switch(lib, state, compile=False, steps=3):
    model = load_numpy_state(lib, _switch_moe(lib), state)
    forward = lib.compile(model) if compile else model
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    x, upstream = lib.tensor(TOKENS, requires_grad=True), lib.tensor(UPSTREAM)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        x.grad = None
        y, aux, z_loss, counts, last_position = forward(x)
        loss = (y * upstream).sum() + 0.1 * aux + 0.01 * z_loss
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        history.append([y, aux, z_loss, counts, last_position, loss, norm, x.grad,
                        {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    return to_numpy(history), numpy_state(model)


def test_switch_top2_moe_training_matches_torch():
    state = numpy_state(_switch_moe(torch))
    assert_close_tree(_train_switch(torch, state), _train_switch(jitorch, state), rtol=1e-5, atol=1e-5)


def test_switch_top2_moe_compiled_matches_eager():
    state = numpy_state(_switch_moe(torch))
    assert_close_tree(_train_switch(jitorch, state), _train_switch(jitorch, state, compile=True),
                      rtol=1e-5, atol=1e-6)


def _noisy_moe(lib, num_experts=E, k=2):
    nn = lib.nn
    Normal = lib.distributions.normal.Normal

    class SparseDispatcher:
        def __init__(self, gates):
            self._gates = gates
            sorted_experts, index_sorted_experts = lib.nonzero(gates).sort(0)
            _, self._expert_index = sorted_experts.split(1, dim=1)
            self._batch_index = lib.nonzero(gates)[index_sorted_experts[:, 1], 0]
            self._part_sizes = (gates > 0).sum(0).tolist()
            self._nonzero_gates = lib.gather(gates[self._batch_index.flatten()], 1, self._expert_index)

        def dispatch(self, inp):
            return lib.split(inp[self._batch_index].squeeze(1), self._part_sizes, dim=0)

        def combine(self, expert_out):
            stitched = lib.cat(expert_out, 0).exp().mul(self._nonzero_gates)
            zeros = lib.zeros(self._gates.size(0), expert_out[-1].size(1), requires_grad=True)
            combined = zeros.index_add(0, self._batch_index, stitched.float())
            combined[combined == 0] = np.finfo(float).eps
            return combined.log()

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.soft = nn.Linear(D, H), nn.Linear(H, D), nn.Softmax(1)

        def forward(self, x):
            return self.soft(self.fc2(lib.relu(self.fc1(x))))

    class NoisyTopKMoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList([MLP() for _ in range(num_experts)])
            self.w_gate = nn.Parameter(lib.randn(D, num_experts) * 0.5)
            self.w_noise = nn.Parameter(lib.randn(D, num_experts) * 0.5)
            self.register_buffer("mean", lib.tensor([0.0]))
            self.register_buffer("std", lib.tensor([1.0]))

        @staticmethod
        def cv_squared(x):
            return x.float().var() / (x.float().mean() ** 2 + 1e-10)

        def prob_in_top_k(self, clean, noisy, noise_stddev, noisy_top):
            flat = noisy_top.flatten()
            positions_if_in = lib.arange(clean.size(0)) * noisy_top.size(1) + k
            threshold_if_in = lib.unsqueeze(lib.gather(flat, 0, positions_if_in), 1)
            threshold_if_out = lib.unsqueeze(lib.gather(flat, 0, positions_if_in - 1), 1)
            normal = Normal(self.mean, self.std)
            return lib.where(lib.gt(noisy, threshold_if_in), normal.cdf((clean - threshold_if_in) / noise_stddev),
                             normal.cdf((clean - threshold_if_out) / noise_stddev))

        def forward(self, x, noise):
            clean = x @ self.w_gate
            noise_stddev = nn.functional.softplus(x @ self.w_noise) + 1e-2
            noisy = clean + noise * noise_stddev
            top_logits, top_indices = noisy.softmax(1).topk(min(k + 1, num_experts), dim=1)
            top_k_gates = top_logits[:, :k] / (top_logits[:, :k].sum(1, keepdim=True) + 1e-6)
            gates = lib.zeros_like(noisy, requires_grad=True).scatter(1, top_indices[:, :k], top_k_gates)
            load = self.prob_in_top_k(clean, noisy, noise_stddev, top_logits).sum(0)
            loss = (self.cv_squared(gates.sum(0)) + self.cv_squared(load)) * 1e-2
            dispatcher = SparseDispatcher(gates)
            inputs = dispatcher.dispatch(x)
            outputs = [self.experts[i](inputs[i]) for i in range(num_experts)]
            return dispatcher.combine(outputs), loss, (gates > 0).sum(0)

    lib.manual_seed(0)
    return NoisyTopKMoE()


def _train_noisy(lib, state, compile=False):
    model = load_numpy_state(lib, _noisy_moe(lib), state)
    forward = lib.compile(model) if compile else model
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2)
    x, noise, upstream = lib.tensor(TOKENS[0]), lib.tensor(NOISE), lib.tensor(UPSTREAM[0])
    history = []
    for step in range(3):
        opt.zero_grad()
        y, aux, load = forward(x, noise * (step + 1) * 0.3)
        loss = (y * upstream).sum() + aux
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        history.append([y, aux, load, loss, norm, {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    return to_numpy(history), numpy_state(model)


def test_noisy_top_k_moe_with_sparse_dispatcher_matches_torch():
    state = numpy_state(_noisy_moe(torch))
    expected = _train_noisy(torch, state)
    eager = _train_noisy(jitorch, state)
    assert_close_tree(expected, eager, rtol=1e-4, atol=1e-5)
    assert_close_tree(eager, _train_noisy(jitorch, state, compile=True), rtol=1e-5, atol=1e-6)


def test_gshard_einsum_dispatch_and_combine_match_torch():
    logits_np = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)

    def run(lib):
        F = lib.nn.functional
        logits = lib.tensor(logits_np, requires_grad=True)
        probs = logits.softmax(-1)
        one_hot = F.one_hot(probs.argmax(-1))
        position = lib.sum(lib.cumsum(one_hot, 0) * one_hot, dim=-1) - 1
        capacity = 2
        slot = F.one_hot(position.clamp(0, capacity - 1), num_classes=capacity)
        within = (position < capacity).float()[:, None, None]
        dispatch = one_hot.unsqueeze(-1).float() * slot.unsqueeze(1).float() * within
        combine = dispatch * probs.max(-1).values[:, None, None]
        expert_in = lib.einsum("sec,sm->ecm", dispatch, lib.arange(30, dtype=lib.float32).view(10, 3))
        y = lib.einsum("ecm,sec->sm", expert_in * 0.5, combine)
        grad, = lib.autograd.grad((y * lib.arange(30.0).view(10, 3)).sum(), logits)
        counts = lib.bincount(probs.argmax(-1), weights=probs.max(-1).values.detach(), minlength=6)
        return to_numpy([one_hot, position, dispatch, expert_in, expert_in.stride(), y, grad, counts,
                         str(lib.cumsum(one_hot, 0).dtype).split(".")[-1]])

    assert_close_tree(run(torch), run(jitorch), rtol=1e-6, atol=1e-6)


def test_mixed_dtype_ops_on_expanded_operands_are_row_major_as_torch():
    """A broadcast (expanded) operand cast for a mixed-dtype op is copied as ``.to`` copies it, dims in place, so the
    result is row-major as torch's and ``.view`` works (ALiBi's ``slopes * arange(T).expand(H, -1, -1)``)."""
    def run(lib):
        positions = lib.arange(7)
        results = [lib.ones(6, 1) * positions.expand(6, 7), positions.expand(6, 7) * 0.5,
                   positions.expand(6, 7) + lib.ones(1, dtype=lib.float64), positions.expand(6, 7).exp(),
                   lib.arange(1.0, 7.0)[:, None, None] * positions[None, None].expand(6, 1, 7),
                   positions[:, None].expand(7, 5) / 2, (positions > 3).expand(6, 7) + lib.ones(6, 7),
                   lib.where(positions.expand(6, 7) > 2, positions.expand(6, 7), lib.zeros(6, 7))]
        return to_numpy([[r, r.stride(), r.view(-1)] for r in results])

    assert_close_tree(run(torch), run(jitorch), rtol=1e-6, atol=0)  # exp: an ulp; strides exact


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_gates_and_norms_round_as_torch(dtype):
    """Low-precision routers and SSM blocks: rsqrt (RMSNorm), softplus (step sizes), sigmoid and tanh gates, mish,
    x ** 3 (rsqrt's gradient) and a Python number added or subtracted are computed as ATen's kernels compute them
    (in float, rounded once, or in float16 steps where torch's kernel takes them), with their gradients, and
    RMSNorm's gradient sums as torch's: bit for bit, not an ulp off."""
    rng = np.random.default_rng(9)
    x_np = (rng.standard_normal(2000) * 3).astype(np.float32)
    g_np = rng.standard_normal(2000).astype(np.float32)

    def run(lib):
        F = lib.nn.functional
        half = getattr(lib, dtype)
        results = []
        for name, fn in [("rsqrt", lambda x: lib.rsqrt(x.abs() + 0.1)), ("softplus", F.softplus),
                         ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=5.0)), ("sigmoid", lib.sigmoid),
                         ("tanh", lib.tanh), ("mish", F.mish), ("cube", lambda x: x ** 3),
                         ("inverse_square", lambda x: x ** -2), ("shift", lambda x: 0.1 + x - 0.3),
                         ("rms_norm", lambda x: x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))]:
            x = lib.tensor(x_np).to(half).view(20, 100).requires_grad_()
            y = fn(x)
            grad, = lib.autograd.grad(y, x, lib.tensor(g_np).to(half).view(20, 100))
            results.append([name, y.detach(), grad])
        x = lib.tensor(x_np).to(half).view(20, 100)
        # x.pow(2) is one PowBackward0 edge, as torch's: RMSNorm's x gets two gradients, not three summed otherwise
        results.append([type(x.requires_grad_().pow(2).grad_fn).__name__, type(x.square().grad_fn).__name__])
        # short rows and strided inputs run ATen's scalar loop, which rounds rsqrt's sqrt to the half type first
        results.append([lib.rsqrt(x[:3, :7].abs() + 0.1), lib.rsqrt(x[:, ::3].abs() + 0.1)])
        return to_numpy([[r.double() if hasattr(r, "double") else r for r in item] if isinstance(item, list)
                         else item for item in results])

    assert_close_tree(run(torch), run(jitorch), rtol=0, atol=0)
