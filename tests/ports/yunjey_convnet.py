"""yunjey/pytorch-tutorial — tutorials/02-intermediate/convolutional_neural_network/main.py:
a ConvNet (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Linear) trained with CrossEntropyLoss and
Adam, then evaluated in eval() mode (BatchNorm's running statistics).

Source: https://github.com/yunjey/pytorch-tutorial, that path at commit
0500d3df5a2a8080ccfccbc00aca0eacc21818db (Yunjey Choi; MIT licence, Copyright (c) 2017).

What changed, and nothing else (the reformatting is ruff format's, tokens unchanged):
- The imports: torchvision and torchvision.transforms are gone (no downloads);
  synthetic_images.digits came in, for the data.
- The script's module-level sections became functions, their lines unchanged and indented:
  "MNIST dataset" + "Data loader" → `load_data(n_train, n_test, batch_size)`, where the two
  `torchvision.datasets.MNIST(...)` became `torch.utils.data.TensorDataset` of synthetic
  images (synthetic_images.py, in ToTensor()'s [0, 1] range); "Loss and optimizer" +
  "Train the model" → `train(model, train_loader, num_epochs)`; "Test the model" →
  `test(model, test_loader)`, which also returns the accuracy it prints; `model =
  ConvNet(num_classes).to(device)` and the three sections run in `main(...)`.
- `torch.save(model.state_dict(), 'model.ckpt')` is left out (file I/O).
The hyper-parameters, ConvNet, the training step and the evaluation are the author's lines.
"""

import torch
import torch.nn as nn
from synthetic_images import digits

# Device configuration
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

# Hyper parameters
num_epochs = 5
num_classes = 10
batch_size = 100
learning_rate = 0.001


def load_data(n_train=64, n_test=32, batch_size=batch_size):
    # MNIST dataset
    train_dataset = torch.utils.data.TensorDataset(*map(torch.tensor, digits(n_train, seed=0)))

    test_dataset = torch.utils.data.TensorDataset(*map(torch.tensor, digits(n_test, seed=1)))

    # Data loader
    train_loader = torch.utils.data.DataLoader(
        dataset=train_dataset, batch_size=batch_size, shuffle=True
    )

    test_loader = torch.utils.data.DataLoader(
        dataset=test_dataset, batch_size=batch_size, shuffle=False
    )
    return train_loader, test_loader


# Convolutional neural network (two convolutional layers)
class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super(ConvNet, self).__init__()
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.layer2 = nn.Sequential(
            nn.Conv2d(16, 32, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.fc = nn.Linear(7 * 7 * 32, num_classes)

    def forward(self, x):
        out = self.layer1(x)
        out = self.layer2(out)
        out = out.reshape(out.size(0), -1)
        out = self.fc(out)
        return out


def train(model, train_loader, num_epochs=num_epochs):
    # Loss and optimizer
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    # Train the model
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.to(device)
            labels = labels.to(device)

            # Forward pass
            outputs = model(images)
            loss = criterion(outputs, labels)

            # Backward and optimize
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            if (i + 1) % 100 == 0:
                print(
                    "Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}".format(
                        epoch + 1, num_epochs, i + 1, total_step, loss.item()
                    )
                )


def test(model, test_loader):
    # Test the model
    model.eval()  # eval mode (batchnorm uses moving mean/variance instead of mini-batch mean/variance)
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()

        print(
            "Test Accuracy of the model on the 10000 test images: {} %".format(
                100 * correct / total
            )
        )
    return 100 * correct / total


def main(n_train=64, n_test=32, batch_size=batch_size, num_epochs=num_epochs):
    train_loader, test_loader = load_data(n_train, n_test, batch_size)
    model = ConvNet(num_classes).to(device)
    train(model, train_loader, num_epochs)
    return model, test(model, test_loader)
