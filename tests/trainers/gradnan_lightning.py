"""A real Lightning Trainer (tiny model on CPU) whose gradients turn NaN while the logged loss
stays 0.0: the Ascend failure the runbook warns about, which only the grad norm shows.

Healthy for HEALTHY steps, NaN gradients until step UNTIL, healthy again, then a normal end.
"""

import time

import lightning as L
import torch

from npu_watchdog_heartbeat.lightning import WatchdogCallback

HEALTHY, UNTIL, STEPS = 10, 40, 60


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def training_step(self, batch, i):
        time.sleep(0.05)
        if not HEALTHY <= self.global_step < UNTIL:
            return self.lin(batch).pow(2).mean()
        # sqrt(0) is 0.0 forward; its gradient is inf, times the 0 inside: NaN gradients, loss 0.0.
        return torch.sqrt(self.lin(batch).pow(2).mean() * 0.0)

    def on_before_optimizer_step(self, optimizer):
        # Runs after the callbacks saw the gradients: the update skips them, so the weights stay
        # finite and the loss keeps reading 0.0 (as on an NPU whose overflow handling hides it).
        for p in self.parameters():
            if p.grad is not None:
                p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = torch.utils.data.DataLoader(torch.randn(STEPS, 4, 8), batch_size=None)
trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0, default_root_dir="out",
                    enable_checkpointing=False, callbacks=[WatchdogCallback(min_interval=0.2)])
trainer.fit(Module(), train_dataloaders=data)
