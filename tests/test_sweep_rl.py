"""Reinforcement-learning updates on fixed rollouts, written once against ``lib`` and run with torch and jitorch.

PPO in the CleanRL style: orthogonally initialised actor-critic MLPs, a ``Categorical`` policy and a ``Normal``
policy with a state-independent log-std (``log_prob``, ``entropy``), GAE by a reversed Python loop, advantage
normalisation, the clipped surrogate (``torch.min``/``torch.clamp``) with clipped value loss, approximate KL and clip
fractions, several epochs of minibatches indexed by NumPy permutations, gradient clipping and linear LR annealing.
Then DQN and double DQN: ``gather``, ``max(dim)``, ``smooth_l1_loss``, and target networks updated in place under
``no_grad`` by ``p.data.mul_().add_()`` (Polyak) and by ``load_state_dict`` (hard).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree, load_numpy_state, numpy_state, to_numpy

N_STEPS, N_ENVS, OBS, N_ACT, ACT_DIM = 16, 4, 5, 3, 2


def layer_init(lib, layer, std=np.sqrt(2), bias_const=0.0):
    lib.nn.init.orthogonal_(layer.weight, std)
    lib.nn.init.constant_(layer.bias, bias_const)
    return layer


def make_agent(lib, continuous):
    nn = lib.nn
    D = lib.distributions

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Sequential(layer_init(lib, nn.Linear(OBS, 32)), nn.Tanh(),
                                        layer_init(lib, nn.Linear(32, 32)), nn.Tanh(),
                                        layer_init(lib, nn.Linear(32, 1), std=1.0))
            n_out = ACT_DIM if continuous else N_ACT
            self.actor = nn.Sequential(layer_init(lib, nn.Linear(OBS, 32)), nn.Tanh(),
                                       layer_init(lib, nn.Linear(32, 32)), nn.Tanh(),
                                       layer_init(lib, nn.Linear(32, n_out), std=0.01))
            if continuous:
                self.actor_logstd = nn.Parameter(lib.zeros(1, ACT_DIM))

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action):
            if continuous:
                mean = self.actor(x)
                std = self.actor_logstd.expand_as(mean).exp()
                dist = D.Normal(mean, std)
                return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)
            dist = D.Categorical(logits=self.actor(x))
            return action, dist.log_prob(action), dist.entropy(), self.critic(x)

    lib.manual_seed(0)
    return Agent()


def rollout(continuous):
    """A fixed batch of transitions, as the environment loop would have stored them (NumPy)."""
    rng = np.random.default_rng(1 if continuous else 0)
    obs = rng.standard_normal((N_STEPS, N_ENVS, OBS)).astype(np.float32)
    if continuous:
        actions = rng.standard_normal((N_STEPS, N_ENVS, ACT_DIM)).astype(np.float32)
    else:
        actions = rng.integers(0, N_ACT, (N_STEPS, N_ENVS))
    rewards = rng.standard_normal((N_STEPS, N_ENVS)).astype(np.float32)
    dones = (rng.uniform(size=(N_STEPS, N_ENVS)) < 0.1).astype(np.float32)
    next_obs = rng.standard_normal((N_ENVS, OBS)).astype(np.float32)
    next_done = np.array([0, 1, 0, 0], np.float32)
    return obs, actions, rewards, dones, next_obs, next_done


def ppo_update(lib, state, continuous, update=1, num_updates=4, epochs=3, n_minibatches=4, gamma=0.99,
               gae_lambda=0.95, clip_coef=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, lr=1e-2):
    agent = load_numpy_state(lib, make_agent(lib, continuous), state)
    optimizer = lib.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    obs, actions, rewards, dones, next_obs, next_done = (lib.tensor(a) for a in rollout(continuous))
    frac = 1.0 - (update - 1.0) / num_updates
    optimizer.param_groups[0]["lr"] = frac * lr

    with lib.no_grad():  # what the rollout phase would have recorded with the current policy
        _, logprobs, _, values = agent.get_action_and_value(obs.reshape(-1, OBS), actions.flatten(0, 1))
        logprobs, values = logprobs.reshape(N_STEPS, N_ENVS), values.reshape(N_STEPS, N_ENVS)
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = lib.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(N_STEPS)):
            if t == N_STEPS - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values

    b_obs = obs.reshape((-1, OBS))
    b_actions = actions.reshape((-1, ACT_DIM)) if continuous else actions.reshape(-1)
    b_logprobs, b_advantages = logprobs.reshape(-1), advantages.reshape(-1)
    b_returns, b_values = returns.reshape(-1), values.reshape(-1)
    batch_size = N_STEPS * N_ENVS
    minibatch_size = batch_size // n_minibatches
    rng = np.random.default_rng(7)
    b_inds = np.arange(batch_size)
    clipfracs, history = [], []
    for _ in range(epochs):
        rng.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            mb_inds = b_inds[start:start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()
            with lib.no_grad():
                old_approx_kl = (-logratio).mean()
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs += [((ratio - 1.0).abs() > clip_coef).float().mean().item()]
            mb_advantages = b_advantages[mb_inds]
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
            surr1 = ratio * mb_advantages
            surr2 = lib.clamp(ratio, 1 - clip_coef, 1 + clip_coef) * mb_advantages
            pg_loss = -lib.min(surr1, surr2).mean()
            newvalue = newvalue.view(-1)
            v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
            v_clipped = b_values[mb_inds] + lib.clamp(newvalue - b_values[mb_inds], -clip_coef, clip_coef)
            v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
            v_loss = 0.5 * lib.max(v_loss_unclipped, v_loss_clipped).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
            optimizer.zero_grad()
            loss.backward()
            grad_norm = lib.nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
            optimizer.step()
            history.append([pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, grad_norm])
    y_pred, y_true = b_values.numpy(), b_returns.numpy()
    var_y = np.var(y_true)
    explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
    return to_numpy([advantages, returns, history, clipfracs, float(explained_var)]), numpy_state(agent)


@pytest.mark.parametrize("continuous", [False, True])
def test_ppo_update_matches_torch(continuous):
    state = numpy_state(make_agent(torch, continuous))
    th, jt = ppo_update(torch, state, continuous, update=2), ppo_update(jitorch, state, continuous, update=2)
    assert max(th[0][3]) > 0  # some ratios were clipped: both branches of the surrogate are exercised
    assert_close_tree(th, jt, rtol=1e-4, atol=1e-5)


def make_qnet(lib, dueling):
    nn = lib.nn

    class QNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(OBS, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
            self.head = nn.Linear(32, N_ACT)
            self.value = nn.Linear(32, 1) if dueling else None

        def forward(self, x):
            h = self.body(x)
            q = self.head(h)
            if self.value is None:
                return q
            return self.value(h) + q - q.mean(dim=1, keepdim=True)

    lib.manual_seed(0)
    return QNetwork()


def dqn_train(lib, state, double, dueling, steps=5, gamma=0.99, tau=0.3, batch=16):
    F = lib.nn.functional
    rng = np.random.default_rng(2)
    q_network = load_numpy_state(lib, make_qnet(lib, dueling), state)
    target_network = copy.deepcopy(q_network)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = lib.optim.Adam(q_network.parameters(), lr=1e-2)
    history = []
    for step in range(steps):
        obs = lib.tensor(rng.standard_normal((batch, OBS)).astype(np.float32))
        actions = lib.tensor(rng.integers(0, N_ACT, batch))
        rewards = lib.tensor(rng.standard_normal(batch).astype(np.float32))
        next_obs = lib.tensor(rng.standard_normal((batch, OBS)).astype(np.float32))
        dones = lib.tensor((rng.uniform(size=batch) < 0.2).astype(np.float32))
        with lib.no_grad():
            if double:
                next_actions = q_network(next_obs).argmax(dim=1, keepdim=True)
                target_max = target_network(next_obs).gather(1, next_actions).squeeze(1)
            else:
                target_max, _ = target_network(next_obs).max(dim=1)
            td_target = rewards.flatten() + gamma * target_max * (1 - dones.flatten())
        old_val = q_network(obs).gather(1, actions.unsqueeze(1)).squeeze()
        loss = F.smooth_l1_loss(td_target, old_val)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 3 == 2:  # hard update
            target_network.load_state_dict(q_network.state_dict())
        else:  # Polyak averaging, the way most code bases write it
            with lib.no_grad():
                for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.mul_(1.0 - tau).add_(param.data, alpha=tau)
        with lib.no_grad():  # epsilon-greedy acting with NumPy's coin flips
            q = q_network(obs)
            greedy = q.argmax(dim=1)
            explore = lib.tensor(rng.uniform(size=batch) < 0.1)
            acts = lib.where(explore, lib.tensor(rng.integers(0, N_ACT, batch)), greedy)
        history.append([loss, old_val, td_target, acts, q.max(1).values,
                        {n: p.grad for n, p in q_network.named_parameters()}])
    return to_numpy(history), numpy_state(q_network), numpy_state(target_network)


@pytest.mark.parametrize("double,dueling", [(False, False), (True, True)])
def test_dqn_with_soft_target_updates_matches_torch(double, dueling):
    state = numpy_state(make_qnet(torch, dueling))
    th, jt = dqn_train(torch, state, double, dueling), dqn_train(jitorch, state, double, dueling)
    assert not np.allclose(th[1]["head.weight"], th[2]["head.weight"])  # target lags behind after a soft update
    assert_close_tree(th, jt, rtol=1e-4, atol=1e-5)
