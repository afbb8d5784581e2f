"""A real Lightning Trainer (tiny model on CPU) with the heartbeat callback: two lines.

The first epoch ends when the scenario's pause is due, so Lightning's own end-of-epoch
validation and checkpoint are the eval and checkpoint phases; the second epoch plays the rest.
"""

import time

import lightning as L
import torch

from npu_watchdog_heartbeat.lightning import WatchdogCallback     # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO


class Data(torch.utils.data.IterableDataset):
    def __iter__(self):
        while not (SCENARIO.pause_due() or SCENARIO.finished()):
            SCENARIO.load_delay()
            yield torch.randn(4, 16)


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 1)

    def training_step(self, batch, i):
        # A constant added outside the gradient: the logged loss is NaN, the weights stay finite.
        return self.lin(batch).pow(2).mean() + SCENARIO.loss_offset()

    def validation_step(self, batch, i):
        time.sleep(PAUSE_SECONDS / 4)

    def on_save_checkpoint(self, checkpoint):
        time.sleep(PAUSE_SECONDS)

    def on_train_epoch_start(self):
        if self.current_epoch == 1:
            SCENARIO.pause_done()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0, default_root_dir="out",
                    callbacks=[WatchdogCallback(min_interval=MIN_INTERVAL)])   # line 2
val = torch.utils.data.DataLoader(torch.randn(4, 4, 16), batch_size=None)
trainer.fit(Module(), train_dataloaders=torch.utils.data.DataLoader(Data(), batch_size=None),
            val_dataloaders=val)
