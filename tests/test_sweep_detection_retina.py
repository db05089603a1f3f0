"""RoI pooling by ``grid_sample`` and by ``adaptive_max_pool2d`` on crops, an FPN with lateral 1x1 convs and nearest
upsampling, and a tiny RetinaNet trained a few steps on fixed boxes: detection research code written once against
``lib`` and run with torch and jitorch (the box helpers are `test_sweep_detection`'s)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sweep_helpers import LIBS, assert_runs_match, copy_weights
from test_sweep_detection import (
    batched_nms, box_iou, cell_anchors, decode, encode, giou_loss, grid_anchors, match, random_boxes,
    sigmoid_focal_loss)


def roi_align_grid_sample(lib, feat, rois, out_size=4, sampling=2, spatial_scale=1.0):
    """RoIAlign (aligned=True) by bilinear ``grid_sample`` at ``sampling``² points per bin, then a mean."""
    F = lib.nn.functional
    n, _, h, w = feat.shape
    idx, boxes = rois[:, 0].long(), rois[:, 1:] * spatial_scale - 0.5
    steps = (lib.arange(out_size * sampling, dtype=feat.dtype) + 0.5) / (out_size * sampling)
    xs = boxes[:, 0:1] + (boxes[:, 2:3] - boxes[:, 0:1]) * steps  # (R, S) pixel coordinates
    ys = boxes[:, 1:2] + (boxes[:, 3:4] - boxes[:, 1:2]) * steps
    gx, gy = (2 * xs + 1) / w - 1, (2 * ys + 1) / h - 1  # align_corners=False normalisation
    grid = lib.stack(lib.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    sampled = F.grid_sample(feat[idx], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return F.avg_pool2d(sampled, sampling)


def roi_max_pool_crops(lib, feat, rois, out_size=4, spatial_scale=1.0):
    F = lib.nn.functional
    out = []
    for r in rois:
        b = int(r[0])
        x1, y1, x2, y2 = (r[1:] * spatial_scale).round().long().tolist()
        crop = feat[b, :, max(y1, 0):y2 + 1, max(x1, 0):x2 + 1]
        out.append(F.adaptive_max_pool2d(crop, out_size))
    return lib.stack(out)


def test_roi_pooling_by_grid_sample_and_adaptive_max_pool():
    rng = np.random.default_rng(3)
    feat_np = rng.normal(size=(2, 3, 10, 12)).astype(np.float32)
    rois_np = np.array([[0, 1.2, 0.7, 9.1, 6.3], [1, 0, 0, 2.4, 1.6], [1, 3.5, 2.2, 11.0, 9.0],
                        [0, 5.0, 5.0, 5.4, 5.6]], np.float32)  # a crop smaller than the output: bins overlap
    g1, g2 = rng.normal(size=(4, 3, 4, 4)).astype(np.float32), rng.normal(size=(4, 3, 4, 4)).astype(np.float32)
    res = []
    for lib in LIBS:
        feat, rois = lib.tensor(feat_np, requires_grad=True), lib.tensor(rois_np, requires_grad=True)
        a = roi_align_grid_sample(lib, feat, rois)
        m = roi_max_pool_crops(lib, feat, rois)
        grads = lib.autograd.grad((a * lib.tensor(g1)).sum() + (m * lib.tensor(g2)).sum(), (feat, rois))
        res.append([a, m, grads])
    assert_runs_match(*res, rtol=1e-5, atol=1e-6, what="roi pooling")


def make_retinanet(lib, num_classes=3, num_anchors=3, ch=16):
    nn, F = lib.nn, lib.nn.functional

    class FPN(nn.Module):
        def __init__(self, in_channels):
            super().__init__()
            self.inner_blocks = nn.ModuleList(nn.Conv2d(c, ch, 1) for c in in_channels)
            self.layer_blocks = nn.ModuleList(nn.Conv2d(ch, ch, 3, padding=1) for _ in in_channels)

        def forward(self, feats):
            last_inner = self.inner_blocks[-1](feats[-1])
            results = [self.layer_blocks[-1](last_inner)]
            for idx in range(len(feats) - 2, -1, -1):
                lateral = self.inner_blocks[idx](feats[idx])
                last_inner = lateral + F.interpolate(last_inner, size=lateral.shape[-2:], mode="nearest")
                results.insert(0, self.layer_blocks[idx](last_inner))
            results.append(F.max_pool2d(results[-1], 1, 2, 0))  # LastLevelMaxPool
            return results

    class Head(nn.Module):
        def __init__(self, out_per_anchor, prior=None):
            super().__init__()
            self.k = out_per_anchor
            self.tower = nn.Sequential(*[m for _ in range(2) for m in (nn.Conv2d(ch, ch, 3, padding=1),
                                                                         nn.GroupNorm(4, ch), nn.ReLU())])
            self.out = nn.Conv2d(ch, num_anchors * out_per_anchor, 3, padding=1)
            nn.init.normal_(self.out.weight, std=0.01)
            nn.init.constant_(self.out.bias, -math.log((1 - prior) / prior) if prior else 0.0)

        def forward(self, feats):
            outs = []
            for f in feats:
                o = self.out(self.tower(f))
                n, _, h, w = o.shape
                outs.append(o.view(n, -1, self.k, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, self.k))
            return lib.cat(outs, dim=1)

    class RetinaNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
            self.c3 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
            self.c4 = nn.Sequential(nn.Conv2d(16, 24, 3, stride=2, padding=1), nn.ReLU())
            self.fpn = FPN([16, 24])
            self.cls_head = Head(num_classes, prior=0.01)
            self.box_head = Head(4)

        def forward(self, x):
            c3 = self.c3(self.stem(x))
            feats = self.fpn([c3, self.c4(c3)])
            return self.cls_head(feats), self.box_head(feats), [f.shape[-2:] for f in feats]

    return RetinaNet()


def retina_losses(lib, cls_logits, box_reg, anchors, targets, box_loss):
    F = lib.nn.functional
    cls_total, box_total = 0.0, 0.0
    for logits, reg, (gt_boxes, gt_labels) in zip(cls_logits, box_reg, targets):
        matches = match(lib, box_iou(lib, gt_boxes, anchors)[0])
        fg = matches >= 0
        num_fg = fg.sum()
        gt_cls = lib.zeros_like(logits)
        gt_cls[fg, gt_labels[matches[fg]]] = 1.0
        valid = matches != -2
        cls_total = cls_total + sigmoid_focal_loss(lib, logits[valid], gt_cls[valid]) / max(1, num_fg.item())
        matched_gt, fg_anchors, fg_reg = gt_boxes[matches[fg]], anchors[fg], reg[fg]
        if box_loss == "smooth_l1":
            loss = F.smooth_l1_loss(fg_reg, encode(lib, matched_gt, fg_anchors), beta=1 / 9, reduction="sum")
        elif box_loss == "l1":
            loss = F.l1_loss(fg_reg, encode(lib, matched_gt, fg_anchors), reduction="sum")
        else:
            loss = giou_loss(lib, decode(lib, fg_reg, fg_anchors), matched_gt).sum()
        box_total = box_total + loss / max(1, num_fg.item())
    return cls_total / len(targets), box_total / len(targets)


@pytest.mark.parametrize("box_loss", ["smooth_l1", "l1", "giou"])
def test_retinanet_training_matches_torch(box_loss):
    torch.manual_seed(0)
    ref = make_retinanet(torch)
    rng = np.random.default_rng(4)
    imgs = rng.normal(size=(2, 3, 48, 40)).astype(np.float32)
    boxes = [random_boxes(rng, 3, 40), random_boxes(rng, 2, 40)]
    labels = [np.array([0, 2, 1]), np.array([1, 1])]
    res = []
    for lib in LIBS:
        model = make_retinanet(lib)
        copy_weights(ref, model)
        opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        warmup = lib.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
        targets = [(lib.tensor(b), lib.tensor(lbl)) for b, lbl in zip(boxes, labels)]
        out = {"cls": [], "box": [], "norm": []}
        anchors = None
        for _ in range(3):
            cls_logits, box_reg, shapes = model(lib.tensor(imgs))
            if anchors is None:
                base = [cell_anchors(lib, (s, s * 1.26), (0.5, 1.0, 2.0))[:3] for s in (8, 16, 32)]
                strides = [(48 // h, 40 // w) for h, w in shapes]
                anchors = grid_anchors(lib, shapes, strides, base).float()
            cls_loss, box_l = retina_losses(lib, cls_logits, box_reg, anchors, targets, box_loss)
            opt.zero_grad()
            (cls_loss + box_l).backward()
            out["norm"].append(lib.nn.utils.clip_grad_norm_(model.parameters(), 10.0))
            opt.step()
            warmup.step()
            out["cls"].append(cls_loss.detach())
            out["box"].append(box_l.detach())
        out["grads"] = {n: p.grad for n, p in model.named_parameters()}
        model.eval()
        with lib.no_grad():
            cls_logits, box_reg, _ = model(lib.tensor(imgs))
            scores = lib.sigmoid(cls_logits[0]).flatten()
            top_scores, top = scores.topk(20)
            a_idx = lib.div(top, 3, rounding_mode="floor")
            pred = decode(lib, box_reg[0][a_idx], anchors[a_idx])
            keep = batched_nms(lib, pred, top_scores, top % 3, 0.5)
            out["dets"] = [pred[keep], top_scores[keep], keep]
        out["anchors"] = anchors
        res.append(out)
    assert_runs_match(*res, rtol=1e-4, atol=1e-5, what=f"retinanet {box_loss}")
