"""The model cache a visitor's model names fill (decoding.model_cache, decoding.models): least recently used
out, bounded in number and bytes, a model that cannot fit refused before any download (`.bin` weights too),
no load holding the lock other loads wait on, hub ids off at the operator's word, model ids of bounded
length. No download: the loads are the tiny models built in-process, or loaders the tests replace; the hub's
figures are replaced where a test needs them."""

import threading

import pytest
import torch

from decoding import model_budget, models
from decoding.model_budget import CACHE_MB_ENV, measured_bytes
from decoding.model_cache import MODELS_ENV, ModelCache
from decoding.models import HUB_ENV, MAX_MODEL_ID_CHARS, ModelLoadError, check_model_id, load_model
from decoding.run import generate

CPU = torch.device("cpu")
WAIT_S = 60  # generous: only reached when something is wrong


def linear(n: int) -> torch.nn.Module:
    return torch.nn.Linear(n, n, bias=False)  # n * n float32 parameters: 4 n^2 bytes


def cache_of(max_models=8, max_bytes=10**9, free=0) -> ModelCache:
    return ModelCache(max_models=lambda: max_models, max_bytes=lambda: max_bytes, free_bytes=lambda device: free,
                      error=ModelLoadError)


def get(cache, name, n=4, need=None, calls=None):
    def load(say):
        if calls is not None:
            calls.append(name)
        return linear(n)

    return cache.get((name,), load, label=name, device=CPU, need=lambda: need, size=measured_bytes)


@pytest.fixture
def fresh_cache(monkeypatch):
    """decoding.models with an empty cache of its own (the session's cached models stay untouched)."""
    cache = ModelCache(error=ModelLoadError)
    monkeypatch.setattr(models, "CACHE", cache)
    return cache


# ---------------------------------------------------------------------------- the cache itself


def test_the_least_recently_used_model_goes_first():
    cache = cache_of(max_models=2)
    a = get(cache, "a")
    get(cache, "b")
    assert get(cache, "a") is a  # a used again: b is now the least recently used
    get(cache, "c")
    assert cache.keys() == [("a",), ("c",)]


def test_the_byte_budget_drops_models_until_the_new_one_fits():
    cache = cache_of(max_bytes=3 * 400)  # three Linear(10, 10): 400 bytes each
    for name in "abc":
        get(cache, name, n=10)
    assert cache.total_bytes() == 1200
    get(cache, "d", n=10, need=400)  # room is made before loading
    assert cache.keys() == [("b",), ("c",), ("d",)] and cache.total_bytes() == 1200


def test_a_model_over_the_budget_is_refused_before_loading_and_after_measuring():
    cache, calls = cache_of(max_bytes=1000), []
    get(cache, "small", n=10)
    with pytest.raises(ModelLoadError, match=f"needs ~.* more than the .* loaded models \\({CACHE_MB_ENV}\\)"):
        get(cache, "estimated", need=5000, calls=calls)
    assert calls == [] and cache.keys() == [("small",)]  # not loaded, nothing dropped
    with pytest.raises(ModelLoadError, match=f"takes .* loaded, more than .*{CACHE_MB_ENV}"):
        get(cache, "measured", n=20, calls=calls)  # unknown before loading: 1600 bytes once loaded
    assert calls == ["measured"] and ("measured",) not in cache.keys()


def test_loads_in_flight_count_against_free_memory():
    cache, started, release = cache_of(free=1000), threading.Event(), threading.Event()

    def slow(say):
        started.set()
        release.wait(WAIT_S)
        return linear(4)

    first = threading.Thread(target=lambda: cache.get(("big",), slow, label="big", device=CPU, need=lambda: 800))
    first.start()
    try:
        assert started.wait(WAIT_S)
        with pytest.raises(ModelLoadError, match="only 200 MiB|only 0 MiB|beside the models loading now"):
            get(cache, "other", need=800)
    finally:
        release.set()
        first.join(WAIT_S)
    get(cache, "other", need=800)  # the first load is done: its reservation is released


def test_a_slow_load_does_not_stall_another_model_and_one_model_loads_once():
    cache, calls = cache_of(), []
    started, release, fast_done = threading.Event(), threading.Event(), threading.Event()

    def slow(say):
        calls.append("slow")
        started.set()
        release.wait(WAIT_S)
        return linear(4)

    results = {}
    waiters = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, cache.get(("slow",), slow, label="slow", device=CPU))) for i in range(2)]
    waiters[0].start()
    try:
        assert started.wait(WAIT_S)
        waiters[1].start()  # the same model: waits for the first load, does not load again
        fast = threading.Thread(target=lambda: (get(cache, "fast"), fast_done.set()))
        fast.start()
        assert fast_done.wait(WAIT_S), "another model's load waited for the slow one"
        assert not release.is_set() and waiters[0].is_alive()
    finally:
        release.set()
        for t in waiters:
            t.join(WAIT_S)
    assert calls == ["slow"] and results[0] is results[1]


def test_a_request_waiting_for_a_load_hears_its_progress():
    """Before: a request that found the model already loading (the app's preload, another visitor's first load)
    waited in silence for the whole download and conversion. Now it hears the line under way, then each new one."""
    cache = cache_of()
    started, release, said = threading.Event(), threading.Event(), threading.Event()
    heard: list[str] = []

    def slow(say):
        say("Downloading 10 of 93 MB, 2 s")
        started.set()
        release.wait(WAIT_S)
        say("Dequantising, 5 s")
        return linear(4)

    loader = threading.Thread(target=lambda: cache.get(("slow",), slow, label="slow", device=CPU))
    loader.start()
    assert started.wait(WAIT_S)

    def listen(line):
        heard.append(line)
        said.set()

    waiter = threading.Thread(target=lambda: cache.get(("slow",), slow, label="slow", device=CPU, say=listen))
    waiter.start()
    try:
        assert said.wait(WAIT_S) and heard == ["Downloading 10 of 93 MB, 2 s"]  # the line under way, at once
    finally:
        release.set()
        loader.join(WAIT_S)
        waiter.join(WAIT_S)
    assert heard == ["Downloading 10 of 93 MB, 2 s", "Dequantising, 5 s"]
    cache.get(("slow",), slow, label="slow", device=CPU, say=heard.append)  # cached: nothing more to hear
    assert len(heard) == 2


# ---------------------------------------------------------------------------- through decoding.models


def test_load_model_keeps_at_most_the_operators_number_of_models(fresh_cache, monkeypatch):
    monkeypatch.setenv(MODELS_ENV, "1")
    first = load_model("tiny-random", dtype="float32", progress=None)
    load_model("tiny-random-draft", dtype="float32", progress=None)
    assert [key[0] for key in fresh_cache.keys()] == ["tiny-random-draft"]
    assert load_model("tiny-random", dtype="float32", progress=None) is not first  # dropped, so loaded again


def test_load_model_does_not_hold_a_lock_while_loading(fresh_cache, monkeypatch):
    """Before: one lock around every load, so a slow hub download stalled every other model."""
    real, started, release = models._load_uncached, threading.Event(), threading.Event()

    def load_uncached(spec, *args):
        if spec.name == "tiny-random-draft":  # the slow one (a big download)
            started.set()
            release.wait(WAIT_S)
        return real(spec, *args)

    monkeypatch.setattr(models, "_load_uncached", load_uncached)
    slow = threading.Thread(target=load_model, args=("tiny-random-draft",), kwargs={"progress": None})
    slow.start()
    try:
        assert started.wait(WAIT_S)
        other = threading.Thread(target=load_model, args=("tiny-random",), kwargs={"progress": None})
        other.start()
        other.join(WAIT_S)
        assert not other.is_alive(), "tiny-random waited for the slow load"
        assert slow.is_alive()
    finally:
        release.set()
        slow.join(WAIT_S)
    assert sorted(key[0] for key in fresh_cache.keys()) == ["tiny-random", "tiny-random-draft"]


@pytest.fixture
def hub_figures(monkeypatch):
    """A reachable hub whose model `someone/weights-in-bin` has 10 GB of `.bin` weights in float32 and no
    safetensors metadata; any real load is a failure."""
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    monkeypatch.setattr(model_budget, "hub_offline_forced", lambda: False)
    monkeypatch.setattr(model_budget, "hub_parameter_count", lambda hub_id: None)
    monkeypatch.setattr(model_budget, "hub_weight_bytes", lambda hub_id: 10 * 10**9)
    monkeypatch.setattr(model_budget, "hub_stored_dtype", lambda hub_id: "float32")
    loads = []
    monkeypatch.setattr(models, "_load_uncached", lambda spec, *args: loads.append(spec.name))
    return loads


def test_bin_weights_are_checked_against_the_budget_before_download(fresh_cache, hub_figures, monkeypatch):
    """Before: no safetensors metadata meant no check at all, and the download began."""
    monkeypatch.setenv(CACHE_MB_ENV, "4000")
    with pytest.raises(ModelLoadError, match=r"someone/weights-in-bin needs ~10.7 GiB, more than the 3.7 GiB"):
        load_model("someone/weights-in-bin", dtype="float32", progress=None)
    assert hub_figures == []


def test_bin_weights_are_checked_against_free_memory_before_download(fresh_cache, hub_figures, monkeypatch):
    monkeypatch.setenv(CACHE_MB_ENV, "1000000")
    monkeypatch.setattr(fresh_cache, "free_bytes", lambda device: 2 * 2**30)
    with pytest.raises(ModelLoadError, match=r"needs ~5.4 GiB, but only 2.0 GiB is free on cpu"):
        load_model("someone/weights-in-bin", dtype="bfloat16", progress=None)  # half of float32's bytes
    assert hub_figures == []


def test_estimates_scale_with_the_stored_and_the_running_dtype(monkeypatch):
    monkeypatch.setattr(model_budget, "hub_offline_forced", lambda: False)
    monkeypatch.setattr(model_budget, "hub_parameter_count", lambda hub_id: None)
    monkeypatch.setattr(model_budget, "hub_weight_bytes", lambda hub_id: 2 * 10**9)
    monkeypatch.setattr(model_budget, "hub_stored_dtype", lambda hub_id: "float16")  # 1e9 parameters
    assert model_budget.estimate_hub_bytes("x/y", torch.float32) == int(1e9 * 4 * model_budget.OVERHEAD)
    monkeypatch.setattr(model_budget, "hub_parameter_count", lambda hub_id: 5 * 10**8)  # safetensors first
    assert model_budget.estimate_hub_bytes("x/y", torch.bfloat16) == int(5e8 * 2 * model_budget.OVERHEAD)


@pytest.mark.slow  # the real model tiny-ar
def test_a_shipped_model_folder_is_estimated_from_its_files():
    need = model_budget.estimate_folder_bytes(models.ASSETS_DIR / "tiny-ar", torch.float32)
    loaded = load_model("tiny-ar", dtype="float32", progress=None)
    assert 0.8 * measured_bytes(loaded.model) <= need <= 1.5 * measured_bytes(loaded.model)


@pytest.mark.parametrize("value", ["0", "-5", "lots", "inf"])
def test_a_bad_budget_names_its_variable(monkeypatch, value):
    monkeypatch.setenv(CACHE_MB_ENV, value)
    with pytest.raises(ValueError, match=f"environment variable {CACHE_MB_ENV}"):
        model_budget.budget_bytes()


# ---------------------------------------------------------------------------- which ids load at all


def test_hub_ids_off_leaves_the_registry(monkeypatch):
    monkeypatch.setenv(HUB_ENV, "0")
    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "someone/weights-in-bin"):
        with pytest.raises(ValueError, match=f"`model` '{name}': this app loads only its own models .*{HUB_ENV}=1"):
            list(generate(name, "hi", max_new_tokens=1))
    assert check_model_id("tiny-random") == "tiny-random"
    assert check_model_id("HuggingFaceTB/SmolLM2-135M-Instruct")  # a registry model asked for by its hub id
    with pytest.raises(ValueError, match=f"`lm-judge.judge_model` 'someone/judge'.*{HUB_ENV}=1"):
        list(generate("tiny-random", "hi", strategy="best-of-n",
                      params={"reward": "lm-judge", "judge_model": "someone/judge"}))
    with pytest.raises(ValueError, match=f"`prm.prm_model` 'Qwen/Qwen2.5-Math-PRM-7B'.*{HUB_ENV}=1"):
        list(generate("tiny-random", "hi", strategy="best-of-n", params={"reward": "prm"}))


@pytest.mark.parametrize("name", ["a/" + "b" * 10**6, "b" * 10**6, "openai:http://h/v1#" + "m" * 10**6,
                                  " " * 10 + "a/" + "b" * (MAX_MODEL_ID_CHARS - 1)])
def test_a_huge_model_id_gets_a_short_message(name):
    """Before: a 1M-character hub id came back in a 1,000,273-character message."""
    with pytest.raises(ValueError, match=f"too long for a model id: at most {MAX_MODEL_ID_CHARS} characters") as err:
        list(generate(name, "hi", max_new_tokens=1))
    assert len(str(err.value)) < 200


def test_hub_ids_longer_than_the_hubs_limit_are_refused():
    assert check_model_id("a" * 96 + "/" + "b" * 96)
    with pytest.raises(ValueError, match="unknown model"):
        check_model_id("a" * 97 + "/b")
