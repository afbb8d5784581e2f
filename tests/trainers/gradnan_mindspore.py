"""Real MindSpore (CPU, PyNative) with a training cell shaped like MindFormers' (it returns
`(loss, overflow, loss scale, learning rate, global grad norm)`): healthy for HEALTHY steps,
then NaN gradients while the loss reads 0.0 until step UNTIL (the update skips non-finite
gradients, so the weights stay finite), healthy again, then a normal end. Only the grad norm shows the divergence.
"""

import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.dataset import GeneratorDataset
from mindspore.train import Model

from npu_watchdog_heartbeat.mindspore import WatchdogCallback

HEALTHY, UNTIL, STEPS = 10, 40, 60
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


class LossNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(8, 1)
        self.steps = 0

    def construct(self, x):
        out = ops.square(self.dense(x)).mean()
        if not HEALTHY <= self.steps < UNTIL:
            return out
        # sqrt(0) is 0.0 forward; its gradient is inf, times the 0 inside: NaN gradients, loss 0.0.
        return ops.sqrt(out * ops.zeros_like(out))


class TrainCell(nn.Cell):
    """One step: loss, gradients, their global norm; the update only with finite gradients."""

    def __init__(self, net, optimizer):
        super().__init__()
        self.net, self.optimizer = net, optimizer
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, x):
        loss = self.net(x)
        grads = self.grad(self.net, self.optimizer.parameters)(x)
        norm = ops.sqrt(ops.addn([ops.square(g).sum() for g in grads]))
        if bool(ops.isfinite(norm)):
            self.optimizer(grads)
        self.net.steps += 1
        # Loss scale 1: a MindFormers cell's default without loss scaling (static, not a collapse).
        return loss, Tensor(False), Tensor(1.0, ms.float32), Tensor(0.01, ms.float32), norm


def batches():
    for _ in range(STEPS):
        time.sleep(0.05)
        yield (np.random.randn(4, 8).astype(np.float32),)


net = LossNet()
cell = TrainCell(net, nn.SGD(net.trainable_params(), learning_rate=0.01))
data = GeneratorDataset(batches, column_names=["x"], shuffle=False)
Model(cell).train(1, data, callbacks=[WatchdogCallback(batch_size=4, min_interval=0.2)], dataset_sink_mode=False)
