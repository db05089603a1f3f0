"""Set-prediction detection (DETR) and detection-backbone plumbing, written once against ``lib`` and run with torch
and jitorch: a sequence-first ``nn.Transformer`` decoding learned queries, sine-free learned position embeddings
built by ``repeat``/``cat``, Hungarian matching on a cost of softmax probabilities, ``cdist(p=1)`` and GIoU (SciPy's
``linear_sum_assignment`` on the ``.cpu()`` cost split per image), the set loss with ``full_like`` batch indices, an
index-tuple assignment and a down-weighted no-object class; torchvision's ``FrozenBatchNorm2d`` (buffers only, a
``_load_from_state_dict`` override dropping ``num_batches_tracked``) and ``IntermediateLayerGetter`` (a
``ModuleDict`` returning an ``OrderedDict`` of feature maps)."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from sweep_helpers import LIBS, assert_runs_match, copy_weights
from test_sweep_detection import generalized_box_iou, random_boxes

NUM_CLASSES, QUERIES, D = 3, 6, 16


def box_cxcywh_to_xyxy(lib, x):
    x_c, y_c, w, h = x.unbind(-1)
    return lib.stack([(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)], dim=-1)


def make_detr(lib):
    nn = lib.nn

    class DETR(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                          nn.Conv2d(8, D, 3, stride=2, padding=1))
            self.transformer = nn.Transformer(D, 2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32,
                                              dropout=0.0)
            self.query_embed = nn.Embedding(QUERIES, D)
            self.row_embed = nn.Parameter(lib.rand(8, D // 2))
            self.col_embed = nn.Parameter(lib.rand(8, D // 2))
            self.class_embed = nn.Linear(D, NUM_CLASSES + 1)
            self.bbox_embed = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 4))

        def forward(self, x):
            h = self.backbone(x)
            H, W = h.shape[-2:]
            pos = lib.cat([self.col_embed[:W].unsqueeze(0).repeat(H, 1, 1),
                           self.row_embed[:H].unsqueeze(1).repeat(1, W, 1)], dim=-1).flatten(0, 1).unsqueeze(1)
            src = pos + h.flatten(2).permute(2, 0, 1)  # (HW, N, D): sequence first
            tgt = self.query_embed.weight.unsqueeze(1).repeat(1, x.shape[0], 1)
            hs = self.transformer(src, tgt).transpose(0, 1)
            return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}

    return DETR()


def hungarian_match(lib, outputs, targets):
    bs, nq = outputs["pred_logits"].shape[:2]
    with lib.no_grad():
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        out_bbox = outputs["pred_boxes"].flatten(0, 1)
        tgt_ids = lib.cat([v["labels"] for v in targets])
        tgt_bbox = lib.cat([v["boxes"] for v in targets])
        cost_class = -out_prob[:, tgt_ids]
        cost_bbox = lib.cdist(out_bbox, tgt_bbox, p=1)
        cost_giou = -generalized_box_iou(lib, box_cxcywh_to_xyxy(lib, out_bbox), box_cxcywh_to_xyxy(lib, tgt_bbox))
        C = (5 * cost_bbox + cost_class + 2 * cost_giou).view(bs, nq, -1).cpu()
        sizes = [len(v["boxes"]) for v in targets]
        indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
    return [(lib.as_tensor(i, dtype=lib.int64), lib.as_tensor(j, dtype=lib.int64)) for i, j in indices], C


def set_criterion(lib, outputs, targets):
    F = lib.nn.functional
    indices, cost = hungarian_match(lib, outputs, targets)
    idx = (lib.cat([lib.full_like(src, i) for i, (src, _) in enumerate(indices)]),
           lib.cat([src for (src, _) in indices]))
    src_logits = outputs["pred_logits"]
    target_classes = lib.full(src_logits.shape[:2], NUM_CLASSES, dtype=lib.int64)
    target_classes[idx] = lib.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
    empty_weight = lib.ones(NUM_CLASSES + 1)
    empty_weight[-1] = 0.1
    loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, empty_weight)
    src_boxes = outputs["pred_boxes"][idx]
    target_boxes = lib.cat([t["boxes"][i] for t, (_, i) in zip(targets, indices)], dim=0)
    num_boxes = max(float(sum(len(t["labels"]) for t in targets)), 1.0)
    loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction="none").sum() / num_boxes
    giou = generalized_box_iou(lib, box_cxcywh_to_xyxy(lib, src_boxes), box_cxcywh_to_xyxy(lib, target_boxes))
    loss_giou = (1 - lib.diag(giou)).sum() / num_boxes
    return loss_ce + 5 * loss_bbox + 2 * loss_giou, indices, cost


def test_detr_set_prediction_training_matches_torch():
    torch.manual_seed(0)
    ref = make_detr(torch)
    rng = np.random.default_rng(0)
    imgs = rng.normal(size=(2, 3, 24, 28)).astype(np.float32)
    xyxy = [random_boxes(rng, 3, 40) / 40, random_boxes(rng, 2, 40) / 40]
    cxcywh = [np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], 1) for b in xyxy]
    labels = [np.array([0, 2, 1]), np.array([1, 1])]
    res, matches = [], []
    for lib in LIBS:
        model = make_detr(lib)
        copy_weights(ref, model)
        opt = lib.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
        targets = [{"boxes": lib.tensor(b), "labels": lib.tensor(lbl)} for b, lbl in zip(cxcywh, labels)]
        out = {"loss": [], "norm": []}
        match = []
        for _ in range(3):
            loss, indices, out["cost"] = set_criterion(lib, model(lib.tensor(imgs)), targets)
            opt.zero_grad()
            loss.backward()
            out["norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), 0.1))
            opt.step()
            out["loss"].append(loss.detach())
            match.append([[t.tolist() for t in ij] for ij in indices])
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        res.append(out)
        matches.append(match)
    assert matches[0] == matches[1]
    assert_runs_match(*res, rtol=1e-4, atol=1e-5, what="detr")


def make_backbone(lib, frozen):
    nn = lib.nn

    class FrozenBatchNorm2d(nn.Module):
        def __init__(self, num_features, eps=1e-5):
            super().__init__()
            self.eps = eps
            for name, init in (("weight", lib.ones), ("bias", lib.zeros), ("running_mean", lib.zeros),
                               ("running_var", lib.ones)):
                self.register_buffer(name, init(num_features))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                  error_msgs):
            state_dict.pop(prefix + "num_batches_tracked", None)
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)

        def forward(self, x):
            w, b = self.weight.reshape(1, -1, 1, 1), self.bias.reshape(1, -1, 1, 1)
            rv, rm = self.running_var.reshape(1, -1, 1, 1), self.running_mean.reshape(1, -1, 1, 1)
            scale = w * (rv + self.eps).rsqrt()
            return x * scale + (b - rm * scale)

    norm = FrozenBatchNorm2d if frozen else nn.BatchNorm2d
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(3, 4, 3, padding=1, bias=False)), ("bn1", norm(4)), ("relu", nn.ReLU()),
        ("layer1", nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False), norm(4), nn.ReLU())),
        ("layer2", nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False), norm(8), nn.ReLU())),
        ("fc", nn.Linear(8, 2))]))


def intermediate_layer_getter(lib, model, return_layers):
    class IntermediateLayerGetter(lib.nn.ModuleDict):
        def __init__(self):
            wanted, layers = dict(return_layers), OrderedDict()
            for name, module in model.named_children():
                layers[name] = module
                wanted.pop(name, None)
                if not wanted:
                    break
            super().__init__(layers)
            self.return_layers = dict(return_layers)

        def forward(self, x):
            out = OrderedDict()
            for name, module in self.items():
                x = module(x)
                if name in self.return_layers:
                    out[self.return_layers[name]] = x
            return out

    return IntermediateLayerGetter()


def test_frozen_batch_norm_backbone_and_intermediate_features():
    torch.manual_seed(1)
    ref = make_backbone(torch, frozen=False)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-1, 1)
    state = {k: v.numpy() for k, v in ref.state_dict().items()}
    x = np.random.default_rng(2).normal(size=(2, 3, 8, 8)).astype(np.float32)
    res, names = [], []
    for lib in LIBS:
        model = make_backbone(lib, frozen=True)
        report = model.load_state_dict({k: lib.tensor(v) for k, v in state.items()}, strict=True)
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("layer2"))  # torchvision's trainable_layers
        body = intermediate_layer_getter(lib, model, {"layer1": "0", "layer2": "1"})
        inp = lib.tensor(x, requires_grad=True)
        feats = body(inp)
        loss = sum(f.pow(2).mean() for f in feats.values())
        loss.backward()
        names.append([list(feats), list(body.keys()), str(report).replace("jitorch", "torch"),
                      sorted(model.state_dict()), [n for n, p in model.named_parameters() if p.grad is not None]])
        res.append([list(feats.values()), inp.grad, [p.grad for p in model.parameters() if p.grad is not None]])
    assert names[0] == names[1]
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="frozen backbone")
