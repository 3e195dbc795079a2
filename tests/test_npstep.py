"""The NumPy decoder step (molspec_core/npstep.py) computes what the torch lean call computes.

The decoders' exactness tests (test_decoding.py, test_speculative_beam.py) run on both engines; here
the call itself is pinned: logits, cross-attention, the keys/values it leaves in the cache.
"""
import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from conftest import needs_native, on_engine, random_model, random_sources
from molspec_core.decoding.batch import pad_sources, start
from molspec_core.decoding.greedy import greedy
from molspec_core.drafting import make_drafter
from molspec_core.model import NUMPY_BLAS, Seq2SeqTransformer, preset
from molspec_core import npstep
from molspec_core.native import native_unavailable
from molspec_core.npstep import NumpyStep
from molspec_core.service import Predictor, rest_after_miss
from molspec_core.tokenizer import PAD_ID


def one_call(model, sources, lengths, tokens, keep, fill_lean=False):
    """A cache for `sources` with rows cut to `lengths`, one decoder call of `tokens` (B, 1, T) with
    cross-attention, commit of `keep` tokens per row, and one more call; everything it produced.
    The prefixes are filled the slow, general way, unless fill_lean (a model that has no other)."""
    with torch.inference_mode():
        cache, _ = start(model, sources, None, padding=max(map(len, sources)) + tokens.shape[-1] + 8)
        for _ in range(max(lengths)):
            model.decode(torch.full((len(sources), 1, 1), 5), cache, lean=fill_lean)
            cache.commit(torch.ones(len(sources), dtype=torch.long))
        cache.rollback(torch.tensor(lengths))
        logits, weights = model.decode(tokens, cache, cross_attention=True)
        pending = cache.layers[0].pending_keys.clone()
        cache.commit(torch.tensor(keep))
        after, _ = model.decode(tokens[:, :, :1], cache)
        slots = [layer.keys.clone() for layer in cache.layers]
        return logits, weights, pending, after, slots, cache.lengths.clone()


@pytest.fixture(params=["fbgemm-fp16", "openblas"])
def kernel(request, monkeypatch) -> str:
    """The products' kernel the NumPy step is built with: FBGEMM's fp16-weight one where this CPU runs
    it (the shipped models' case), and OpenBLAS (any CPU; weights not exact in float16)."""
    if request.param == "fbgemm-fp16" and not npstep.fp16_kernel_available():
        pytest.skip("this torch or CPU has no FBGEMM fp16-weight kernel (needs x86 with AVX2)")
    if request.param == "openblas":
        monkeypatch.setattr(npstep, "fp16_kernel_available", lambda: False)
    return request.param


@pytest.mark.parametrize("lengths", [[3, 3, 3], [2, 5, 4]], ids=["same-length", "ragged"])
@pytest.mark.parametrize("t_new", [1, 4, 50])  # 50: 150 rows, past npstep.PACKED_MAX_ROWS
def test_numpy_step_equals_the_torch_lean_call(lengths, t_new, kernel):
    sources = random_sources(4, 3, 14, 3, 12)  # different lengths: source padding is masked
    tokens = torch.tensor(random_sources(5, 3, 14, t_new, t_new)).unsqueeze(1)  # (3, 1, T)
    keep = [t_new, 1, max(t_new - 1, 0)]
    torch_run = one_call(random_model(3), sources, lengths, tokens, keep)
    fast = random_model(3, engine="numpy")
    assert fast.numpy_step.packed == (kernel == "fbgemm-fp16")
    numpy_run = one_call(fast, sources, lengths, tokens, keep)
    for name, a, b in zip(("logits", "cross-attention", "pending keys", "next logits"), torch_run, numpy_run):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, atol=1e-5), name
    for a, b, row_length in zip(torch_run[4], numpy_run[4], [torch_run[5]] * len(torch_run[4])):
        for row, n in enumerate(row_length.tolist()):  # the slots each row really has; others are never read
            assert torch.allclose(a[row, :, :n], b[row, :, :n], atol=1e-5)
    assert torch.equal(torch_run[5], numpy_run[5])


def assert_same_encoder(plain, fast, sources) -> None:
    """`fast` encodes `sources` as `plain` does, and makes the same cross-attention keys/values."""
    with torch.inference_mode():
        src = pad_sources(sources)
        keep = src != PAD_ID
        memory, fast_memory = plain.encode(src), fast.encode(src)
        assert fast_memory.shape == memory.shape
        assert torch.allclose(fast_memory[keep], memory[keep], atol=1e-5)  # pad positions are never read
        for a, b in zip(plain.new_cache(memory, keep, 8).layers, fast.new_cache(memory, keep, 8).layers):
            assert b.cross_keys.is_contiguous() and b.cross_values.is_contiguous()
            assert torch.allclose(a.cross_keys, b.cross_keys, atol=1e-5)
            assert torch.allclose(a.cross_values, b.cross_values, atol=1e-5)


@pytest.mark.parametrize("n_sources", [1, 3])  # 3: padded rows, masked
def test_numpy_encoder_and_cross_keys_equal_torch(n_sources, kernel):
    sources = random_sources(8, n_sources, 14, 3, 60)  # up to 180 rows: both sides of PACKED_MAX_ROWS
    assert_same_encoder(random_model(3), random_model(3, engine="numpy"), sources)


def test_training_never_takes_the_numpy_path():
    model = random_model(3, engine="numpy").train()
    src = torch.tensor([[5, 6, 7, 8]])
    assert model.encode(src).requires_grad  # torch's graph, so gradients flow


def test_fp16_kernel_only_for_weights_exact_in_float16():
    """Weights that float16 would round (a model trained or loaded in float32) keep OpenBLAS, so the
    step never computes with weights other than the model's."""
    model = random_model(3)
    with torch.no_grad():
        model.decoder[0].ff.up.weight[0, 0] += 1e-4  # no longer a float16 value
    model.use_numpy_step()
    assert not model.numpy_step.packed
    assert npstep.fp16_exact(random_model(3).embed.weight) and not npstep.fp16_exact(torch.tensor([0.1]))


def test_shipped_models_take_the_fp16_kernel():
    if not npstep.fp16_kernel_available():
        pytest.skip("this torch or CPU has no FBGEMM fp16-weight kernel (needs x86 with AVX2)")
    assert Predictor.load("retro", "cpu").model.numpy_step.packed


def test_decoders_really_take_the_numpy_step(copy_model, monkeypatch):
    """Greedy and speculative calls go through NumpyStep when it is on, and never when it is off."""
    calls = []
    original = NumpyStep.__call__
    monkeypatch.setattr(NumpyStep, "__call__", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    model, vocab = copy_model
    sources = random_sources(2, 5, len(vocab), 4, 12)
    for name, length in (("none", 0), ("pointer", 8)):
        assert greedy(model, sources, lambda s: make_drafter(name, s, length, 1)) is not None
    assert not calls
    fast = on_engine(model, "numpy")
    results = [greedy(fast, [s], lambda s: make_drafter("pointer", s, 8, 1))[0] for s in sources]
    assert len(calls) == sum(r.stats.model_calls for r in results) > 0  # every call of a lone query


@pytest.mark.parametrize("engine", ["numpy", pytest.param("native", marks=needs_native)])
def test_position_limit_is_kept(engine):
    torch.manual_seed(0)
    model = on_engine(Seq2SeqTransformer(preset("tiny", 14, max_positions=12)).eval(), engine)
    with torch.inference_mode():
        src = torch.tensor([[5, 6, 7]])
        cache = model.new_cache(model.encode(src), src != PAD_ID, capacity=20)
        cache.lengths = torch.tensor([10])
        with pytest.raises(ValueError, match="positions"):
            model.decode(torch.full((1, 1, 3), 5), cache)
        assert model._in_place(cache, 1, 3) is not None  # the lean call, so the NumPy or C step, refused it


def test_only_float32_cpu_models():
    with pytest.raises(ValueError, match="float32 models on CPU"):
        random_model(0).half().use_numpy_step()


def blas_thread_counts() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_numpy_blas_threads_follow_torch_in_the_numpy_steps_only(copy_model, monkeypatch):
    """use_numpy_step held NumPy's BLAS to torch's thread count for the whole process (a plain threadpool_limits
    call), an embedding program's own NumPy work included; it is held in MolSpec's NumPy step calls only."""
    seen = []
    for name in ("encode", "cross_keys_values_of", "__call__"):
        original = getattr(NumpyStep, name)
        monkeypatch.setattr(NumpyStep, name, lambda self, *a, _original=original, **k: seen.append(
            blas_thread_counts()) or _original(self, *a, **k))
    model, vocab = copy_model
    before = torch.get_num_threads()
    try:
        with threadpool_limits(2, user_api="blas"):  # the embedding program's own setting
            torch.set_num_threads(1)
            fast = on_engine(model, "numpy")
            assert blas_thread_counts() == {2}
            greedy(fast, random_sources(2, 2, len(vocab), 4, 8), lambda s: make_drafter("none", s, 0, 1))
            assert len(seen) > 3 and all(counts == {1} for counts in seen), seen
            assert blas_thread_counts() == {2}
    finally:
        torch.set_num_threads(before)


def test_overlapping_numpy_steps_give_the_blas_threads_back_once_the_last_ends():
    """Concurrent decodes (one model serves every session) overlap their steps: the first to end gave the setting
    back under the others."""
    with threadpool_limits(2, user_api="blas"):
        with NUMPY_BLAS.held(1):
            with NUMPY_BLAS.held(1):
                assert blas_thread_counts() == {1}
            assert blas_thread_counts() == {1}  # the first step still computes
        assert blas_thread_counts() == {2}
        with NUMPY_BLAS.held(None):  # a model without the NumPy step leaves them be
            assert blas_thread_counts() == {2}


def test_predictor_engines():
    auto = Predictor.load("retro", "cpu").engine
    assert auto == ("native" if native_unavailable() is None else "numpy")  # auto: C on CPU where it builds, else NumPy
    torch_only = Predictor.load("retro", "cpu", engine="torch")
    assert torch_only.engine == "torch"
    numpy_one = Predictor.load("retro", "cpu", engine="numpy")
    query = numpy_one.prepare("CC(=O)Nc1ccc(O)cc1").ids
    a = numpy_one.decode([query], "spec-pointer", 1, None, None, None)[0].hypotheses[0]
    b = torch_only.decode([query], "greedy", 1, None, None, None)[0].hypotheses[0]
    assert a.tokens == b.tokens and a.score == pytest.approx(b.score, abs=1e-4)
    with pytest.raises(ValueError, match="unknown engine"):
        Predictor.load("retro", "cpu", engine="onnx")
    assert np.isfinite(a.score)


def test_rest_after_miss_follows_the_verify_cost():
    """Rows rest after a missed draft only where a verify call costs several one-token calls: the
    NumPy step with OpenBLAS products, or torch on CPU; not with the fp16-weight products."""
    assert rest_after_miss(random_model(0, engine="torch")) == 2
    fast = random_model(0, engine="numpy")
    assert rest_after_miss(fast) == (0 if fast.numpy_step.packed else 2)


def test_predictor_names_its_products():
    assert Predictor.load("retro", "cpu", engine="torch").products == "torch"
    expected = "fbgemm-fp16" if npstep.fp16_kernel_available() else "openblas"
    assert Predictor.load("retro", "cpu", engine="numpy").products == expected
    if native_unavailable() is None:
        native_one = Predictor.load("retro", "cpu")
        assert native_one.products == "c-fp16"
        assert native_one.engine_description == "C decoder and encoder, fp16 weights"
    assert Predictor.load("retro", "cpu", engine="numpy").engine_description.startswith("NumPy step")
    assert Predictor.load("retro", "cpu", engine="torch").engine_description == "torch"


def test_native_engine_builds_wherever_it_can_run():
    """Where the CPU and a compiler allow the C step, it must build: a C source that no longer
    compiles would otherwise only turn its tests into skips (and the engine into NumPy)."""
    import platform
    import shutil

    from molspec_core import native

    runnable = (platform.machine().lower() in ("x86_64", "amd64") and set(native.CPU_FLAGS) <= native._cpu_flags()
                and (shutil.which("cc") or shutil.which("gcc")) is not None)
    if not runnable:
        pytest.skip("this machine cannot run the C step (not x86-64 with AVX2/FMA/F16C, or no C compiler)")
    assert native_unavailable() is None
    assert native_unavailable("avx2") is None
