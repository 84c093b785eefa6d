"""
What a training run keeps besides its step, called by name from train.py's loop: the batches (made
ahead on a GPU), stop requests and the checkpoint clock agreed across processes, the counters a
checkpoint saves, non-finite losses caught, log lines, evaluations and checkpoints.
"""
import inspect
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import (ConfigError, Stop, TrainingError, format_time, peak_flops, save_checkpoint,
                    write_atomic)
from data import eval_metrics
from mixit import param_groups

# On a GPU, this thread makes the next step's batches while a step runs. A CPU's cores run the step.
AHEAD = ThreadPoolExecutor(1)


@dataclass
class RunState:
    """A run's counters, which its checkpoints save (these keys, in this order): loss_sum and
    loss_tokens since the last evaluation, the others since step 0."""
    iter_num: int = 0
    # The loss summed over every process's scored tokens. While training, each process sums its own
    # on the device.
    loss_sum: float = 0.0
    loss_tokens: int = 0
    tokens: int = 0
    samples: int = 0
    flops: float = 0.0
    train_time: float = 0.0
    # best.pt's val_loss, kept here: metrics.jsonl may be lost
    best_val_loss: float = math.inf


def write_metrics(path, history):
    """metrics.jsonl: one JSON object a line, each eval's."""
    text = "".join(json.dumps(m) + "\n" for m in history)
    write_atomic(path, lambda f: f.write(text.encode()))


def unfreeze_parameters(model, optimizer, weight_decay):
    """Every frozen parameter starts training (fresh optimizer state, its kind's weight decay);
    returns how many."""
    params = [p for p in model.parameters() if not p.requires_grad]
    for p in params:
        p.requires_grad_(True)
    for group in param_groups(params, weight_decay):
        if group["params"]:
            optimizer.add_param_group(group)
    return sum(p.numel() for p in params)


def wrap(model, config, env):
    """The model that trains: compiled (afresh: each run of a multi-run job compiles, whatever
    dynamo's recompile limit) and, under torchrun, in DDP, which syncs no buffers: the fixed ones
    are identical by construction."""
    train_model = model
    if config["compile"] is True or (config["compile"] == "auto" and env.device_type == "cuda"):
        torch._dynamo.reset()
        train_model = torch.compile(model, dynamic=False)
    if env.ddp:
        # torch < 2.13 names it broadcast_buffers, which also skips the buffers' first broadcast.
        no_sync = "broadcast_buffers"
        if "forward_sync_buffers" in inspect.signature(DDP).parameters:
            no_sync = "forward_sync_buffers"
        device_ids = [env.device.index] if env.device_type == "cuda" else None
        train_model = DDP(train_model, device_ids=device_ids, **{no_sync: False})
    return train_model


def step_shares(accum, batch_size, env):
    """This process's share of a step as (micro-batch, rows) pairs: the same sequences a step at any
    process count."""
    if accum % env.world_size == 0:
        return [(k, slice(None)) for k in range(env.rank, accum, env.world_size)]
    if batch_size % env.world_size == 0:
        return [(k, slice(env.rank, None, env.world_size)) for k in range(accum)]
    raise ConfigError(f"{env.world_size} processes can share neither "
                      f"gradient_accumulation_steps={accum} nor batch_size={batch_size}; "
                      f"make one of them a multiple of {env.world_size}")


def step_batches(task, config, shares, iter_num):
    """This process's micro-batches (x, y) of a step, on the host: micro-batch k is the same at any
    process count."""
    return [[t[rows] for t in task.get_batch("train", config["batch_size"],
                                             seed=[config["seed"], iter_num, micro])]
            for micro, rows in shares]


def checkpoint_kept(ckpt_path, which):
    """What a run that fails leaves behind, said in its error line."""
    if os.path.isfile(ckpt_path):
        return f"the {which} checkpoint {ckpt_path} is untouched"
    return "no checkpoint written"


def progress(iter_num, config, loss, lr, dt, tokens_per_iter, flops_per_token, peak, env,
             scored=None):
    """A step's log line: loss, step size, time, throughput (scored: a language model's share
    scored), one MFU."""
    tok_s = tokens_per_iter / dt
    line = (f"iter {iter_num}/{config['max_iters']}: loss {loss:.4f}, lr {lr:.2e}, "
            f"{dt * 1000:.1f} ms/iter, {tok_s:,.0f} tok/s")
    per_process = ""
    if env.ddp:
        line += f" over {env.world_size} processes"
        per_process = " per process"
    if scored is not None:
        line += f" ({scored:.0%} scored)"
    mfu = "n/a"
    if peak:
        mfu = f"{flops_per_token * tok_s / env.world_size / peak * 100:.1f}%"
    line += f", mfu {mfu}{per_process}, "
    if env.device_type == "cuda":
        line += f"peak {torch.cuda.max_memory_allocated(env.device) / 2 ** 30:.2f} GiB, "
    return line + f"eta {format_time((config['max_iters'] - iter_num) * dt)}"


class RunKeeper:
    """What one run keeps around its steps, called by train.py's loop: the model and optimizer (for
    evaluations, checkpoints and unfreezing), the counters (state), the evaluations (history), and
    what the steps leave on the device and the clock."""

    def __init__(self, config, task, env, model, optimizer, state, history, chance):
        self.config = config
        self.task = task
        self.env = env
        self.model = model
        self.optimizer = optimizer
        self.state = state
        self.history = history
        self.chance = chance
        self.ckpt_path = os.path.join(config["out_dir"], "ckpt.pt")
        self.shares = step_shares(config["gradient_accumulation_steps"], config["batch_size"], env)
        # The sequences of a step over all processes, and their positions.
        self.step_rows = config["batch_size"] * config["gradient_accumulation_steps"]
        self.tokens_per_iter = self.step_rows * task.block_size
        # A language model trains on the tokens it scores (predicts), a classifier on every
        # position.
        self.counts_scored = getattr(task, "counts_scored", False)
        self.peak = peak_flops(env.device, env.dtype)
        # This process's loss summed over its scored tokens since the last evaluation, kept on the
        # device (no sync). The processes' sums add up, so the master alone starts from the saved
        # total.
        self.loss_sum = torch.tensor(state.loss_sum if env.master else 0.0, device=env.device)
        # The first step with a non-finite loss or gradient norm, kept on the device too.
        self.first_bad = torch.tensor(-1, device=env.device)
        self.start_log_window()
        self.wrap_model()
        # On a GPU, the future of the next step's batches.
        self.batches_ahead = None
        self.saved_at = time.time()
        # train_time grows by the time since timed_from: the steps', not the evaluations'.
        self.timed_from = time.time()

    def wrap_model(self):
        """The model that trains (wrapped again when parts unfreeze: DDP hooks the parameters that
        train as it is built), what trains (clipped together) and its training FLOPs per token."""
        self.train_model = wrap(self.model, self.config, self.env)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.flops_per_token = self.model.flops_per_token(self.task.block_size)
        # The model's first step compiles: it is left out of the rate of the line that logs it.
        self.warming = True

    def start_log_window(self):
        """The next log line's time and rate count the steps from now, none of them a warm-up."""
        self.warming = False
        self.log_start = time.time()
        self.log_iters = 0
        self.log_scored = 0

    def unfreeze(self):
        """The frozen parts start training, in the model wrapped again."""
        count = unfreeze_parameters(self.model, self.optimizer, self.config["weight_decay"])
        if count:
            before = self.flops_per_token
            self.wrap_model()
            self.env.print(f"iter {self.state.iter_num}: unfroze {count:,} parameters; "
                           f"training FLOPs per token {before / 1e6:.3f}M -> "
                           f"{self.flops_per_token / 1e6:.3f}M")

    def before_step(self, stop):
        """The step's micro-batches on the device, their scored tokens, and the function that waits
        for the sums over the processes, taken while the step runs, of the step's scored tokens
        (first), the checkpoint clock's vote and the stop requests' votes."""
        env = self.env
        iter_num = self.state.iter_num
        batch_args = (self.task, self.config, self.shares)
        # On a GPU, a thread made the step's batches while the step before ran.
        if self.batches_ahead:
            host_batches = self.batches_ahead.result()
        else:
            host_batches = step_batches(*batch_args, iter_num)
        if env.device_type == "cuda":
            self.batches_ahead = AHEAD.submit(step_batches, *batch_args, iter_num + 1)
        counts = [int((y >= 0).sum()) for _, y in host_batches]
        # The master's clock says when the latest checkpoint is due.
        interval = self.config["checkpoint_interval"] * 60
        checkpoint_due = env.master and 0 < interval < time.time() - self.saved_at
        wait_agreed = env.agree([sum(counts), checkpoint_due]
                                + [stop.signum == s for s in Stop.SIGNALS])
        batches = [env.to_device(x, y) for x, y in host_batches]
        return batches, counts, wait_agreed

    def after_step(self, loss_sum, grad_norm, agreed):
        """Count the step done: its loss, whether it was finite, the tokens it trained on. Sets what
        the processes agreed on while it ran: its scored tokens, whether the latest checkpoint is
        due (the master's clock), and the stop signal one received (0 if none)."""
        state = self.state
        scored = agreed[0]
        self.scored = scored
        self.checkpoint_due = agreed[1]
        self.stop_signal = next((s for s, votes in zip(Stop.SIGNALS, agreed[2:]) if votes), 0)
        state.iter_num += 1
        finite = loss_sum.isfinite() & grad_norm.isfinite()
        self.first_bad = torch.where((self.first_bad < 0) & ~finite, state.iter_num, self.first_bad)
        self.loss_sum += loss_sum
        trained = scored if self.counts_scored else self.tokens_per_iter
        state.tokens += trained
        state.flops += self.flops_per_token * trained
        state.samples += self.step_rows
        state.loss_tokens += scored
        self.log_scored += scored
        self.log_iters += 1

    def check_finite(self):
        """Stop, without writing a checkpoint, if a step had a non-finite loss or gradient norm."""
        step = self.env.agree_max(int(self.first_bad.item()))
        if step >= 0:
            raise TrainingError(f"non-finite loss or gradient norm at iter {step}; stopped, "
                                f"{checkpoint_kept(self.ckpt_path, 'last good')}")

    def summed(self, tensor):
        """A device tensor summed over every process, read on the host."""
        return self.env.all_reduce(tensor.clone()).item()

    def log(self, loss_sum, lr):
        """The step's log line (the one host sync of a logging step): its loss is the mean over its
        scored tokens, the time and throughput are those since the last line."""
        self.check_finite()
        dt = (time.time() - self.log_start) / self.log_iters
        # A collective: every process sums, whether the step scored a token or not.
        summed = self.summed(loss_sum)
        loss = math.nan
        if self.scored:
            loss = summed / self.scored
        share = None
        if self.counts_scored:
            share = self.log_scored / self.log_iters / self.tokens_per_iter
        line = progress(self.state.iter_num, self.config, loss, lr, dt, self.tokens_per_iter,
                        self.flops_per_token, self.peak, self.env, share)
        if self.warming:
            line += ", warm-up step included"
        self.env.print(line)

    def evaluate(self, lr):
        """Evaluate, save the latest checkpoint (and the best, where val_loss is the lowest yet) and
        log."""
        state = self.state
        # The loss read above waited for the device: the steps are done. The evaluation's own time
        # is left out: the clock restarts after it.
        self.clock_steps()
        train_loss = math.nan
        if state.loss_tokens:
            train_loss = self.summed(self.loss_sum) / state.loss_tokens
        self.loss_sum.zero_()
        state.loss_tokens = 0
        evals = eval_metrics(self.model, self.task, self.config["batch_size"], self.env,
                             self.chance)
        scores = {"iter": state.iter_num, "train_loss": train_loss, **evals}
        metrics = {**scores, "lr": lr, "tokens": state.tokens, "samples": state.samples,
                   "flops": state.flops, "time": round(state.train_time, 2)}
        # A nan val_loss (an evaluation that scored no token) is never the best.
        best = metrics["val_loss"] < state.best_val_loss
        if best:
            state.best_val_loss = metrics["val_loss"]
        self.history.append(metrics)
        self.save(best)
        shown = [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in scores.items()
                 if not isinstance(v, list)]
        self.env.print("eval " + ", ".join(shown))
        self.start_log_window()
        self.timed_from = time.time()

    def save(self, best=False):
        """metrics.jsonl, the best checkpoint, then the latest: a kill between them resumes from the
        latest, which redoes the evaluations after it. A collective (the loss sum is all-reduced)
        that never writes a poisoned checkpoint, and that every process leaves together, after the
        master's write (torchrun kills the rest 30 s after the first exits)."""
        self.check_finite()
        state = asdict(replace(self.state, loss_sum=self.summed(self.loss_sum)))
        self.env.master_does(lambda: self.write_files(state, best), "write the checkpoint")
        self.saved_at = time.time()

    def write_files(self, state, best):
        """metrics.jsonl, best.pt (where best), then ckpt.pt."""
        paths = [self.ckpt_path]
        if best:
            paths.insert(0, os.path.join(self.config["out_dir"], "best.pt"))
        write_metrics(os.path.join(self.config["out_dir"], "metrics.jsonl"), self.history)
        save_checkpoint(paths, self.model, self.optimizer, self.config, state)

    def clock_steps(self):
        """Add the steps' time since timed_from to train_time."""
        self.state.train_time += time.time() - self.timed_from
        self.timed_from = time.time()

    def out_of_memory(self):
        """The error a step out of memory ends in: what to try."""
        batch = self.config["batch_size"]
        accum = self.config["gradient_accumulation_steps"]
        hint = "a smaller model"
        if batch > 1:
            hint = f"--batch_size={batch // 2} --gradient_accumulation_steps={2 * accum}"
        return TrainingError(f"out of memory at batch_size={batch}: try {hint} (the same "
                             f"{accum * batch} sequences a step); "
                             f"{checkpoint_kept(self.ckpt_path, 'last')}")
