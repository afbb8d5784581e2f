"""Stand-in for `megatron.training.training` (see ../../README.md): the train loop's call order."""

import math


def training_log(loss_dict, total_loss_dict, learning_rate, decoupled_learning_rate, iteration,
                 loss_scale, report_memory_flag, skipped_iter, grad_norm, params_norm, num_zeros_in_grad):
    """Keeps the skipped / NaN iteration counts the way Megatron does; returns the memory flag."""
    total_loss_dict["skipped iterations"] = total_loss_dict.get("skipped iterations", 0) + skipped_iter
    got_nan = any(not math.isfinite(float(v)) for v in loss_dict.values())
    total_loss_dict["nan iterations"] = total_loss_dict.get("nan iterations", 0) + int(got_nan)
    return report_memory_flag


def save_checkpoint(iteration, model, optimizer, opt_param_scheduler, num_floating_point_operations_so_far):
    model.save(iteration)


def evaluate_and_print_results(prefix, forward_step_func, data_iterator, model, process_non_loss_data_func,
                               config, verbose=False, write_to_tensorboard=True):
    model.evaluate()


def train(forward_step_func, model, optimizer, opt_param_scheduler, train_data_iterator, valid_data_iterator,
          process_non_loss_data_func, config, checkpointing_context=None):
    """`model` is the trainer script's object: train_step(), should_eval/save(), finished()."""
    iteration = 0
    total_loss_dict = {}
    report_memory_flag = True
    while not model.finished():
        loss_dict, skipped_iter, grad_norm, num_zeros = model.train_step(next(train_data_iterator))
        iteration += 1
        report_memory_flag = training_log(loss_dict, total_loss_dict, optimizer.lr, None, iteration,
                                          optimizer.loss_scale, report_memory_flag, skipped_iter,
                                          grad_norm, None, num_zeros)
        if model.should_eval():
            evaluate_and_print_results(f"iteration {iteration}", forward_step_func, valid_data_iterator,
                                       model, process_non_loss_data_func, config, False)
        if model.should_save():
            save_checkpoint(iteration, model, optimizer, opt_param_scheduler, 0)
    return iteration
