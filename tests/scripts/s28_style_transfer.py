"""Neural style transfer (after the PyTorch tutorial "Neural Transfer Using PyTorch", Gatys et al.): a small
frozen conv feature extractor rebuilt layer by layer into an nn.Sequential with ContentLoss/StyleLoss modules
inserted after chosen convs (the tutorial's get_style_model_and_losses), Gram matrices via bmm/mm, the input
image optimised by LBFGS (strong Wolfe line search) with a closure that clamp_s it in torch.no_grad, and a
total-variation term.

Image and weights come from NumPy; LBFGS is deterministic, so metrics must match torch.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input):
        self.loss = F.mse_loss(gram_matrix(input), self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


def get_style_model_and_losses(cnn, style_img, content_img, content_layers=("conv_3",),
                               style_layers=("conv_1", "conv_2", "conv_3", "conv_4")):
    normalization = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    content_losses, style_losses = [], []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = f"pool_{i}"
        elif isinstance(layer, nn.AvgPool2d):
            name = f"avgpool_{i}"
        else:
            raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module(f"style_loss_{i}", style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], (ContentLoss, StyleLoss)):
            break
    return model[: (i + 1)], style_losses, content_losses


def total_variation(img):
    return (img[:, :, 1:, :] - img[:, :, :-1, :]).abs().mean() + (img[:, :, :, 1:] - img[:, :, :, :-1]).abs().mean()


rng = np.random.RandomState(0)
cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1),
                    nn.ReLU(inplace=True), nn.MaxPool2d(2, 2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
                    nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True), nn.AvgPool2d(2)).eval()
with torch.no_grad():
    for p in cnn.parameters():
        p.copy_(torch.from_numpy((rng.randn(*p.shape) * 0.25).astype(np.float32)))
cnn.requires_grad_(False)
content_img = torch.from_numpy(rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
style_img = torch.from_numpy(np.tile(np.sin(np.arange(16) / 2.0)[None, None, :, None] * 0.5 + 0.5, (1, 3, 1, 16))
                             .astype(np.float32))
input_img = content_img.clone()
model, style_losses, content_losses = get_style_model_and_losses(cnn, style_img, content_img)
print("model:", [n for n, _ in model.named_children()])
input_img.requires_grad_(True)
model.eval()
model.requires_grad_(False)
optimizer = torch.optim.LBFGS([input_img], lr=1, max_iter=8, history_size=10, line_search_fn="strong_wolfe")
style_weight, content_weight = 1e3, 1.0
history = []
run = [0]
for _ in range(2):  # the tutorial loops `while run[0] <= num_steps`
    def closure():
        with torch.no_grad():
            input_img.clamp_(0, 1)
        optimizer.zero_grad()
        model(input_img)
        style_score = sum(sl.loss for sl in style_losses) * style_weight
        content_score = sum(cl.loss for cl in content_losses) * content_weight
        loss = style_score + content_score + 0.1 * total_variation(input_img)
        loss.backward()
        run[0] += 1
        history.append((style_score.item(), content_score.item(), loss.item()))
        return loss
    optimizer.step(closure)
with torch.no_grad():
    input_img.clamp_(0, 1)
state = optimizer.state[optimizer._params[0]]
print(f"initial_loss={history[0][2]:.6f}")
print(f"final_loss={history[-1][2]:.6f}")
print(f"style_final={history[-1][0]:.6f}")
print(f"content_final={history[-1][1]:.6f}")
print(f"n_evals={run[0]}")
print(f"lbfgs_n_iter={state['n_iter']}")
print(f"img_mean={input_img.mean().item():.6f}")
print(f"img_tv={total_variation(input_img).item():.6f}")
