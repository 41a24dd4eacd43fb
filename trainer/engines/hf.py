"""A transformers engine: batched sampling with a KV cache, on the CPU or one GPU.

It runs the trainer's own model object (colocated, no copy), so a weight update is a
version bump. The decode loop is written out rather than delegated to
``model.generate`` because the learner needs exactly what it sampled with: the
log-probability of each sampled id under the tempered distribution, per-request seeds
(a sample must not depend on which other episodes share its batch, or a resumed run
would not reproduce), and per-request token limits.

Requests that name a ``session`` (one episode) reuse the KV cache the engine kept from
that episode's previous turn, so a turn prefills only what was appended since (see
:mod:`.session_cache`); ``cross_turn_cache=False`` turns this off for comparison and
debugging. Either way the sampled ids and their log-probabilities are the engine's
own, and the rollout's drift check compares every episode with a full render.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..hf_compat import cache_keyword, cache_of, last_logits_keyword
from .base import Completion, GenerationRequest, SamplingConfig
from .masks import StepMasks, additive_mask, prebuilt_masks_apply
from .prefix_share import prefix_groups
from .sampling import draw_uniforms, sample_rows
from .session_cache import (
    CachedPrefix,
    SessionCaches,
    batch_cache,
    plain_layers,
    view_row,
)

if TYPE_CHECKING:
    import torch

__all__ = ["TransformersEngine"]

_STOP_TAIL_TOKENS = 32


class TransformersEngine:
    """Generate with a ``transformers`` causal LM (or a peft wrapper of one).

    Args:
        model: the policy; the engine and the trainer share it.
        tokenizer: needed only for stop strings (to decode the tail of a sequence).
        pad_token_id: id used to left-pad prompts; its value never matters to outputs.
        seed: base seed for requests that carry none.
        max_batch_size: requests generated together at most.
        cross_turn_cache: keep each session's KV cache between its turns (see
            :mod:`.session_cache`); off, every call prefills its whole prompt.
        max_cached_sessions: sessions whose caches are kept at most (least recently
            used dropped first).
        share_prefixes: prefill the common start of a batch's alike prompts once (see
            :mod:`.prefix_share`).
        reserve_room: decode into a cache with the steps' columns reserved, written in
            place, instead of copying the whole cache every step (see :mod:`.kv_room`).
        prebuilt_masks: hand the model each forward's attention mask in the additive
            form SDPA uses, built once, where that is exactly what the model would
            build (see :mod:`.masks`); off, the model builds it from the 2-D mask.
        grouped_attention: in a prefill with a mask, let torch's SDPA group the query
            heads of a grouped-query model instead of repeating the cache's key and
            value heads (see :mod:`.gqa`; bit-identical outputs).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        pad_token_id: int = 0,
        seed: int = 0,
        max_batch_size: int = 64,
        cross_turn_cache: bool = True,
        max_cached_sessions: int = 256,
        share_prefixes: bool = True,
        reserve_room: bool = True,
        prebuilt_masks: bool = True,
        grouped_attention: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pad_token_id = pad_token_id
        self.seed = seed
        self.max_batch_size = max_batch_size
        self.policy_version = 0
        self._calls = 0
        self._cache_kw = cache_keyword(model)
        self._last_logits = last_logits_keyword(model)
        self.cross_turn_cache = cross_turn_cache
        self.caches = SessionCaches(max_cached_sessions)
        self.share_prefixes = share_prefixes
        self.reserve_room = reserve_room
        self.prebuilt_masks = prebuilt_masks and prebuilt_masks_apply(model)
        self._mask_dtype: Any = None  # set by each generate call (see there)
        self.grouped_attention = grouped_attention and _plain_sdpa(model)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """Continue each request; see :class:`~gymhub.trainer.engines.base.Engine`."""
        import torch

        if sampling.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine to have a tokenizer")
        out: list[Completion] = []
        # the dtype the attention runs in, for the prebuilt masks: looked up once per call
        # (through a peft wrapper that is a chain of attribute forwards)
        self._mask_dtype = self.model.get_input_embeddings().weight.dtype
        was_training = bool(getattr(self.model, "training", False))
        if was_training:  # eval() walks every module; a model in eval mode needs no walk
            self.model.eval()
        try:
            # no_grad, not inference_mode: measured side by side on the tiny model's decode
            # (8 x 64 tokens, quiet machine, 1 and 2 threads) inference_mode saved ~1 %, and
            # its tensors could not be touched by a later grad-mode forward (a buffer a
            # model builds lazily during generation would break the update)
            with torch.no_grad(), self._attention():
                for i in range(0, len(requests), self.max_batch_size):
                    out.extend(self._batch(requests[i : i + self.max_batch_size], sampling))
        finally:
            if was_training:
                self.model.train()
        return out

    def _attention(self) -> contextlib.AbstractContextManager[None]:
        """The model's attention while the engine runs it (see :mod:`.gqa`).

        Checked at every call: a model switched to another attention since the engine was
        built keeps it.
        """
        if not self.grouped_attention or not _plain_sdpa(self.model):
            return contextlib.nullcontext()
        from .gqa import engine_attention

        return engine_attention(self.model)

    def _generators(self, requests: Sequence[GenerationRequest]) -> list[torch.Generator]:
        import torch

        gens = []
        for r in requests:
            self._calls += 1
            seed = r.seed if r.seed is not None else self.seed * 1_000_003 + self._calls
            gens.append(torch.Generator().manual_seed(int(seed) % (2**63)))
        return gens

    def _take(
        self, requests: Sequence[GenerationRequest]
    ) -> list[tuple[CachedPrefix | None, int]]:
        """Each request's cached prefix and how many of its tokens to reuse."""
        if not self.cross_turn_cache:
            return [(None, 0)] * len(requests)
        return [
            self.caches.take(r.session, r.prompt_ids, self.policy_version)
            if r.session is not None
            else (None, 0)
            for r in requests
        ]

    def _batch(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        taken = self._take(requests)
        try:
            return self._decode(requests, sampling, taken)
        except BaseException:
            for r in requests:
                if r.session is not None and self.cross_turn_cache:
                    self.caches.untake(r.session)
            raise

    def _decode(
        self,
        requests: Sequence[GenerationRequest],
        sampling: SamplingConfig,
        taken: list[tuple[CachedPrefix | None, int]],
    ) -> list[Completion]:
        """Prefill what no cache holds, then decode the batch in lockstep.

        Columns of the batch: each row's cached prefix left-padded to the widest one,
        then its uncached suffix (all as long as the longest, see :func:`_refeed`; a
        row with no cache is left-padded), then one column per decode step. ``attn``
        marks the columns a row really fed (padding and the steps after a row finished
        are 0), which is also what :meth:`_keep` cuts back out.
        """
        import torch

        device = next(self.model.parameters()).device
        b = len(requests)
        if min((len(r.prompt_ids) for r in requests), default=1) < 1:
            raise ValueError("every request needs at least one prompt token")
        self._share_prefixes(requests, taken, device)
        _refeed(requests, taken)
        reuse = [n for _, n in taken]
        past_w = max(reuse, default=0)
        suffixes = [list(r.prompt_ids[n:]) for r, n in zip(requests, reuse, strict=True)]
        width = max(len(s) for s in suffixes)
        ids = torch.full((b, width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((b, past_w + width), dtype=torch.long)
        pos = torch.zeros((b, width), dtype=torch.long)
        for row, (suffix, n) in enumerate(zip(suffixes, reuse, strict=True)):
            start = width - len(suffix)
            ids[row, start:] = torch.tensor(suffix, dtype=torch.long)
            pos[row, start:] = torch.arange(n, n + len(suffix), dtype=torch.long)
            attn[row, past_w - n : past_w] = 1
            attn[row, past_w + start :] = 1
        ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
        steps = max((r.max_tokens for r in requests), default=0)
        room = width + steps if self.reserve_room else 0
        past, logits = self._prefill(requests, ids, attn, pos, taken, past_w, room=room)
        taken.clear()  # the batch cache is now the only copy of the prefixes
        if self.reserve_room:
            from .kv_room import reserve_room

            reserve_room(past, steps)
        gens = self._generators(requests)  # also for greedy calls: it numbers the requests
        uniforms = None if sampling.temperature <= 0 else draw_uniforms(gens, steps)
        masks = StepMasks(attn, steps, self._mask_dtype if self.prebuilt_masks else None)
        stop_ids = set(sampling.stop_token_ids)
        gen_ids: list[list[int]] = [[] for _ in range(b)]
        gen_lp: list[list[float]] = [[] for _ in range(b)]
        fed = [0] * b
        reasons: list[str | None] = [None if r.max_tokens > 0 else "length" for r in requests]
        last_pos = pos[:, -1:]
        everyone = list(range(b))
        for step in range(steps):
            rows = [row for row in everyone if reasons[row] is None]
            whole = len(rows) == b
            u = None if uniforms is None else (uniforms[:, step] if whole
                                               else uniforms[rows, step])
            drawn = sample_rows(logits if whole else logits[rows], sampling.temperature,
                                sampling.top_p, u)
            tokens = [self.pad_token_id] * b
            for row, (tok, lp) in zip(rows, drawn, strict=True):
                tokens[row] = tok
                gen_ids[row].append(tok)
                gen_lp[row].append(lp)
                if tok in stop_ids or self._hit_stop_string(gen_ids[row], sampling.stop):
                    reasons[row] = "stop"
                elif len(gen_ids[row]) >= requests[row].max_tokens:
                    reasons[row] = "length"
            if all(r is not None for r in reasons):
                break
            for row in rows:
                fed[row] += 1
            mask = masks.feed(None if whole else rows)
            last_pos = last_pos + 1
            result = self.model(
                input_ids=torch.tensor(tokens, device=device)[:, None],
                attention_mask=mask,
                position_ids=last_pos,
                use_cache=True,
                **{self._cache_kw: past},
                **self._last_logits,
            )
            past = cache_of(result)
            logits = result.logits[:, -1, :].float()
        attn = masks.attn
        self._keep(requests, past, attn, [g[:n] for g, n in zip(gen_ids, fed, strict=True)])
        return [
            Completion(
                token_ids=gen_ids[row],
                logprobs=gen_lp[row],
                finish_reason="stop" if reasons[row] == "stop" else "length",
            )
            for row in range(b)
        ]

    def _share_prefixes(
        self,
        requests: Sequence[GenerationRequest],
        taken: list[tuple[CachedPrefix | None, int]],
        device: Any,
    ) -> None:
        """Give requests that no cache covers one prefill of each common start."""
        fresh = [row for row, (_, n) in enumerate(taken) if n == 0]
        if self.share_prefixes and len(fresh) >= 2:
            self._prefix_node(requests, taken, fresh, 0, None, device)

    def _prefix_node(
        self,
        requests: Sequence[GenerationRequest],
        taken: list[tuple[CachedPrefix | None, int]],
        rows: list[int],
        depth: int,
        entry: CachedPrefix | None,
        device: Any,
    ) -> None:
        """Below a shared start of ``depth`` tokens (``entry``), share what ``rows`` share.

        A prefix tree, as in the update (:mod:`gymhub.trainer.forward`): the system prompt
        common to every task once, then each database's schema once on top of it; each
        row takes the deepest start it shares.
        """
        import torch

        rest = [requests[row].prompt_ids[depth:] for row in rows]
        for members, n in prefix_groups(rest):
            sub = [rows[i] for i in members]
            ids = list(requests[sub[0]].prompt_ids[: depth + n])
            kwargs: dict[str, Any] = dict(self._last_logits)
            if entry is not None:
                kwargs[self._cache_kw] = batch_cache([(entry, depth)], depth)
            result = self.model(input_ids=torch.tensor([ids[depth:]], device=device),
                                position_ids=torch.arange(depth, depth + n, device=device)[None],
                                use_cache=True, **kwargs)
            layers = plain_layers(cache_of(result))
            if layers is None:  # a cache that cannot be cut and reused: no sharing, ever
                self.share_prefixes = False
                return
            child = CachedPrefix(ids, [layer.keys for layer in layers],
                                 [layer.values for layer in layers], self.policy_version)
            for row in sub:
                taken[row] = (child, min(depth + n, len(requests[row].prompt_ids) - 1))
            self._prefix_node(requests, taken, sub, depth + n, child, device)

    def _prefill(
        self,
        requests: Sequence[GenerationRequest],
        ids: torch.Tensor,
        attn: torch.Tensor,
        pos: torch.Tensor,
        taken: list[tuple[CachedPrefix | None, int]],
        past_w: int,
        share: bool = True,
        room: int = 0,
    ) -> tuple[Any, torch.Tensor]:
        """The batch's cache and last-position logits after its prompts.

        Requests with the same whole prompt and the same cached prefix, or none (a GRPO
        group's samples of one task), are prefilled once; their rows of the cache are
        copies of it. Each still samples with its own seed, and the logits are those of
        the same forward.
        """
        import torch

        first: dict[tuple[Any, ...], int] = {}
        rows: list[int] = []  # the rows prefilled
        expand: list[int] = []  # for each request, its prefilled row's index in ``rows``
        for row, (r, (entry, n)) in enumerate(zip(requests, taken, strict=True)):
            key = (id(entry) if n else 0, n, *r.prompt_ids)
            if share and key in first:
                expand.append(first[key])
                continue
            first[key] = len(rows)
            expand.append(len(rows))
            rows.append(row)
        shared = len(rows) < len(requests)
        full, taken_all = (ids, attn, pos), taken
        if shared:
            index = torch.tensor(rows, device=ids.device)
            ids, attn, pos = ids[index], attn[index], pos[index]
            taken = [taken[row] for row in rows]
        kwargs: dict[str, Any] = dict(self._last_logits)
        if past_w > 0:
            kwargs[self._cache_kw] = batch_cache(taken, past_w, room)
        result = self.model(
            input_ids=ids, attention_mask=self._mask(attn, ids.shape[1]), position_ids=pos,
            use_cache=True, **kwargs
        )
        past = cache_of(result)
        logits = result.logits[:, -1, :].float()
        if shared:
            if not hasattr(past, "batch_select_indices"):  # a legacy cache: no sharing
                return self._prefill(requests, *full, taken_all, past_w, share=False, room=room)
            spread = torch.tensor(expand, device=logits.device)
            past.batch_select_indices(spread)
            logits = logits[spread]
        return past, logits

    def _keep(
        self,
        requests: Sequence[GenerationRequest],
        past: Any,
        attn: torch.Tensor,
        fed: list[list[int]],
    ) -> None:
        """Store each session's cache: the columns its row fed, compacted."""
        if not self.cross_turn_cache:
            return
        sessions = [(row, r.session) for row, r in enumerate(requests) if r.session is not None]
        if not sessions:
            return
        layers = plain_layers(past)
        if layers is None:  # not cacheable (see plain_layers): run without it from now on
            self.cross_turn_cache = False
            for _, session in sessions:
                self.caches.untake(session)
            self.caches.clear()
            return
        counts = attn.sum(dim=1).tolist()
        firsts = attn.argmax(dim=1).tolist()
        lasts = (attn.shape[1] - 1 - attn.flip(1).argmax(dim=1)).tolist()
        for row, session in sessions:
            prefix = [*requests[row].prompt_ids, *fed[row]]
            # a row's columns are one run (see _refeed); anything else would be an
            # internal inconsistency, and such a cache is never reused
            if len(prefix) != counts[row] or lasts[row] - firsts[row] + 1 != counts[row]:
                self.caches.untake(session)
                continue
            keys, values = view_row(layers, row, firsts[row], lasts[row] + 1)
            self.caches.put(
                session, CachedPrefix(prefix, keys, values, version=self.policy_version)
            )

    def _mask(self, attn: torch.Tensor, queries: int) -> torch.Tensor:
        """The mask a forward gets: additive and 4-D where :mod:`.masks` applies."""
        if not self.prebuilt_masks:
            return attn
        return additive_mask(attn, queries, self._mask_dtype)

    def _hit_stop_string(self, ids: list[int], stops: Sequence[str]) -> bool:
        if not stops:
            return False
        tail = self.tokenizer.decode(ids[-_STOP_TAIL_TOKENS:], skip_special_tokens=False)
        return any(s in tail for s in stops)

    def release(self, session: str) -> None:
        """Free ``session``'s KV cache (the rollout calls this when an episode ends)."""
        self.caches.release(session)

    def update_weights(self, model: Any) -> None:
        """Colocated: the engine runs the trainer's model, so only the version moves.

        Cached keys and values were computed with the old weights: all are dropped.
        """
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())
        self.caches.clear()
        self.policy_version += 1

    def weights_replaced(self, version: int) -> None:
        """A weight receiver loaded policy ``version`` into :attr:`model` in place.

        A rollout worker's engine does not count its own updates: it takes the
        learner's version number, so every turn it samples is tagged with the version
        whose weights produced it. Cached keys and values came from older weights and
        are dropped, as in :meth:`update_weights`.
        """
        self.caches.clear()
        self.policy_version = version

    def sleep(self) -> None:
        """Drop the sessions' KV caches; the model is shared with the trainer."""
        self.caches.clear()

    def wake_up(self) -> None:
        """See :meth:`sleep`."""


def _plain_sdpa(model: Any) -> bool:
    """SDPA attention on a config without sub-configs (see :mod:`.gqa`).

    Setting a config's attention implementation sets its sub-configs' too (a vision
    tower's, say), and setting it back would not restore theirs where they differed.
    """
    config = getattr(model, "config", None)
    return (getattr(config, "_attn_implementation", None) == "sdpa"
            and not getattr(config, "sub_configs", None))


def _refeed(
    requests: Sequence[GenerationRequest], taken: list[tuple[CachedPrefix | None, int]]
) -> None:
    """Shorten reuse so that every row's new part is as long as the longest one.

    A row whose uncached suffix is shorter than the batch's longest would otherwise be
    left-padded between its cached prefix and its suffix: a hole that every decode step
    attends over (or that would have to be copied away). Re-feeding the end
    of its cached prefix instead costs nothing: the padded columns are computed in the
    same batched forward either way. Its real columns are then one run, ending at the
    batch's last column.
    """
    width = max(len(r.prompt_ids) - n for r, (_, n) in zip(requests, taken, strict=True))
    for row, (r, (entry, n)) in enumerate(zip(requests, taken, strict=True)):
        short = width - (len(r.prompt_ids) - n)
        if n and short:
            taken[row] = (entry, max(n - short, 0))
