"""The scripts of tools/ refuse, before any work, what would destroy their inputs or divide by nothing: an output
that is one of the run's inputs (or, for an output folder, an input folder, a folder inside one, or one holding an
input), two outputs at one path, an argument or input file that leaves nothing to count. Each script's main runs
in this process with a command line as a user types it; where a check is missing, the stand-in Predictor stops
the run at the model's loading, so no test decodes or writes over anything it did not make."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import FIXTURES, ROOT, load_tool
from molspec_core.bench import percentile
from molspec_core.data import Pair, write_splits
from molspec_core.io import OutputFileError

sys.path.insert(0, str(ROOT / "tools"))
from _toolbox import check_output_folder, check_outputs  # noqa: E402


class NoModel:
    """A Predictor that cannot load: a run that gets this far went past the check under test."""

    @staticmethod
    def load(*args, **kwargs):
        raise AssertionError("a model was loaded: the run went past its checks")


def run_main(tool, monkeypatch, capsys, *argv: object) -> tuple[object, str]:
    """(exit code or message, stderr) of the script's main on this command line; it must exit."""
    monkeypatch.setattr(sys, "argv", [f"{tool.__name__}.py", *map(str, argv)])
    with pytest.raises(SystemExit) as stop:
        tool.main()
    return stop.value.code, capsys.readouterr().err


def text_of(path: Path) -> str:
    return path.read_text()


REACTIONS = {"CCO": ["CC.O", "O.CC"], "CCN": ["CC.N", "N.CC"]}


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    """A tiny forward prepare-data folder."""
    train = [Pair(s, t) for t, sources in REACTIONS.items() for s in sources]
    folder = tmp_path / "tiny"
    write_splits(folder, {"train": train, "val": train[:1], "test": train[:1]}, {"task": "forward", "augment": 2})
    return folder


# ---- the shared checks --------------------------------------------------------------------------


def test_an_output_that_is_an_input_is_refused_naming_both_through_links_too(tmp_path: Path):
    source = tmp_path / "in.txt"
    source.write_text("C\n")
    (tmp_path / "link.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    for output in (source, tmp_path / "link.txt", tmp_path / "hard.txt", tmp_path / "." / "in.txt"):
        with pytest.raises(OutputFileError, match=r"--out .* is --src .*in\.txt, which this run reads"):
            check_outputs([("--out", output)], [("--src", source)])
    check_outputs([("--out", tmp_path / "out.txt"), ("--log", None)], [("--src", source), ("--tgt", None)])


def test_two_outputs_at_one_path_and_what_check_output_refuses_are_refused(tmp_path: Path):
    with pytest.raises(OutputFileError, match="--out .*a.json and the summary .*a.json are one file"):
        check_outputs([("--out", tmp_path / "a.json"), ("the summary", tmp_path / "a.json")])
    with pytest.raises(OutputFileError, match="^--out: .* is a folder"):
        check_outputs([("--out", tmp_path)])
    with pytest.raises(OutputFileError, match="^--out: the folder of .* does not exist"):
        check_outputs([("--out", tmp_path / "no" / "such.txt")])


def test_an_output_folder_is_neither_an_input_folder_nor_inside_one_nor_holding_an_input(tmp_path: Path):
    data, mined = tmp_path / "data", tmp_path / "out" / "mined.json"
    data.mkdir()
    mined.parent.mkdir()
    mined.write_text("{}")
    with pytest.raises(OutputFileError, match=r"--out .*data is --data .*data, which this run reads"):
        check_output_folder("--out", data, [("--data", data)])
    with pytest.raises(OutputFileError, match=r"--out .*sub lies inside --data .*data"):
        check_output_folder("--out", data / "sub", [("--data", data)])
    with pytest.raises(OutputFileError, match=r"--out .*out holds --mined .*mined.json"):
        check_output_folder("--out", tmp_path / "out", [("--data", data), ("--mined", mined)])
    with pytest.raises(OutputFileError, match="is a file, not a folder"):
        check_output_folder("--out", mined, [])
    check_output_folder("--out", tmp_path / "new", [("--data", data), ("--replay", None)])


def test_the_95th_percentile_is_a_value_at_least_95_percent_of_the_values_do_not_exceed():
    assert percentile([0.3, 0.1], 0.95) == 0.3  # int(0.95 * (n - 1)) took the faster of two
    assert percentile([5.0], 0.95) == 5.0
    assert percentile(list(range(1, 21)), 0.95) == 19
    assert percentile(list(range(1, 61)), 0.95) == 57  # 0.95 * 60 is a hair above 57 in floating point
    assert percentile(list(range(100, 0, -1)), 0.5) == 50
    with pytest.raises(ValueError):
        percentile([], 0.95)


# ---- outputs over inputs ----------------------------------------------------------------------------


def test_textbook_refuses_to_write_its_report_over_the_examples(tmp_path, monkeypatch, capsys):
    tool = load_tool("textbook")
    examples = tmp_path / "examples.json"
    shutil.copy(ROOT / "assets" / "examples.json", examples)
    before = text_of(examples)
    monkeypatch.setattr(tool, "EXAMPLES", examples)
    monkeypatch.setattr(tool, "Predictor", NoModel)
    code, err = run_main(tool, monkeypatch, capsys, "--out", examples)
    assert code == 2 and "--out" in err and "is the examples file" in err
    assert text_of(examples) == before


@pytest.mark.parametrize("augment, said", [("0", "between 1 and 20, not 0"), ("x", "a whole number, not 'x'")])
def test_textbook_refuses_writings_it_cannot_read_before_a_model_loads(augment, said, monkeypatch, capsys):
    # --augment 0 loaded the forward model and ended in service's ValueError traceback
    tool = load_tool("textbook")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    code, err = run_main(tool, monkeypatch, capsys, "--augment", augment)
    assert code == 2 and f"--augment: must be {said}" in err


def test_stereo_check_refuses_to_write_its_report_over_the_report_it_reads(tmp_path, monkeypatch, capsys):
    tool = load_tool("stereo_check")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    report = tmp_path / "r.json"
    report.write_text('{"kept": {"lines": []}}\n')
    code, err = run_main(tool, monkeypatch, capsys, "--lines-from", report, "--against", report, "--out", report,
                         "--test", tmp_path / "test")  # refused before the test set is read
    assert code == 2 and f"--out {report} is --lines-from {report}" in err
    assert text_of(report) == '{"kept": {"lines": []}}\n'
    code, err = run_main(tool, monkeypatch, capsys, "--lines-from", tmp_path / "old.json", "--against", report,
                         "--out", report, "--test", tmp_path / "test")
    assert code == 2 and f"is --against {report}" in err


def test_hard_examples_build_refuses_to_write_into_the_folders_it_reads(data, tmp_path, monkeypatch, capsys):
    tool = load_tool("hard_examples")
    before = text_of(data / "train.src")
    code, err = run_main(tool, monkeypatch, capsys, "build", "--data", data, "--replay", data, "--out", data)
    assert code == 2 and f"--out {data} is --data {data}" in err
    code, err = run_main(tool, monkeypatch, capsys, "build", "--data", data, "--out", data / "hard")
    assert code == 2 and "lies inside --data" in err
    mined = tmp_path / "hard" / "stats.json"  # a report where the folder's stats would go
    mined.parent.mkdir()
    mined.write_text("{}")
    code, err = run_main(tool, monkeypatch, capsys, "build", "--data", data, "--mined", mined, "--out", mined.parent)
    assert code == 2 and "holds --mined" in err and text_of(mined) == "{}"
    with pytest.raises(OutputFileError):  # the function refuses too, for a caller without the command line
        tool.build(tmp_path / "other", None, data, replay=data)
    assert text_of(data / "train.src") == before


def test_hard_examples_build_refuses_a_folder_that_already_holds_files(data, tmp_path, monkeypatch, capsys):
    """A rerun of the recipe, or a model folder given as --out, was written into without a word: its stats.json
    replaced and the new training files mixed with what was there (prepare-data refuses such a folder)."""
    tool = load_tool("hard_examples")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "stats.json").write_text('{"earlier": 1}')
    code, err = run_main(tool, monkeypatch, capsys, "build", "--data", data, "--out", earlier)
    assert code == 2 and f"--out {earlier} already holds files" in err
    assert text_of(earlier / "stats.json") == '{"earlier": 1}' and [p.name for p in earlier.iterdir()] == ["stats.json"]
    with pytest.raises(OutputFileError, match="already holds files"):  # the function too
        tool.build(data, None, earlier)
    (tmp_path / "empty").mkdir()
    assert tool.build(data, None, tmp_path / "empty")["train"] == 4  # an empty folder is a new one


def test_hard_examples_starts_refuses_to_write_over_the_training_sources(data, monkeypatch, capsys):
    tool = load_tool("hard_examples")
    before = text_of(data / "train.src")
    code, err = run_main(tool, monkeypatch, capsys, "starts", "--data", data, "--out", data / "train.src")
    assert code == 2 and f"is --data's train.src {data / 'train.src'}" in err
    assert text_of(data / "train.src") == before


def test_rank_pairs_mine_never_writes_its_summary_over_its_pairs(data, tmp_path, monkeypatch, capsys):
    tool = load_tool("rank_pairs")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    with pytest.raises(OutputFileError, match=r"--out .*p\.json and the summary .*p\.json are one file"):
        tool.mine("no-model", data, tmp_path / "p.json")
    code, err = run_main(tool, monkeypatch, capsys, "mine", "--model", "m", "--data", data, "--out",
                         tmp_path / "p.json")
    assert code == 2 and "are one file" in err
    code, err = run_main(tool, monkeypatch, capsys, "mine", "--model", "m", "--data", data, "--out",
                         data / "train.tgt")
    assert code == 2 and "is --data's train.tgt" in err
    assert not (tmp_path / "p.json").exists()


def test_rank_pairs_summary_of_pairs_named_near_the_limit_has_a_name_that_fits(tmp_path):
    """--out <251 letters>.tsv: the summary, its suffix .json, took 256 bytes, and the run was refused with 'File name
    too long' naming a summary its user never named. Its name is cut to fit (io.fitted_name); short names as before."""
    tool = load_tool("rank_pairs")
    assert tool.summary_path(tmp_path / "p.tsv") == tmp_path / "p.json"
    summary = tool.summary_path(tmp_path / ("p" * 251 + ".tsv"))
    assert summary.parent == tmp_path and summary.suffix == ".json" and len(os.fsencode(summary.name)) <= 255


def test_rank_pairs_near_refuses_to_write_over_its_pairs(tmp_path, monkeypatch, capsys):
    tool = load_tool("rank_pairs")
    monkeypatch.setattr(tool, "gaps", NoModel.load)
    pairs = tmp_path / "p.tsv"
    pairs.write_text("CC.O\tCCO\tCCC\n")
    code, err = run_main(tool, monkeypatch, capsys, "near", "--model", "m", "--pairs", pairs, "--out", pairs)
    assert code == 2 and f"--out {pairs} is --pairs {pairs}" in err
    named_json = tmp_path / "p.json"  # pairs named as --out p.tsv's summary would be
    named_json.write_text("CC.O\tCCO\tCCC\n")
    code, err = run_main(tool, monkeypatch, capsys, "near", "--model", "m", "--pairs", named_json, "--out", pairs)
    assert code == 2 and f"the summary (--out with the suffix .json) {named_json} is --pairs {named_json}" in err
    assert text_of(pairs) == text_of(named_json) == "CC.O\tCCO\tCCC\n"


def test_pool_sweep_decode_and_make_stock_and_make_10k_refuse_their_input_as_output(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src.txt"
    src.write_text("CCO\n")
    tool = load_tool("pool_sweep")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    code, err = run_main(tool, monkeypatch, capsys, "decode", "--src", src, "--tgt", src, "--out", src)
    assert code == 2 and f"is --src {src}" in err
    stock = load_tool("make_stock")
    train = tmp_path / stock.TRAIN
    train.parent.mkdir(parents=True)
    train.write_bytes(b"")
    code, err = run_main(stock, monkeypatch, capsys, "--data", tmp_path, "--out", train)
    assert code == 2 and "is the training reactions" in err
    code, err = run_main(load_tool("make_10k"), monkeypatch, capsys, "--src", src, "--out", src)
    assert code == 2 and f"is --src {src}" in err
    assert text_of(src) == "CCO\n" and train.read_bytes() == b""


# ---- the scripts that had no parser -------------------------------------------------------------------------


class NoServer:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a server was started")


def test_screenshot_and_batch_page_check_their_paths_before_a_server_starts(tmp_path, monkeypatch, capsys):
    shot = load_tool("readme_screenshot")
    monkeypatch.setattr(shot.subprocess, "Popen", NoServer)
    code, err = run_main(shot, monkeypatch, capsys, "CCO", "--out", tmp_path / "no" / "such.png")
    assert code == 2 and "does not exist" in err
    page = load_tool("measure_batch_page")
    code, err = run_main(page, monkeypatch, capsys, tmp_path / "missing.csv")
    assert code == 2 and "missing.csv is not a file" in err


def test_cost_ratio_names_a_model_without_a_draft(monkeypatch, capsys):
    code, err = run_main(load_tool("cost_ratio"), monkeypatch, capsys, FIXTURES / "copy_model")
    assert code == 2 and "has no draft model" in err


def test_cost_ratio_refuses_a_query_the_model_cannot_read_in_one_line(monkeypatch, capsys):
    # `cost_ratio.py forward 'xx(('` ended in service's ValueError traceback
    tool = load_tool("cost_ratio")

    class Drafted:
        draft_model = object()

        @classmethod
        def load(cls, *args, **kwargs):
            return cls()

        def prepare(self, text):
            raise ValueError(f"not a valid SMILES: RDKit cannot parse {text!r}")

    monkeypatch.setattr(tool, "Predictor", Drafted)
    code, err = run_main(tool, monkeypatch, capsys, "forward", "xx((")
    assert code == 2 and "not a valid SMILES: RDKit cannot parse 'xx(('" in err and "Traceback" not in err


# ---- arguments and inputs that left nothing to count -------------------------------------------------------


def test_rank_pairs_near_on_no_pairs_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    tool = load_tool("rank_pairs")
    monkeypatch.setattr(tool, "gaps", lambda model, lines, **kwargs: [0.0] * len(lines))
    pairs, out = tmp_path / "pairs.tsv", tmp_path / "near.tsv"
    pairs.write_text("")  # what mine writes where every recorded product is first
    code, _ = run_main(tool, monkeypatch, capsys, "near", "--model", FIXTURES / "copy_model", "--pairs", pairs,
                       "--out", out)
    assert "holds no pairs" in str(code)
    assert not out.exists() and not out.with_suffix(".json").exists()
    with pytest.raises(tool.NoPairs):
        tool.near(str(FIXTURES / "copy_model"), pairs, out, 2.5)


def test_rank_pairs_near_names_a_pair_the_model_cannot_read_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """A pairs file mined by another model (or written by hand) holding a token the scoring model lacks stopped near
    with a TokenizeError traceback once the model had loaded."""
    tool = load_tool("rank_pairs")
    pairs, out = tmp_path / "pairs.tsv", tmp_path / "near.tsv"
    pairs.write_text("CCO\tCCN\tCCC\nCC[Zz]\tCCO\tCCC\n")
    code, err = run_main(tool, monkeypatch, capsys, "near", "--model", FIXTURES / "copy_model", "--pairs", pairs,
                         "--out", out)
    assert code == 2 and (f"--pairs {pairs}, line 2: token '[Zz]' is not in the model's vocabulary: score the pairs "
                          "with the model that mined them (--model)") in err
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_pool_sweep_score_on_an_empty_file_says_so(tmp_path, monkeypatch, capsys):
    tool = load_tool("pool_sweep")
    empty = tmp_path / "empty.jsonl"
    for text in ("", "\n"):  # a blank line is no query either
        empty.write_text(text)
        with pytest.raises(SystemExit, match="holds no queries"):
            tool.main(["score", str(empty)])


def test_decode_cost_refuses_no_rounds(monkeypatch, capsys):
    tool = load_tool("decode_cost")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    code, err = run_main(tool, monkeypatch, capsys, "--src", "q.txt", "--rounds", "0")
    assert code == 2 and "--rounds: must be 1 or more, not 0" in err


def test_decode_cost_times_the_arithmetic_asked_for(tmp_path, monkeypatch, capsys):
    """decode_cost timed float32 only, where the app computes in int8 on a CPU; --dtype loads the arithmetic asked
    for, and one the engine cannot run here is a usage error, not a traceback."""
    tool = load_tool("decode_cost")
    asked = []

    class Refusing(Timed):
        @classmethod
        def load(cls, *args, **kwargs):
            asked.append(kwargs.get("dtype"))
            raise ValueError("int8 arithmetic runs on the CPU's native engine, not on cuda")

    monkeypatch.setattr(tool, "Predictor", Refusing)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    code, err = run_main(tool, monkeypatch, capsys, "--src", queries, "--dtype", "int8")
    assert asked == ["int8"] and code == 2 and "--dtype int8: int8 arithmetic runs on the CPU's native" in err


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_centre_check_refuses_a_limit_below_one(limit, tmp_path, monkeypatch, capsys):
    code, err = run_main(load_tool("centre_check"), monkeypatch, capsys, "--data", tmp_path, "--limit", limit)
    assert code == 2 and f"--limit: must be 1 or more, not {limit}" in err


def test_centre_check_says_so_when_no_reaction_is_mapped(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "uspto50k" / "gln_split" / "raw_test.csv"
    raw.parent.mkdir(parents=True)
    raw.write_text("id,reactants>reagents>production\n1,CC(=O)O.OCC>>CC(=O)OCC\n")
    code, _ = run_main(load_tool("centre_check"), monkeypatch, capsys, "--data", tmp_path)
    assert "none of the 1 reactions read has an atom map" in str(code)


@pytest.mark.parametrize("text,said", [
    ("id,rxn\n1,CC>>CC\n", "has no column 'reactants>reagents>production'"),  # a KeyError traceback
    ("id,reactants>reagents>production\n1,CCO\n", "line 2: 'CCO' is not a reaction"),  # "not enough values"
])
def test_centre_check_names_the_file_and_line_it_cannot_read(text, said, tmp_path, monkeypatch, capsys):
    raw = tmp_path / "uspto50k" / "gln_split" / "raw_test.csv"
    raw.parent.mkdir(parents=True)
    raw.write_text(text)
    code, err = run_main(load_tool("centre_check"), monkeypatch, capsys, "--data", tmp_path)
    assert code == 2 and f"{raw}" in err and said in err, err


@pytest.mark.parametrize("data,said", [
    (b"notgzip\n", "cannot be read to its end"),  # gzip's BadGzipFile traceback
    (gzip.compress(b"id,rxn\n1,CC>>CC\n"), "has no column 'reactants>reagents>production'"),  # a KeyError
])
def test_make_stock_names_a_training_file_it_cannot_read_and_writes_nothing(data, said, tmp_path, monkeypatch,
                                                                             capsys):
    tool = load_tool("make_stock")
    train = tmp_path / tool.TRAIN
    train.parent.mkdir(parents=True)
    train.write_bytes(data)
    code, err = run_main(tool, monkeypatch, capsys, "--data", tmp_path, "--out", tmp_path / "stock.smi.gz")
    assert code == 2 and f"{train}" in err and said in err, err
    assert not (tmp_path / "stock.smi.gz").exists()


def test_int8_agreement_names_the_methods_it_knows(tmp_path, monkeypatch, capsys):
    tool = load_tool("int8_agreement")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    code, err = run_main(tool, monkeypatch, capsys, "--src", queries, "--tgt", queries, "--method", "grredy")
    assert code == 2 and "invalid choice: 'grredy'" in err and "greedy" in err


def test_int8_agreement_refuses_a_method_int8_cannot_decode_before_the_float32_model_loads(tmp_path, monkeypatch,
                                                                                          capsys):
    """--method spec-paper (25 drafts a call; int8 verifies one) loaded both models and ended in predict's ValueError
    traceback; a model whose float32 weights the native engine cannot read (the copy model), in a traceback at the
    load. Each is a usage error naming the flag: the method once the int8 model has loaded, before the float32 one."""
    tool = load_tool("int8_agreement")
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    loaded = []

    class Int8Only:
        @classmethod
        def load(cls, *args, dtype="float32", **kwargs):
            loaded.append(dtype)
            return cls()

        def methods(self):
            return ["greedy", "beam"]

        def check_augment(self, augment):
            if augment > 1:
                raise ValueError("retro was trained on one writing of each query")

    monkeypatch.setattr(tool, "Predictor", Int8Only)
    code, err = run_main(tool, monkeypatch, capsys, "--src", queries, "--tgt", queries, "--method", "beam-uncached")
    assert code == 2 and loaded == ["int8"], err
    assert "--method beam-uncached: retro in int8 cannot decode it (int8 arithmetic runs no uncached baseline)" in err
    assert err.rstrip().endswith("it decodes greedy, beam")
    loaded.clear()  # a writing the model was not trained on: predict's ValueError traceback in the warm-up
    code, err = run_main(tool, monkeypatch, capsys, "--src", queries, "--tgt", queries, "--augment", "5")
    assert code == 2 and loaded == ["int8"] and "--augment 5: retro was trained on one writing" in err, err
    monkeypatch.undo()
    code, err = run_main(tool, monkeypatch, capsys, "--model", FIXTURES / "copy_model", "--src", queries, "--tgt",
                         queries)
    assert code == 2 and (f"error: --model {FIXTURES / 'copy_model'}: dtype int8 runs on the native engine, which "
                          "cannot take this model here") in err


class Timed:
    """A Predictor that reads every query (or none, `refuses`) and answers none, for the timing tools' counts."""

    refuses = False

    @classmethod
    def load(cls, *args, **kwargs):
        return cls()

    def prepare(self, source):
        if self.refuses:
            raise ValueError("unreadable")

    def predict(self, source, **options):
        return SimpleNamespace(ok=False, predictions=[])

    def methods(self):  # what int8_agreement asks the int8 side
        return ["greedy"]

    def check_augment(self, augment):
        pass


def test_page_latency_reports_a_true_95th_percentile(tmp_path, monkeypatch, capsys):
    tool = load_tool("page_latency")
    monkeypatch.setattr(tool, "Predictor", Timed)
    clock = iter([0.0, 0.1, 1.0, 1.3])  # two queries: 100 ms, then 300 ms
    monkeypatch.setattr(tool, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\nCCN\n")
    monkeypatch.setattr(sys, "argv", ["page_latency.py", "--src", str(queries), "--tgt", str(queries),
                                      "--methods", "greedy", "--warmup", "0"])
    tool.main()
    got = json.loads(capsys.readouterr().out)["methods"]["greedy"]
    assert got["p95_ms"] == got["max_ms"] == 300.0  # int(0.95 * (n - 1)) reported the faster of the two
    assert load_tool("server_latency").way_summary([0.3, 0.1])["p95_ms"] == 300.0  # the same percentile


def test_page_latency_says_so_when_the_model_reads_no_query(tmp_path, monkeypatch, capsys):
    tool = load_tool("page_latency")
    monkeypatch.setattr(tool, "Predictor", type("Refusing", (Timed,), {"refuses": True}))
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    code, _ = run_main(tool, monkeypatch, capsys, "--src", queries, "--tgt", queries, "--methods", "greedy")
    assert "reads none of the queries" in str(code)


class OneWriting(Timed):
    """A Predictor of a model trained on one writing of each query: it refuses other writings, as the service does."""

    def check_augment(self, augment):
        if augment > 1:
            raise ValueError("tiny was trained on one writing of each query")

    def predict(self, source, **options):
        raise AssertionError("a query was decoded in writings the model refuses")


@pytest.mark.parametrize("name,argv,said", [
    ("page_latency", ["--tgt", "{queries}", "--methods", "greedy"], "error: --augment 5: tiny was trained"),
    ("decode_cost", ["--configs", "1x1,4x3"], "error: --configs 4x3: tiny was trained"),
    ("pool_sweep", ["decode", "--tgt", "{queries}", "--out", "{tmp}/o.jsonl"], "decode: --augment 5: tiny was trained"),
    ("stereo_check", ["--task", "retro", "--test", "{tmp}"], "error: --augment 5: tiny was trained"),
])
def test_writings_a_model_was_not_trained_on_are_refused_naming_the_flag(name, argv, said, tmp_path, monkeypatch,
                                                                        capsys):
    """page_latency, stereo_check and decode_cost (a BxW with W > 1) ended in predict's ValueError traceback once the
    model loaded; pool_sweep decode wrote the answers of writings the app never gives such a model, for its exponents
    to pool."""
    tool = load_tool(name)
    monkeypatch.setattr(tool, "Predictor", OneWriting)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    for file in ("reactants.txt", "products.txt"):  # stereo_check's --test
        (tmp_path / file).write_text("CCO\n")
    given = [arg.format(tmp=tmp_path, queries=queries) for arg in argv]
    src = ["--src", queries] if name != "stereo_check" else []
    code, err = run_main(tool, monkeypatch, capsys, *given, *src)
    assert said in f"{code} {err}", (code, err)
    assert not (tmp_path / "o.jsonl").exists()


def test_decode_cost_hands_predict_one_query_at_a_time_where_each_is_read_in_writings():
    """As the CLI does (service.window_size): a BxW with W > 1 handed predict a window of 32 batches, timing a
    hand-over the CLI never makes."""
    tool = load_tool("decode_cost")
    calls = []

    class Counted:
        def predict(self, queries, batch_size, augment, **options):
            calls.append((len(queries), augment))
            return [SimpleNamespace(ok=True) for _ in queries]

    tool.run(Counted(), ["CCO"] * 5, (4, 3, False), {})
    assert calls == [(1, 3)] * 5
    calls.clear()
    tool.run(Counted(), ["CCO"] * 5, (4, 1, False), {})
    assert calls == [(5, 1)]


def test_int8_agreement_says_so_when_the_model_reads_no_query(tmp_path, monkeypatch, capsys):
    # it loaded both models, then ended in a ZeroDivisionError traceback
    tool = load_tool("int8_agreement")
    monkeypatch.setattr(tool, "Predictor", type("Refusing", (Timed,), {"refuses": True}))
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    code, _ = run_main(tool, monkeypatch, capsys, "--src", queries, "--tgt", queries)
    assert "reads none of the queries" in str(code)


class Answering:
    """A Predictor of one dtype (`load`'s) whose first answer to each query is ANSWERS[dtype][query] (None: refused)."""

    ANSWERS = {"float32": {"CCO": None, "CCN": "CC"}, "int8": {"CCO": None, "CCN": "CCC"}}

    def __init__(self, dtype):
        self.dtype = dtype

    @classmethod
    def load(cls, *args, dtype="float32", **kwargs):
        return cls(dtype)

    def prepare(self, source):
        if source not in self.ANSWERS[self.dtype]:
            raise ValueError("unreadable")
        return source

    def predict(self, source, **options):
        answer = self.ANSWERS[self.dtype][source]
        return SimpleNamespace(ok=answer is not None, predictions=[SimpleNamespace(smiles=answer)] if answer else [])

    def methods(self):  # what int8_agreement asks the int8 side
        return ["greedy"]

    def check_augment(self, augment):
        pass


def test_int8_agreement_does_not_count_a_query_both_refused_as_agreeing(tmp_path, monkeypatch, capsys):
    # a query both answered with none counted as the two giving the same answer: 0.5 here, not 0
    tool = load_tool("int8_agreement")
    monkeypatch.setattr(tool, "Predictor", Answering)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\nCCN\nxyz\n")  # the model reads no 'xyz': left out, and counted (it was not)
    monkeypatch.setattr(sys, "argv", ["int8_agreement.py", "--src", str(queries), "--tgt", str(queries),
                                      "--warmup", "0"])
    tool.main()
    got = json.loads(capsys.readouterr().out)
    assert (got["queries"], got["unreadable"]) == (2, 1) and got["first_answer_agreement"] == 0.0
    assert got["refused"] == {"float32": 1, "int8": 1, "both": 1}


class Recording(Answering):
    """Answering, keeping the options of every predict call."""

    calls: list[dict] = []

    def predict(self, source, **options):
        self.calls.append(options)
        result = super().predict(source, **options)
        result.in_model_order = lambda: result.predictions  # what page_latency reads
        return result


@pytest.mark.parametrize("name", ["page_latency", "int8_agreement"])
def test_timing_tools_time_each_query_whole(name, tmp_path, monkeypatch, capsys):
    # both called predict under its default 60 s limit: a stopped query's time counted as a latency (page_latency)
    # and in the seconds and int8_speedup (int8_agreement), unsaid
    tool = load_tool(name)
    monkeypatch.setattr(tool, "Predictor", Recording)
    monkeypatch.setattr(Recording, "calls", [])
    queries = tmp_path / "q.txt"
    queries.write_text("CCN\n")
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--src", str(queries), "--tgt", str(queries), "--warmup", "1",
                                      *(["--methods", "greedy", "--augment", "1"] if name == "page_latency" else [])])
    tool.main()
    assert Recording.calls and all("time_limit_s" in options and options["time_limit_s"] is None
                                   for options in Recording.calls), Recording.calls


def test_textbook_names_each_models_weights_and_the_code_in_its_report(tmp_path, monkeypatch, capsys):
    # bench/textbook/shipped_int8.json named neither: the shipped models have been replaced since
    from molspec_core.calibration import weights_fingerprint

    tool = load_tool("textbook")

    class Stand:
        path = FIXTURES / "copy_model"

        @classmethod
        def load(cls, *args, **kwargs):
            return cls()

    monkeypatch.setattr(tool, "Predictor", Stand)
    monkeypatch.setattr(tool, "known_answer_ranks", lambda *args: [])
    monkeypatch.setattr(sys, "argv", ["textbook.py", "--augment", "1", "--out", str(tmp_path / "t.json")])
    tool.main()
    saved = json.loads((tmp_path / "t.json").read_text())
    for task in ("forward", "retro"):
        assert saved[task]["model"] == str(FIXTURES / "copy_model")
        assert saved[task]["weights"] == weights_fingerprint(FIXTURES / "copy_model")
    assert "commit" in saved and saved["command"].endswith(f"--out {tmp_path / 't.json'}")


@pytest.mark.parametrize("name,argv,said", [
    ("draft_sweep", ["--rounds", "0"], "--rounds: must be 1 or more, not 0"),  # a KeyError after the warm-up
    ("rank_pairs", ["mine", "--limit", "-3"], "--limit: must be 0 or more, not -3"),  # mined all but the last 3
    ("decode_cost", ["--limit", "0"], "--limit: must be 1 or more, not 0"),  # a traceback once the model loaded
    ("draft_sweep", ["--limit", "0"], "--limit: must be 1 or more, not 0"),
    ("int8_agreement", ["--limit", "0"], "--limit: must be 1 or more, not 0"),
    ("page_latency", ["--limit", "-1"], "--limit: must be 1 or more, not -1"),
    ("server_latency", ["--limit", "0"], "--limit: must be 1 or more, not 0"),
    ("pool_sweep", ["decode", "--limit", "0"], "--limit: must be 1 or more, not 0"),
    ("int8_agreement", ["--warmup", "-2"], "--warmup: must be 0 or more, not -2"),  # warmed up on all but 2
    # both models loaded, then a ValueError traceback from the first query
    ("int8_agreement", ["--beam-width", "51"], "--beam-width: must be between 1 and 50, not 51"),
    ("int8_agreement", ["--augment", "21"], "--augment: must be between 1 and 20, not 21"),
    ("page_latency", ["--n-best", "0"], "--n-best: must be 1 or more, not 0"),
    ("rank_pairs", ["mine", "--width", "0"], "--width: must be 1 or more, not 0"),
])
def test_counts_that_cannot_be_are_usage_errors_before_any_work(name, argv, said, tmp_path, monkeypatch, capsys):
    tool = load_tool(name)
    if hasattr(tool, "Predictor"):
        monkeypatch.setattr(tool, "Predictor", NoModel)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    files = {"rank_pairs": ["--model", "m", "--data", tmp_path, "--out", tmp_path / "p.tsv"],
             "pool_sweep": ["--src", queries, "--tgt", queries, "--out", tmp_path / "o.jsonl"]}
    needed = files.get(name, ["--src", queries, "--tgt", queries] if name in ("int8_agreement", "page_latency")
                       else ["--src", queries])
    code, err = run_main(tool, monkeypatch, capsys, *argv, *needed)
    assert code == 2 and said in err, err


# ---- inputs that are not there --------------------------------------------------------------------------------

MISSING = "no_such_input"  # the name of every missing input below


def run_with_a_missing_path(name: str, argv: list[str], missing: Path, tmp_path: Path, monkeypatch,
                            capsys) -> tuple[int, str]:
    """Tool `name` run on `argv`, whose {missing} is a path that is not there, {queries} a file of one query and {tmp}
    a folder holding reactants.txt and products.txt; its model never loads. Its exit code and standard error."""
    tool = load_tool(name)
    if hasattr(tool, "Predictor"):
        monkeypatch.setattr(tool, "Predictor", NoModel)
    for file in ("reactants.txt", "products.txt"):
        (tmp_path / file).write_text("CCO\n")
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    given = [arg.format(missing=missing, tmp=tmp_path, queries=queries) for arg in argv]
    return run_main(tool, monkeypatch, capsys, *given)


@pytest.mark.parametrize("name,argv,flag", [
    ("centre_check", ["--data", "{missing}"], "--data"),
    ("make_stock", ["--data", "{missing}", "--out", "{tmp}/stock.smi.gz"], "--data"),
    ("make_10k", ["--src", "{missing}", "--out", "{tmp}/big.csv"], "--src"),
    ("ray_throughput", ["--src", "{missing}"], "--src"),
    ("stereo_check", ["--task", "retro", "--test", "{missing}"], "--test"),
    ("stereo_check", ["--train-tgt", "{missing}", "--test", "{tmp}"], "--train-tgt"),
    ("hard_examples", ["starts", "--data", "{missing}", "--out", "{tmp}/starts.txt"], "--data"),
    ("hard_examples", ["build", "--data", "{missing}", "--out", "{tmp}/built"], "--data"),
    ("rank_pairs", ["mine", "--model", "m", "--data", "{missing}", "--out", "{tmp}/p.tsv"], "--data"),
    ("rank_pairs", ["near", "--model", "m", "--pairs", "{missing}", "--out", "{tmp}/p.tsv"], "--pairs"),
    ("pool_sweep", ["decode", "--src", "{missing}", "--tgt", "{queries}", "--out", "{tmp}/o.jsonl"], "--src"),
    ("pool_sweep", ["score", "{missing}"], "file"),
    ("draft_sweep", ["--src", "{missing}"], "--src"),
    ("decode_cost", ["--src", "{queries}", "--index", "{missing}"], "--index"),
    ("page_latency", ["--src", "{queries}", "--tgt", "{missing}"], "--tgt"),
    ("server_latency", ["--src", "{missing}"], "--src"),
    ("draft_compare", ["--draft", "{tmp}", "--src", "{missing}", "--out", "{tmp}/r.json"], "--src"),
])
def test_an_input_that_is_not_there_is_a_usage_error_naming_its_flag(name, argv, flag, tmp_path, monkeypatch,
                                                                    capsys):
    """Each ended in a FileNotFoundError (or ValueError) traceback naming no flag; two after loading the model."""
    missing = tmp_path / MISSING
    code, err = run_with_a_missing_path(name, argv, missing, tmp_path, monkeypatch, capsys)
    assert code == 2 and f"error: {flag}: {missing}" in err and "does not exist" in err, err
    assert "USPTO data" not in err  # the hint is for the default data folder


def test_a_missing_default_data_file_says_where_the_data_comes_from(tmp_path, monkeypatch, capsys):
    tool = load_tool("centre_check")
    monkeypatch.setattr(tool, "DEFAULT_DATA", tmp_path / "shared" / "data")
    monkeypatch.setattr(sys.modules["_toolbox"], "DEFAULT_DATA", tmp_path / "shared" / "data")
    code, err = run_main(tool, monkeypatch, capsys)
    assert code == 2 and f"--data: {tmp_path}/shared/data/uspto50k/gln_split/raw_test.csv does not exist" in err
    assert "the USPTO data sets are not part of this repository: README.md's \"Data\" says where" in err


@pytest.mark.parametrize("name,argv", [
    ("cost_ratio", ["{missing}"]),
    ("draft_sweep", ["--model", "{missing}", "--src", "{queries}"]),
    ("decode_cost", ["--model", "{missing}", "--src", "{queries}"]),
    ("page_latency", ["--model", "{missing}", "--src", "{queries}", "--tgt", "{queries}"]),
    ("server_latency", ["--model", "{missing}", "--src", "{queries}"]),
    ("pool_sweep", ["decode", "--model", "{missing}", "--src", "{queries}", "--tgt", "{queries}", "--out",
                    "{tmp}/o.jsonl"]),
    ("rank_pairs", ["near", "--model", "{missing}", "--pairs", "{queries}", "--out", "{tmp}/p.tsv"]),
    ("stereo_check", ["--task", "retro", "--model", "{missing}", "--test", "{tmp}"]),
    ("draft_compare", ["--model", "{missing}", "--draft", "{tmp}", "--src", "{queries}", "--out", "{tmp}/r.json"]),
])
def test_a_model_that_is_not_there_is_a_usage_error_before_any_work(name, argv, tmp_path, monkeypatch, capsys):
    """A mistyped model ended in a CheckpointError traceback, several after their queries were read and checked."""
    missing = tmp_path / MISSING
    code, err = run_with_a_missing_path(name, argv, missing, tmp_path, monkeypatch, capsys)
    flag = "model" if name == "cost_ratio" else "--model"
    assert code == 2 and f"error: {flag} {missing}: model folder {missing} does not exist" in err, err


@pytest.mark.parametrize("name,argv,said", [
    ("draft_sweep", ["--draft-lens", "8,a"], "argument --draft-lens: must be a whole number, not 'a'"),
    ("draft_sweep", ["--rests", "0,-1"], "argument --rests: must be 0 or more, not -1"),
    ("draft_sweep", ["--methods", "spec-auto,nope"], "argument --methods: unknown method 'nope'; choose from"),
    ("decode_cost", ["--configs", "1x1,8y2"], "argument --configs: a configuration is BxW or BxWf, each number 1 "
                                              "or more, not '8y2'"),
    ("decode_cost", ["--method", "nope"], "argument --method: unknown method 'nope'"),
    ("page_latency", ["--tgt", "{queries}", "--methods", "beam,nope"], "argument --methods: unknown method 'nope'"),
    ("ray_throughput", ["--workers", "1,two"], "argument --workers: must be a whole number, not 'two'"),
    ("pool_sweep", ["decode", "--tgt", "{queries}", "--out", "{tmp}/o.jsonl", "--method", "nope"],
     "argument --method: unknown method 'nope'"),
])
def test_a_bad_item_of_a_list_or_a_method_name_is_a_usage_error_before_any_work(name, argv, said, tmp_path,
                                                                               monkeypatch, capsys):
    """Each was a ValueError traceback, most after the model loaded (pool_sweep's method refused every query)."""
    tool = load_tool(name)
    if hasattr(tool, "Predictor"):
        monkeypatch.setattr(tool, "Predictor", NoModel)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    given = [arg.format(tmp=tmp_path, queries=queries) for arg in argv]
    code, err = run_main(tool, monkeypatch, capsys, *given, "--src", queries)
    assert code == 2 and said in err, err


def test_pool_sweep_score_refuses_an_exponent_that_is_no_number(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        load_tool("pool_sweep").main(["score", str(tmp_path), "--powers", "1,x"])
    assert stop.value.code == 2 and "argument --powers: must be a number, not 'x'" in capsys.readouterr().err


@pytest.mark.parametrize("name,argv,said", [
    # rng.sample's "Sample larger than population or is negative" traceback, after the folders were read
    ("hard_examples", ["build", "--right-writings", "-1"], "--right-writings: must be 0 or more, not -1"),
    ("hard_examples", ["build", "--replay-ratio", "nan"], "--replay-ratio: must be a finite number at least 0"),
    ("make_stock", ["--min-uses", "0", "--data", "{tmp}", "--out", "{tmp}/stock.smi.gz"],
     "--min-uses: must be 1 or more, not 0"),  # kept what 1 keeps, said 0
    ("rank_pairs", ["near", "--max-gap", "nan"], "--max-gap: must be a finite number at least 0"),  # kept none
    ("ray_throughput", ["--batch-size", "0"], "--batch-size: must be 1 or more, not 0"),
    ("ray_throughput", ["--method", "nope"], "--method: unknown method 'nope'"),
    ("stereo_check", ["--plain", "-1"], "--plain: must be 0 or more, not -1"),  # all but the last one decoded
    ("stereo_check", ["--augment", "0"], "--augment: must be between 1 and"),  # after the model loaded
    ("draft_compare", ["--temperature", "nan"], "--temperature: must be a number in [0.01, 100], not nan"),
])
def test_a_number_out_of_range_is_a_usage_error_at_parse_time(name, argv, said, tmp_path, monkeypatch, capsys):
    tool = load_tool(name)
    if hasattr(tool, "Predictor"):
        monkeypatch.setattr(tool, "Predictor", NoModel)
    code, err = run_main(tool, monkeypatch, capsys, *(arg.format(tmp=tmp_path) for arg in argv))
    assert code == 2 and f"argument {said}" in err, err


@pytest.mark.parametrize("name,argv,said", [
    ("make_10k", ["--src", "{bad_gz}", "--out", "{tmp}/big.csv"], "--src: {bad_gz} cannot be read to its end"),
    ("ray_throughput", ["--src", "{bad_gz}", "--rows", "2", "--small-rows", "1"],
     "--src: {bad_gz} cannot be read to its end"),
    ("stereo_check", ["--task", "retro", "--test", "{tmp}", "--lines-from", "{queries}"],
     "--lines-from {queries} cannot be read as JSON"),
    ("stereo_check", ["--train-tgt", "{bad_gz}", "--test", "{tmp}"], "{bad_gz} cannot be read to its end"),
    ("hard_examples", ["build", "--data", "{data}", "--mined", "{queries}", "--out", "{tmp}/built"],
     "--mined {queries} cannot be read as JSON"),
    ("rank_pairs", ["near", "--model", FIXTURES / "copy_model", "--pairs", "{queries}", "--out", "{tmp}/n.tsv"],
     "--pairs {queries}, line 1: a pair is source, product and negative"),
])
def test_an_input_of_another_kind_is_a_usage_error_naming_it(name, argv, said, data, tmp_path, monkeypatch, capsys):
    """Each was gzip's or json's traceback (or 'not enough values to unpack'), naming neither flag nor file."""
    tool = load_tool(name)
    if hasattr(tool, "Predictor"):
        monkeypatch.setattr(tool, "Predictor", NoModel)
    for file in ("reactants.txt", "products.txt"):
        (tmp_path / file).write_text("CCO\n")
    paths = {"tmp": tmp_path, "queries": tmp_path / "q.txt", "bad_gz": tmp_path / "bad.gz", "data": data}
    paths["queries"].write_text("CCO\n")
    paths["bad_gz"].write_text("not gzip\n")
    code, err = run_main(tool, monkeypatch, capsys, *(str(arg).format(**paths) for arg in argv))
    assert code == 2 and said.format(**paths) in err, err


def test_ray_throughput_without_ray_is_refused_before_it_times_anything(tmp_path, monkeypatch, capsys):
    """Without Ray it timed the single process first (minutes on 2,000 rows), then died at its first Ray run, and
    those timings were lost: it is refused before any run."""
    tool = load_tool("ray_throughput")
    monkeypatch.setitem(sys.modules, "ray", None)
    runs: list[object] = []
    monkeypatch.setattr(tool, "run", lambda *args: runs.append(args) or 1.0)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\nCCN\nCCC\n")
    code, err = run_main(tool, monkeypatch, capsys, "--src", str(queries), "--rows", "3", "--small-rows", "1")
    assert code == 2 and "--ray needs Ray: pip install -e .[scale]" in err and not runs, err


def test_pool_sweep_score_names_a_line_that_is_not_json(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"decoded": {}}\n{not json\n')
    with pytest.raises(SystemExit, match=r"a\.jsonl, line 2, is not JSON"):
        load_tool("pool_sweep").main(["score", str(tmp_path / "a.jsonl")])


@pytest.mark.parametrize("mined,also,said", [
    ({"a": 1}, False, "not evaluate's report on `starts`' index (it has no 'first_right')"),  # a KeyError
    ({"augment": 2, "first_right": {"model_order": [1]}}, False, "mine with one answer from one writing"),
    ({"first_right": {"model_order": [1]}}, True, "--also adds new reactions: give it without --mined"),
])
def test_hard_examples_build_refusals_are_usage_errors_and_write_nothing(mined, also, said, data, tmp_path,
                                                                        monkeypatch, capsys):
    """build's ValueErrors were tracebacks, and a report of another kind a KeyError."""
    report = tmp_path / "mined.json"
    report.write_text(json.dumps(mined))
    argv = ["build", "--data", data, "--mined", report, "--out", tmp_path / "built",
            *(["--also", data] if also else [])]
    code, err = run_main(load_tool("hard_examples"), monkeypatch, capsys, *argv)
    assert code == 2 and said in err, err
    assert not (tmp_path / "built").exists()


def test_stereo_check_names_an_earlier_report_without_its_groups(tmp_path, monkeypatch, capsys):
    """A report of the same task and test set but without the groups' lines was a KeyError traceback."""
    tool = load_tool("stereo_check")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    for file in ("reactants.txt", "products.txt"):
        (tmp_path / file).write_text("CCO\n")
    report = tmp_path / "old.json"
    report.write_text(json.dumps({"task": "retro", "test": tmp_path.name}))
    code, err = run_main(tool, monkeypatch, capsys, "--task", "retro", "--test", tmp_path, "--lines-from", report)
    assert code == 2 and "--lines-from or --against: not a report of this tool (it has no 'kept')" in err, err


@pytest.mark.parametrize("command,stats,said", [
    ("starts", "{bad", "--data {stats} cannot be read as JSON"),  # json's traceback
    ("build", "{bad", "--data {stats} cannot be read as JSON"),
    ("build", '{"train": 4}', "{stats}: its \"task\" is not one of forward, retro"),  # a KeyError
])
def test_hard_examples_names_a_stats_json_it_cannot_read(command, stats, said, data, tmp_path, monkeypatch, capsys):
    (data / "stats.json").write_text(stats)
    out = tmp_path / ("starts.txt" if command == "starts" else "built")
    code, err = run_main(load_tool("hard_examples"), monkeypatch, capsys, command, "--data", data, "--out", out)
    assert code == 2 and said.format(stats=data / "stats.json") in err, err
    assert not out.exists()


def test_stereo_check_refuses_a_model_of_the_other_task(tmp_path, monkeypatch, capsys):
    """--task retro with the forward model read the products as forward queries and reported its numbers."""
    tool = load_tool("stereo_check")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    for file in ("reactants.txt", "products.txt"):
        (tmp_path / file).write_text("CCO\n")
    code, err = run_main(tool, monkeypatch, capsys, "--task", "retro", "--model", "forward", "--test", tmp_path)
    assert code == 2 and "--model forward is a forward model, and --task is retro" in err, err


def test_pool_sweep_decode_refuses_files_of_unequal_length_before_the_model_loads(tmp_path, monkeypatch):
    """read_pairs' refusal came after the load, as a traceback."""
    tool = load_tool("pool_sweep")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    (tmp_path / "src.txt").write_text("CCO\nCC\n")
    (tmp_path / "tgt.txt").write_text("CCO\n")
    with pytest.raises(SystemExit, match=r"pool_sweep\.py decode: .*src\.txt has 2 lines but .*tgt\.txt has 1"):
        tool.main(["decode", "--model", str(FIXTURES / "copy_model"), "--src", str(tmp_path / "src.txt"), "--tgt",
                   str(tmp_path / "tgt.txt"), "--out", str(tmp_path / "o.jsonl")])
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("name,argv", [("draft_sweep", []),
                                       ("pool_sweep", ["decode", "--tgt", "{queries}", "--out", "{tmp}/o.jsonl"]),
                                       ("stereo_check", ["--task", "retro", "--test", "{tmp}", "--augment", "1"]),
                                       ("page_latency", ["--tgt", "{queries}"])])
def test_an_int8_run_of_weights_the_native_engine_cannot_read_says_so(name, argv, tmp_path, monkeypatch, capsys):
    """The copy model's float32 weights: the native engine's ValueError was a traceback (an unknown --dtype too)."""
    tool = load_tool(name)
    queries = tmp_path / "q.txt"
    queries.write_text("CCO\n")
    for file in ("reactants.txt", "products.txt"):
        (tmp_path / file).write_text("CCO\n")
    given = [arg.format(tmp=tmp_path, queries=queries) for arg in argv]
    src = ["--src", queries] if name != "stereo_check" else []
    code, err = run_main(tool, monkeypatch, capsys, *given, "--model", FIXTURES / "copy_model", *src, "--dtype", "int8")
    # cc13309's words: the engine the user never chose is named as what int8 runs on
    assert "dtype int8 runs on the native engine, which cannot take this model here" in f"{code} {err}", (code, err)
    code, err = run_main(tool, monkeypatch, capsys, *given, *src, "--dtype", "int4")
    assert code == 2 and "argument --dtype: invalid choice: 'int4'" in err


def test_the_tools_keep_rdkit_quiet_as_the_molspec_command_does():
    """Since 48c8374 the engine quiets RDKit only inside its own calls, so a tool's own parsing (centre_check's,
    stereo_check's) printed RDKit's errors line by line; the tools, programs like `molspec`, turn them off."""
    import subprocess

    code = ("import sys; sys.path.insert(0, 'tools'); import _toolbox; from rdkit import Chem; "
            "assert Chem.MolFromSmiles('c1cc') is None")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
