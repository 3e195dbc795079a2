"""tools/pool_sweep.py: the answers it saves, pooled with the app's exponent, are the app's answers, and its
counts follow from them (the sweep itself needs the shipped model and USPTO-MIT: the tool's own run)."""
import json
import math

import pytest

from conftest import FIXTURES, load_tool
from molspec_core.calibration import weights_fingerprint
from molspec_core.service import POOL_POWER, Predictor, pool_writings


@pytest.fixture(scope="module")
def tool():
    return load_tool("pool_sweep")


@pytest.fixture(scope="module")
def reader():
    """The copy model, marked as trained on many writings of each query, so that predict allows augment."""
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    predictor.config = {**predictor.config, "data_stats": {"augment": 20}}
    return predictor


def test_saved_answers_pooled_with_the_apps_exponent_are_the_apps_answers(tool, reader):
    queries = ["OCCOc1ccccc1", "CC(=O)Nc1ccc(O)cc1", "NCCO", "Xx"]
    rows = list(tool.decode_rows(reader, queries, ["OCCOc1ccccc1", "CC(=O)Nc1ccc(O)cc1", "OCCN", "C"], augment=4,
                                 n_best=3))
    assert [row["line"] for row in rows] == [0, 1, 2, 3] and "error" in rows[3]
    assert len(rows[0]["writings"]) == 4
    assert rows[2]["target"] == "NCCO"  # canonical
    for query, row in zip(queries[:3], rows):
        app = reader.predict(query, method="beam", n_best=3, augment=4)
        assert 1 <= len(row["writings"]) <= 4
        pooled = tool.pooled(row["writings"], POOL_POWER)[:3]
        assert [answer for answer, _ in pooled] == [p.smiles for p in app.in_model_order()]
        assert [sane for _, sane in pooled] == [p.sane for p in app.in_model_order()]


def test_counts_follow_the_pooled_order_and_the_apps_sane_first_order(tool):
    log = math.log
    rows = [  # right first; right second but the first is flagged; wrong; refused; right only beyond the cut
        {"line": 0, "target": "A", "writings": [[("A", log(0.6), True), ("B", log(0.3), True)]] * 2},
        {"line": 1, "target": "B", "writings": [[("C", log(0.7), False), ("B", log(0.2), True)],
                                                [("B", log(0.5), True), ("C", log(0.4), False)]]},
        {"line": 2, "target": "Z", "writings": [[("A", log(0.9), True)]]},
        {"line": 3, "target": "A", "error": "unknown token"},
        {"line": 4, "target": "D", "writings": [[("C", log(0.5), False), ("E", log(0.3), True),
                                                 ("D", log(0.1), True)]]},
    ]
    got = tool.score_rows(rows, POOL_POWER, n_best=2)
    assert got["n"] == 5
    assert got["top"] == [1, 2] and got["app"] == [2, 3]  # D takes flagged C's place in the list
    assert got["not_sane"] == 2
    assert got["writings"] == [4, 2] and got["not_sane_each"] == [2, 0]


def test_the_pooling_exponent_is_a_parameter_and_must_be_positive():
    answers = [[("A", math.log(0.9))], [("B", math.log(0.4))], [("B", math.log(0.4))]]
    # the mean puts A (0.3) above B (0.27); the app's power mean weighs that two writings agree on B
    assert [a for a, _, _ in pool_writings(answers, 1.0)] == ["A", "B"]
    assert [a for a, _, _ in pool_writings(answers)] == ["B", "A"]
    assert pool_writings(answers, 1.0)[0][1] == pytest.approx(math.log(0.3))
    with pytest.raises(ValueError, match="positive"):
        pool_writings(answers, 0.0)


def test_score_prints_one_column_per_cut_off_and_one_app_column_when_one_answer_is_kept(tool, tmp_path, capsys):
    log = math.log
    rows = [{"line": 0, "target": "B", "writings": [[("C", log(0.7), False), ("B", log(0.2), True)]]},
            {"line": 1, "target": "A", "writings": [[("A", log(0.9), True)]]}]
    saved = tmp_path / "rows.jsonl"
    saved.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for n_best, header, figures in ((1, ["top1", "app1"], ["50.0", "100.0", "50.0"]),
                                    (2, ["top1", "top2", "app1", "app2"], ["50.0", "100.0", "100.0", "100.0", "50.0"])):
        tool.main(["score", str(saved), "--n-best", str(n_best), "--powers", "0.25"])
        lines = capsys.readouterr().out.splitlines()
        assert "does not say what decoded its answers" in lines[0]  # a file written by hand, not by decode
        assert lines[2].split()[1:-2] == header  # after "power", before "not-sane1 (%)"
        assert lines[3].split() == ["0.25", *figures]


def test_decode_records_what_decoded_the_answers_and_score_says_it(tool, tmp_path, capsys):
    """The saved answers named neither the model nor its settings, so a file scored later could not say whose
    answers its figures rank."""
    (tmp_path / "src.txt").write_text("CCO\nNCCO\n")
    (tmp_path / "tgt.txt").write_text("CO\nNO\n")
    saved = tmp_path / "answers.jsonl"
    tool.main(["decode", "--model", str(FIXTURES / "copy_model"), "--src", str(tmp_path / "src.txt"), "--tgt",
               str(tmp_path / "tgt.txt"), "--augment", "1", "--n-best", "2", "--dtype", "float32", "--out", str(saved)])
    first, *rows = [json.loads(line) for line in saved.read_text().splitlines()]
    decoded = first["decoded"]
    assert {key: decoded[key] for key in ("model", "method", "n_best", "augment", "dtype", "src", "tgt", "limit")} == {
        "model": str(FIXTURES / "copy_model"), "method": "beam", "n_best": 2, "augment": 1, "dtype": "float32",
        "src": str(tmp_path / "src.txt"), "tgt": str(tmp_path / "tgt.txt"), "limit": None}
    # the weights and the code, as evaluate's reports record them
    assert decoded["weights"] == weights_fingerprint(FIXTURES / "copy_model") and "commit" in decoded
    assert "command" in decoded
    assert [row["line"] for row in rows] == [0, 1]
    capsys.readouterr()
    tool.main(["score", str(saved), "--n-best", "2", "--powers", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"answers of {FIXTURES / 'copy_model'} (beam, 2 a writing, 1 writing(s), float32)")
    assert out[1].startswith("2 queries, 0 refused")


def test_sampled_writings_draw_the_seeds_predict_gives_them(tool, reader):
    """A sampling method's writings draw with seeds of their own, as predict's (74d3de0): the saved answers pooled
    are the app's for the same seed, not those of writings that all drew the first writing's samples."""
    queries = ["OCCOc1ccccc1", "CC(=O)Nc1ccc(O)cc1"]
    rows = list(tool.decode_rows(reader, queries, queries, augment=4, method="sample", n_best=3))
    for query, row in zip(queries, rows):
        app = reader.predict(query, method="sample", n_best=3, augment=4)
        assert [answer for answer, _ in tool.pooled(row["writings"], POOL_POWER)[:3]] == [
            p.smiles for p in app.in_model_order()]
