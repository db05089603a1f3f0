"""BERT-style masked-language-model research code, written once against ``lib`` and run with torch and jitorch from
torch's initial weights and the same NumPy data: Hugging Face's ``BertModel`` (token + position + segment embeddings
with registered ``position_ids``/``token_type_ids`` buffers, the padding mask made additive as ``(1.0 - mask) *
finfo(dtype).min``, post-LN layers with eager or ``scaled_dot_product_attention`` self-attention), ``_init_weights``
through ``.data``, the pre-training heads (MLM decoder tied to the word embeddings with its own bias, NSP on the
pooled [CLS]), the data collator's 15% masking with 80/10/10 replacement decided by NumPy uniforms,
``CrossEntropyLoss`` (ignore_index -100), gradient checkpointing of every layer through
``torch.utils.checkpoint.checkpoint(use_reentrant=False)``, AdamW with the Trainer's no-decay groups and
``get_linear_schedule_with_warmup`` as a ``LambdaLR``. LoRA fine-tuning is in ``test_sweep_bert_lora.py``."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import assert_runs_match, copy_weights

PAD, CLS, SEP, MASK, SPECIAL = 0, 1, 2, 3, 4
VOCAB, HIDDEN, LAYERS, HEADS, INTER, MAX_POS, SEQ = 48, 32, 2, 4, 64, 32, 20


def make_bert(lib, attn="eager", dropout=0.0, pretraining=True, num_labels=2):
    nn, F = lib.nn, lib.nn.functional

    class BertEmbeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD)
            self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN)
            self.token_type_embeddings = nn.Embedding(2, HIDDEN)
            self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("position_ids", lib.arange(MAX_POS).expand((1, -1)), persistent=False)
            self.register_buffer("token_type_ids", lib.zeros(self.position_ids.size(), dtype=lib.long),
                                 persistent=False)

        def forward(self, input_ids, token_type_ids=None):
            seq_length = input_ids.size()[1]
            position_ids = self.position_ids[:, :seq_length]
            if token_type_ids is None:
                token_type_ids = self.token_type_ids[:, :seq_length].expand(input_ids.size()[0], seq_length)
            embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
            embeddings += self.position_embeddings(position_ids)
            return self.dropout(self.LayerNorm(embeddings))

    class BertSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_attention_heads = HEADS
            self.attention_head_size = HIDDEN // HEADS
            self.all_head_size = HIDDEN
            self.query = nn.Linear(HIDDEN, HIDDEN)
            self.key = nn.Linear(HIDDEN, HIDDEN)
            self.value = nn.Linear(HIDDEN, HIDDEN)
            self.dropout = nn.Dropout(dropout)

        def transpose_for_scores(self, x):
            new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            return x.view(new_x_shape).permute(0, 2, 1, 3)

        def forward(self, hidden_states, attention_mask):
            query_layer = self.transpose_for_scores(self.query(hidden_states))
            key_layer = self.transpose_for_scores(self.key(hidden_states))
            value_layer = self.transpose_for_scores(self.value(hidden_states))
            if attn == "sdpa":  # BertSdpaSelfAttention
                context_layer = F.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                                               attn_mask=attention_mask,
                                                               dropout_p=dropout if self.training else 0.0)
            else:
                attention_scores = lib.matmul(query_layer, key_layer.transpose(-1, -2))
                attention_scores = attention_scores / math.sqrt(self.attention_head_size)
                attention_scores = attention_scores + attention_mask
                attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
                context_layer = lib.matmul(attention_probs, value_layer)
            context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
            return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))

    class BertOutput(nn.Module):  # BertSelfOutput and BertOutput: dense, dropout, post-LN residual
        def __init__(self, d_in):
            super().__init__()
            self.dense = nn.Linear(d_in, HIDDEN)
            self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.dropout = nn.Dropout(dropout)

        def forward(self, hidden_states, input_tensor):
            return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.ModuleDict({"self": BertSelfAttention(), "output": BertOutput(HIDDEN)})
            self.intermediate = nn.Sequential(nn.Linear(HIDDEN, INTER), nn.GELU())
            self.output = BertOutput(INTER)

        def forward(self, hidden_states, attention_mask):
            attention_output = self.attention["output"](self.attention["self"](hidden_states, attention_mask),
                                                        hidden_states)
            return self.output(self.intermediate(attention_output), attention_output)

    class BertEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList([BertLayer() for _ in range(LAYERS)])
            self.gradient_checkpointing = False
            self._gradient_checkpointing_func = functools.partial(lib.utils.checkpoint.checkpoint,
                                                                  use_reentrant=False)

        def forward(self, hidden_states, attention_mask):
            for layer_module in self.layer:
                if self.gradient_checkpointing and self.training:
                    hidden_states = self._gradient_checkpointing_func(layer_module.__call__, hidden_states,
                                                                      attention_mask)
                else:
                    hidden_states = layer_module(hidden_states, attention_mask)
            return hidden_states

    class BertModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = BertEmbeddings()
            self.encoder = BertEncoder()
            self.pooler = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())

        def get_extended_attention_mask(self, attention_mask, dtype):
            extended_attention_mask = attention_mask[:, None, None, :]
            extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
            return (1.0 - extended_attention_mask) * lib.finfo(dtype).min

        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            if attention_mask is None:
                attention_mask = lib.ones(input_ids.shape, device=input_ids.device)
            embedding_output = self.embeddings(input_ids, token_type_ids)
            extended = self.get_extended_attention_mask(attention_mask, embedding_output.dtype)
            sequence_output = self.encoder(embedding_output, extended)
            return sequence_output, self.pooler(sequence_output[:, 0])

    class BertLMPredictionHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.transform = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.LayerNorm(HIDDEN, eps=1e-12))
            self.decoder = nn.Linear(HIDDEN, VOCAB, bias=False)
            self.bias = nn.Parameter(lib.zeros(VOCAB))
            self.decoder.bias = self.bias  # resized with the embeddings

        def forward(self, hidden_states):
            return self.decoder(self.transform(hidden_states))

    class BertForPreTraining(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel()
            if pretraining:
                self.predictions = BertLMPredictionHead()
                self.seq_relationship = nn.Linear(HIDDEN, 2)
                self.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight  # tie_weights
            else:  # BertForSequenceClassification
                self.dropout = nn.Dropout(dropout)
                self.classifier = nn.Linear(HIDDEN, num_labels)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)

        def gradient_checkpointing_enable(self):
            self.bert.encoder.gradient_checkpointing = True

        def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                    next_sentence_label=None):
            sequence_output, pooled_output = self.bert(input_ids, attention_mask, token_type_ids)
            if not pretraining:
                logits = self.classifier(self.dropout(pooled_output))
                return logits, None if labels is None else nn.CrossEntropyLoss()(logits, labels)
            prediction_scores = self.predictions(sequence_output)
            seq_relationship_score = self.seq_relationship(pooled_output)
            total_loss = None
            if labels is not None and next_sentence_label is not None:
                loss_fct = nn.CrossEntropyLoss()
                masked_lm_loss = loss_fct(prediction_scores.view(-1, VOCAB), labels.view(-1))
                next_sentence_loss = loss_fct(seq_relationship_score.view(-1, 2), next_sentence_label.view(-1))
                total_loss = masked_lm_loss + next_sentence_loss
            return (prediction_scores, seq_relationship_score), total_loss

    return BertForPreTraining()


def sentence_pairs(n, seed):
    """[CLS] A [SEP] B [SEP] [PAD]...: A counts up from a random token; B continues it (label 0) or is random (1)."""
    rng = np.random.default_rng(seed)
    ids = np.full((n, SEQ), PAD, np.int64)
    types, mask, nsp = np.zeros_like(ids), np.zeros_like(ids), rng.integers(0, 2, n)
    for i in range(n):
        la, lb = rng.integers(3, 8), rng.integers(2, 8)
        start = rng.integers(SPECIAL, VOCAB)
        a = SPECIAL + (start - SPECIAL + np.arange(la)) % (VOCAB - SPECIAL)
        b = SPECIAL + (a[-1] + 1 - SPECIAL + np.arange(lb)) % (VOCAB - SPECIAL) if nsp[i] == 0 \
            else rng.integers(SPECIAL, VOCAB, lb)
        row = np.concatenate([[CLS], a, [SEP], b, [SEP]])
        ids[i, :len(row)], mask[i, :len(row)], types[i, la + 2: len(row)] = row, 1, 1
    return ids, types, mask, nsp


def mask_tokens(lib, inputs, rng, mlm_probability=0.15):
    """DataCollatorForLanguageModeling.torch_mask_tokens, its Bernoulli draws made from NumPy uniforms."""
    bernoulli = lambda p: lib.tensor(rng.uniform(size=tuple(p.shape)), dtype=p.dtype) < p  # noqa: E731
    labels = inputs.clone()
    probability_matrix = lib.full(labels.shape, mlm_probability)
    special_tokens_mask = inputs < SPECIAL
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = bernoulli(probability_matrix)
    labels[~masked_indices] = -100  # only masked tokens count in the loss
    indices_replaced = bernoulli(lib.full(labels.shape, 0.8)) & masked_indices
    inputs[indices_replaced] = MASK
    indices_random = bernoulli(lib.full(labels.shape, 0.5)) & masked_indices & ~indices_replaced
    random_words = lib.tensor(rng.integers(0, VOCAB, tuple(labels.shape)), dtype=lib.long)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


def get_linear_schedule_with_warmup(lib, optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step)
                   / float(max(1, num_training_steps - num_warmup_steps)))
    return lib.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda, -1)


def grouped_parameters(model, weight_decay=0.01):
    no_decay = ["bias", "LayerNorm.weight"]
    return [{"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
             "weight_decay": weight_decay},
            {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
             "weight_decay": 0.0}]


def pretrain_run(lib, ref, steps=5, checkpointing=True, attn="eager", dtype="float32"):
    model = make_bert(lib, attn=attn)
    copy_weights(ref, model)
    model.to(getattr(lib, dtype))
    assert model.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    if checkpointing:
        model.gradient_checkpointing_enable()
    optimizer = lib.optim.AdamW(grouped_parameters(model), lr=2e-3, eps=1e-6)
    scheduler = get_linear_schedule_with_warmup(lib, optimizer, 2, steps)
    rng = np.random.default_rng(7)
    out = {"loss": [], "lr": [], "labels": [], "inputs": [], "norm": []}
    model.train()
    for step in range(steps):
        ids, types, mask, nsp = sentence_pairs(8, seed=step)
        inputs, labels = mask_tokens(lib, lib.tensor(ids), rng)
        out["inputs"].append(inputs)
        out["labels"].append(labels)
        (scores, nsp_scores), loss = model(inputs, attention_mask=lib.tensor(mask), token_type_ids=lib.tensor(types),
                                           labels=labels, next_sentence_label=lib.tensor(nsp))
        loss.backward()
        out["norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        out["loss"].append(loss.detach())
        out["lr"].append(scheduler.get_last_lr())
    out["scores"] = [scores, nsp_scores]
    out["params"] = dict(model.named_parameters())
    return out


@pytest.mark.parametrize("attn,checkpointing,dtype", [("eager", True, "float32"), ("sdpa", False, "float32"),
                                                      ("sdpa", True, "float64")])
def test_bert_pretraining_matches_torch(attn, checkpointing, dtype):
    torch.manual_seed(0)
    ref = make_bert(torch, attn=attn)
    kw = dict(attn=attn, checkpointing=checkpointing, dtype=dtype)
    th, jt = pretrain_run(torch, ref, **kw), pretrain_run(jitorch, ref, **kw)
    for key in ("inputs", "labels"):  # integer masking, compared exactly (and some tokens were masked)
        assert_runs_match(th.pop(key), jt.pop(key), what=key)
    tol = 1e-4 if dtype == "float32" else 1e-9
    # AdamW moves an element by up to lr whatever its gradient's size: float32 weights compared to a fraction of lr
    assert_runs_match(th.pop("params"), jt.pop("params"), rtol=tol, atol=1e-4 if dtype == "float32" else 1e-10,
                      what="params")
    assert_runs_match(th, jt, rtol=tol, atol=tol / 100, what=f"bert {attn}/{checkpointing}/{dtype}")


def test_masking_matches_the_collator_rules():
    ids = sentence_pairs(64, seed=0)[0]
    res = [mask_tokens(lib, lib.tensor(ids), np.random.default_rng(3)) for lib in (torch, jitorch)]
    assert_runs_match(res[0], res[1], what="masked inputs/labels")
    inputs, labels = (t.numpy() for t in res[1])
    masked = labels != -100
    assert (ids[masked] >= SPECIAL).all() and (labels[masked] == ids[masked]).all()
    assert 0.1 < masked.sum() / (ids >= SPECIAL).sum() < 0.2
    assert (inputs[~masked] == ids[~masked]).all() and (inputs[masked] == MASK).mean() > 0.6


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_checkpointed_layers_with_dropout_recompute_the_same_masks(lib):
    """Dropout inside checkpointed layers: the recomputation replays the forward's random state (the default
    ``preserve_rng_state``), so checkpointing changes no gradient (within each library; the libraries' dropout
    masks differ, they use different generators)."""
    torch.manual_seed(1)
    ref = make_bert(torch, dropout=0.1)
    ids, types, mask, nsp = sentence_pairs(6, seed=11)
    labels = np.where(np.random.default_rng(2).uniform(size=ids.shape) < 0.3, ids, -100)
    grads = []
    for ckpt in (False, True):
        model = make_bert(lib, dropout=0.1)
        copy_weights(ref, model)
        if ckpt:
            model.gradient_checkpointing_enable()
        lib.manual_seed(123)
        _, loss = model(lib.tensor(ids), lib.tensor(mask), lib.tensor(types), labels=lib.tensor(labels),
                        next_sentence_label=lib.tensor(nsp))
        loss.backward()
        grads.append([loss] + [p.grad for p in model.parameters()])
    assert_runs_match(grads[0], grads[1], rtol=1e-6, atol=1e-7, what=f"{lib.__name__} checkpointing")
