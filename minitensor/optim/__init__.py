"""minitensor.optim: SGD, Adam, AdamW, Adadelta and learning-rate schedules, as torch.optim.

opt = mt.optim.Adam(model.parameters(), lr=1e-3)
sched = mt.optim.lr_scheduler.NoamLR(opt, d_model=128, warmup_steps=400)
for batch in data:
    opt.zero_grad()
    loss = loss_fn(model, batch)
    loss.backward()
    opt.step()
    sched.step()
"""

from . import lr_scheduler
from .adadelta import Adadelta
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "lr_scheduler"]
