"""yunjey/pytorch-tutorial's recurrent neural networks: an LSTM classifier of MNIST rows
(many-to-one, batch_first, zero h0/c0, `out[:, -1, :]`) and its bidirectional twin.

Source: https://github.com/yunjey/pytorch-tutorial at commit
0500d3df5a2a8080ccfccbc00aca0eacc21818db (Yunjey Choi; MIT licence):
tutorials/02-intermediate/recurrent_neural_network/main.py (class RNN) and
tutorials/02-intermediate/bidirectional_recurrent_neural_network/main.py (class BiRNN).
The two scripts differ only in the model class and learning_rate (0.01 and 0.003; the
bidirectional one also skips `model.eval()`, a no-op for this dropout-free model).

What changed, and nothing else (the reformatting is ruff format's, tokens unchanged):
- The hyper-parameters are shrunk (28x28 images -> 6x5, 128 hidden -> 8, 10 classes -> 3,
  batch 100 -> 10), num_epochs 2 -> 3 for the tiny data set to show learning.
- torchvision's MNIST became `SyntheticImages`: (1, rows, columns) float images in [0, 1]
  whose rows carry a class pattern plus noise, and an int label; the two DataLoaders are
  built by `get_loaders(shuffle=True)`, so a test can turn the shuffling off (the two
  libraries draw different permutations).
- The script's body after the model became `train_and_test(model, learning_rate, ...)`,
  which also returns each step's loss and the test accuracy it prints; the checkpoint
  save (file I/O) is left out.
"""

import numpy as np
import torch
import torch.nn as nn

# Device configuration
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Hyper-parameters
sequence_length = 6
input_size = 5
hidden_size = 8
num_layers = 2
num_classes = 3
batch_size = 10
num_epochs = 3
learning_rate = 0.01


class SyntheticImages(torch.utils.data.Dataset):
    """Stands in for torchvision.datasets.MNIST with ToTensor: item i is
    (image [1, sequence_length, input_size] float32 in [0, 1], label int)."""

    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        patterns = rng.rand(num_classes, sequence_length, input_size)
        self.labels = rng.randint(0, num_classes, n)
        noise = rng.rand(n, sequence_length, input_size)
        self.images = (0.7 * patterns[self.labels] + 0.3 * noise).astype(np.float32)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.tensor(self.images[i][None]), int(self.labels[i])


def get_loaders(shuffle=True):
    # MNIST dataset
    train_dataset = SyntheticImages(200, seed=0)

    test_dataset = SyntheticImages(30, seed=1)

    # Data loader
    train_loader = torch.utils.data.DataLoader(
        dataset=train_dataset, batch_size=batch_size, shuffle=shuffle
    )

    test_loader = torch.utils.data.DataLoader(
        dataset=test_dataset, batch_size=batch_size, shuffle=False
    )
    return train_loader, test_loader


# Recurrent neural network (many-to-one)
class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, num_classes):
        super(RNN, self).__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        # Set initial hidden and cell states
        h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
        c0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)

        # Forward propagate LSTM
        out, _ = self.lstm(
            x, (h0, c0)
        )  # out: tensor of shape (batch_size, seq_length, hidden_size)

        # Decode the hidden state of the last time step
        out = self.fc(out[:, -1, :])
        return out


# Bidirectional recurrent neural network (many-to-one)
class BiRNN(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, num_classes):
        super(BiRNN, self).__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers, batch_first=True, bidirectional=True
        )
        self.fc = nn.Linear(hidden_size * 2, num_classes)  # 2 for bidirection

    def forward(self, x):
        # Set initial states
        h0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(
            device
        )  # 2 for bidirection
        c0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(device)

        # Forward propagate LSTM
        out, _ = self.lstm(
            x, (h0, c0)
        )  # out: tensor of shape (batch_size, seq_length, hidden_size*2)

        # Decode the hidden state of the last time step
        out = self.fc(out[:, -1, :])
        return out


def train_and_test(model, learning_rate, train_loader, test_loader):
    """The script from its loss on: returns (each step's loss, test accuracy in %)."""
    losses = []
    # Loss and optimizer
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    # Train the model
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.reshape(-1, sequence_length, input_size).to(device)
            labels = labels.to(device)

            # Forward pass
            outputs = model(images)
            loss = criterion(outputs, labels)

            # Backward and optimize
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

            if (i + 1) % 100 == 0:
                print(
                    "Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}".format(
                        epoch + 1, num_epochs, i + 1, total_step, loss.item()
                    )
                )

    # Test the model
    model.eval()
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.reshape(-1, sequence_length, input_size).to(device)
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
    return losses, 100 * correct / total
