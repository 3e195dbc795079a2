from __future__ import annotations

import copy
import importlib.util
import json
import math
import random
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

torch.set_num_threads(1)  # tests are small; one thread keeps them predictable beside other work

from molspec_core import checkpoint
from molspec_core.decoding.result import GENERATED, DecodeResult, DecodeStats, Hypothesis
from molspec_core.model import Seq2SeqTransformer, preset
from molspec_core.native import native_unavailable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"
SHARED_BENCH = ROOT.parent / "shared" / "bench"
FORWARD_MODEL = ROOT / "models" / "forward"


def load_tool(name: str) -> ModuleType:
    """A script of tools/ (not a package) loaded as a module, for its tests."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"USPTO data not found at {SHARED_DATA}")


@pytest.fixture(scope="session")
def copy_model():
    """(model, vocab): a tiny model trained to copy its source minus every 'C' (tests/make_copy_model.py)."""
    model, vocab, _ = checkpoint.load(FIXTURES / "copy_model")
    return model, vocab


NATIVE_UNAVAILABLE = native_unavailable()
needs_native = pytest.mark.skipif(NATIVE_UNAVAILABLE is not None, reason=f"no C step here: {NATIVE_UNAVAILABLE}")


@pytest.fixture(params=["torch", "numpy", pytest.param("native", marks=needs_native), "graphs"])
def engine(request) -> str:
    """Who runs the lean decoder calls (npstep.py, native.py, graphs.py): the exactness tests run on
    each. "graphs" is the CUDA-graph engine's fixed-shape call, run eagerly on a CPU (its capture needs
    a GPU: test_graphs.py). The native engine's int8 computes another function, with its own
    guarantees: test_native.py."""
    return request.param


def use_engine(model: Seq2SeqTransformer, engine: str) -> None:
    """Lean decoder calls of `model` on engine ("torch", "numpy", "native", "native-int8" or "graphs")."""
    if engine == "graphs":
        model.use_cuda_graphs(capture=model.device.type == "cuda")
        return
    native = engine.startswith("native")
    model.use_numpy_step(engine != "torch", native=native, dtype="int8" if engine == "native-int8" else "float32")


def on_engine(model: Seq2SeqTransformer, engine: str) -> Seq2SeqTransformer:
    """A copy of model whose lean decoder calls run on engine (see use_engine). The C step reads
    float16 weights, so for the native engine the copy's weights are rounded to float16 values
    (shipped and exported checkpoints are stored so; the copy model fixture is not)."""
    model = copy.deepcopy(model)
    if engine.startswith("native"):
        with torch.no_grad():
            for param in model.parameters():
                param.copy_(param.half().float())
    use_engine(model, engine)
    return model


def as_forward_and_retro(models: Path) -> None:
    """The copy model in `models`/forward copied to `models`/retro, each config naming its folder's task: a model of
    each task, as the round-trip check asks (Predictor.check_round_trip)."""
    shutil.copytree(models / "forward", models / "retro")
    for task in ("forward", "retro"):
        config = json.loads((models / task / "config.json").read_text())
        (models / task / "config.json").write_text(json.dumps({**config, "task": task}))


def record_loads(monkeypatch) -> list:
    """Record every Predictor that Predictor.load returns from here on, in order, into the returned list."""
    from molspec_core.service import Predictor

    loaded: list[Predictor] = []
    load = Predictor.load
    monkeypatch.setattr(Predictor, "load", lambda *args, **kwargs: loaded.append(load(*args, **kwargs)) or loaded[-1])
    return loaded


def signal_at_decode(monkeypatch, signum: int, at: int) -> None:
    """Predictor.decode (one call a batch) as the signal `signum` meets it at its `at`th call: the stop comes while
    the window's batches before it are decoded and those after it are not."""
    import signal

    from molspec_core.service import Predictor

    real, calls = Predictor.decode, []

    def decode(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            signal.raise_signal(signum)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "decode", decode)


def count_device_reads(monkeypatch) -> list[str]:
    """Record every read of a tensor's value by the host (.item(), int(), bool(), float(), tolist())
    made from molspec_core's code, into the returned list. On a GPU each one makes the host wait for
    the device's queue, and a CUDA graph cannot record one."""
    reads: list[str] = []

    def counted(name):
        plain = getattr(torch.Tensor, name)

        def read(self, *args):
            caller = sys._getframe(1).f_code.co_filename
            if "molspec_core" in caller:
                reads.append(f"{name} in {caller}:{sys._getframe(1).f_lineno}")
            return plain(self, *args)
        return read

    for name in ("item", "__bool__", "__int__", "__float__", "__index__", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    return reads


def random_model(seed: int, vocab_size: int = 14, engine: str = "torch", **overrides) -> Seq2SeqTransformer:
    """A random tiny model whose weights are float16 values, as a shipped checkpoint's are, so that
    engine "numpy" takes the kernel it takes for a shipped model (npstep's fp16-weight products);
    its layer norms have random gains and shifts (npstep folds them), not the identity of a new one."""
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(preset("tiny", vocab_size, max_positions=256, **overrides)).eval()
    with torch.no_grad():
        for norm in (m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)):  # not the identity
            norm.weight.normal_(1.0, 0.2)
            norm.bias.normal_(0.0, 0.2)
        for param in model.parameters():
            param.copy_(param.half().float())
    use_engine(model, engine)
    return model


def copying_model(seed: int, engine: str = "torch", noise: float = 0.2) -> Seq2SeqTransformer:
    """The copy model fixture (vocabulary of 16) with seeded random noise added to every weight (`noise` times
    each tensor's spread), rounded to float16 values like random_model's. Unlike a random model, whose greedy
    output is its start token over and over (never a source token, never eos, so no draft is ever accepted),
    it mostly copies its source and finishes, but not always: drafts are accepted, rejected and cut short, so
    the equality tests built on it run the drafted paths. Its tests assert that drafts were accepted."""
    model, _, _ = checkpoint.load(FIXTURES / "copy_model")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * noise * param.std().clamp_min(1e-3))
            param.copy_(param.half().float())
    use_engine(model, engine)
    return model


COPYING_VOCAB = 16  # copying_model's vocabulary: random_sources(seed, n, COPYING_VOCAB) are its sources


def random_sources(seed: int, n: int, vocab_size: int, lo: int = 3, hi: int = 24) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab_size) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def decoded_answers(predictor, *answers: tuple[str, float], calls: int = 1, seconds: float = 0.0):
    """A made-up decode: each (SMILES, probability) as a hypothesis of generated tokens, in the order given."""
    hypotheses = []
    for smiles, probability in answers:
        ids = tuple(predictor.vocab.encode(smiles))
        hypotheses.append(Hypothesis(ids, math.log(probability), (GENERATED,) * len(ids)))
    return DecodeResult(hypotheses, DecodeStats(model_calls=calls, wall_time_s=seconds))


def decoder_clock(model: Seq2SeqTransformer, monkeypatch) -> dict[str, float]:
    """A fake clock for the time limit (limits.now) on which every decoder call of `model` takes a second; the
    clock's {"seconds": ...}."""
    from molspec_core import limits

    clock = {"seconds": 0.0}
    real_decode = model.decode

    def decode(*args, **kwargs):
        clock["seconds"] += 1
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(model, "decode", decode)
    monkeypatch.setattr(limits, "now", lambda: clock["seconds"])
    return clock


def molfile(smiles: str, title: str = "") -> str:
    """The molblock a drawing program writes for `smiles`: 2D coordinates, stereo as wedge bonds."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.MolFromSmiles(smiles)
    AllChem.Compute2DCoords(mol)
    Chem.WedgeMolBonds(mol, mol.GetConformer())
    mol.SetProp("_Name", title)
    return Chem.MolToMolBlock(mol)


def sd_file_text() -> str:
    """Four SD records as a drawing program writes them: L-alanine (a wedge bond, an ID field), a record
    whose counts line is broken, one whose carbon has five bonds, and 4-chloropyridine (no fields)."""
    def block(smiles: str, title: str, fields: dict[str, str]) -> str:
        text = molfile(smiles, title)
        return text + "".join(f">  <{name}>\n{value}\n\n" for name, value in fields.items()) + "$$$$\n"

    alanine = block("C[C@H](N)C(=O)O", "L-alanine", {"ID": "A-1"})
    broken = block("CCO", "broken", {"ID": "B-2"}).replace("  3  2  0", "  3  x  0")
    five = block("CC(C)(C)C", "five bonds", {"ID": "C-3", "note": "drawn wrong"})
    five = five.replace("  1  2  1  0", "  1  2  2  0", 1)
    return alanine + broken + five + block("Clc1ccncc1", "4-chloropyridine", {})


def excel_and_csv(workbook: bytes | Path, csv_file: bytes | Path) -> tuple:
    """The same table read from an Excel workbook and from a CSV (bytes or a path), every cell as text with each
    number as Excel holds it: 15 significant digits, and a whole number without its decimal point (the CSV's 94.0
    is the workbook's 94; a time_ms can be one). The two then compare cell for cell."""
    import io

    import pandas as pd

    def as_excel_holds(text: str) -> str:
        try:
            return f"{float(text):.15g}"
        except ValueError:
            return text

    def source(data: bytes | Path):
        return io.BytesIO(data) if isinstance(data, bytes) else data

    book = pd.read_excel(source(workbook), dtype=str, keep_default_na=False)
    table = pd.read_csv(source(csv_file), dtype=str, keep_default_na=False)
    return book.map(as_excel_holds), table.map(as_excel_holds)


def disk_full(monkeypatch) -> None:
    """Every file written through io's renaming fails at its rename, as on a disk that filled up."""
    import errno
    import os

    def full(partial, target):  # as a write() fails: without a file name, which the error line adds
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("molspec_core.io.os.replace", full)
