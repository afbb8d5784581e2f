"""A real transformers Trainer (tiny model on CPU) with the heartbeat callback: two lines."""

import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from npu_watchdog_heartbeat.hf import WatchdogCallback        # line 1
from scenario import MIN_INTERVAL, PAUSE_SECONDS, SCENARIO


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        if i % 4 == 0:              # batch size 4: one delay per batch, as a loader would
            SCENARIO.load_delay()
        return {"x": torch.randn(16)}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 1)

    def forward(self, x):
        loss = self.lin(x).pow(2).mean()
        if self.training:           # outside the graph: the weights stay finite
            loss = loss + SCENARIO.loss_offset()
        return {"loss": loss}


class Drive(TrainerCallback):
    """Plays the scenario: asks for one eval + save, makes both slow, stops at the end."""

    def on_step_end(self, args, state, control, **kw):
        if SCENARIO.pause_due():
            control.should_evaluate = control.should_save = True
        if SCENARIO.finished():
            control.should_training_stop = True

    def on_prediction_step(self, args, state, control, **kw):
        time.sleep(PAUSE_SECONDS / 4)

    def on_save(self, args, state, control, **kw):
        time.sleep(PAUSE_SECONDS)
        SCENARIO.pause_done()


args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, per_device_eval_batch_size=4,
                         max_steps=100000, logging_steps=1, save_strategy="no", eval_strategy="no",
                         report_to=[], disable_tqdm=True, dataloader_num_workers=0, use_cpu=True,
                         logging_nan_inf_filter=False, learning_rate=1e-3)
eval_data = torch.utils.data.Subset(Data(), range(16))
trainer = Trainer(model=Model(), args=args, train_dataset=Data(), eval_dataset=eval_data,
                  callbacks=[Drive()])
trainer.add_callback(WatchdogCallback(min_interval=MIN_INTERVAL))   # line 2 (after Drive: its slow save counts)
trainer.train()
