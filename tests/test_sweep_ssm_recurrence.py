"""State-space and linear-recurrence sequence models, run with ``lib=torch`` and ``lib=jitorch`` from the same
weights and sequences.

A Mamba block (hand-written RMSNorm, depthwise causal ``Conv1d(groups=d, padding=k-1)`` sliced back, ``softplus``
step sizes, ``einsum`` discretization over (b, l, d, n), the selective scan as a Python loop and as a parallel
masked ``cumsum``-of-logs form), Mamba-2's chunked SSD (``segsum`` with ``-inf`` masks, ``F.pad``), an S4D layer
(complex parameters through ``view_as_real``/``view_as_complex``, an FFT convolution, per-parameter optimizer groups),
and an RWKV-4 time-mixing recurrence (``maximum``-stabilized log-sum-exp state) with ALiBi biases and rotary
embeddings both through ``polar``/``view_as_complex`` and in the real cos/sin form. Training steps under AdamW and
``clip_grad_norm_``, and the models under ``jitorch.compile`` against eager jitorch.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

DM, DI, N, K, L, B = 6, 12, 4, 4, 10, 2
_rng = np.random.default_rng(0)
SEQ = _rng.standard_normal((B, L, DM)).astype(np.float32)
SEQ_UPSTREAM = _rng.standard_normal((B, L, DM)).astype(np.float32)


def _mamba(lib, parallel):
    nn = lib.nn
    F = nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(lib.ones(d))

        def forward(self, x):
            return x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    class MambaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.dt_rank = math.ceil(DM / 16)
            self.norm = RMSNorm(DM)
            self.in_proj = nn.Linear(DM, DI * 2, bias=False)
            self.conv1d = nn.Conv1d(DI, DI, K, groups=DI, padding=K - 1)
            self.x_proj = nn.Linear(DI, self.dt_rank + 2 * N, bias=False)
            self.dt_proj = nn.Linear(self.dt_rank, DI)
            self.A_log = nn.Parameter(lib.log(lib.arange(1, N + 1, dtype=lib.float32).repeat(DI, 1)))
            self.D = nn.Parameter(lib.ones(DI))
            self.out_proj = nn.Linear(DI, DM, bias=False)

        def forward(self, x):
            length = x.shape[1]
            xs, res = self.in_proj(self.norm(x)).split(split_size=[DI, DI], dim=-1)
            xs = F.silu(self.conv1d(xs.transpose(1, 2))[:, :, :length].transpose(1, 2))
            A = -lib.exp(self.A_log.float())
            delta, Bm, Cm = self.x_proj(xs).split(split_size=[self.dt_rank, N, N], dim=-1)
            delta = F.softplus(self.dt_proj(delta))
            y = (self.parallel_scan if parallel else self.scan)(xs, delta, A, Bm, Cm) + xs * self.D
            return x + self.out_proj(y * F.silu(res))

        @staticmethod
        def scan(u, delta, A, Bm, Cm):
            delta_A = lib.exp(lib.einsum("b l d, d n -> b l d n", delta, A))
            delta_B_u = lib.einsum("b l d, b l n, b l d -> b l d n", delta, Bm, u)
            state, ys = lib.zeros((u.shape[0], u.shape[2], N), device=delta_A.device), []
            for i in range(u.shape[1]):
                state = delta_A[:, i] * state + delta_B_u[:, i]
                ys.append(lib.einsum("b d n, b n -> b d", state, Cm[:, i, :]))
            return lib.stack(ys, dim=1)

        @staticmethod
        def parallel_scan(u, delta, A, Bm, Cm):
            # h_t = sum_{s<=t} exp(cum_t - cum_s) dBu_s with cum the cumulative sum of the log decays
            cum = lib.cumsum(lib.einsum("bld,dn->bldn", delta, A), dim=1)
            delta_B_u = delta.unsqueeze(-1) * Bm.unsqueeze(2) * u.unsqueeze(-1)
            causal = lib.tril(lib.ones(u.shape[1], u.shape[1], dtype=lib.bool))
            log_decay = cum.unsqueeze(2) - cum.unsqueeze(1)
            log_decay = log_decay.masked_fill(~causal[None, :, :, None, None], float("-inf"))
            state = (lib.exp(log_decay) * delta_B_u.unsqueeze(1)).sum(2)
            return (state * Cm.unsqueeze(2)).sum(-1)

    lib.manual_seed(0)
    return MambaBlock()


def _train_mamba(lib, state, parallel, compile=False, steps=3):
    model = load_numpy_state(lib, _mamba(lib, parallel), state)
    forward = lib.compile(model) if compile else model
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    x, upstream = lib.tensor(SEQ, requires_grad=True), lib.tensor(SEQ_UPSTREAM)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        x.grad = None
        y = forward(x)
        loss = (y * upstream).sum()
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        history.append([y, loss, norm, x.grad, {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    return to_numpy(history), numpy_state(model)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential_scan", "parallel_scan"])
def test_mamba_block_training_matches_torch_and_compiled(parallel):
    state = numpy_state(_mamba(torch, parallel))
    eager = _train_mamba(jitorch, state, parallel)
    assert_close_tree(_train_mamba(torch, state, parallel), eager, rtol=1e-4, atol=1e-5)
    assert_close_tree(eager, _train_mamba(jitorch, state, parallel, compile=True), rtol=1e-4, atol=1e-5)


def test_mamba2_chunked_ssd_matches_torch():
    rng = np.random.default_rng(2)
    b, length, h, p, n, chunk = 2, 8, 3, 4, 5, 4
    arrays = [rng.standard_normal((b, length, h, p)), -np.exp(rng.standard_normal((b, length, h))),
              rng.standard_normal((b, length, h, n)), rng.standard_normal((b, length, h, n)),
              rng.standard_normal((b, length, h, p))]
    arrays = [a.astype(np.float32) for a in arrays]

    def run(lib):
        def segsum(x):
            T = x.size(-1)
            x = x[..., None].repeat(*([1] * x.dim()), T)
            x = x.masked_fill(~lib.tril(lib.ones(T, T, dtype=lib.bool), diagonal=-1), 0)
            return lib.cumsum(x, dim=-2).masked_fill(~lib.tril(lib.ones(T, T, dtype=lib.bool)), -lib.inf)

        X, A, Bm, Cm = (lib.tensor(a, requires_grad=True) for a in arrays[:4])
        c = length // chunk
        Xc, Bc, Cc = X.reshape(b, c, chunk, h, p), Bm.reshape(b, c, chunk, h, n), Cm.reshape(b, c, chunk, h, n)
        Ac = A.reshape(b, c, chunk, h).permute(0, 3, 1, 2)
        A_cumsum = lib.cumsum(Ac, dim=-1)
        Y_diag = lib.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, lib.exp(segsum(Ac)), Xc)
        decay_states = lib.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
        states = lib.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, Xc)
        states = lib.cat([lib.zeros_like(states[:, :1]), states], dim=1)
        decay_chunk = lib.exp(segsum(lib.nn.functional.pad(A_cumsum[:, :, :, -1], (1, 0))))
        new_states = lib.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
        states, final_state = new_states[:, :-1], new_states[:, -1]
        Y_off = lib.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, lib.exp(A_cumsum))
        Y = (Y_diag + Y_off).reshape(b, length, h, p)
        grads = lib.autograd.grad((Y * lib.tensor(arrays[4])).sum() + final_state.pow(2).sum(), [X, A, Bm, Cm])
        return to_numpy([Y, final_state, Y.stride(), grads])

    assert_close_tree(run(torch), run(jitorch), rtol=1e-5, atol=1e-5)


def _s4d(lib, h=4, n=8):
    nn = lib.nn

    class S4DKernel(nn.Module):
        def __init__(self, lr=1e-3):
            super().__init__()
            log_dt = lib.rand(h) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)
            self.C = nn.Parameter(lib.view_as_real(lib.randn(h, n // 2, dtype=lib.cfloat)))
            for name, value in (("log_dt", log_dt), ("log_A_real", lib.log(0.5 * lib.ones(h, n // 2))),
                                ("A_imag", math.pi * lib.arange(n // 2).repeat(h, 1))):
                self.register_parameter(name, nn.Parameter(value))
                getattr(self, name)._optim = {"weight_decay": 0.0, "lr": lr}

        def forward(self, length):
            dt = lib.exp(self.log_dt)
            A = -lib.exp(self.log_A_real) + 1j * self.A_imag
            dtA = A * dt.unsqueeze(-1)
            C = lib.view_as_complex(self.C) * (lib.exp(dtA) - 1.0) / A
            return 2 * lib.einsum("hn, hnl -> hl", C, lib.exp(dtA.unsqueeze(-1) * lib.arange(length))).real

    class S4D(nn.Module):
        def __init__(self):
            super().__init__()
            self.D = nn.Parameter(lib.randn(h))
            self.kernel = S4DKernel()
            self.output_linear = nn.Sequential(nn.Conv1d(h, 2 * h, kernel_size=1), nn.GLU(dim=-2))

        def forward(self, u):
            length = u.size(-1)
            k_f = lib.fft.rfft(self.kernel(length), n=2 * length)
            y = lib.fft.irfft(lib.fft.rfft(u, n=2 * length) * k_f, n=2 * length)[..., :length]
            return self.output_linear(nn.functional.gelu(y + u * self.D.unsqueeze(-1)))

    lib.manual_seed(0)
    return S4D()


def _train_s4d(lib, state, inputs, compile=False):
    model = load_numpy_state(lib, _s4d(lib), state)
    forward = lib.compile(model) if compile else model
    params = list(model.parameters())
    opt = lib.optim.AdamW([p for p in params if not hasattr(p, "_optim")], lr=1e-2, weight_decay=0.01)
    opt.add_param_group({"params": [p for p in params if hasattr(p, "_optim")], **params[-3]._optim})
    x, upstream = lib.tensor(inputs[0], requires_grad=True), lib.tensor(inputs[1])
    history = []
    for _ in range(3):
        opt.zero_grad()
        x.grad = None
        y = forward(x)
        loss = (y * upstream).sum()
        loss.backward()
        norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        history.append([y, y.stride(), loss, norm, x.grad, {k: p.grad for k, p in model.named_parameters()}])
        opt.step()
    return to_numpy(history), numpy_state(model)


def test_s4d_complex_fft_layer_training_matches_torch_and_compiled():
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((2, 4, 16)).astype(np.float32) for _ in range(2)]
    state = numpy_state(_s4d(torch))
    eager = _train_s4d(jitorch, state, inputs)
    assert_close_tree(_train_s4d(torch, state, inputs), eager, rtol=1e-4, atol=1e-5)
    assert_close_tree(eager, _train_s4d(jitorch, state, inputs, compile=True), rtol=1e-5, atol=1e-6)


def _alibi_slopes(n):
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _alibi_slopes(2 * closest)[0::2][:n - closest]


def _rwkv_alibi_rotary(lib, arrays, compiled=False):
    k_np, v_np, w_np, u_np, up_np, q_np, q_up_np = arrays
    T, heads, dim = k_np.shape[1], q_np.shape[1], q_np.shape[-1]

    def wkv(k, v, w, u):
        time_decay = -lib.exp(w)
        aa, bb, pp = lib.zeros_like(k[:, 0]), lib.zeros_like(k[:, 0]), lib.full_like(k[:, 0], -1e38)
        ys = []
        for t in range(T):
            kk, vv = k[:, t], v[:, t]
            ww = u + kk
            p = lib.maximum(pp, ww)
            e1, e2 = lib.exp(pp - p), lib.exp(ww - p)
            ys.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
            ww = pp + time_decay
            p = lib.maximum(ww, kk)
            e1, e2 = lib.exp(ww - p), lib.exp(kk - p)
            aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
        return lib.stack(ys, 1)

    def attention(q):
        slopes = lib.tensor(_alibi_slopes(6))
        alibi = slopes.unsqueeze(1).unsqueeze(1) * lib.arange(T).unsqueeze(0).unsqueeze(0).expand(6, -1, -1)
        alibi = alibi.view(6, 1, T)[:heads]
        freqs = 1.0 / (10000 ** (lib.arange(0, dim, 2)[: dim // 2].float() / dim))
        freqs = lib.outer(lib.arange(T), freqs).float()
        freqs_cis = lib.polar(lib.ones_like(freqs), freqs)
        xq = q.transpose(1, 2)
        xq_ = lib.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        rotated = lib.view_as_real(xq_ * freqs_cis.view(1, T, 1, dim // 2)).flatten(3).type_as(xq).transpose(1, 2)
        emb = lib.cat((freqs, freqs), dim=-1)
        first, second = q.chunk(2, dim=-1)
        rotated_real = q * emb.cos() + lib.cat((-second, first), dim=-1) * emb.sin()
        scores = rotated @ rotated_real.transpose(-2, -1) / math.sqrt(dim) + alibi
        scores = scores.masked_fill(lib.triu(lib.ones(T, T, dtype=lib.bool), 1), float("-inf"))
        return scores.softmax(-1) @ q, alibi, freqs_cis

    k, v, w, u, q = (lib.tensor(a, requires_grad=True) for a in (k_np, v_np, w_np, u_np, q_np))
    run_wkv, run_attention = (lib.compile(wkv), lib.compile(attention)) if compiled else (wkv, attention)
    y = run_wkv(k, v, w, u)
    out, alibi, freqs_cis = run_attention(q)
    loss = (y * lib.tensor(up_np)).sum() + (out * lib.tensor(q_up_np)).sum()
    grads = lib.autograd.grad(loss, [k, v, w, u, q])
    return to_numpy([y, out, alibi, alibi.stride(), freqs_cis, grads])


def test_rwkv_recurrence_alibi_and_rotary_match_torch_and_compiled():
    rng = np.random.default_rng(3)
    batch, T, C, heads = 2, 7, 8, 2
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in
              [(batch, T, C), (batch, T, C), (C,), (C,), (batch, T, C), (batch, heads, T, 8), (batch, heads, T, 8)]]
    eager = _rwkv_alibi_rotary(jitorch, arrays)
    assert_close_tree(_rwkv_alibi_rotary(torch, arrays), eager, rtol=1e-5, atol=1e-5)
    assert_close_tree(eager, _rwkv_alibi_rotary(jitorch, arrays, compiled=True), rtol=1e-5, atol=1e-6)


def test_causal_depthwise_conv_and_decode_state_match_torch():
    rng = np.random.default_rng(4)
    x_np, w_np, up_np = (rng.standard_normal(s).astype(np.float32) for s in [(2, 6, 9), (6, 1, 4), (2, 6, 9)])

    def run(lib):
        F = lib.nn.functional
        x, w = lib.tensor(x_np, requires_grad=True), lib.tensor(w_np, requires_grad=True)
        padded = F.conv1d(F.pad(x, (3, 0)), w, groups=6)
        sliced = F.conv1d(x, w, padding=3, groups=6)[..., :9]
        grads = lib.autograd.grad((sliced * lib.tensor(up_np)).sum(), [x, w])
        conv_state = lib.roll(lib.zeros(2, 6, 4), shifts=-1, dims=-1)
        conv_state[:, :, -1] = x[:, :, 0].detach()
        step = lib.sum(conv_state * w.detach().squeeze(1), dim=-1)
        return to_numpy([padded, sliced, sliced.stride(), sliced.is_contiguous(), grads, step])

    assert_close_tree(run(torch), run(jitorch), rtol=1e-5, atol=1e-6)
