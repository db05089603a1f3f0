"""Small ResNet-style classifier: residual blocks, AdaptiveAvgPool2d, Dropout2d, DataLoader with 2 workers."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes),
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, stride=2), nn.Dropout2d(0.1))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


class StripesDataset(Dataset):
    """Class k = stripes of orientation/period k, plus noise; generated per index so workers can build items."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(self.seed * 100003 + idx)
        label = idx % 4
        r = torch.arange(8).float()
        if label == 0:
            img = (r.view(8, 1) % 2).expand(8, 8)
        elif label == 1:
            img = (r.view(1, 8) % 2).expand(8, 8)
        elif label == 2:
            img = ((r.view(8, 1) + r.view(1, 8)) % 2)
        else:
            img = torch.zeros(8, 8)
            img[2:6, 2:6] = 1
        img = img + 0.3 * torch.randn(8, 8, generator=g)
        return img.unsqueeze(0), label


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            _, predicted = torch.max(model(images).data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    return correct / total


def main():
    torch.manual_seed(0)
    train_loader = DataLoader(StripesDataset(192, 1), batch_size=32, shuffle=True, num_workers=2,
                              persistent_workers=False, drop_last=True)
    test_loader = DataLoader(StripesDataset(64, 2), batch_size=64, num_workers=2)
    model = ResNet()
    criterion = nn.CrossEntropyLoss(label_smoothing=0.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
    losses = []
    for epoch in range(4):
        model.train()
        running = 0.0
        for i, (inputs, labels) in enumerate(train_loader):
            optimizer.zero_grad(set_to_none=True)
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            running += loss.item()
        scheduler.step()
        losses.append(running / len(train_loader))
        print(f"epoch {epoch}: loss {losses[-1]:.4f} lr {optimizer.param_groups[0]['lr']:.4f}")
    acc = evaluate(model, test_loader)
    print(f"Accuracy of the network on the test images: {100 * acc:.1f} %")
    print(f"initial_loss={losses[0]:.6f}")
    print(f"final_loss={losses[-1]:.6f}")
    print(f"accuracy={acc:.4f}")


if __name__ == "__main__":
    main()
