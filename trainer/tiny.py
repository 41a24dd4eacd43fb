"""Tiny models and tokenizers built locally, for smoke tests and benchmarks.

Nothing is downloaded: the tokenizer is trained in a few milliseconds on a small corpus
of the words echo-v0 uses, and the model is a randomly initialised two-layer Llama. They
exercise every code path of the learner (chat templates with tools, generation, LoRA,
updates) at a cost a CPU test suite can afford.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHATML_TOOLS",
    "CORPUS",
    "LOOK",
    "build_model",
    "build_tokenizer",
    "echo_lessons",
    "save_tiny",
    "teach",
]

#: A canonical echo-v0 turn: it calls ``look``, so an episode lasts until ``max_turns``.
LOOK = 'Let me look. <tool_call>{"name": "look", "arguments": {}}</tool_call>'

#: A ChatML template that renders tool specs and tool calls (Qwen/Hermes style).
CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "Tools:{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}<|im_end|>\n"
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>"
    "{{ {'name': c.name, 'arguments': c.arguments} | tojson }}</tool_call>{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Text the tiny tokenizer is trained on.
CORPUS = [
    'Repeat the user\'s word with the submit tool. <tool_call>{"name": "submit", '
    '"arguments": {"answer": "apple-0"}}</tool_call> Submitted. Score: 1',
    "apple river stone cloud ember maple orbit quartz tulip zephyr look submit answer",
    "No tool call found. Call one of: look, submit. Invalid action tool user system assistant",
    '{"type": "function", "function": {"name": "look", "description": "Show the word again.", '
    '"parameters": {"type": "object", "properties": {}, "required": []}}}',
    "0123456789 - _ : , . ! ? ( ) [ ] { } \" ' \n",
]


def build_tokenizer() -> Any:
    """A 400-token byte-level BPE tokenizer with a ChatML chat template that renders tools."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHATML_TOOLS
    return fast


def build_model(vocab_size: int, seed: int = 0) -> Any:
    """A 2-layer Llama with hidden size 64, initialised from ``seed``, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()  # type: ignore[no-untyped-call]


def echo_lessons(tokenizer: Any, tasks: int = 2) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, answer ids)`` pairs: echo-v0's first prompts answered with :data:`LOOK`.

    The answer is the tokenizer's own encoding of the text plus the end-of-turn id, so a
    model that reproduces it samples exactly what a render of the transcript tokenises to.
    """
    from gymhub.envs import make

    from .chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    answer = [*tokenizer.encode(LOOK, add_special_tokens=False), renderer.end_of_turn_id]
    env = make("echo-v0")
    pairs = []
    for i in range(tasks):
        obs, info = env.reset(options={"task_id": f"echo-{i:04d}"})
        pairs.append((renderer.prompt_ids(obs, info["tools"]), list(answer)))
    env.close()
    return pairs


def teach(
    model: Any, pairs: list[tuple[list[int], list[int]]], *, steps: int = 50, lr: float = 1e-2
) -> Any:
    """Fit ``model`` to answer each prompt with its answer (teacher forcing, Adam).

    A random tiny model samples arbitrary byte-level tokens, which a decode and
    re-encode does not reproduce, so its episodes always "drift" from a full render.
    A few dozen steps on canonical answers make its greedy turns canonical text, which
    is what a test or benchmark of the drift check needs. Returns the model, in eval mode.
    """
    import torch

    width = max(len(p) + len(a) for p, a in pairs)
    ids = torch.zeros((len(pairs), width), dtype=torch.long)
    attn = torch.zeros((len(pairs), width), dtype=torch.long)
    target = torch.zeros((len(pairs), width - 1))
    for row, (prompt, answer) in enumerate(pairs):
        seq = prompt + answer
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
        target[row, len(prompt) - 1 : len(seq) - 1] = 1
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        loss = -(logp * target).sum() / target.sum()
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    return model.eval()


def save_tiny(directory: str, seed: int = 0) -> None:
    """Write a tiny model and its tokenizer as a local model directory.

    ``gymhub train --model DIR`` loads local directories only, so this is how a reader
    tries the whole learner in seconds without a model download.
    """
    tokenizer = build_tokenizer()
    build_model(len(tokenizer), seed=seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python -m gymhub.trainer.tiny DIR   (writes a tiny model + tokenizer)")
    save_tiny(sys.argv[1])
