"""MorvanZhou/PyTorch-Tutorial — tutorial-contents/401_CNN.py: a two-layer CNN (Sequential of
Conv2d, ReLU, MaxPool2d; Linear), Adam and CrossEntropyLoss, with the test accuracy printed
during training and ten predictions at the end.

Source: https://github.com/MorvanZhou/PyTorch-Tutorial, that path at commit
dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7 (Morvan Zhou; MIT licence, Copyright (c) 2017).

What changed, and nothing else (the reformatting is ruff format's, tokens unchanged):
- The imports: os, torchvision, matplotlib (and, below, matplotlib.cm and sklearn) are gone;
  numpy and synthetic_images.digits came in, for the data.
- The data: the two `torchvision.datasets.MNIST(...)` became a
  `Data.TensorDataset` of synthetic images (synthetic_images.py) and `SyntheticMNISTTest`,
  which has the two attributes the program reads of the MNIST test set (`test_data`, uint8
  (n, 28, 28), and `test_labels`); the download check on ./mnist/ went with them. The
  author's `test_x = torch.unsqueeze(test_data.test_data, ...)` line is kept; DOWNLOAD_MNIST
  is gone.
- The visualisation, which the author marks "can be ignored": plotting one example
  (plt.imshow/title/show, and the two size prints beside it), plot_with_labels, plt.ion/ioff
  and the T-SNE branch under `if HAS_SK:`.
- The module-level script became functions, its lines unchanged and indented:
  `load_data(n_train, n_test, BATCH_SIZE)` (returns train_loader, test_x, test_y),
  `train(cnn, train_loader, test_x, test_y, EPOCH)` (the optimiser, the loss and the
  training loop) and `predict(cnn, test_x, test_y)` (the ten predictions; returns pred_y).
  `main(...)` runs them on `cnn = CNN()`.
The hyper-parameters, CNN, the training step and the accuracy are the author's lines.
"""
# library
# standard library

# third-party library
import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as Data
from synthetic_images import digits

# torch.manual_seed(1)    # reproducible

# Hyper Parameters
EPOCH = 1  # train the training data n times, to save time, we just train 1 epoch
BATCH_SIZE = 50
LR = 0.001  # learning rate


class SyntheticMNISTTest:
    """What 401_CNN.py reads of torchvision's MNIST(train=False): uint8 images and labels."""

    def __init__(self, n, seed=1):
        images, labels = digits(n, seed)
        self.test_data = torch.tensor((images[:, 0] * 255).round().astype(np.uint8))
        self.test_labels = torch.tensor(labels)


def load_data(n_train=100, n_test=50, BATCH_SIZE=BATCH_SIZE):
    # Mnist digits dataset
    train_data = Data.TensorDataset(*map(torch.tensor, digits(n_train, seed=0)))

    # Data Loader for easy mini-batch return in training, the image batch shape will be (50, 1, 28, 28)
    train_loader = Data.DataLoader(dataset=train_data, batch_size=BATCH_SIZE, shuffle=True)

    # pick 2000 samples to speed up testing
    test_data = SyntheticMNISTTest(n_test)
    test_x = (
        torch.unsqueeze(test_data.test_data, dim=1).type(torch.FloatTensor)[:2000] / 255.0
    )  # shape from (2000, 28, 28) to (2000, 1, 28, 28), value in range(0,1)
    test_y = test_data.test_labels[:2000]
    return train_loader, test_x, test_y


class CNN(nn.Module):
    def __init__(self):
        super(CNN, self).__init__()
        self.conv1 = nn.Sequential(  # input shape (1, 28, 28)
            nn.Conv2d(
                in_channels=1,  # input height
                out_channels=16,  # n_filters
                kernel_size=5,  # filter size
                stride=1,  # filter movement/step
                padding=2,  # if want same width and length of this image after Conv2d, padding=(kernel_size-1)/2 if stride=1
            ),  # output shape (16, 28, 28)
            nn.ReLU(),  # activation
            nn.MaxPool2d(kernel_size=2),  # choose max value in 2x2 area, output shape (16, 14, 14)
        )
        self.conv2 = nn.Sequential(  # input shape (16, 14, 14)
            nn.Conv2d(16, 32, 5, 1, 2),  # output shape (32, 14, 14)
            nn.ReLU(),  # activation
            nn.MaxPool2d(2),  # output shape (32, 7, 7)
        )
        self.out = nn.Linear(32 * 7 * 7, 10)  # fully connected layer, output 10 classes

    def forward(self, x):
        x = self.conv1(x)
        x = self.conv2(x)
        x = x.view(x.size(0), -1)  # flatten the output of conv2 to (batch_size, 32 * 7 * 7)
        output = self.out(x)
        return output, x  # return x for visualization


def train(cnn, train_loader, test_x, test_y, EPOCH=EPOCH):
    optimizer = torch.optim.Adam(cnn.parameters(), lr=LR)  # optimize all cnn parameters
    loss_func = nn.CrossEntropyLoss()  # the target label is not one-hotted

    # training and testing
    for epoch in range(EPOCH):
        for step, (b_x, b_y) in enumerate(
            train_loader
        ):  # gives batch data, normalize x when iterate train_loader
            output = cnn(b_x)[0]  # cnn output
            loss = loss_func(output, b_y)  # cross entropy loss
            optimizer.zero_grad()  # clear gradients for this training step
            loss.backward()  # backpropagation, compute gradients
            optimizer.step()  # apply gradients

            if step % 50 == 0:
                test_output, last_layer = cnn(test_x)
                pred_y = torch.max(test_output, 1)[1].data.numpy()
                accuracy = float((pred_y == test_y.data.numpy()).astype(int).sum()) / float(
                    test_y.size(0)
                )
                print(
                    "Epoch: ",
                    epoch,
                    "| train loss: %.4f" % loss.data.numpy(),
                    "| test accuracy: %.2f" % accuracy,
                )


def predict(cnn, test_x, test_y):
    # print 10 predictions from test data
    test_output, _ = cnn(test_x[:10])
    pred_y = torch.max(test_output, 1)[1].data.numpy()
    print(pred_y, "prediction number")
    print(test_y[:10].numpy(), "real number")
    return pred_y


def main(n_train=100, n_test=50, BATCH_SIZE=BATCH_SIZE, EPOCH=EPOCH):
    train_loader, test_x, test_y = load_data(n_train, n_test, BATCH_SIZE)
    cnn = CNN()
    print(cnn)  # net architecture
    train(cnn, train_loader, test_x, test_y, EPOCH)
    return cnn, predict(cnn, test_x, test_y)
