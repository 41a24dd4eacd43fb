"""The learner on several processes: ``torchrun`` + FSDP2, with world-size-free results.

``torchrun --nproc-per-node N -m gymhub.trainer ...`` (or ``gymhub train --nproc N``, which
re-launches itself that way, see :func:`launch`) runs N copies of the loop that differ only
in their rank. With ``WORLD_SIZE`` unset (or 1) :class:`Processes` is inert: every method
below returns its input or does nothing, and the single process trains exactly as it did
before any of this existed. The choices, and the failure each one avoids:

* **Process group.** gloo on the CPU, NCCL on GPUs (each process takes the GPU of its
  ``LOCAL_RANK``, before the model loads); every collective waits at most
  ``dist_timeout_s``, so a process that died or hangs ends the run with an error instead
  of a silent hang. Only the transformers engine is supported: a vLLM engine per rank
  would need a weight path from FSDP shards (rollout workers fed by ``WeightPush`` are
  that path).
* **Sharding.** FSDP2 ``fully_shard`` on each decoder layer (the classes the model names in
  ``_no_split_modules``, the Hugging Face convention), then on the root; LoRA and full
  fine-tuning alike (the frozen base weights are sharded with the adapters). Every rank
  builds the same initial weights from the seed, which :meth:`Processes.shard` checks
  (FSDP2 does not broadcast them). Gradients are *summed* across ranks, not averaged:
  each rank's loss is already divided by the whole step's counts (see
  :class:`~gymhub.trainer.losses.StepCounts`), so the sum is the gradient of the loss a
  single process computes on the whole batch.
* **Rollouts.** Each rank plays the step's groups ``r, r + N, r + 2N, ...`` (a GRPO group
  never splits, :meth:`Processes.my_tasks`). Generation makes as many forwards as its
  episodes need, a number that differs between ranks, while an FSDP forward all-gathers
  its layer's weights *with every rank*: a rank with one forward more would wait forever.
  So :meth:`Processes.gathered` all-gathers the weights once, on every rank together,
  and keeps them whole until the rollout ends; generating then needs no collective. The
  update's memory stays sharded; during generation each rank holds the full weights,
  which is what any rollout engine holds.
* **World-size invariance.** An episode's seeds (the environment's reset, every turn's
  sampling) derive from ``(seed, step, its task's position in the whole step, its sample
  index)`` (see :func:`~gymhub.trainer.rollout.run_group_batch`), never from the rank, and
  the engine samples each request from its own generator, whatever else shares its batch.
  The task order is the seeded sampler's, the same on every rank. After the rollout every
  rank gathers every trajectory, in index order (:meth:`Processes.gather`): advantages
  (``batch`` scaling, dynamic sampling), metrics and ``trajectories.jsonl`` are then made
  by the single-process code from the same list, so 1 and N processes log the same
  numbers and write the same file.
* **The update.** Every rank knows every kept row. Each optimizer step's rows (grouped as
  one process groups them) are dealt round-robin to the ranks (:meth:`Processes.share`),
  each rank cuts its share into micro-batches and adds zero-weight ones (:class:`Padding`)
  up to the busiest rank's count: every rank makes the same forwards and backwards, so the
  FSDP collectives line up. The update's forwards are the plain padded ones (the shared
  prompt tree of :mod:`.forward` makes a data-dependent number of forwards). The step's
  token and sequence counts are the global ones; update metrics are summed over ranks.
* **Checkpoints.** The full state dict is gathered to rank 0 (``cpu_offload``) and written
  once, by rank 0, in the single-process format (trainable tensors by name, optimizer
  state by parameter index): a checkpoint resumes on any number of processes, one
  included. Every rank reads it back (the directory must be visible to all: one machine,
  or a shared file system).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gymhub.errors import ConfigError

if TYPE_CHECKING:
    from .config import GRPOConfig

__all__ = ["Padding", "Processes", "launch", "launch_command", "should_launch"]

T = TypeVar("T")


class Padding(list):  # type: ignore[type-arg]
    """A micro-batch that only keeps this rank's collectives in step with the others'.

    It holds a real row (any will do: every rank has them all) so that its forward and
    backward touch every parameter as a real micro-batch does; its loss is multiplied by
    0, so it adds exact zeros to the gradient and nothing to the metrics.
    """


def should_launch(cfg: GRPOConfig, environ: Mapping[str, str] | None = None) -> bool:
    """``gymhub train`` must re-launch itself: ``nproc > 1`` and no launcher started it.

    A process torchrun started has ``WORLD_SIZE`` set: it never launches again.
    """
    env = os.environ if environ is None else environ
    return cfg.nproc > 1 and "WORLD_SIZE" not in env


def launch_command(nproc: int, args: Sequence[str]) -> list[str]:
    """The ``torch.distributed.run`` command that runs ``gymhub train ARGS`` on ``nproc`` ranks.

    ``--standalone`` picks a free rendezvous port on this machine, so two runs side by
    side do not collide. ``--nproc`` itself is left out of the ranks' arguments: they do
    not need it, and torchrun's parser would take it for an abbreviation of its own
    ``--nproc-per-node``/``--nproc_per_node`` and stop, ambiguous.
    """
    rest: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("--nproc",):
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "gymhub.trainer", *rest]


def launch(nproc: int, args: Sequence[str]) -> int:
    """Run :func:`launch_command` in a subprocess and return its exit status.

    A subprocess, not ``torch.distributed.run.main`` in this process: the launcher's
    signal handling and its report of a failed rank stay its own. On Ctrl-C the launcher
    is waited for (it stops its ranks), not killed, which would orphan them.
    """
    proc = subprocess.Popen(launch_command(nproc, args))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()


@dataclass
class Processes:
    """This process's place among the learner's processes; inert in a single process.

    Attributes:
        rank: this process's rank.
        world: how many processes train together.
        device: ``cpu``, or the GPU this rank uses.
        owns_group: the process group was started here (and :meth:`close` ends it).
    """

    rank: int = 0
    world: int = 1
    device: str = "cpu"
    owns_group: bool = False
    _fsdp: list[tuple[Any, bool]] = field(default_factory=list, repr=False)

    @property
    def active(self) -> bool:
        """More than one process."""
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, writes files and checkpoints."""
        return self.rank == 0

    @classmethod
    def from_env(cls, cfg: GRPOConfig) -> Processes:
        """Join the process group torchrun describes (``WORLD_SIZE``, ``RANK``, ...).

        Call it before the model loads: on GPUs it makes this rank's GPU the current one.

        Raises:
            ConfigError: an engine other than transformers, or a fixed ``cuda:N`` device,
                with several processes.
        """
        world = int(os.environ.get("WORLD_SIZE") or 1)
        if world <= 1:
            return cls()
        import datetime

        import torch
        import torch.distributed as dist

        if cfg.engine != "transformers":
            raise ConfigError(f"engine {cfg.engine!r} with several learner processes is not "
                              "supported: use engine = 'transformers' (or rollout workers)")
        if cfg.device.startswith("cuda:"):
            raise ConfigError(f"device {cfg.device!r} with several processes: each process "
                              "takes the GPU of its LOCAL_RANK; set device = 'cuda' or 'auto'")
        gpu = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        local = int(os.environ.get("LOCAL_RANK") or 0)
        device = "cpu"
        if gpu:
            torch.cuda.set_device(local)
            device = f"cuda:{local}"
        owns = False
        if not dist.is_initialized():
            dist.init_process_group("nccl" if gpu else "gloo",
                                    timeout=datetime.timedelta(seconds=cfg.dist_timeout_s))
            owns = True
        return cls(rank=dist.get_rank(), world=dist.get_world_size(), device=device,
                   owns_group=owns)

    def close(self) -> None:
        """End the process group if :meth:`from_env` started it."""
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owns_group = False

    # ------------------------------------------------------------ the model
    def shard(self, model: Any) -> Any:
        """Wrap ``model`` with FSDP2: each decoder layer, then the root (see module doc).

        Raises:
            RuntimeError: the ranks' initial trainable weights differ (every rank must
                build the same model from the same seed).
        """
        if not self.active:
            return model
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        self._check_same_weights(model)
        device = next(model.parameters()).device
        mesh = init_device_mesh(device.type, (self.world,))
        layers = _decoder_layers(model)
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
        # the root keeps its weights after forward (backward needs them at once): what
        # fully_shard chooses for a root by default, said explicitly to be restored later
        fully_shard(model, mesh=mesh, reshard_after_forward=False)
        self._fsdp = [(layer, True) for layer in layers] + [(model, False)]
        for module, _ in self._fsdp:
            # a plain sum: the losses are already divided by the global counts
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
        return model

    def _check_same_weights(self, model: Any) -> None:
        import torch

        with torch.no_grad():
            total = sum(float(p.double().sum()) for p in model.parameters() if p.requires_grad)
        sums = self.gather([total])
        if any(s != sums[0] for s in sums):
            raise RuntimeError(f"the processes start from different weights (checksums "
                               f"{sums}): every rank must build the model from the same seed")

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Hold the whole weights on every rank, so forwards need no collective.

        Every rank must enter together (the all-gather is one collective); inside, each
        rank may run any number of forwards. On exit each rank drops the gathered copy.
        """
        if not self.active or not self._fsdp:
            yield
            return
        # the root must know it is the root (FSDP does this at its first forward) before a
        # first explicit unshard; private in torch 2.13, hence the guard
        state = self._fsdp[-1][0]._get_fsdp_state()
        getattr(state, "_lazy_init", lambda: None)()
        try:
            for module, _ in self._fsdp:
                module.set_reshard_after_forward(False, recurse=False)
                module.unshard()
            yield
        finally:
            for module, after in self._fsdp:
                module.set_reshard_after_forward(after, recurse=False)
                module.reshard()

    # -------------------------------------------------------------- the data
    def my_tasks(self, n: int) -> list[int]:
        """Positions of the step's ``n`` tasks this rank plays: ``rank, rank + N, ...``."""
        return list(range(self.rank, n, self.world))

    def gather(self, items: list[T], key: Callable[[T], Any] | None = None) -> list[T]:
        """Every rank's ``items``, concatenated in rank order (then sorted by ``key``)."""
        if not self.active:
            return items
        import torch.distributed as dist

        parts: list[list[T] | None] = [None] * self.world
        dist.all_gather_object(parts, items)
        out = [x for part in parts for x in (part or [])]
        return sorted(out, key=key) if key is not None else out

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value``, on every rank."""
        if not self.active:
            return value
        import torch.distributed as dist

        box: list[Any] = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[no-any-return]

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums over the ranks (float64)."""
        if not self.active:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return [float(x) for x in t.tolist()]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.active:
            import torch.distributed as dist

            dist.barrier()

    def share(self, steps: Sequence[Sequence[Sequence[T]]],
              micro_batch_size: int) -> list[list[list[T]]]:
        """This rank's micro-batches of each optimizer step (see the module docstring).

        ``steps`` are the whole batch's optimizer steps, each a list of micro-batches, as
        one process makes them. A step's rows are dealt round-robin; this rank cuts its
        share into micro-batches of at most ``micro_batch_size`` and pads with
        :class:`Padding` to the count of the rank with the most.
        """
        if not self.active:
            return [list(map(list, s)) for s in steps]
        out = []
        for step in steps:
            rows = [r for m in step for r in m]
            most = max(math.ceil(len(rows[k:: self.world]) / micro_batch_size)
                       for k in range(self.world))
            mine = rows[self.rank:: self.world]
            micro: list[list[T]] = [mine[i: i + micro_batch_size]
                                    for i in range(0, len(mine), micro_batch_size)]
            micro += [Padding(rows[:1]) for _ in range(most - len(micro))]
            out.append(micro)
        return out

    # ---------------------------------------------------------- checkpoints
    def full_state(self, model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Trainable tensors by name and the optimizer state by index, whole, on rank 0.

        A collective: every rank calls it; the others get empty dicts. The optimizer
        state has the single-process layout (``optimizer.state_dict()``), so any number
        of processes can load it.
        """
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        names = _trainable_names(model)
        weights: dict[str, Any] = dict(get_model_state_dict(model, options=opts))
        optim = get_optimizer_state_dict(model, optimizer, options=opts)
        if not self.is_main:
            return {}, {}
        tensors = {n: weights[n].contiguous() for n in names}
        return tensors, _by_index(optim, names)

    def restorer(self, model: Any, optimizer: Any) -> Callable[[dict[str, Any], dict[str, Any]],
                                                               None] | None:
        """How :func:`~.checkpoint.load_checkpoint` loads full state into sharded parameters."""
        if not self.active:
            return None

        def restore(tensors: dict[str, Any], optim: dict[str, Any]) -> None:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
                set_optimizer_state_dict,
            )

            opts = StateDictOptions(full_state_dict=True, strict=False)
            set_model_state_dict(model, tensors, options=opts)
            set_optimizer_state_dict(model, optimizer, _by_name(optim, _trainable_names(model)),
                                     options=StateDictOptions(full_state_dict=True))
            for group in optimizer.param_groups:  # its round trip makes AdamW's betas a list
                for key, value in group.items():
                    if key != "params" and isinstance(value, list):
                        group[key] = tuple(value)

        return restore


def full_value(x: Any) -> Any:
    """A tensor that may be a DTensor (a sharded norm, say) as a whole local tensor."""
    return x.full_tensor() if hasattr(x, "full_tensor") else x


def _decoder_layers(model: Any) -> list[Any]:
    """The outermost modules of the classes ``model`` says must not be split.

    Hugging Face models list their decoder layer classes in ``_no_split_modules`` (peft
    wrappers forward the attribute). Without it the root alone is sharded.
    """
    wanted = set(getattr(model, "_no_split_modules", None) or ())
    found: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        if type(module).__name__ not in wanted or module is model:
            continue
        if any(name.startswith(outer + ".") for outer, _ in found):
            continue
        found.append((name, module))
    return [m for _, m in found]


def _trainable_names(model: Any) -> list[str]:
    """Names of the trainable parameters, in the optimizer's order."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _by_index(optim: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A full optimizer state keyed by parameter name -> ``optimizer.state_dict()``'s layout."""
    index = {n: i for i, n in enumerate(names)}
    return {
        "state": {index[n]: s for n, s in optim.get("state", {}).items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]}
                         for g in optim.get("param_groups", [])],
    }


def _by_name(optim: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`_by_index`."""
    return {
        "state": {names[int(i)]: s for i, s in optim.get("state", {}).items()},
        "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]}
                         for g in optim.get("param_groups", [])],
    }
