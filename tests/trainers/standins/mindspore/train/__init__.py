"""Stand-in for `mindspore.train` (see ../../README.md): Callback, RunContext, Model, ModelCheckpoint.

Hook names and call order follow MindSpore 2.x `Model.train`: on_train_begin, then per epoch
on_train_epoch_begin, per step on_train_step_begin / on_train_step_end, on_train_epoch_end (and,
with a `valid_dataset`, on_eval_begin, on_eval_step_end per batch, on_eval_end), finally
on_train_end. Callbacks run in list order. `cb_params.net_outputs` is the loss, or
`(loss, overflow, loss_scale)` when a loss-scale manager is given.
"""

from types import SimpleNamespace


class Callback:
    def on_train_begin(self, run_context): pass
    def on_train_epoch_begin(self, run_context): pass
    def on_train_step_begin(self, run_context): pass
    def on_train_step_end(self, run_context): pass
    def on_train_epoch_end(self, run_context): pass
    def on_train_end(self, run_context): pass
    def on_eval_begin(self, run_context): pass
    def on_eval_step_end(self, run_context): pass
    def on_eval_end(self, run_context): pass


class RunContext:
    def __init__(self, cb_params):
        self._params = cb_params
        self._stop = False

    def original_args(self):
        return self._params

    def request_stop(self):
        self._stop = True

    def get_stop_requested(self):
        return self._stop


class FixedLossScaleManager:
    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        self._scale = float(loss_scale)

    def get_loss_scale(self):
        return self._scale


class ModelCheckpoint(Callback):
    """Saves every `save_checkpoint_steps` steps from on_train_step_end, as MindSpore's does."""

    def __init__(self, save_checkpoint_steps, save_fn):
        self.every, self.save_fn = save_checkpoint_steps, save_fn

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if self.every and cb.cur_step_num % self.every == 0:
            self.save_fn(cb.cur_step_num)


class Model:
    """`step_fn(batch) -> loss or (loss, overflow, scale)`; `eval_fn(batch)` per validation batch."""

    def __init__(self, step_fn, eval_fn=None, optimizer=None, loss_scale_manager=None):
        self.step_fn, self.eval_fn = step_fn, eval_fn
        self.optimizer, self.loss_scale_manager = optimizer, loss_scale_manager

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, valid_dataset=None,
              valid_frequency=1):
        cbs = list(callbacks or [])
        cb = SimpleNamespace(cur_step_num=0, cur_epoch_num=0, epoch_num=epoch, net_outputs=None,
                             optimizer=self.optimizer, loss_scale_manager=self.loss_scale_manager,
                             batch_num=None, train_network=None)
        ctx = RunContext(cb)
        for c in cbs:
            c.on_train_begin(ctx)
        for e in range(epoch):
            cb.cur_epoch_num = e + 1
            for c in cbs:
                c.on_train_epoch_begin(ctx)
            for batch in train_dataset(e):
                for c in cbs:
                    c.on_train_step_begin(ctx)
                cb.cur_step_num += 1
                cb.net_outputs = self.step_fn(batch)
                for c in cbs:
                    c.on_train_step_end(ctx)
                if ctx.get_stop_requested():
                    break
            for c in cbs:
                c.on_train_epoch_end(ctx)
            if valid_dataset is not None and (e + 1) % valid_frequency == 0:
                for c in cbs:
                    c.on_eval_begin(ctx)
                for batch in valid_dataset:
                    self.eval_fn(batch)
                    for c in cbs:
                        c.on_eval_step_end(ctx)
                for c in cbs:
                    c.on_eval_end(ctx)
            if ctx.get_stop_requested():
                break
        for c in cbs:
            c.on_train_end(ctx)
