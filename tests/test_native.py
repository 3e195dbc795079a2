"""The C decoder step (molspec_core/native.py, csrc/decoder_step.c) computes what the NumPy step computes.

The decoders' exactness tests (test_decoding.py, test_speculative_beam.py) run on this engine too;
here the call itself is pinned: logits, cross-attention, the keys/values it leaves in the cache, and
the property that makes speculative decoding equal greedy to the bit on it: a token's logits do not
depend on the other tokens or rows of the call.
"""
import dataclasses
import itertools
import re
import shutil

import numpy as np
import pytest
import torch

from conftest import COPYING_VOCAB, copying_model, needs_native, on_engine, random_model, random_sources, use_engine
from molspec_core import limits, native, service
from molspec_core.decoding.batch import start
from molspec_core.decoding.beam import beam_search
from molspec_core.decoding.greedy import greedy
from molspec_core.decoding.speculative_beam import speculative_beam
from molspec_core.drafting import make_drafter
from molspec_core.limits import QueryTimeout, time_limit
from molspec_core.model import Seq2SeqTransformer
from molspec_core.native import NativeStep, NativeUnavailable
from molspec_core.npstep import _Affine
from molspec_core.service import Predictor
from molspec_core.tokenizer import PAD_ID
from test_npstep import assert_same_encoder, one_call

pytestmark = needs_native


@pytest.fixture(params=["native", "avx2"])
def isa(request) -> str:
    """The instruction set the C step is built for: this CPU's best, and AVX2 alone (what CPUs without
    AVX-512 run; on a CPU with it, this builds and tests that code too)."""
    return request.param


def native_model(seed: int, isa: str, **kwargs) -> Seq2SeqTransformer:
    model = random_model(seed, engine="numpy", **kwargs)
    model.numpy_step = NativeStep(model, isa)
    return model


@pytest.mark.parametrize("lengths", [[3, 3, 3], [2, 5, 4]], ids=["same-length", "ragged"])
@pytest.mark.parametrize("t_new", [1, 4, 7, 50])  # 3 to 150 rows: row blocks of every size, and many blocks
def test_native_step_equals_the_numpy_step(lengths, t_new, isa):
    sources = random_sources(4, 3, 14, 3, 12)  # different lengths: source padding is masked
    tokens = torch.tensor(random_sources(5, 3, 14, t_new, t_new)).unsqueeze(1)  # (3, 1, T)
    keep = [t_new, 1, max(t_new - 1, 0)]
    reference = one_call(random_model(3, engine="numpy"), sources, lengths, tokens, keep)
    native_run = one_call(native_model(3, isa), sources, lengths, tokens, keep)
    for name, a, b in zip(("logits", "cross-attention", "pending keys", "next logits"), reference, native_run):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, atol=1e-5), name
    for a, b in zip(reference[4], native_run[4]):
        for row, n in enumerate(reference[5].tolist()):  # the slots each row really has; others are never read
            assert torch.allclose(a[row, :, :n], b[row, :, :n], atol=1e-5)
    assert torch.equal(reference[5], native_run[5])


@pytest.mark.parametrize("n_sources", [1, 3])  # 3: padded rows, masked
def test_native_encoder_and_cross_keys_equal_numpy(n_sources, isa):
    assert_same_encoder(random_model(3, engine="numpy"), native_model(3, isa), random_sources(8, n_sources, 14, 3, 60))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_a_source_in_a_padded_batch_encodes_as_it_does_alone(isa, dtype):
    """The C encoder computes each source up to its last kept token, its rows packed after the previous
    source's, 96 rows at a time (session 70): each source's memory rows are the same to the bit as when it is
    encoded alone, over batches of 40 to 300 rows, and rows past a source hold the final norm's shift."""
    model = random_model(3, engine="numpy")
    model.numpy_step = NativeStep(model, isa, dtype)
    sources = random_sources(12, 6, 14, 2, 50)
    assert len({len(s) for s in sources}) > 2
    width = max(map(len, sources))
    with torch.inference_mode():
        memory = model.encode(torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sources]))
        for row, source in enumerate(sources):
            alone = model.encode(torch.tensor([source]))[0]
            assert torch.equal(memory[row, :len(source)], alone)
            shift = model.encoder_norm.bias.detach().float().expand(width - len(source), -1)
            assert torch.equal(memory[row, len(source):], shift)


@pytest.mark.parametrize("width", [32, 64])  # widths 32 and 64: output panels that do and do not fill a block
def test_a_tokens_logits_do_not_depend_on_the_rest_of_the_call(width, isa):
    """Token j's logits from one call of T tokens equal, bit for bit, those of the call of its first
    j + 1 tokens, and a row's equal those of the same row called with other rows beside it."""
    model = native_model(7, isa, vocab_size=40, d_model=width, n_heads=4, d_ff=2 * width)
    sources = random_sources(9, 3, 40, 5, 20)
    tokens = torch.tensor(random_sources(10, 3, 40, 11, 11)).unsqueeze(1)  # (3, 1, 11)
    with torch.inference_mode():
        cache, _ = start(model, sources, None, padding=40)
        model.decode(tokens[:, :, :2], cache)
        cache.commit(torch.tensor([2, 1, 0]))  # ragged prefixes
        whole, weights = model.decode(tokens, cache, cross_attention=True)
        for j in range(tokens.shape[-1]):
            part, part_weights = model.decode(tokens[:, :, :j + 1], cache, cross_attention=True)
            assert torch.equal(part[:, :, j], whole[:, :, j]), j
            assert torch.equal(part_weights[:, :, j], weights[:, :, j]), j
        alone = []
        for row in range(3):
            single, _ = start(model, [sources[row]], None, padding=40)
            model.decode(tokens[row:row + 1, :, :2], single)
            single.commit(torch.tensor([[2, 1, 0][row]]))
            alone.append(model.decode(tokens[row:row + 1], single)[0])
    for row, logits in enumerate(alone):  # the encoder (NumPy) computed each source alone here, so only close
        assert torch.allclose(logits, whole[row:row + 1], atol=1e-5)


def test_speculative_greedy_equals_greedy_to_the_bit():
    """Same tokens and the same scores, not just close ones (see the property above), on a model that
    copies (drafts are accepted: a run that accepts none would compare two plain decodes)."""
    model = copying_model(11, engine="native")
    assert isinstance(model.numpy_step, NativeStep)
    sources = random_sources(12, 12, COPYING_VOCAB, 4, 30)
    plain = greedy(model, sources, lambda s: make_drafter("none", s, 0, 1))
    assert sum(r.hypotheses[0].finished for r in plain) > len(plain) // 2  # real answers, not runs to the budget
    for name in ("lookup", "pointer"):
        fast = greedy(model, sources, lambda s, name=name: make_drafter(name, s, 8, 1))
        assert sum(r.stats.draft_tokens_accepted for r in fast) > 0.3 * sum(len(r.hypotheses[0].tokens) for r in plain)
        for a, b in zip(plain, fast):
            assert a.hypotheses[0].tokens == b.hypotheses[0].tokens
            assert a.hypotheses[0].score == b.hypotheses[0].score


def test_decoders_really_take_the_native_step(copy_model, monkeypatch):
    """Every decoder call of greedy is a C call: the plain one or a fused step; beam search is one C search
    (NativeStep.beam_search, whose steps are C calls to decoder_step), no step of it a call from Python."""
    calls = []
    for name in ("__call__", "greedy_step", "beam_search"):
        original = getattr(NativeStep, name)
        monkeypatch.setattr(NativeStep, name,
                            lambda self, *a, original=original, **k: calls.append(1) or original(self, *a, **k))
    model, vocab = copy_model
    fast = on_engine(model, "native")
    sources = random_sources(2, 5, len(vocab), 4, 12)
    results = [greedy(fast, [s], lambda s: make_drafter("pointer", s, 8, 1))[0] for s in sources]
    assert len(calls) == sum(r.stats.model_calls for r in results) > 0
    calls.clear()
    results = beam_search(fast, sources, 3)
    assert len(calls) == 1 and max(r.stats.model_calls for r in results) > 1


def test_weights_not_float16_values_are_refused_with_the_reason_and_where_such_weights_are():
    """A training run's last/ and best/ are float32: given one, --engine native and --dtype int8 said only that the
    weights are not float16 values. The refusal names the folders whose weights are."""
    model = random_model(3)
    with torch.no_grad():
        model.decoder[0].ff.up.weight[0, 0] += 1e-4
    with pytest.raises(NativeUnavailable, match="float16") as refused:
        model.use_numpy_step(native=True)
    assert "; a model folder written in float16 has them: the shipped models, a training run's export/ folder" \
        in str(refused.value)


@pytest.fixture()
def fresh_build(monkeypatch, tmp_path):
    """The C step built anew, into an empty cache folder; the process's build is restored after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native._library.cache_clear()
    yield tmp_path
    native._library.cache_clear()


@pytest.mark.parametrize("cause, setup", [
    ("lacks", lambda mp: mp.setattr(native, "_cpu_flags", lambda: {"avx2"})),
    # no /proc/cpuinfo (an x86-64 Mac with AVX2): it said 'this CPU lacks avx2, fma, f16c', which is untrue there
    ("this CPU's features could not be read \\(the C step reads them from Linux's /proc/cpuinfo, absent here or "
     "without a flags line\\), so whether it has avx2, fma, f16c, which the C step needs, is not known",
     lambda mp: mp.setattr(native, "_cpuinfo_text", lambda: "")),
    ("compiling decoder_step.c failed", lambda mp: mp.setenv("CC", "false")),
    # not a folder: the remedy names the variable that moves the build
    ("building the C step into /dev/null/cache/molspec failed: .*; set XDG_CACHE_HOME to a folder that can be "
     "written", lambda mp: mp.setenv("XDG_CACHE_HOME", "/dev/null/cache")),
    # said to be the cache folder's failure before, and the remedy for a compiler that cannot be run is CC
    ("CC='/no/such/compiler' names no program that can be run here; set CC to a C compiler",
     lambda mp: mp.setenv("CC", "/no/such/compiler")),
    # an unclosed quote: shlex's ValueError escaped native_unavailable, and a CPU Predictor.load failed on it
    ("CC=\"cc 'x\" cannot be read as a command line \\(No closing quotation\\); set CC to a C compiler",
     lambda mp: mp.setenv("CC", "cc 'x")),
])
def test_where_it_cannot_run_auto_takes_numpy_and_native_says_why(fresh_build, monkeypatch, cause, setup):
    setup(monkeypatch)
    assert re.search(cause, native.native_unavailable())
    assert Predictor.load("retro", "cpu").engine == "numpy"
    with pytest.raises(ValueError, match=f"engine native cannot run here: .*{cause}"):
        Predictor.load("retro", "cpu", engine="native")


def test_cc_is_read_as_a_command_line_as_make_reads_it(monkeypatch):
    """CC="ccache gcc" (a compiler behind a cache) was run as one program named 'ccache gcc', and the C step did not
    build; it is read as make reads it. Unset or blank, cc or gcc is taken."""
    monkeypatch.setenv("CC", "env  cc -O2")
    assert native._compiler() == ["env", "cc", "-O2"]
    monkeypatch.setenv("CC", " ")
    assert native._compiler() in ([shutil.which("cc")], [shutil.which("gcc")])


def test_built_into_the_cache_once(fresh_build, monkeypatch):
    assert native.native_unavailable() is None
    built = list((fresh_build / "molspec").glob("decoder_step-*.so"))
    assert len(built) == 1
    native._library.cache_clear()
    stamp = built[0].stat().st_mtime_ns
    assert native.native_unavailable() is None
    assert built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
    # built, it needs no compiler: one removed since (an image that builds, then drops gcc) refused the C step
    native._library.cache_clear()
    monkeypatch.setenv("CC", "/no/such/compiler")
    assert native.native_unavailable() is None


def test_a_single_threaded_build_in_the_cache_loads_without_a_compiler(fresh_build, monkeypatch):
    """Where the C step does not build with OpenMP, it is built single-threaded; that build, in the cache, loaded only
    while a compiler could be found (the OpenMP build was tried first, and a missing compiler stopped it)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    no_openmp = fresh_build / "cc-without-openmp"  # a compiler whose OpenMP is missing (clang without libomp)
    no_openmp.write_text(f'#!/bin/sh\ncase " $* " in *" {native.OPENMP} "*) exit 1;; esac\nexec {compiler} "$@"\n')
    no_openmp.chmod(0o755)
    monkeypatch.setenv("CC", str(no_openmp))
    assert native.native_unavailable() is None and not native._library().has_threads()
    native._library.cache_clear()
    monkeypatch.setenv("CC", "/no/such/compiler")
    assert native.native_unavailable() is None


# ---- dtype int8 ----------------------------------------------------------------------------------


def test_int8_weights_are_the_weights_rounded_per_column_in_their_panel_layout():
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(10, 37)).astype(np.float32)  # k not a multiple of 4, n not of 16
    weight[:, 5] = 0.0  # a zero column keeps a usable scale
    affine = _Affine(torch.from_numpy(weight.T.copy()), torch.zeros(37))
    panels, scales, sums, k4 = native._int8_panels(affine)
    assert k4 == 12 and panels.shape == (3, 3, 16, 4) and scales.shape == sums.shape == (48,)
    q = panels.transpose(1, 3, 0, 2).reshape(12, 48)  # back to (k4, n_pad): row 4g + j, column 16p + c
    assert np.all(q[10:] == 0) and np.all(q[:, 37:] == 0) and np.abs(q).max() == 127
    assert np.all(np.abs(q[:10, :37] * scales[:37] - weight) <= scales[:37] / 2 + 1e-7)
    assert np.array_equal(sums, q.sum(axis=0))


def test_int8_is_the_same_function_on_every_path_and_close_to_float32():
    """The int32 sums are exact: VNNI (where this CPU has it), the AVX2 kernel (the AVX2 build) and the
    plain loop give the same bits. And int8 stays close to float32 on a random model."""
    sources = random_sources(4, 3, 14, 3, 12)
    tokens = torch.tensor(random_sources(5, 3, 14, 9, 9)).unsqueeze(1)
    runs = []
    for isa, dtype in (("native", "int8"), ("avx2", "int8"), ("plain-int8", "int8"), ("native", "float32")):
        model = random_model(3, engine="numpy")
        model.numpy_step = NativeStep(model, isa, dtype)
        runs.append(one_call(model, sources, [2, 5, 4], tokens, [9, 1, 8], fill_lean=True))
    for other in runs[1:3]:
        for a, b in zip(runs[0][:4], other[:4]):
            assert torch.equal(a, b)
    vnni = {"avx512f", "avx512bw", "avx512_vnni"} <= native._cpu_flags()  # else the native build is the AVX2 one
    model = random_model(3, engine="numpy")
    assert NativeStep(model, "native", "int8").int8_vnni == vnni and not NativeStep(model, "avx2", "int8").int8_vnni
    logits_int8, logits_float32 = runs[0][0], runs[3][0]
    assert 0 < float((logits_int8 - logits_float32).abs().max()) < 0.05 * float(logits_float32.abs().max())


def test_int8_products_of_every_block_shape_equal_the_plain_loop():
    """A call of 1 to 13 rows takes every register block of the VNNI kernel (1 to 12 rows, then 12 + 1), each of
    which holds a weight vector in its register for all its rows (csrc int8_block); the same bits as the plain
    loop's, as test_int8_is_the_same_function_on_every_path_and_close_to_float32 checks at 27 rows only."""
    sources = random_sources(6, 1, 14, 5, 5)
    tokens = torch.tensor(random_sources(7, 1, 14, 13, 13)).unsqueeze(1)  # (1, 1, 13)
    for t_new in range(1, 14):
        runs = []
        for isa in ("native", "plain-int8"):
            model = random_model(3, engine="numpy")
            model.numpy_step = NativeStep(model, isa, "int8")
            runs.append(one_call(model, sources, [2], tokens[:, :, :t_new], [t_new], fill_lean=True))
        (*outputs, slots, lengths), (*plain_outputs, plain_slots, plain_lengths) = runs
        written = int(lengths[0])  # the slots past it were never written (the native engine leaves them raw)
        assert torch.equal(lengths, plain_lengths)
        for a, b in zip(outputs + [s[:, :, :written] for s in slots],
                        plain_outputs + [s[:, :, :written] for s in plain_slots]):
            assert torch.equal(a, b), t_new


# rows of the call: 3 (a tile of 3 rows), 27 (16 + 11), 150 (products of 96 rows: 6 blocks of 16; then 3 + 6)
@pytest.mark.parametrize("t_new", [1, 9, 50])
def test_int8_on_amx_tiles_equals_vnni_to_the_bit(t_new):
    """Where the CPU has AMX, the native build's int8 products with k a multiple of 64 and 3 rows or more run
    on its tiles (csrc: amx_sums): the same int32 sums as the VNNI kernel (the no-amx build) and the plain
    loop, so the same bits. Widths 64 and 192 make every product's k a multiple of 64; 14 tokens give the
    output projection one panel, the qkv product 12 (pairs of panels and a lone one)."""
    if not native._library("native").int8_amx():
        pytest.skip("no AMX tiles here (a CPU without them, or a kernel that does not lend them): the native build "
                    "runs the VNNI or AVX2 kernel, tested above")
    sources = random_sources(4, 3, 14, 3, 40)  # the encoder's products: 3 sources, up to 120 rows
    tokens = torch.tensor(random_sources(5, 3, 14, t_new, t_new)).unsqueeze(1)
    runs, steps = [], []
    for isa in ("native", "no-amx", "plain-int8"):
        model = random_model(3, engine="numpy", d_model=64, d_ff=192)
        model.numpy_step = NativeStep(model, isa, "int8")
        steps.append(model.numpy_step)
        runs.append(one_call(model, sources, [2, 5, 4], tokens, [t_new, 1, max(t_new - 1, 0)], fill_lean=True))
    assert steps[0].int8_amx and not steps[1].int8_amx and steps[1].int8_vnni
    for other in runs[1:]:
        for a, b in zip(runs[0][:4], other[:4]):
            assert torch.equal(a, b)
        assert torch.equal(runs[0][5], other[5])
        for a, b in zip(runs[0][4], other[4]):  # the slots each row has; others are never read
            assert all(torch.equal(a[row, :, :n], b[row, :, :n]) for row, n in enumerate(runs[0][5].tolist()))


def test_reports_and_the_sidebar_say_where_int8_runs_on_amx():
    """A speed figure depends on AMX: a bench report's products field and the sidebar's engine say so."""
    amx = bool(native._library("native").int8_amx())
    int8 = Predictor.load("forward", "cpu", dtype="int8")
    assert int8.products == ("c-int8-amx" if amx else "c-int8")
    assert int8.engine_description.endswith(" (AMX)") == amx
    assert Predictor.load("forward", "cpu").products == "c-fp16"


def test_the_cpu_description_names_vnni_only_where_the_int8_products_use_it(monkeypatch):
    """The C step's int8 products use VNNI's AVX-512 form only (csrc: int8_vnni); a CPU with AVX2 and AVX-VNNI, its
    256-bit form, and no AVX-512 (Intel's 12th to 14th generation Core) runs them on the AVX2 kernel, so the
    device name in the sidebar and in every bench report must not credit VNNI there (it read 'with AVX2 and VNNI')."""
    # this machine's: VNNI used where its flags have VNNI's AVX-512 form
    assert bool(native._library("native").int8_vnni()) == ("avx512_vnni" in native._cpu_flags())
    info = {"model name": "12th Gen Intel(R) Core(TM) i7-12700", "flags": "fpu avx avx2 fma f16c avx_vnni"}
    monkeypatch.setattr(native, "_cpuinfo", lambda field: info.get(field, ""))
    assert native.cpu_description() == "12th Gen Intel(R) Core(TM) i7-12700 with AVX2"
    info["flags"] += " avx512f avx512bw avx512_vnni"
    assert native.cpu_description() == "12th Gen Intel(R) Core(TM) i7-12700 with AVX-512 and VNNI"


def test_an_environment_variable_chooses_the_build_for_timings(monkeypatch):
    """MOLSPEC_NATIVE_BUILD=no-amx loads the VNNI build (the README's AMX figures compare the two); a name that is
    no build makes the native engine unavailable, with the names to choose from, and auto takes NumPy."""
    monkeypatch.setenv(native.BUILD_VARIABLE, "no-amx")
    int8 = Predictor.load("forward", "cpu", dtype="int8")
    assert int8.products == "c-int8" and not int8.model.numpy_step.int8_amx
    monkeypatch.setenv(native.BUILD_VARIABLE, "avx-1024")
    assert native.native_unavailable() == ("MOLSPEC_NATIVE_BUILD='avx-1024' names no build of the C step; choose "
                                           "from native, avx2, plain-int8, no-amx")
    assert Predictor.load("retro", "cpu").engine == "numpy"


def test_int8_speculative_greedy_equals_int8_greedy_to_the_bit():
    model = copying_model(11, engine="native-int8")
    assert model.numpy_step.dtype == "int8"
    sources = random_sources(12, 12, COPYING_VOCAB, 4, 30)
    plain = greedy(model, sources, lambda s: make_drafter("none", s, 0, 1))
    fast = greedy(model, sources, lambda s: make_drafter("pointer", s, 8, 1))
    assert sum(r.hypotheses[0].finished for r in plain) > len(plain) // 2
    assert sum(r.stats.draft_tokens_accepted for r in fast) > 0.3 * sum(len(r.hypotheses[0].tokens) for r in plain)
    for a, b in zip(plain, fast):
        assert a.hypotheses[0].tokens == b.hypotheses[0].tokens and a.hypotheses[0].score == b.hypotheses[0].score


@pytest.mark.parametrize("engine", ["native", "native-int8"])
def test_exact_speculative_beam_equals_beam_search_to_the_bit(engine):
    """The app computes in int8 by default and shows beam search's copied tokens from sbs-exact's decode of
    the same query (views.predict.partner_answer): in float32 and int8 the n-best lists must be beam's, scores
    to the bit (README: one draft a call equals the plain decoder to the bit on the C engine; in int8
    activations are rounded per token, so a drafted call gives each token what a step gives it). On a model
    that copies, so the answers hold drafted tokens and sbs-exact makes fewer calls than beam search."""
    model = copying_model(13, engine=engine)
    sources = random_sources(14, 12, COPYING_VOCAB, 4, 30)
    for width in (3, 5):
        plain = beam_search(model, sources, width, max_len=30)
        fast = speculative_beam(model, sources, width, lambda s: make_drafter("pointer", s, 2, 1), exact=True,
                                max_len=30)
        copied = [sum(p >= 0 for p in r.hypotheses[0].provenance) for r in fast]
        assert sum(copied) > 0.3 * sum(len(r.hypotheses[0].tokens) for r in plain)
        assert [r.stats.draft_tokens_accepted for r in fast] == copied  # the best answer's drafted tokens
        assert sum(r.stats.model_calls for r in fast) < sum(r.stats.model_calls for r in plain)
        for a, b in zip(plain, fast):
            assert [h.tokens for h in b.hypotheses] == [h.tokens for h in a.hypotheses]
            assert [h.finished for h in b.hypotheses] == [h.finished for h in a.hypotheses]
            assert [h.score for h in b.hypotheses] == [h.score for h in a.hypotheses]


def test_int8_is_asked_for_by_name_and_only_of_the_native_engine():
    one = Predictor.load("retro", "cpu", dtype="int8")
    assert (one.engine, one.dtype) == ("native", "int8") and one.products.startswith("c-int8")
    assert "int8 weights" in one.engine_description
    assert Predictor.load("retro", "cpu").dtype == "float32"
    for engine in ("numpy", "torch"):
        with pytest.raises(ValueError, match="native engine"):
            Predictor.load("retro", "cpu", engine=engine, dtype="int8")
    with pytest.raises(ValueError, match="unknown dtype"):
        Predictor.load("retro", "cpu", dtype="float16")


def test_every_answer_row_says_which_arithmetic_computed_it():
    """The CSV's dtype column (io.RESULT_COLUMNS): the predictor's, on every answer of a query read once or in
    several writings; empty on the row of a query that was never decoded."""
    from molspec_core.io import RESULT_COLUMNS, result_rows

    column = RESULT_COLUMNS.index("dtype")
    for dtype in ("float32", "int8"):
        predictor = Predictor.load("retro", "cpu", dtype=dtype)
        for augment in (1, 2):
            result = predictor.predict("CC(=O)Nc1ccc(O)cc1", method="beam", n_best=2, augment=augment)
            assert result.dtype == dtype and [row[column] for row in result_rows(1, (), result)] == [dtype, dtype]
        refused = predictor.predict("C1CC")
        assert not refused.ok and result_rows(1, (), refused)[0][column] is None


def test_int8_unavailable_says_why_int8_cannot_load(monkeypatch):
    """What the app asks before it offers int8: None exactly where Predictor.load takes it."""
    assert service.int8_unavailable("cpu") is None  # this module runs where the C step builds
    monkeypatch.setattr(service, "resolve_device", lambda device: torch.device("cuda"))
    assert "CPU's native engine, not on cuda" in service.int8_unavailable()
    monkeypatch.undo()
    monkeypatch.setattr(service, "native_unavailable", lambda: "no C compiler found")
    assert service.int8_unavailable("cpu") == "no C compiler found"


def test_the_native_engine_keeps_drafting_after_a_miss_whatever_torch_lacks(monkeypatch):
    """rest_after_miss read NumpyStep.packed (torch has FBGEMM's fp16 kernel), which the C engine's products never
    use: on a torch without that kernel spec-lookup's rows rested after a miss, which took them out of the C greedy
    loop (greedy_search runs one lookup draft a call with rest 0 only). The C step's verify calls are cheap anyway."""
    model = native_model(0, "native")
    monkeypatch.setattr(model.numpy_step, "packed", False)
    assert service.rest_after_miss(model) == 0
    searched = []  # the C loop's calls: with that rest, a lookup draft a call is decoded there
    monkeypatch.setattr(NativeStep, "greedy_search", lambda self, *args, **kwargs: searched.append(args) or [])
    greedy(model, [[5, 6, 7]], lambda s: make_drafter("lookup", s, 4, 1), rest=service.rest_after_miss(model))
    assert searched


@pytest.mark.parametrize("name, draft_len", [("pointer", 8), ("lookup", 5)])
def test_int8_speculative_decoders_equal_int8_greedy_and_beam_on_the_copy_model(copy_model, name, draft_len):
    """On int8 as on float32: speculative greedy gives greedy's tokens and scores, sbs-exact beam
    search's n-best lists (one draft per row: the calls int8 runs)."""
    model, vocab = on_engine(copy_model[0], "native-int8"), copy_model[1]
    sources = random_sources(7, 60, len(vocab), 1, 30)
    for source in sources:
        plain = greedy(model, [source], lambda s: make_drafter("none", s, 0, 1))[0].hypotheses[0]
        fast = greedy(model, [source], lambda s: make_drafter(name, s, draft_len, 1))[0].hypotheses[0]
        assert (fast.tokens, fast.score) == (plain.tokens, plain.score)
    for source in sources[:15]:
        for width in (3, 5):
            reference = beam_search(model, [source], width)[0].hypotheses
            exact = speculative_beam(model, [source], width, lambda s: make_drafter(name, s, draft_len, 1),
                                     exact=True)[0].hypotheses
            assert [h.tokens for h in exact] == [h.tokens for h in reference]
            assert [h.score for h in exact] == pytest.approx([h.score for h in reference], abs=1e-5)


def test_int8_decodes_greedy_calls_of_several_drafts_as_greedy(copy_model):
    """Greedy's calls of several drafts a row were refused under int8 ('decodes one draft per row'): they ran in
    torch. Each draft is now fed as a row of its own through the C step (greedy.verify_as_rows), which computes
    int8 as greedy's own calls do: the same tokens and scores, to the bit."""
    model, vocab = on_engine(copy_model[0], "native-int8"), copy_model[1]
    sources = random_sources(7, 3, len(vocab), 5, 20)
    plain = greedy(model, sources, lambda s: make_drafter("none", s, 0, 0))
    drafted = greedy(model, sources, lambda s: make_drafter("paper", s, 4, 3))
    assert [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in drafted] == \
        [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in plain]
    assert sum(r.stats.draft_tokens_accepted for r in drafted) > 0


def test_an_int8_call_of_several_branches_a_row_is_refused_in_words_that_hold(copy_model):
    """model.decode refused an int8 call of several branches a row saying that 'a method that verifies several
    drafts per call (as the paper's) needs float32', untrue since greedy.verify_as_rows (spec-paper runs in int8,
    above): the refusal says how such a call is made in int8."""
    model = on_engine(copy_model[0], "native-int8")
    cache, _ = start(model, [[4, 5, 6, 7]], padding=4)
    with pytest.raises(ValueError) as refused:
        model.decode(torch.tensor([[[4, 5, 6], [6, 7, 4]]]), cache)  # (1 row, 2 branches, 3 tokens)
    assert "needs float32" not in str(refused.value)
    # where it is done: greedy's verify_as_rows, and the speculative beam searches' own feed (it named sbs-exact
    # beside verify_as_rows, which it does not call, and 'the spec-* methods', spec-sample's one draft among them)
    assert str(refused.value).endswith(
        "several drafts a row are fed as rows of their own, each on a copy of its row's cache, by the greedy methods "
        "(decoding.greedy.verify_as_rows: spec-paper, n_drafts above 1) and by sbs and sbs-exact "
        "(decoding.speculative_beam)")


def test_an_int8_predictor_decodes_several_drafts_per_call_as_int8_greedy(copy_model, tmp_path):
    """predict refused the paper's drafts and n_drafts > 1 under int8 ('verifies 25 drafts per call here, and int8
    arithmetic verifies one'), and methods() left spec-paper out, though since 1883bf9 the C step verifies each
    draft as a row of its own (greedy.verify_as_rows): the answers are int8 greedy's, tokens and scores to the bit."""
    from molspec_core import checkpoint

    checkpoint.save(copying_model(13), copy_model[1], tmp_path, meta={"task": "copy-test-fixture"},
                    dtype=torch.float16)  # float16 values: the C engine loads it, and int8 with it
    predictor = Predictor.load(tmp_path, "cpu", dtype="int8")
    assert predictor.engine == "native" and predictor.dtype == "int8"
    assert "spec-paper" in predictor.methods()
    queries = ["NCCOCCNCCOCCNCCO", "CC(=O)Nc1ccc(O)cc1", "ClCC(Br)CN", "c1ccncc1CCl"]
    plain = predictor.predict(queries, method="greedy")
    for method, n_drafts in (("spec-paper", None), ("spec-paper", 4), ("spec-lookup", 3), ("spec-pointer", 2)):
        drafted = predictor.predict(queries, method=method, n_drafts=n_drafts, batch_size=2)
        for a, b in zip(plain, drafted):
            assert a.ok and b.ok and b.dtype == "int8"
            assert [(p.tokens, p.score) for p in b.predictions] == [(p.tokens, p.score) for p in a.predictions]
        assert sum(r.stats.draft_tokens_accepted for r in drafted) > 0, method  # drafts were taken


def test_an_int8_predictor_decodes_speculative_beam_search_of_several_drafts_as_beam_search(copy_model, tmp_path):
    """predict refused sbs-exact and sbs with n_drafts > 1 under int8 ('verifies 3 drafts per call here, and int8
    arithmetic verifies one'), though on the native engine each of a hypothesis' drafts is fed as a row of its own
    (speculative_beam._Search.feed), which the C step computes as beam search's steps: the n-best lists are int8
    beam search's, scores to the bit."""
    from molspec_core import checkpoint

    checkpoint.save(copying_model(13), copy_model[1], tmp_path, meta={"task": "copy-test-fixture"},
                    dtype=torch.float16)  # float16 values: the C engine loads it, and int8 with it
    predictor = Predictor.load(tmp_path, "cpu", dtype="int8")
    assert predictor.engine == "native" and predictor.dtype == "int8"
    queries = ["NCCOCCNCCOCCNCCO", "CC(=O)Nc1ccc(O)cc1", "ClCC(Br)CN", "c1ccncc1CCl"]
    beam = predictor.predict(queries, method="beam", n_best=3)
    exact = predictor.predict(queries, method="sbs-exact", n_best=3, n_drafts=3)
    for a, b in zip(beam, exact):
        assert a.ok and b.ok and b.dtype == "int8"
        assert [(p.tokens, p.score) for p in b.predictions] == [(p.tokens, p.score) for p in a.predictions]
    assert sum(r.stats.model_calls for r in exact) < sum(r.stats.model_calls for r in beam)  # drafts were taken
    assert all(r.ok for r in predictor.predict(queries, method="sbs", n_best=3, n_drafts=3))


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_the_time_limit_stops_every_method_on_the_native_engine(dtype):
    """The C step's whole-step calls (greedy_step, beam_search's runs) bypass the model's decoder call, where the
    deadline was checked: a limit of a microsecond let every query finish (session 65's audit)."""
    predictor = Predictor.load("forward", "cpu", dtype=dtype)
    assert predictor.engine_description.startswith("C ")
    for method in ("greedy", "spec-lookup", "beam", "sbs-exact"):
        n_best = 3 if method in ("beam", "sbs-exact") else 1
        stopped = predictor.predict("CC(=O)Cl.NCc1ccccc1", method=method, n_best=n_best, time_limit_s=1e-6)
        assert not stopped.ok and "time limit" in stopped.error, method
        assert predictor.predict("CC(=O)Cl.NCc1ccccc1", method=method, n_best=n_best, time_limit_s=60).ok


class _StepClock:
    """A fake clock for the time limit (limits.now) on which every step of a beam search in C takes a second, or,
    given per_row, that many seconds for each row it feeds (a beam's first step feeds one row, its next `width`)."""

    def __init__(self, library, per_row: float | None = None):
        self.library, self.per_row, self.seconds = library, per_row, 0.0

    def __getattr__(self, name):
        return getattr(self.library, name)

    def beam_run(self, model, call, run):
        state = run._obj  # ctypes.byref(run)._obj: the run, whose steps the call takes and whose rows it counts
        rows_before = state.rows_fed
        failed = self.library.beam_run(model, call, run)
        self.seconds += state.steps if self.per_row is None else (state.rows_fed - rows_before) * self.per_row
        return failed

    def greedy_run(self, model, call, run):
        """A greedy search's run in C: a second a step."""
        failed = self.library.greedy_run(model, call, run)
        self.seconds += run._obj.steps
        return failed


SLOW_SOURCE = "OCc1ccc(N)cc1NOCc1ccc(Cl)cc1OCNCCOCBr"  # 23 steps of the copy model's beam without a limit


def test_beam_search_in_c_stops_within_a_step_of_the_limit_and_hands_on_what_it_found(copy_model, monkeypatch):
    """The time limit was checked only between C runs of 16 steps, and the search raised with nothing: the shipped
    retro model with a 1 s limit ran ~7 s on a loaded CPU, then reported no answers and 0 model calls. A run now
    takes the steps that fit in the time left (one first, to learn the pace), and the search hands on its live
    beam, unfinished, with the calls it made."""
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    clock = _StepClock(model.numpy_step._library)
    monkeypatch.setattr(model.numpy_step, "_library", clock)
    monkeypatch.setattr(limits, "now", lambda: clock.seconds)
    with time_limit(5.5), pytest.raises(QueryTimeout) as stopped:
        beam_search(model, [vocab.encode(SLOW_SOURCE)], width=3)
    assert clock.seconds == 6  # runs of 1, 2 and 2 steps, then 1 (0.5 s left): a step past 5.5 s
    assert stopped.value.searched == (False,)
    found = stopped.value.found[0]
    assert found.stats.model_calls == 6 and len(found.hypotheses) == 3
    assert all(not h.finished and len(h.tokens) == 6 for h in found.hypotheses)
    assert [h.score for h in found.hypotheses] == sorted((h.score for h in found.hypotheses), reverse=True)


@pytest.mark.parametrize("draft_len", [0, 4])
def test_greedy_search_in_c_stopped_by_the_limit_hands_on_the_queries_that_ended_and_the_calls(copy_model, monkeypatch,
                                                                                               draft_len):
    """Greedy's loop in C (no drafts, or one lookup draft a call) raised a bare QueryTimeout at the time limit: a
    query stopped said 0 model calls, and its batch-mates that had ended were decoded again. It hands on each query's
    result now: whole for one that had ended, the calls alone for one still decoding (no answer cut short)."""
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = [vocab.encode("CCO"), vocab.encode(SLOW_SOURCE)]

    def factory(source):
        return make_drafter("lookup" if draft_len else "none", source, draft_len, 1)
    unlimited = greedy(model, sources, factory)
    assert unlimited[0].stats.model_calls < 5 < unlimited[1].stats.model_calls
    clock = _StepClock(model.numpy_step._library)
    monkeypatch.setattr(model.numpy_step, "_library", clock)
    monkeypatch.setattr(limits, "now", lambda: clock.seconds)
    with time_limit(5.5), pytest.raises(QueryTimeout) as stopped:
        greedy(model, sources, factory)
    assert clock.seconds == 6  # runs of 1, 2 and 2 steps, then 1 (0.5 s left): a step past 5.5 s
    assert stopped.value.searched == (True, False)
    done, cut = stopped.value.found
    assert done.hypotheses == unlimited[0].hypotheses
    assert dataclasses.replace(done.stats, wall_time_s=0) == dataclasses.replace(unlimited[0].stats, wall_time_s=0)
    assert cut.hypotheses == [] and cut.stats.model_calls == 6


def test_a_beam_stopped_before_its_first_step_hands_on_no_empty_answer(copy_model, monkeypatch):
    """Stopped after the encoder and before the first step, the search handed on its one live slot, holding bos
    alone: an empty "answer" of 0 calls. It hands on nothing now. A clock that moves a second each time it is read:
    the limit is set at 0, the encoder checks it at 1, the first run at 2."""
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    monkeypatch.setattr(limits, "now", itertools.count().__next__)
    with time_limit(1.5), pytest.raises(QueryTimeout) as stopped:
        beam_search(model, [vocab.encode(SLOW_SOURCE)], width=3)
    assert stopped.value.searched == (False,)
    assert stopped.value.found[0].hypotheses == [] and stopped.value.found[0].stats.model_calls == 0


def test_a_beams_pace_is_learnt_before_a_long_run_in_c(copy_model, monkeypatch):
    """A beam's first step feeds one row, the next ones `width`: a run sized by the first step's pace alone took
    ~10 steps past the limit. Runs grow at most twofold, so the slower pace is seen first."""
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    clock = _StepClock(model.numpy_step._library, per_row=0.1)  # 0.1 s the first step, 0.3 s the next ones
    monkeypatch.setattr(model.numpy_step, "_library", clock)
    monkeypatch.setattr(limits, "now", lambda: clock.seconds)
    with time_limit(1.5), pytest.raises(QueryTimeout):
        beam_search(model, [vocab.encode(SLOW_SOURCE)], width=3)
    assert 1.5 < clock.seconds <= 1.5 + 0.3 + 1e-9  # past the limit by at most one step


def test_cache_slots_that_are_not_contiguous_take_the_numpy_path_with_its_mask():
    """The C call reads slots as contiguous (B, H, capacity, hd) blocks; other slots go through the NumPy
    step, which needs the attention mask the native call does without."""
    sources = random_sources(4, 3, 14, 3, 12)
    tokens = torch.tensor(random_sources(5, 3, 14, 4, 4)).unsqueeze(1)
    reference = random_model(3, engine="numpy")
    fast = native_model(3, "native")
    runs = []
    for model in (reference, fast):
        with torch.inference_mode():
            cache, _ = start(model, sources, None, padding=20)
            for layer in cache.layers:  # the same values, laid out (B, capacity, H, hd)
                for name in ("keys", "values"):
                    slots = getattr(layer, name)
                    setattr(layer, name, slots.transpose(1, 2).contiguous().transpose(1, 2))
            assert not cache.layers[0].keys.is_contiguous()
            model.decode(tokens[:, :, :2], cache)
            cache.commit(torch.tensor([2, 1, 0]))
            runs.append(model.decode(tokens, cache, cross_attention=True))
    assert torch.allclose(runs[0][0], runs[1][0], atol=1e-5)
    assert torch.allclose(runs[0][1], runs[1][1], atol=1e-5)


def test_slots_never_written_do_not_poison_a_shorter_row_on_the_numpy_path():
    """Slots past a shorter row's new tokens are never written (the cache is not zeroed); a NaN or -inf left there
    by earlier memory made that row's output NaN (0 x NaN), seen as a flaky failure of the test above in the suite."""
    sources = random_sources(4, 3, 14, 3, 12)
    tokens = torch.tensor(random_sources(5, 3, 14, 4, 4)).unsqueeze(1)
    runs = []
    for garbage in (0.0, float("nan")):
        model = native_model(3, "native")
        with torch.inference_mode():
            cache, _ = start(model, sources, None, padding=20)
            for layer in cache.layers:  # laid out (B, capacity, H, hd): the NumPy step's path
                for name in ("keys", "values"):
                    slots = getattr(layer, name).transpose(1, 2).contiguous().transpose(1, 2)
                    slots.fill_(garbage)
                    setattr(layer, name, slots)
            model.decode(tokens[:, :, :2], cache)
            cache.commit(torch.tensor([2, 1, 0]))
            runs.append(model.decode(tokens, cache, cross_attention=True))
    assert torch.isfinite(runs[1][0]).all() and torch.equal(runs[0][0], runs[1][0])


def test_token_ids_outside_the_vocabulary_are_refused_before_the_c_code_reads_them():
    model = native_model(3, "native")
    with torch.inference_mode(), pytest.raises(ValueError, match="vocabulary"):
        model.encode(torch.tensor([[5, 6, 14]]))  # vocabulary of 14: ids 0..13


# ---- beam search in C (NativeStep.beam_search) ---------------------------------------------------


def c_and_python_beams_agree(seed: int, width: int, n_best: int, prune: bool, steps_per_run: int, monkeypatch) -> list:
    """beam_search on the native engine, its loop in C (NativeStep.beam_search, steps_per_run steps a C
    call), against the same engine with the loop in Python, step by step (decoder call, commit, log_probs,
    best_children, reorder): the same n-best lists with the same scores to the bit and the same calls per
    query. Returns the C loop's results."""
    from molspec_core.decoding import beam as beam_module

    with monkeypatch.context() as m:
        m.setattr(native, "STEPS_PER_RUN", steps_per_run)
        model = native_model(seed, "native", vocab_size=9)
        sources = random_sources(seed + 20, 4, 9, 2, 12)
        fused = beam_search(model, sources, width, n_best, max_len=14, prune=prune)
        m.setattr(beam_module, "NativeStep", type("NotNative", (), {}))
        stepwise = beam_search(model, sources, width, n_best, max_len=14, prune=prune)
    for a, b in zip(fused, stepwise):
        assert ([(h.tokens, h.score, h.finished) for h in a.hypotheses]
                == [(h.tokens, h.score, h.finished) for h in b.hypotheses])
        assert a.stats.model_calls == b.stats.model_calls
    return fused


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("width,n_best,prune", [(1, 1, True), (3, 3, True), (5, 5, True), (5, 2, True), (5, 2, False)])
@pytest.mark.parametrize("steps_per_run", [3, 16])
def test_beam_search_in_c_equals_the_steps_it_runs(seed, width, n_best, prune, steps_per_run, monkeypatch):
    """Over queries of different lengths (they finish at different steps: Python drops their rows, C leaves
    them), searches of several C calls (3 steps a call) and of one (16)."""
    c_and_python_beams_agree(seed, width, n_best, prune, steps_per_run, monkeypatch)


def test_beam_search_in_c_meets_both_stops_and_both_kinds_of_answer(monkeypatch):
    """What the test above covers: queries stopped by the floor and at their budget (14 steps here),
    finished answers and unfinished ones, searches of several C calls."""
    kinds, calls = set(), set()
    for seed in range(3):
        for width, n_best in ((1, 1), (5, 2)):
            found = c_and_python_beams_agree(seed, width, n_best, True, 3, monkeypatch)
            kinds |= {h.finished for r in found for h in r.hypotheses}
            calls |= {r.stats.model_calls for r in found}
    assert kinds == {True, False} and 14 in calls and min(calls) < 14


def test_beam_selection_in_c_breaks_ties_as_best_children():
    """The C selection keeps best_children's order on many ties (log-probs rounded to quarters) and
    dead slots (-inf, their log-probs never read), including fewer finite candidates than the width."""
    from molspec_core.decoding.beam import best_children

    library, rng = native._library(), np.random.default_rng(0)
    for _ in range(500):
        queries, slots, vocab = (int(n) for n in rng.integers(1, [4, 6, 9]))
        width = int(rng.integers(1, slots * vocab + 1))
        log_probs = (np.round(rng.standard_normal((queries, slots, vocab)) * 4) / 4).astype(np.float32)
        log_probs[rng.random(log_probs.shape) < 0.2] = -np.inf
        scores = (np.round(rng.standard_normal((queries, slots)) * 2) / 2).astype(np.float32)
        scores[rng.random(scores.shape) < 0.3] = -np.inf
        top_scores = np.empty((queries, width), dtype=np.float32)
        top_index = np.empty((queries, width), dtype=np.int64)
        stale = log_probs.copy()  # beam_run does not feed a dead slot: its row holds anything
        stale[scores == -np.inf] = np.nan
        library.beam_select(queries, slots, vocab, width, scores.ctypes.data, stale.ctypes.data,
                            top_scores.ctypes.data, top_index.ctypes.data)
        expected_scores, expected_index = best_children(scores, log_probs, width)
        assert top_index.tolist() == expected_index.tolist()
        assert top_scores.tolist() == expected_scores.tolist()


def test_native_log_probs_are_a_log_softmax_computed_row_by_row():
    """model.log_probs on the native engine: torch's log_softmax to float rounding, and each row's
    values the same to the bit whatever else the call holds (beam search feeds a row alone, sbs-exact
    in a longer call)."""
    model = native_model(1, "native")
    logits = torch.randn(6, 3, 37) * 4
    got = model.log_probs(logits)
    assert torch.allclose(got, logits.log_softmax(dim=-1), atol=2e-6, rtol=0)
    assert torch.equal(model.log_probs(logits[2:3, 1]), got[2:3, 1])


@pytest.mark.parametrize("drafter", ["none", "pointer", "lookup"])
def test_fused_greedy_step_equals_the_steps_it_fuses(copy_model, drafter, monkeypatch):
    """greedy on the native engine settles each call (argmax, accepted drafts, log-probs, attention
    peak, new lengths) in the C call; switched off, the same engine settles it in NumPy
    (greedy.settle_lists). Same tokens, same provenance, same call counts; scores to float rounding
    (the two sum exponentials in different orders). A batch: rows finish at different calls."""
    from molspec_core.decoding import greedy as greedy_module

    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(31, 4, len(vocab), 3, 14)

    seen: list[tuple[int, int | None]] = []  # what each proposal was told: output so far, attention peak

    def factory(source):
        made = make_drafter(drafter, source, 4, 1)
        propose = made.propose
        made.propose = lambda generated, peak: seen.append((len(generated), peak)) or propose(generated, peak)
        return made

    fused = greedy(model, sources, factory)
    assert drafter == "none" or sum(r.stats.draft_tokens_accepted for r in fused) > 0
    fused_seen, seen[:] = list(seen), []
    monkeypatch.setattr(greedy_module, "NativeStep", type("NotNative", (), {}))
    stepwise = greedy(model, sources, factory)
    for a, b in zip(fused, stepwise):
        (x,), (y,) = a.hypotheses, b.hypotheses
        assert (x.tokens, x.provenance, x.finished) == (y.tokens, y.provenance, y.finished)
        assert x.score == pytest.approx(y.score, abs=1e-5)
        assert a.stats.model_calls == b.stats.model_calls
    assert fused_seen == (seen if drafter == "pointer" else [])  # without drafts or with lookup ones: the loop in C


@pytest.mark.parametrize("steps_per_run", [3, 16])
@pytest.mark.parametrize("draft_len", [0, 2, 4])
def test_greedy_search_in_c_equals_the_steps_it_runs(copy_model, steps_per_run, draft_len, monkeypatch):
    """Greedy without drafts or with one lookup draft (draft_len 0: the NullDrafter) runs its whole loop in C on
    the native engine (NativeStep.greedy_search, steps_per_run calls a C call); the same drafters as classes
    the C code does not know keep the loop in Python, one C call (greedy_step) a step. The same tokens,
    provenance, scores to the bit, finished flags and DecodeStats counts, over queries that finish apart and
    queries stopped at their budget (9 tokens)."""
    from molspec_core.drafting import LookupDrafter, NullDrafter

    class InPython(LookupDrafter if draft_len else NullDrafter):
        pass

    monkeypatch.setattr(native, "STEPS_PER_RUN", steps_per_run)
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(31, 12, len(vocab), 3, 14)
    name = "lookup" if draft_len else "none"
    in_c = greedy(model, sources, lambda s: make_drafter(name, s, draft_len, 1), max_len=9)
    stepwise = greedy(model, sources, lambda s: InPython(s, draft_len, 1), max_len=9)
    for a, b in zip(in_c, stepwise):
        (x,), (y,) = a.hypotheses, b.hypotheses
        assert (x.tokens, x.score, x.finished, x.provenance) == (y.tokens, y.score, y.finished, y.provenance)
        assert dataclasses.replace(a.stats, wall_time_s=0) == dataclasses.replace(b.stats, wall_time_s=0)
    assert {r.hypotheses[0].finished for r in in_c} == {True, False}  # both kinds of stop
    assert len({r.stats.model_calls for r in in_c}) > 2  # rows finishing apart
    assert (sum(r.stats.draft_tokens_accepted for r in in_c) > 0) == (draft_len > 0)


@pytest.mark.parametrize("dtype, widths", [("float32", {}), ("int8", {}), ("int8", {"d_model": 64, "d_ff": 192})],
                         ids=["float32", "int8", "int8-widths-of-64"])
def test_results_do_not_depend_on_the_thread_count(dtype, widths):
    """With OpenMP the C call splits products, attention and the encoder among torch's thread count;
    each output is still computed alike, so one thread and three give the same bits (150-row calls,
    past every loop's parallel threshold). Widths that are multiples of 64 take AMX's tiles where the CPU
    has them (each thread configures its own)."""
    model = random_model(3, engine="numpy", **widths)
    model.numpy_step = NativeStep(model, "native", dtype)
    if not model.numpy_step.threaded:
        pytest.skip("the C step was built without OpenMP here (the compiler has none)")
    sources = random_sources(4, 3, 14, 20, 40)
    tokens = torch.tensor(random_sources(5, 3, 14, 50, 50)).unsqueeze(1)
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 3):
            torch.set_num_threads(threads)
            memory = model.encode(torch.tensor([s + [0] * (40 - len(s)) for s in sources]))
            runs.append((memory,) + one_call(model, sources, [3, 9, 5], tokens, [50, 1, 20], fill_lean=True))
    finally:
        torch.set_num_threads(before)
    for name, a, b in zip(("memory", "logits", "cross-attention", "pending keys", "next logits"), runs[0], runs[1]):
        assert torch.equal(a, b), name
    assert torch.equal(runs[0][6], runs[1][6])
    for a, b in zip(runs[0][5], runs[1][5]):  # the slots each row has written (others start uninitialized)
        for row, n in enumerate(runs[0][6].tolist()):
            assert torch.equal(a[row, :, :n + 1], b[row, :, :n + 1])


@pytest.mark.parametrize("width", [2, 4])
def test_sbs_exact_on_the_pools_own_rows_equals_its_gathered_calls(copy_model, width, monkeypatch):
    """On the native engine sbs-exact feeds a row pool's rows in place (RowPool.view, Call.rows); the
    gather-and-write path it replaces gives the same n-best lists, scores to the bit, and both
    equal beam search's tokens."""
    from molspec_core.decoding import speculative_beam as sbs_module

    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(41, 4, len(vocab), 3, 14)

    def factory(source):
        return make_drafter("pointer", source, 4, 1)

    views = []
    original_view = sbs_module.RowPool.view
    monkeypatch.setattr(sbs_module.RowPool, "view", lambda self, *a: views.append(1) or original_view(self, *a))
    in_pool = speculative_beam(model, sources, width, factory, exact=True)
    assert views  # the pool path really ran
    monkeypatch.setattr(sbs_module, "NativeStep", type("NotNative", (), {}))
    gathered = speculative_beam(model, sources, width, factory, exact=True)
    reference = beam_search(model, sources, width)
    for a, b, c in zip(in_pool, gathered, reference):
        assert [(h.tokens, h.score) for h in a.hypotheses] == [(h.tokens, h.score) for h in b.hypotheses]
        assert [h.tokens for h in a.hypotheses] == [h.tokens for h in c.hypotheses]


@pytest.mark.parametrize("drafter,n_drafts", [("pointer", 1), ("paper", 6)])
def test_sbs_exact_never_reads_a_native_pools_unwritten_slots(copy_model, drafter, n_drafts, monkeypatch):
    """On the native engine sbs-exact leaves its row pool uninitialized (RowPool zeroed=False): the C
    step reads a row's slots only up to its length, and gathered copies (several drafts a row, fed by
    torch, which reads masked slots) get zeros there. Filled with NaN instead, the pool still gives
    beam search's n-best lists."""
    from molspec_core.cache import RowPool

    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(43, 4, len(vocab), 3, 14)
    made = []

    def poisoned(self, shape):
        made.append(self.zeroed)
        first = self.base.layers[0].keys
        return first.new_zeros(shape) if self.zeroed else first.new_full(shape, float("nan"))

    monkeypatch.setattr(RowPool, "_new", poisoned)
    found = speculative_beam(model, sources, 10, lambda source: make_drafter(drafter, source, 3, n_drafts), exact=True)
    assert made and not any(made)  # the pools were left unzeroed
    reference = beam_search(model, sources, 10)
    for a, b in zip(found, reference):
        assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
        assert np.allclose([h.score for h in a.hypotheses], [h.score for h in b.hypotheses], atol=1e-5)


def test_a_pool_view_is_refused_off_the_native_lean_call(copy_model):
    """A view's rows index the pool, not the call: the NumPy and torch steps would read the wrong rows."""
    from molspec_core.cache import RowPool

    model = on_engine(copy_model[0], "numpy")
    cache, _ = start(model, [[5, 6, 7]], None, padding=8)
    pool = RowPool(cache, 2)
    view = pool.view(torch.tensor([1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="row pool"):
        model.decode(torch.tensor([[[4]]]), view)


@pytest.mark.parametrize("order", [
    [0, 0, 1, 2, 3],  # a beam's rows shift down behind its best slot's two children
    [1, 0, 2, 4, 3],  # two pairs trading places: cycles, each staged once
    [2, 0, 1, 1, 4, 4],  # a cycle of three beside a row read twice
    [3, 3, 3, 3],  # every row from one
    [0, 1, 2],  # nothing moves
])
def test_beam_steps_move_rows_each_from_its_parent_whatever_the_order(order):
    """beam_run's row moves (csrc move_rows, tested through reorder_rows) copy each moved row once, straight
    from its source where no other move still reads the row they overwrite, staging only for cycles: every
    order gives what indexing gives, the slots past `used` untouched."""
    import ctypes

    library = native._library()
    rng = np.random.default_rng(len(order))
    outer, groups, capacity, head_dim, used = 3, 2, 6, 4, 5  # stride = capacity * head_dim, 5 of its 24 floats used
    slots = rng.standard_normal((outer, len(order), groups, capacity * head_dim)).astype(np.float32)
    want = slots.copy()
    want[:, :, :, :used] = slots[:, order, :, :used]
    rows = np.array(order, dtype=np.int64)
    assert library.reorder_rows(slots.ctypes.data_as(ctypes.c_void_p), outer, len(order), groups,
                                ctypes.c_int64(capacity * head_dim), ctypes.c_int64(used),
                                rows.ctypes.data_as(ctypes.c_void_p)) == 0
    assert np.array_equal(slots, want)


def test_a_lookup_draft_len_past_the_models_positions_is_cut_as_on_the_other_engines(copy_model):
    """A lookup draft is cut to its source and its row's room on every engine (fit_drafts), so a draft_len above the
    model's positions (the copy model has 128) drafts as one of the source's length. The loop in C took the call's
    width from draft_len and refused it as a sequence longer than the model's positions."""
    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(41, 6, len(vocab), 3, 20)
    plain = greedy(model, sources, lambda s: make_drafter("none", s, 0, 0))
    for draft_len in (model.cfg.max_positions, 200):
        drafted = greedy(model, sources, lambda s: make_drafter("lookup", s, draft_len, 1))
        assert [(r.hypotheses[0].tokens, r.hypotheses[0].score, r.hypotheses[0].finished) for r in drafted] == \
            [(r.hypotheses[0].tokens, r.hypotheses[0].score, r.hypotheses[0].finished) for r in plain]
        assert sum(r.stats.draft_tokens_accepted for r in drafted) > 0


@pytest.mark.parametrize("n_drafts", [1, 3])
@pytest.mark.parametrize("engine", ["native", "native-int8"])
def test_exactly_tied_alternatives_are_ordered_as_beam_search_orders_them(engine, n_drafts):
    """A model with two tokens of the same embedding row ties their alternatives exactly. On the C step sbs-exact
    holds beam search's log-probs to the bit (several drafts a row fed as rows of their own: in torch, as before,
    they parted at such ties), so it breaks those ties as beam search does (best_children's order) and returns
    the same lists. On the other engines the two searches can part at such ties, which no tie rule can mend:
    speculative_beam.py's docstring says why."""
    for seed in range(3):
        model = copying_model(seed, noise=0.5)
        with torch.no_grad():
            model.embed.weight[9] = model.embed.weight[6]
        use_engine(model, engine)
        sources = random_sources(seed, 6, COPYING_VOCAB, 2, 12)
        plain = beam_search(model, sources, 4, max_len=14)
        fast = speculative_beam(model, sources, 4, lambda s: make_drafter("lookup", s, 2, n_drafts), exact=True,
                                max_len=14)
        assert sum(len(r.hypotheses) - len({h.score for h in r.hypotheses}) for r in plain) > 0  # ties in the lists
        assert sum(r.stats.draft_tokens_accepted for r in fast) > 0
        for a, b in zip(plain, fast):
            assert [(h.tokens, h.score, h.finished) for h in b.hypotheses] == \
                [(h.tokens, h.score, h.finished) for h in a.hypotheses]
