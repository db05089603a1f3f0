"""Policy-gradient RL the way small research code writes it: REINFORCE with a baseline, then advantage
actor-critic with GAE on a NumPy grid-world (walls, a goal, step penalties), torch.distributions.Categorical for
log_prob / entropy, discounted returns computed backwards and normalized, smooth_l1 critic loss, a PPO clipped
surrogate with a KL early-stop over stored rollouts (Categorical KL through kl_divergence), gradient clipping.

Actions are drawn with NumPy from the policy's probabilities (as many RL codebases do), so the run is
deterministic; metrics must match torch. One more rollout samples with Categorical.sample() and is only checked
for shape, dtype and range.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, kl_divergence

rng = np.random.RandomState(0)
SIZE, GOAL = 5, (4, 4)
WALLS = {(1, 1), (2, 1), (3, 3), (1, 3)}
MOVES = [(-1, 0), (1, 0), (0, -1), (0, 1)]


class GridWorld:
    def reset(self):
        self.pos, self.t = (0, 0), 0
        return self.obs()

    def obs(self):
        o = np.zeros(2 * SIZE + 1, dtype=np.float32)
        o[self.pos[0]] = 1
        o[SIZE + self.pos[1]] = 1
        o[-1] = self.t / 20
        return o

    def step(self, a):
        r, c = self.pos[0] + MOVES[a][0], self.pos[1] + MOVES[a][1]
        if 0 <= r < SIZE and 0 <= c < SIZE and (r, c) not in WALLS:
            self.pos = (r, c)
        self.t += 1
        done = self.pos == GOAL or self.t >= 20
        return self.obs(), (1.0 if self.pos == GOAL else -0.05), done


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2 * SIZE + 1, 32), nn.Tanh())
        self.pi = nn.Linear(32, 4)
        self.v = nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x)
        return Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def discounted(rewards, gamma):
    R, out = 0.0, []
    for r in reversed(rewards):
        R = r + gamma * R
        out.insert(0, R)
    return torch.tensor(out)


def rollout(model, env):
    obs, logps, ents, values, rewards, acts, states = env.reset(), [], [], [], [], [], []
    done = False
    while not done:
        x = torch.from_numpy(obs)
        dist, value = model(x)
        a = rng.choice(4, p=dist.probs.detach().double().numpy() / dist.probs.detach().double().sum().item())
        act = torch.tensor(a)
        logps.append(dist.log_prob(act))
        ents.append(dist.entropy())
        values.append(value)
        states.append(x)
        acts.append(a)
        obs, r, done = env.step(a)
        rewards.append(r)
    return torch.stack(logps), torch.stack(ents), torch.stack(values), rewards, torch.stack(states), torch.tensor(acts)


model = ActorCritic()
init = np.random.RandomState(1)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy(init.uniform(-0.3, 0.3, p.shape).astype(np.float32)))
opt = torch.optim.Adam(model.parameters(), lr=0.02)
env = GridWorld()
gamma, lam = 0.95, 0.9

episode_returns, losses = [], []
for ep in range(60):
    logps, ents, values, rewards, states, acts = rollout(model, env)
    returns = discounted(rewards, gamma)
    if ep < 20:  # REINFORCE with a learned baseline
        adv = returns - values.detach()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv
        loss = -(logps * adv).sum() + F.mse_loss(values, returns) - 0.01 * ents.sum()
    else:  # A2C with generalized advantage estimation
        v = torch.cat([values.detach(), torch.zeros(1)])
        deltas = torch.tensor(rewards) + gamma * v[1:] - v[:-1]
        gae, advs = 0.0, []
        for d in reversed(deltas.tolist()):
            gae = d + gamma * lam * gae
            advs.insert(0, gae)
        adv = torch.tensor(advs)
        loss = -(logps * adv).mean() + 0.5 * F.smooth_l1_loss(values, adv + v[:-1]) - 0.01 * ents.mean()
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    episode_returns.append(sum(rewards))
    losses.append(loss.item())

# PPO epochs over one stored batch of rollouts
batch = [rollout(model, env) for _ in range(4)]
states = torch.cat([b[4] for b in batch])
acts = torch.cat([b[5] for b in batch])
rets = torch.cat([discounted(b[3], gamma) for b in batch])
with torch.no_grad():
    old_dist, old_v = model(states)
    old_logp = old_dist.log_prob(acts)
    adv = rets - old_v
ppo_losses, kls = [], []
for epoch in range(6):
    dist, v = model(states)
    ratio = (dist.log_prob(acts) - old_logp).exp()
    surr = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    loss = -surr.mean() + 0.5 * (rets - v).pow(2).mean() - 0.01 * dist.entropy().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kl = kl_divergence(old_dist, model(states)[0]).mean().item()
    ppo_losses.append(loss.item())
    kls.append(kl)
    if kl > 0.05:
        break

torch.manual_seed(0)
with torch.no_grad():
    d, _ = model(states)
    sampled = d.sample()
    assert sampled.shape == acts.shape and sampled.dtype == torch.long
    assert 0 <= sampled.min().item() and sampled.max().item() < 4

print(f"initial_loss={losses[0]:.6f}")
print(f"final_loss={losses[-1]:.6f}")
print(f"first_returns={np.mean(episode_returns[:10]):.6f}")
print(f"last_returns={np.mean(episode_returns[-10:]):.6f}")
print(f"ppo_first={ppo_losses[0]:.6f}")
print(f"ppo_last={ppo_losses[-1]:.6f}")
print(f"ppo_epochs={len(ppo_losses)}")
print(f"kl_last={kls[-1]:.6f}")
print(f"policy_entropy={d.entropy().mean().item():.6f}")
