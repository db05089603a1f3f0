"""Train a small CNN on scikit-learn's handwritten digits: ordinary PyTorch code under ``import jitorch as torch``.

The 1797 8x8 grey images of ``sklearn.datasets.load_digits`` are standardized, split 80/20 with a fixed seed, and fed
through ``TensorDataset`` + ``DataLoader(shuffle=True)`` to a two-conv CNN trained with Adam (cosine learning-rate
decay) and cross-entropy.

Run::

    python examples/train_digits.py                   # jitorch, 15 epochs, exits 1 if test accuracy < 97%
    python examples/train_digits.py --backend torch   # the very same code on PyTorch, to compare accuracy and speed
    python examples/train_digits.py --quick           # 3 epochs on a subset: a smoke test, no accuracy threshold

Everything below the imports is plain PyTorch; only the backend switch knows there are two libraries.
"""
import jitorch as torch

import argparse
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("jitorch", "torch"), default="jitorch",
                        help="library behind the name `torch` (default: jitorch)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="3 epochs on 600 training images, no accuracy threshold (for tests)")
    parser.add_argument("--min-accuracy", type=float, default=0.97,
                        help="exit with status 1 below this test accuracy (ignored with --quick)")
    return parser.parse_args(argv)


ARGS = parse_args()
if ARGS.backend == "torch":
    import torch  # noqa: F811 - the reference run: the same code on PyTorch


def load_data(seed, quick):
    """Standardized (N, 1, 8, 8) float32 images and int64 labels, as train and test tensors."""
    digits = load_digits()
    images = digits.images.astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)
    if quick:
        x_train, y_train = x_train[:600], y_train[:600]
    # One mean and std over all training pixels: per-pixel statistics would divide by zero on the always-blank border.
    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return (torch.tensor(x_train).unsqueeze(1), torch.tensor(y_train, dtype=torch.long),
            torch.tensor(x_test).unsqueeze(1), torch.tensor(y_test, dtype=torch.long))


class DigitsCNN(torch.nn.Module):
    """conv 1->16 -> pool -> conv 16->32 -> pool -> linear: ~10k parameters, enough for ~98% on 8x8 digits."""

    def __init__(self, num_classes=10):
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 4 x 4
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 2 x 2
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 2 * 2, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def evaluate(model, images, labels):
    """Accuracy on a whole split in one batch (the test set is only 360 images)."""
    model.eval()
    with torch.no_grad():
        predicted = model(images).argmax(dim=1)
    model.train()
    return (predicted == labels).float().mean().item()


def main():
    torch.manual_seed(ARGS.seed)
    epochs = 3 if ARGS.quick else ARGS.epochs
    x_train, y_train, x_test, y_test = load_data(ARGS.seed, ARGS.quick)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                         batch_size=ARGS.batch_size, shuffle=True)
    model = DigitsCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=ARGS.lr)
    # Decaying the learning rate to zero settles the last epochs: the final accuracy does not hinge on the last batch.
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    criterion = torch.nn.CrossEntropyLoss()
    print(f"backend {ARGS.backend}: {len(x_train)} train / {len(x_test)} test images, "
          f"{sum(p.numel() for p in model.parameters())} parameters")

    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        total_loss, seen = 0.0, 0
        # disable=None: a bar on a terminal, silence when piped (tests, logs).
        progress = tqdm(loader, desc=f"epoch {epoch:2d}/{epochs}", leave=False, disable=None)
        for images, labels in progress:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            batch_loss = loss.item()
            total_loss += batch_loss * len(labels)
            seen += len(labels)
            # refresh=False: the bar redraws at its own pace instead of once per step.
            progress.set_postfix(loss=f"{batch_loss:.4f}", refresh=False)
        scheduler.step()
        accuracy = evaluate(model, x_test, y_test)
        print(f"epoch {epoch:2d}  train loss {total_loss / seen:.4f}  test accuracy {accuracy:.4f}")
    elapsed = time.perf_counter() - start

    print(f"final test accuracy {accuracy:.4f} ({accuracy * len(y_test):.0f}/{len(y_test)}), "
          f"trained {epochs} epochs in {elapsed:.1f} s")
    if not ARGS.quick and accuracy < ARGS.min_accuracy:
        print(f"FAILED: test accuracy {accuracy:.4f} < {ARGS.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
