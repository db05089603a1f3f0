"""Soft actor-critic on a 1-D point-mass task (after pranz24/pytorch-soft-actor-critic and CleanRL's sac_continuous): a
squashed Gaussian policy via Normal(mean, std).rsample() with the tanh log-prob correction, the same policy as
TransformedDistribution(Normal, [TanhTransform(cache_size=1), AffineTransform]) whose log_prob must agree, twin Q
networks (orthogonal_ init as CleanRL's layer_init) with Polyak-averaged targets (torch.no_grad + mul_/add_),
automatic entropy tuning of log_alpha, and a discrete-action head with Categorical(logits) /
OneHotCategoricalStraightThrough, Independent(Normal) entropies, kl_divergence between policies, Beta and
LowRankMultivariateNormal policy alternatives, and their rsample grads.

Exploration noise comes from torch.manual_seed's stream (Normal.rsample draws with torch.randn, which jitorch
reproduces), the environment from NumPy; so every metric must match torch.
"""
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import (AffineTransform, Beta, Categorical, Independent, LowRankMultivariateNormal, Normal,
                                 OneHotCategoricalStraightThrough, TanhTransform, TransformedDistribution,
                                 kl_divergence)

LOG_STD_MIN, LOG_STD_MAX, ACTION_SCALE = -5, 2, 2.0


class Actor(nn.Module):
    def __init__(self, obs=2, act=1, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mean, self.log_std = nn.Linear(hidden, act), nn.Linear(hidden, act)

    def forward(self, s):
        h = self.body(s)
        log_std = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return self.mean(h), log_std

    def sample(self, s):
        mean, log_std = self(s)
        normal = Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * ACTION_SCALE
        log_prob = normal.log_prob(x_t) - torch.log(ACTION_SCALE * (1 - y_t.pow(2)) + 1e-6)
        return action, log_prob.sum(1, keepdim=True), x_t, normal


def layer_init(layer, std=math.sqrt(2), bias_const=0.0):
    # CleanRL's init: orthogonal weights (float32, drawn on torch's stream after manual_seed) and constant biases.
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def q_net():
    return nn.Sequential(layer_init(nn.Linear(3, 32)), nn.ReLU(), layer_init(nn.Linear(32, 1), std=1.0))


def env_step(state, action):
    pos, vel = state[:, 0], state[:, 1]
    vel = np.clip(vel + 0.1 * action[:, 0], -1, 1)
    pos = np.clip(pos + 0.1 * vel, -2, 2)
    return np.stack([pos, vel], 1), -(pos ** 2) - 0.01 * action[:, 0] ** 2


torch.manual_seed(0)
actor, q1, q2 = Actor(), q_net(), q_net()
q1_t, q2_t = copy.deepcopy(q1), copy.deepcopy(q2)
log_alpha = torch.zeros(1, requires_grad=True)
target_entropy = -1.0
opt_a = torch.optim.Adam(actor.parameters(), lr=3e-3)
opt_q = torch.optim.Adam(list(q1.parameters()) + list(q2.parameters()), lr=3e-3)
opt_alpha = torch.optim.Adam([log_alpha], lr=3e-3)
rng = np.random.RandomState(0)
state = rng.uniform(-1, 1, (64, 2))
q_losses, pi_losses, alphas, tf_gaps = [], [], [], []
for step in range(25):
    s = torch.tensor(state, dtype=torch.float32)
    with torch.no_grad():
        a, _, _, _ = actor.sample(s)
    next_state, reward = env_step(state, a.numpy())
    s2, r = torch.tensor(next_state, dtype=torch.float32), torch.tensor(reward, dtype=torch.float32)[:, None]
    with torch.no_grad():
        a2, logp2, _, _ = actor.sample(s2)
        sa2 = torch.cat([s2, a2], 1)
        target = r + 0.9 * (torch.min(q1_t(sa2), q2_t(sa2)) - log_alpha.exp() * logp2)
    sa = torch.cat([s, a], 1)
    q_loss = F.mse_loss(q1(sa), target) + F.mse_loss(q2(sa), target)
    opt_q.zero_grad()
    q_loss.backward()
    opt_q.step()

    pi, logp, x_t, normal = actor.sample(s)
    sa_pi = torch.cat([s, pi], 1)
    pi_loss = (log_alpha.exp().detach() * logp - torch.min(q1(sa_pi), q2(sa_pi))).mean()
    opt_a.zero_grad()
    pi_loss.backward()
    opt_a.step()
    alpha_loss = -(log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    opt_alpha.zero_grad()
    alpha_loss.backward()
    opt_alpha.step()
    with torch.no_grad():
        for net, tgt in ((q1, q1_t), (q2, q2_t)):
            for p, tp in zip(net.parameters(), tgt.parameters()):
                tp.mul_(0.95).add_(p, alpha=0.05)
        squashed = TransformedDistribution(Normal(normal.loc, normal.scale),
                                           [TanhTransform(cache_size=1), AffineTransform(0.0, ACTION_SCALE)])
        y = torch.tanh(x_t.detach()) * ACTION_SCALE
        tf_gaps.append((squashed.log_prob(y.clamp(-ACTION_SCALE + 1e-3, ACTION_SCALE - 1e-3)).sum(1, keepdim=True)
                        - logp).abs().median().item())
    state = next_state
    q_losses.append(q_loss.item())
    pi_losses.append(pi_loss.item())
    alphas.append(log_alpha.exp().item())

# Discrete and alternative policy families.
logits = torch.tensor(rng.randn(8, 4), dtype=torch.float32, requires_grad=True)
cat = Categorical(logits=logits)
st = OneHotCategoricalStraightThrough(logits=logits)
onehot = st.rsample()
(onehot * torch.arange(4.0)).sum().backward()
loc = torch.tensor(rng.randn(8, 3), dtype=torch.float32, requires_grad=True)
pol_a = Independent(Normal(loc, torch.ones(8, 3)), 1)
pol_b = Independent(Normal(torch.zeros(8, 3), 2 * torch.ones(8, 3)), 1)
kl = kl_divergence(pol_a, pol_b).mean()
beta = Beta(torch.tensor([2.0, 0.5]), torch.tensor([3.0, 0.5]))
lr_mvn = LowRankMultivariateNormal(torch.zeros(3), torch.tensor(rng.randn(3, 1), dtype=torch.float32),
                                   torch.ones(3) * 0.5)
print(f"initial_loss={q_losses[0]:.6f}")
print(f"final_loss={q_losses[-1]:.6f}")
print(f"pi_loss_last={pi_losses[-1]:.6f}")
print(f"alpha_last={alphas[-1]:.6f}")
print(f"transform_logprob_gap={max(tf_gaps):.6f}")
print(f"cat_entropy={cat.entropy().mean().item():.6f}")
print(f"cat_logprob={cat.log_prob(torch.arange(8) % 4).sum().item():.6f}")
print(f"st_grad={logits.grad.abs().sum().item():.6f}")
print(f"kl={kl.item():.6f}")
print(f"indep_entropy={pol_a.entropy().mean().item():.6f}")
print(f"beta_entropy={beta.entropy().sum().item():.6f}")
print(f"beta_mean={beta.mean.sum().item():.6f}")
print(f"lowrank_entropy={lr_mvn.entropy().item():.6f}")
print(f"lowrank_logprob={lr_mvn.log_prob(torch.ones(3)).item():.6f}")
