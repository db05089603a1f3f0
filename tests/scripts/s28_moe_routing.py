"""Sparse mixture-of-experts layer (after Switch Transformer / Mixtral / fairseq's MoE): a softmax router with
top-k gating renormalised over the chosen experts, a per-expert dispatch loop with torch.where / index_add_, a
capacity-limited top-1 variant that drops overflow tokens via cumsum positions, and the load-balancing auxiliary
loss (fraction of tokens routed x mean router probability) plus the router z-loss.

Weights and data come from NumPy; training is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w1 = nn.Linear(d, h, bias=False)
        self.w3 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d, bias=False)

    def forward(self, x):  # SwiGLU, as in Mixtral
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    def __init__(self, d, h, n_experts, top_k):
        super().__init__()
        self.gate = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList([Expert(d, h) for _ in range(n_experts)])
        self.n_experts, self.top_k = n_experts, top_k

    def forward(self, hidden_states):
        batch, seq, d = hidden_states.shape
        x = hidden_states.view(-1, d)
        router_logits = self.gate(x)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(x.dtype)
        final = torch.zeros((batch * seq, d), dtype=x.dtype, device=x.device)
        expert_mask = F.one_hot(selected, num_classes=self.n_experts).permute(2, 1, 0)
        for e in range(self.n_experts):
            idx, top_x = torch.where(expert_mask[e])
            if top_x.numel() == 0:
                continue
            current = x[None, top_x].reshape(-1, d)
            current = self.experts[e](current) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(x.dtype))
        return final.reshape(batch, seq, d), router_logits


def load_balancing_loss(router_logits, n_experts, top_k):
    probs = F.softmax(router_logits, dim=-1)
    _, selected = torch.topk(probs, top_k, dim=-1)
    expert_mask = F.one_hot(selected, n_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(probs, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * n_experts


def router_z_loss(router_logits):
    return torch.logsumexp(router_logits, dim=-1).pow(2).mean()


def switch_top1_with_capacity(x, gate, experts, capacity_factor=1.0):
    """Switch routing: each expert takes at most `capacity` tokens in order; the rest pass through unchanged."""
    n_tok, n_exp = x.shape[0], len(experts)
    probs = F.softmax(gate(x), dim=-1)
    gate_val, expert_idx = probs.max(dim=-1)
    capacity = int(capacity_factor * n_tok / n_exp)
    one_hot = F.one_hot(expert_idx, n_exp)
    position = torch.cumsum(one_hot, dim=0) * one_hot  # 1-based slot of each token in its expert's queue
    keep = (position.sum(-1) <= capacity) & (position.sum(-1) > 0)
    out = x.clone()
    for e in range(n_exp):
        sel = ((expert_idx == e) & keep).nonzero(as_tuple=True)[0]
        if sel.numel():
            out[sel] = experts[e](x[sel]) * gate_val[sel].unsqueeze(-1)
    return out, keep.float().mean()


class Model(nn.Module):
    def __init__(self, vocab=20, d=16, n_experts=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.norm = nn.RMSNorm(d) if hasattr(nn, "RMSNorm") else nn.LayerNorm(d)
        self.moe = SparseMoE(d, 24, n_experts, top_k=2)
        self.switch_gate = nn.Linear(d, n_experts, bias=False)
        self.switch_experts = nn.ModuleList([Expert(d, 12) for _ in range(n_experts)])
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.emb(tokens)
        moe_out, logits = self.moe(self.norm(h))
        h = h + moe_out
        b, t, d = h.shape
        sw, kept = switch_top1_with_capacity(h.reshape(-1, d), self.switch_gate, self.switch_experts, 1.25)
        return self.out(sw.view(b, t, d)), logits, kept


rng = np.random.RandomState(0)
model = Model()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.2).astype(np.float32)))
tokens = torch.from_numpy(rng.randint(0, 20, size=(8, 12)))
targets = (tokens * 3 + 1) % 20
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
losses, aux_losses, kept_fracs = [], [], []
for step in range(40):
    logits, router_logits, kept = model(tokens)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    aux = load_balancing_loss(router_logits, 4, 2)
    z = router_z_loss(router_logits)
    loss = ce + 0.01 * aux + 1e-3 * z
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(ce.item())
    aux_losses.append(aux.item())
    kept_fracs.append(kept.item())

with torch.no_grad():
    _, router_logits, _ = model(tokens)
    counts = torch.bincount(router_logits.topk(2, dim=-1).indices.flatten(), minlength=4)
    scattered = torch.zeros(4).scatter_add_(0, router_logits.argmax(-1), torch.ones(96))
print("expert counts:", counts.tolist())
print(f"initial_loss={losses[0]:.6f}")
print(f"loss_20={losses[20]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"aux_first={aux_losses[0]:.6f}")
print(f"aux_last={aux_losses[-1]:.6f}")
print(f"kept_mean={sum(kept_fracs) / len(kept_fracs):.6f}")
print(f"counts_checksum={sum((i + 1) * c for i, c in enumerate(counts.tolist()))}")
print(f"argmax_counts_checksum={sum((i + 1) * c for i, c in enumerate(scattered.tolist())):.1f}")
print(f"gate_norm={model.moe.gate.weight.norm().item():.6f}")
