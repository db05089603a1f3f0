"""LoRA fine-tuning research code on the BERT of ``test_sweep_bert.py``, written once against ``lib`` and run with
torch and jitorch from torch's weights (LoRA's random ``kaiming_uniform_`` init included) and the same NumPy data:
loralib's ``LoRALinear`` (an ``nn.Linear`` subclass whose ``train()``/``eval()`` unmerge/merge ``B @ A`` into the
frozen weight through ``.data``), PEFT's wrapper (``lora_A``/``lora_B`` as ``nn.Linear`` layers injected with
``setattr`` on the parent, ``merge``/``unmerge`` under ``no_grad``, ``merge_and_unload``), and the
``nn.utils.parametrize.register_parametrization`` alternative (``cached()`` evaluation, merged by
``remove_parametrizations(leave_parametrized=True)``). The base model is frozen with ``requires_grad_(False)``; PEFT's
``enable_input_require_grads`` hook lets reentrant checkpointing reach the adapters."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights
from test_sweep_bert import HIDDEN, get_linear_schedule_with_warmup, make_bert, sentence_pairs

R, ALPHA = 4, 8


def lora_classes(lib):
    nn, F = lib.nn, lib.nn.functional

    class LoRALinear(nn.Linear):  # loralib.Linear
        def __init__(self, in_features, out_features, r=R, lora_alpha=ALPHA, merge_weights=True, **kwargs):
            nn.Linear.__init__(self, in_features, out_features, **kwargs)
            self.r, self.lora_alpha, self.merge_weights, self.merged = r, lora_alpha, merge_weights, False
            self.lora_dropout = nn.Identity()
            self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
            self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
            self.scaling = self.lora_alpha / self.r
            self.weight.requires_grad = False  # freezing the pre-trained weight matrix
            self.reset_parameters()

        def reset_parameters(self):
            nn.Linear.reset_parameters(self)
            if hasattr(self, "lora_A"):  # the way microsoft/LoRA initializes A and B
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
                nn.init.zeros_(self.lora_B)

        def train(self, mode=True):
            nn.Linear.train(self, mode)
            if mode and self.merge_weights and self.merged:
                self.weight.data -= (self.lora_B @ self.lora_A) * self.scaling
                self.merged = False
            elif not mode and self.merge_weights and not self.merged:
                self.weight.data += (self.lora_B @ self.lora_A) * self.scaling
                self.merged = True
            return self

        def forward(self, x):
            if self.r > 0 and not self.merged:
                result = F.linear(x, self.weight, bias=self.bias)
                result += (self.lora_dropout(x) @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)) \
                    * self.scaling
                return result
            return F.linear(x, self.weight, bias=self.bias)

    class PeftLoraLinear(nn.Module):  # peft.tuners.lora.Linear
        def __init__(self, base_layer, r=R, lora_alpha=ALPHA):
            super().__init__()
            self.base_layer, self.scaling, self.merged = base_layer, lora_alpha / r, False
            self.lora_A = nn.Linear(base_layer.in_features, r, bias=False)
            self.lora_B = nn.Linear(r, base_layer.out_features, bias=False)
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)

        def get_delta_weight(self):
            return (self.lora_B.weight @ self.lora_A.weight) * self.scaling

        def merge(self):
            with lib.no_grad():
                self.base_layer.weight.add_(self.get_delta_weight())
            self.merged = True

        def unmerge(self):
            with lib.no_grad():
                self.base_layer.weight.sub_(self.get_delta_weight())
            self.merged = False

        def forward(self, x):
            result = self.base_layer(x)
            if self.merged:
                return result
            return result + self.lora_B(self.lora_A(x)) * self.scaling

    class LoRAParametrization(nn.Module):
        def __init__(self, features_out, features_in, r=R, lora_alpha=ALPHA):
            super().__init__()
            self.lora_A = nn.Parameter(lib.zeros((r, features_in)))
            self.lora_B = nn.Parameter(lib.zeros((features_out, r)))
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.scale = lora_alpha / r

        def forward(self, original_weights):
            return original_weights + (self.lora_B @ self.lora_A).view(original_weights.shape) * self.scale

    return LoRALinear, PeftLoraLinear, LoRAParametrization


def add_lora(lib, model, style, targets=("query", "value")):
    LoRALinear, PeftLoraLinear, LoRAParametrization = lora_classes(lib)
    for name, module in list(model.named_modules()):
        if not name.endswith(targets):
            continue
        parent_name, child = name.rsplit(".", 1)
        parent = model.get_submodule(parent_name)
        if style == "loralib":
            new = LoRALinear(module.in_features, module.out_features)
            new.weight.data.copy_(module.weight.data)
            new.bias.data.copy_(module.bias.data)
            setattr(parent, child, new)
        elif style == "peft":
            setattr(parent, child, PeftLoraLinear(module))
        else:
            lib.nn.utils.parametrize.register_parametrization(
                module, "weight", LoRAParametrization(module.out_features, module.in_features))
    for n, p in model.named_parameters():  # mark_only_lora_as_trainable, the new classifier head kept trainable
        if "lora_" not in n and not n.startswith("classifier"):
            p.requires_grad_(False)
    return model


def merge(lib, model, style):
    for module in list(model.modules()):
        if style == "peft" and hasattr(module, "merge"):
            module.merge()
        elif style == "parametrize" and lib.nn.utils.parametrize.is_parametrized(module, "weight"):
            lib.nn.utils.parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    if style == "loralib":
        model.eval()  # LoRALinear.train(False) merges


def make_lora_model(lib, style):
    return add_lora(lib, make_bert(lib, pretraining=False), style)


def finetune_run(lib, ref, style, steps=5, checkpointing=None):
    model = make_lora_model(lib, style)
    copy_weights(ref, model)
    if checkpointing is not None:
        model.gradient_checkpointing_enable()
        model.bert.encoder._gradient_checkpointing_func = lambda f, *a: lib.utils.checkpoint.checkpoint(
            f, *a, use_reentrant=checkpointing == "reentrant")
        if checkpointing == "reentrant":  # PEFT's enable_input_require_grads: the frozen embeddings' output
            model.bert.embeddings.register_forward_hook(lambda module, inp, output: output.requires_grad_(True))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = lib.optim.AdamW(trainable, lr=5e-3, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(lib, optimizer, 1, steps)
    out = {"loss": [], "n_trainable": sum(p.numel() for p in trainable)}
    model.train()
    for step in range(steps):
        ids, types, mask, label = sentence_pairs(8, seed=20 + step)
        logits, loss = model(lib.tensor(ids), lib.tensor(mask), lib.tensor(types), labels=lib.tensor(label))
        loss.backward()
        out["grads"] = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        assert all(g is not None for g in out["grads"].values())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        out["loss"].append(loss.detach())
    ids, types, mask, label = sentence_pairs(16, seed=99)
    batch = (lib.tensor(ids), lib.tensor(mask), lib.tensor(types))
    model.eval()
    with lib.no_grad():
        if style == "parametrize":
            with lib.nn.utils.parametrize.cached():
                out["eval"] = model(*batch)[0]
        else:
            out["eval"] = model(*batch)[0]  # loralib's eval() has merged by now
        merge(lib, model, style)
        out["merged_eval"] = model(*batch)[0]
    out["state"] = model.state_dict()
    out["frozen"] = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    return out


def reference(style, seed=0):
    torch.manual_seed(seed)
    return add_lora(torch, make_bert(torch, pretraining=False), style)


@pytest.mark.parametrize("style", ["loralib", "peft", "parametrize"])
def test_lora_finetuning_and_merging_match_torch(style):
    ref = reference(style)
    th, jt = finetune_run(torch, ref, style), finetune_run(jitorch, ref, style)
    for run in (th, jt):  # merging the adapters changes no prediction
        np.testing.assert_allclose(run["merged_eval"].numpy(), run["eval"].numpy(), rtol=1e-5, atol=1e-5)
    assert th["n_trainable"] == jt["n_trainable"] == 2 * 2 * 2 * R * HIDDEN + HIDDEN * 2 + 2
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-6, what=f"lora {style}")


@pytest.mark.parametrize("checkpointing", ["reentrant", "non_reentrant"])
def test_lora_with_gradient_checkpointing_matches_torch(checkpointing):
    ref = reference("peft", seed=3)
    plain = finetune_run(jitorch, ref, "peft", steps=2)
    th, jt = (finetune_run(lib, ref, "peft", steps=2, checkpointing=checkpointing) for lib in (torch, jitorch))
    assert_runs_match(th, jt, rtol=1e-4, atol=1e-6, what=f"lora {checkpointing}")
    assert_runs_match(plain["grads"], jt["grads"], rtol=1e-6, atol=1e-8, what="checkpointing changes no gradient")


def test_lora_frozen_base_and_init():
    """What the adapters start from: the base weights are frozen and untouched by training, B is zero (the adapted
    model starts as the base model), and A's kaiming_uniform_(a=sqrt(5)) stays inside 1/sqrt(fan_in)."""
    ref = reference("loralib", seed=5)
    ids, types, mask, _ = sentence_pairs(4, seed=6)
    res = []
    for lib in (torch, jitorch):
        lib.manual_seed(0)
        model = make_lora_model(lib, "loralib")
        for m in model.modules():
            if hasattr(m, "lora_A"):
                bound = 1 / math.sqrt(m.in_features)
                a = m.lora_A.detach().numpy()
                assert np.abs(a).max() <= bound and np.abs(a).max() > 0.8 * bound and a.std() > 0.4 * bound
                assert not m.weight.requires_grad and m.lora_A.requires_grad and (m.lora_B == 0).all()
        copy_weights(ref, model)
        plain = make_bert(lib, pretraining=False)
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if "lora_" not in k})
        batch = (lib.tensor(ids), lib.tensor(mask), lib.tensor(types))
        model.train()
        res.append([model(*batch)[0], plain(*batch)[0]])
        np.testing.assert_allclose(res[-1][0].detach().numpy(), res[-1][1].detach().numpy(), rtol=1e-6, atol=1e-6)
    assert_runs_match(res[0], res[1], rtol=1e-5, atol=1e-6, what="lora at init")
