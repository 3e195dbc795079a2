"""Fuzzing the input path: every input ends in predictions or a clear error, nothing escapes.

A seeded generator makes 10,000 inputs per run: random strings, mutated valid SMILES, unbalanced
rings and brackets, huge strings, unicode and control characters, empty lines, tokens missing from
the vocabulary, reaction SMILES with '>'. The tiny copy model keeps decoding fast, so the run
measures the validation and error paths rather than the model."""
import csv
import random
import string

import pandas as pd
import pytest

from conftest import FIXTURES
from molspec_core.cli import main
from molspec_core.service import Predictor

VALID = ["CCO", "c1ccccc1N", "CC(=O)Oc1ccccc1C(=O)O", "N#Cc1ccncc1", "OCC(O)CO", "C1CCNCC1", "Brc1cccnc1",
         "CC(C)(C)OC(=O)N1CCCC1", "O=C(Cl)c1ccccc1", "CN(C)C=O"]
ALPHABET = string.ascii_letters + string.digits + "()[]=#@+-\\/%.:>*$ \t"


def mutate(rng: random.Random, smiles: str) -> str:
    chars = list(smiles)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(3)
        at = rng.randrange(len(chars) + 1)
        if op == 0:
            chars.insert(at, rng.choice(ALPHABET))
        elif op == 1 and chars:
            del chars[min(at, len(chars) - 1)]
        elif chars:
            chars[min(at, len(chars) - 1)] = rng.choice(ALPHABET)
    return "".join(chars)


def fuzz_inputs(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    makers = [
        lambda: "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))),
        lambda: mutate(rng, rng.choice(VALID)),
        lambda: rng.choice(VALID) + rng.choice(["1", "(", ")", "[", "]", "((", "C1CC"]),
        lambda: "C" * rng.choice([2001, 5000, 20000]),
        lambda: "".join(chr(rng.randrange(0x80, 0x3000)) for _ in range(rng.randint(1, 10))),
        lambda: "".join(chr(rng.randrange(0, 32)) for _ in range(rng.randint(1, 5))),
        lambda: rng.choice(["", " ", "\t", "\n"]),
        lambda: rng.choice(VALID) + rng.choice(["[Pt]", "[U]", "[Na+]", "S", "P", "I", "[nH]"]),
        lambda: rng.choice(VALID) + ">" + rng.choice(["", ">", ">CCO", "CC>"]) + rng.choice(VALID),
        lambda: rng.choice(VALID),
    ]
    return [rng.choice(makers)() for _ in range(n)]


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load(FIXTURES / "copy_model", device="cpu")


def test_ten_thousand_inputs_through_predict(predictor):
    inputs = fuzz_inputs(0, 10_000)
    results = predictor.predict(inputs, method="spec-pointer", batch_size=16)
    assert len(results) == len(inputs)
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    assert all(r.predictions for r in ok)
    assert all(isinstance(r.error, str) and r.error and "Traceback" not in r.error for r in errors)
    assert all(r.query == str(i) for r, i in zip(results, inputs))  # rows never shift
    assert len(ok) > 500 and len(errors) > 5000  # both paths were exercised
    print(f"fuzz: {len(inputs)} inputs, {len(ok)} predicted, {len(errors)} clear errors")


@pytest.mark.parametrize("method", ["beam", "sbs-exact", "mentored"])
def test_fuzz_other_methods(predictor, method):
    inputs = fuzz_inputs(1, 300)
    results = predictor.predict(inputs, method=method, n_best=2)
    assert len(results) == 300 and all(r.ok == bool(r.predictions) for r in results)


def test_fuzzed_csv_through_the_cli(tmp_path):
    inputs = fuzz_inputs(2, 10_000)
    frame = pd.DataFrame({"smiles": inputs})
    frame.to_csv(tmp_path / "in.csv", index=False, quoting=csv.QUOTE_ALL)  # pandas leaves a lone \r unquoted
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", str(FIXTURES / "copy_model"), "--input", str(tmp_path / "in.csv"),
                 "--output", str(out), "--method", "spec-lookup", "--batch-size", "32"]) == 0
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert sorted(set(table["row"].astype(int))) == list(range(1, 10_001))  # every row reported
    bad = table[table["error"] != ""]
    good = table[table["error"] == ""]
    assert len(bad) > 5000 and (good["rank"] != "").all()
    print(f"fuzz CLI: {len(inputs)} rows, {len(set(good['row']))} predicted, {len(bad)} clear errors")
    # the copy model drops every 'C', so all-carbon queries give an empty prediction: marked invalid
    assert (good[good["smiles"] == ""]["valid"] == "False").all()
    for column in ("query", "smiles", "error"):  # nothing a spreadsheet would run
        assert not table[column].str.match(r"^[=+\-@\t\r]").any()
