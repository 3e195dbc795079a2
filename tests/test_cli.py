"""The CLI end to end on the copy fixture: predict (one SMILES, files), evaluate, bench."""
import argparse
import csv
import gzip
import json
import math
import logging
import os
import re
import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch

from conftest import (FIXTURES, ROOT, disk_full, excel_and_csv, needs_native, record_loads, sd_file_text,
                      signal_at_decode)
from molspec_core.boundary import Terminated
from molspec_core.cli import build_parser, main
from molspec_core.io import read_queries

MODEL = str(FIXTURES / "copy_model")


def test_predict_one_smiles_prints_a_table(capsys):
    assert main(["predict", "--model", MODEL, "--smiles", "OCCc1ccccc1", "--method", "spec-pointer"]) == 0
    out = capsys.readouterr().out
    assert "query: OCCc1ccccc1" in out and "rank" in out and "model calls" in out


def test_predict_one_smiles_says_in_how_many_writings_it_was_read(capsys, monkeypatch):
    """--augment 5 on CCO, which has 3 writings, printed nothing of the 3: its answers read as pooled over 5."""
    from molspec_core.service import Predictor

    monkeypatch.setattr(Predictor, "augmentable", property(lambda self: True))  # the copy model reads one writing
    assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--method", "beam", "--augment", "5"]) == 0
    assert "query: CCO   (read in 3 of the 5 writings asked for, " in capsys.readouterr().out
    assert main(["predict", "--model", MODEL, "--smiles", "OCCOc1ccccc1", "--method", "beam", "--augment", "5"]) == 0
    assert "writings asked for" not in capsys.readouterr().out


def test_predict_one_smiles_says_which_answers_are_sane(capsys):
    """The copy model's best answer to benzene is benzene itself: flagged, with the reason."""
    assert main(["predict", "--model", MODEL, "--smiles", "c1ccccc1", "--method", "beam", "--n-best", "3"]) == 0
    out = capsys.readouterr().out
    assert "check" in out and "c1ccccc1   (same as the query)" in out and "flagged" in out


@pytest.mark.skipif(not (ROOT / "models" / "forward" / "config.json").is_file(), reason="no shipped forward model")
def test_predict_one_smiles_says_which_answer_the_model_wrote_several_ways(capsys):
    """The shipped forward model, reading one writing (the CLI's default), spells this amide in two atom
    orders in its top 5 (USPTO-MIT test line 26,211; test_app's test of the same uses the same query)."""
    query = "Nc1ccc(F)cc1.O=C(O)c1ccccc1"
    assert main(["predict", "--model", "forward", "--smiles", query, "--method", "beam", "--n-best", "5"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 4 and rows[0].endswith("O=C(Nc1ccc(F)cc1)c1ccccc1   (written 2 ways)")


@pytest.mark.skipif(not (ROOT / "models" / "forward" / "config.json").is_file(), reason="no shipped forward model")
def test_predict_one_cxsmiles_notes_the_enhanced_stereo_it_does_not_read(capsys):
    assert main(["predict", "--model", "forward", "--smiles", "C[C@H](N)C(=O)O.CC(=O)Cl |o1:1|"]) == 0
    out = capsys.readouterr().out
    assert "query: CC(=O)Cl.C[C@H](N)C(=O)O" in out
    assert "\nnote: Enhanced stereo is not read: or1 (one configuration, not known which) at atom 1" in out


def calibration_case(tmp_path) -> tuple:
    """A copy of the copy model and the calibrate arguments of six validation pairs, four of which it gets right: the
    targets of the third and the sixth (ON1N1, N()) are SMILES RDKit cannot read."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1", "CCN(CC)CC"]
    (tmp_path / "val.src").write_text("\n".join(queries) + "\n")
    (tmp_path / "val.tgt").write_text("\n".join(q.replace("C", "") or "O" for q in queries) + "\n")
    return model, ["--model", str(model), "--src", str(tmp_path / "val.src"), "--tgt", str(tmp_path / "val.tgt")]


def test_calibrate_writes_a_calibration_the_model_then_uses(tmp_path, capsys):
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    # two of its six targets are SMILES RDKit cannot read (ON1N1, N()), and fit nothing: they are not counted
    assert "fitted on 3 queries (1 of 4 gave no answer to count: refused, a target RDKit cannot read, or no valid " \
           "answer), judged on 1 query (1 of 2 gave no answer" in capsys.readouterr().out
    saved = json.loads((model / "calibration.json").read_text())
    assert saved["method"] == "beam" and saved["n_best"] == 2
    assert main(["predict", "--model", str(model), "--smiles", "CCOc1ccccc1", "--method", "beam", "--n-best", "2"]) == 0
    assert " - " not in capsys.readouterr().out.splitlines()[2]  # the answer carries a confidence
    assert main(["predict", "--model", str(model), "--smiles", "CCOc1ccccc1"]) == 0  # greedy: fitted for beam only
    assert " - " in capsys.readouterr().out.splitlines()[2]


def test_calibrate_of_one_answer_asked_for_several_offers_the_methods_it_fits(tmp_path, capsys, no_model_load):
    """calibrate --method greedy --n-best 5 was told 'use --n-best 1, or one of beam, sbs-exact, sbs, sample,
    spec-sample, ...' (evaluate's words), methods calibrate then refuses (sampled or lossy)."""
    model, files = calibration_case(tmp_path)
    expect_refused(["calibrate", *files, "--method", "greedy", "--n-best", "5"], capsys,
                   "greedy returns one answer, so it has no top-5: use --n-best 1 (a fit of greedy's answers), or one "
                   "of beam, sbs-exact, beam-uncached")


def test_calibrate_stopped_too_soon_for_a_fit_says_so_and_writes_nothing(tmp_path, capsys, caplog, monkeypatch):
    """Stopped after one query, which gives no fit, its warning read 'stopped after 1 of 6 queries, which give no
    fit'."""
    model, files = calibration_case(tmp_path)
    with monkeypatch.context() as patched, caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        ctrl_c_at_third_predict(patched, 2)
        assert main(["calibrate", *files, "--n-best", "2", "--force", "--batch-size", "1"]) == 130
    assert any(r.getMessage().startswith("stopped after 1 of 6 queries, which gives no fit (") for r in caplog.records)
    assert sorted(path.name for path in model.iterdir()) == ["config.json", "model.safetensors", "vocab.json"]
    capsys.readouterr()


def test_calibrate_forced_onto_one_query_says_so_in_the_singular(tmp_path, capsys, caplog):
    """calibrate --force on a fit of one query warned 'the fit rests on 1 queries'."""
    model, files = calibration_case(tmp_path)
    targets = (tmp_path / "val.tgt").read_text().splitlines()
    (tmp_path / "val.tgt").write_text("\n".join([targets[0], "N(", *targets[2:]]) + "\n")  # 2 of 3 fit nothing
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["calibrate", *files, "--n-best", "2", "--force", "--limit", "4"]) == 0
    assert caplog.records[-1].getMessage().startswith("the fit rests on 1 query: its confidences are coarse steps")
    capsys.readouterr()


def test_predict_says_when_its_confidence_column_stays_empty(tmp_path, capsys):
    """An empty confidence column was left for the user to puzzle out (no fit for the method, or a sampled one)."""
    model, files = calibration_case(tmp_path)
    run = ["predict", "--model", str(model), "--input", str(tmp_path / "val.src"), "--output",
           str(tmp_path / "out.csv"), "--method", "beam", "--n-best", "2"]
    note = f"note: beam's answers have no calibration in {model} (sampling and lossy methods never do"
    assert main(run) == 0 and note in capsys.readouterr().out
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    capsys.readouterr()
    (tmp_path / "out.csv").unlink()
    assert main(run) == 0 and "have no calibration" not in capsys.readouterr().out
    (tmp_path / "out.csv").unlink()
    assert main([*run[:-4], "--method", "sample"]) == 0
    assert "note: sample's answers have no calibration" in capsys.readouterr().out


def test_calibrate_judge_rejudges_the_saved_fit_on_its_own_check_queries_and_writes_nothing(tmp_path, capsys):
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--method", "spec-auto", "--judge"]) == 2  # nothing fitted yet
    assert "has no calibration for greedy answers to judge (calibration.greedy.json" in capsys.readouterr().err
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    capsys.readouterr()
    saved = (model / "calibration.json").read_text()
    before = sorted(path.name for path in model.iterdir())
    assert main(["calibrate", *files, "--n-best", "2", "--judge"]) == 0
    out = capsys.readouterr().out
    # decoded as when it was fitted, the same answers: its own error again, to the digit
    own = json.loads(saved)["ece"]
    assert f"its own expected calibration error {own:.4f}), judged on 1 query (1 of 2 gave no answer to count: " \
           "refused, a target RDKit cannot read, or no valid answer) decoded by beam, 2-best, float32" in out
    assert out.rstrip().endswith(f"expected calibration error {own:.4f}")
    assert (model / "calibration.json").read_text() == saved and sorted(p.name for p in model.iterdir()) == before
    # other queries (a --limit other than the fit's) gave an error not comparable with the fit's own, without a word
    assert main(["calibrate", *files, "--n-best", "2", "--judge", "--limit", "3"]) == 2
    assert "the saved fit was judged on 2 queries" in capsys.readouterr().err


def test_a_calibration_stopped_by_ctrl_c_keeps_the_fit_of_the_queries_it_decoded(tmp_path, capsys, monkeypatch,
                                                                                   caplog):
    """Ctrl-C an hour into `calibrate` lost every query decoded. The fit of those decoded before the stop, the one
    --limit with their number makes, is written beside the fit file, not in use, and the warning says how to take it."""
    from molspec_core.service import Predictor

    model, files = calibration_case(tmp_path)
    files += ["--n-best", "2", "--force", "--batch-size", "1"]
    real = Predictor.predict
    ctrl_c_at_third_predict(monkeypatch, at=6)  # five of the six queries decoded, one a call
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["calibrate", *files]) == 130
    assert not (model / "calibration.json").exists()
    partial = model / "calibration.json.partial"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert ("stopped after 5 of 6 queries: their fit, as --limit 5 makes it (fitted on 2 (below 100: coarse steps), "
            "judged on 2, expected calibration error") in said
    assert f"is written to {partial} and not used; rename it to calibration.json to use it" in said
    monkeypatch.setattr(Predictor, "predict", real)
    assert main(["calibrate", *files, "--limit", "5"]) == 0
    assert json.loads(partial.read_text()) == json.loads((model / "calibration.json").read_text())
    partial.unlink()
    caplog.clear()
    ctrl_c_at_third_predict(monkeypatch, at=1)  # nothing decoded: no fit, and no word of one
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["calibrate", *files]) == 130
    assert not partial.exists() and "stopped after" not in caplog.text
    capsys.readouterr()


def test_a_sigterm_after_every_query_is_decoded_writes_the_fit_first(tmp_path, capsys, monkeypatch, caplog):
    """A SIGTERM once every query was decoded, while the fit was made (the weights hashed, the maps fitted) or
    written, lost the whole calibration run: no fit, not even a .partial one. The fit is written, then the stop is
    obeyed (exit 143)."""
    from molspec_core import calibration

    model, files = calibration_case(tmp_path)
    real = calibration.fit_answers

    def fit_answers(*args, **kwargs):  # the fit of the answers collected: every query is decoded
        signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration, "fit_answers", fit_answers)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 143
    assert json.loads((model / "calibration.json").read_text())["n_best"] == 2
    assert "stopping once the fit is written" in caplog.text


def test_a_screen_that_cannot_take_the_fit_loses_no_fit(tmp_path, monkeypatch):
    """`molspec calibrate ... | head -1`: the reader gone, printing the fit's figures raised BrokenPipeError before
    the fit was written, and the whole run was lost. The fit is written first."""
    import molspec_core.cli as cli_module

    model, files = calibration_case(tmp_path)

    def broken(*args, **kwargs):
        if kwargs.get("file") is None:  # standard output: the pipe
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_module, "print", broken, raising=False)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 2
    assert json.loads((model / "calibration.json").read_text())["n_best"] == 2


def test_calibrate_takes_a_time_limit_as_evaluate_does(tmp_path, capsys, monkeypatch):
    """calibrate decoded under the service's 60 s per query, with no --time-limit to raise it: on a slow machine the
    slowest queries were refused and left out of the fit (now counted in a warning), and nothing could keep them."""
    from molspec_core.service import DEFAULT_TIME_LIMIT_S, Predictor

    model, files = calibration_case(tmp_path)
    real, limits = Predictor.predict, []

    def predict(self, *args, **kwargs):
        limits.append(kwargs.get("time_limit_s"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", predict)
    assert main(["calibrate", *files, "--n-best", "2", "--force", "--time-limit", "300"]) == 0
    assert main(["calibrate", *files, "--n-best", "2", "--judge"]) == 0
    assert limits == [300.0, DEFAULT_TIME_LIMIT_S]
    capsys.readouterr()


def test_calibrate_judges_on_the_very_queries_that_judged_the_fit(tmp_path, capsys):
    """Files shifted by a line (or another --limit of the same size) were judged as if they were the fit's own."""
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    assert json.loads((model / "calibration.json").read_text())["check_sha256"]
    lines = (tmp_path / "val.src").read_text().splitlines()
    (tmp_path / "val.src").write_text("\n".join(lines[:-1] + ["CCCOc1ccccc1"]) + "\n")  # a check query changed
    capsys.readouterr()
    assert main(["calibrate", *files, "--n-best", "2", "--judge"]) == 2
    assert "these are not the 2 queries the saved fit was judged on" in capsys.readouterr().err


def test_calibrate_judge_names_the_files_and_limit_the_fit_was_made_from(tmp_path, capsys):
    """--judge needs the files and --limit the fit was made with, and refused others with 'judge it on the files and
    --limit it was made with', which nothing recorded: the fit records them, and the refusal names them."""
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2", "--force", "--limit", "5"]) == 0
    saved = json.loads((model / "calibration.json").read_text())
    assert (saved["src"], saved["tgt"], saved["limit"]) == (str(tmp_path / "val.src"), str(tmp_path / "val.tgt"), 5)
    capsys.readouterr()
    assert main(["calibrate", *files, "--n-best", "2", "--judge"]) == 2
    assert (f"judge it on the files and --limit it was made with: --src {tmp_path / 'val.src'} --tgt "
            f"{tmp_path / 'val.tgt'} --limit 5") in capsys.readouterr().err


def test_calibrate_refuses_a_fit_without_one_right_answer_and_says_what_it_replaces(tmp_path, capsys, caplog):
    """Targets that were not the queries' answers fitted every answer to 12%, over the model's fit, without a word."""
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    saved = (model / "calibration.json").read_text()
    capsys.readouterr()
    targets = (tmp_path / "val.tgt").read_text()
    (tmp_path / "val.tgt").write_text("CC\n" * 6)
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 2
    assert "none of the answers to the 4 fitting queries is right" in capsys.readouterr().err
    assert (model / "calibration.json").read_text() == saved
    (tmp_path / "val.tgt").write_text(targets)  # the right answers again
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    out = capsys.readouterr().out
    assert "the fit in the folder (fitted on 3 queries, judged on 1 with error" in out
    assert f"(the file it replaces is kept as {model / 'calibration.json.bak'})" in out
    assert caplog.records[-1].getMessage() == (
        "the fit rests on 3 queries: its confidences are coarse steps (the default --limit, 2000, fits on 1,333)")


def test_calibrate_fits_greedy_answers_and_refuses_sampled_ones(tmp_path, capsys):
    from molspec_core import calibration

    model, files = calibration_case(tmp_path)
    assert main(["calibrate", "--method", "spec-auto", *files, "--force"]) == 0  # one answer: n-best 1 without asking
    assert "(spec-auto, 1-best)" in capsys.readouterr().out
    assert calibration.load(model, 1, "greedy").method == "spec-auto"
    assert not (model / "calibration.json").exists()
    assert main(["predict", "--model", str(model), "--smiles", "CCOc1ccccc1"]) == 0  # greedy's answer: its own fit
    assert " - " not in capsys.readouterr().out.splitlines()[2]
    assert main(["calibrate", "--method", "sample", *files]) == 2
    assert "sampled or lossy" in capsys.readouterr().err


def test_calibrate_refuses_before_decoding_a_fit_on_few_queries_a_folder_it_cannot_write_and_ignored_drafts(
        tmp_path, capsys, monkeypatch, no_model_load):
    """A fit on 2 queries replaced the shipped fit on 1,333 (13 times its error), told only after the fact; and a
    folder it could not write lost the whole decode when the fit was saved."""
    model, files = calibration_case(tmp_path)
    # the file holds 6 lines: a --limit would not help (it said 'give at least 150 queries (--limit, default 2000)')
    expect_refused(["calibrate", *files], capsys, "6 validation queries would fit the calibration on 4 (the rest judge "
                   "it): below 100 its confidences are a few coarse steps, and every answer would get one; "
                   f"{tmp_path / 'val.src'} holds no more: give a file of at least 150 validation queries, or --force "
                   "to fit on these")
    expect_refused(["calibrate", *files, "--limit", "5"], capsys, "give at least 150 queries (--limit, default 2000), "
                   "or --force to fit on these")
    real_access = os.access
    monkeypatch.setattr("molspec_core.io.os.access", lambda path, mode: str(path) != str(model) and real_access(
        path, mode))
    expect_refused(["calibrate", *files, "--force"], capsys, "no permission to write in the folder of")
    expect_refused(["calibrate", *files, "--force", "--method", "spec-auto", "--draft-len", "3"], capsys,
                   "calibrate decodes with each method's own drafts")
    expect_refused(["calibrate", *files, "--force", "--judge"], capsys, "--judge writes nothing")
    assert sorted(path.name for path in model.iterdir()) == sorted(p.name for p in (FIXTURES / "copy_model").iterdir())


def test_calibrate_counts_the_queries_whose_answers_fitted_and_holds_its_minimum_for_them(tmp_path, capsys,
                                                                                          monkeypatch):
    """"fitted on 4 queries" counted refused queries and targets RDKit cannot read, which fit nothing, so the
    minimum of fitting queries passed on fewer that fitted anything. Here two of the four fitting queries' targets
    are unreadable, under a minimum of 3: the fit is kept aside, not used, and named."""
    monkeypatch.setattr("molspec_core.cli.MIN_FIT_QUERIES", 3)
    model, files = calibration_case(tmp_path)
    targets = (tmp_path / "val.tgt").read_text().splitlines()
    (tmp_path / "val.tgt").write_text("\n".join(["x(", *targets[1:]]) + "\n")  # the third's, ON1N1, is unreadable too
    expect_refused(["calibrate", *files, "--n-best", "2"], capsys, "the answers of 2 of the 4 fitting queries fitted "
                   "the calibration: below 3 its confidences are a few coarse steps, so ")
    assert not (model / "calibration.json").exists()
    assert json.loads((model / "calibration.json.refused").read_text())["n_fit_answered"] == 2
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0
    assert ("fitted on 2 queries (2 of 4 gave no answer to count: refused, a target RDKit cannot read, or no valid "
            "answer), judged on 1 query (1 of 2 gave ") in capsys.readouterr().out
    saved = json.loads((model / "calibration.json").read_text())
    assert (saved["n_fit"], saved["n_fit_answered"], saved["n_check"], saved["n_check_answered"]) == (4, 2, 2, 1)


def test_calibrate_counts_a_fit_from_before_the_answered_count_like_for_like(tmp_path, capsys, monkeypatch):
    """A fit file from before the count of answered queries (the shipped ones) says how many queries fitted it,
    answered or not: a new fit on the same queries, counted by those answered, came out 'fewer' and was refused, so the
    shipped fits' own command could not make them again without --force."""
    monkeypatch.setattr("molspec_core.cli.MIN_FIT_QUERIES", 2)
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2"]) == 0
    saved = json.loads((model / "calibration.json").read_text())
    assert (saved["n_fit"], saved.pop("n_fit_answered"), saved.pop("n_check_answered")) == (4, 3, 1)
    (model / "calibration.json").write_text(json.dumps(saved))  # as a file from before the count
    capsys.readouterr()
    assert main(["calibrate", *files, "--n-best", "2"]) == 0, capsys.readouterr().err
    assert "the fit in the folder (fitted on 4 queries, judged on 2 with error" in capsys.readouterr().out


def test_calibrate_refuses_to_replace_a_fit_of_another_beam_width_unforced(tmp_path, capsys, monkeypatch):
    """One fit serves every beam width: `calibrate --n-best 3` replaced the shipped 10-best fit, which the app's
    default (10-best) then used, without a word."""
    monkeypatch.setattr("molspec_core.cli.MIN_FIT_QUERIES", 3)
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2"]) == 0
    first = (model / "calibration.json").read_text()
    with monkeypatch.context() as patch:
        patch.setattr("molspec_core.service.Predictor.load", lambda *a, **k: pytest.fail("loaded before the check"))
        expect_refused(["calibrate", *files, "--n-best", "3"], capsys, "the fit in the folder (calibration.json) was "
                       "made on 2-best lists, and one fit serves every beam width: a fit on 3-best lists would "
                       "replace it for all of them; give --n-best 2, or --force to replace it")
    assert (model / "calibration.json").read_text() == first
    assert main(["calibrate", *files, "--n-best", "3", "--force"]) == 0
    assert json.loads((model / "calibration.json").read_text())["n_best"] == 3


def test_calibrate_keeps_the_fit_it_replaces_and_refuses_one_that_judges_worse(tmp_path, capsys, monkeypatch):
    """Every fit replaced the one before, however much worse, and kept no copy of it."""
    # this case's 6 queries fit on the answers of 3 of the first 4, and 3 queries on those of 2
    monkeypatch.setattr("molspec_core.cli.MIN_FIT_QUERIES", 2)
    model, files = calibration_case(tmp_path)
    assert main(["calibrate", *files, "--n-best", "2"]) == 0
    first = (model / "calibration.json").read_text()
    assert not (model / "calibration.json.bak").exists()  # nothing was replaced
    capsys.readouterr()
    # a fit on fewer queries than the one in the folder: refused before decoding (a fit on 100 queries judged better
    # than the shipped one on 1,333, on its 50 check queries, by chance)
    with monkeypatch.context() as patch:
        patch.setattr("molspec_core.service.Predictor.load", lambda *a, **k: pytest.fail("loaded before the check"))
        expect_refused(["calibrate", *files, "--n-best", "2", "--limit", "3"], capsys, "3 validation queries would fit "
                       "the calibration on 2 (the rest judge it): the fit it would replace rests on 3; give at least 4 "
                       "queries")
    # the four fitting queries' targets mostly wrong, the two check queries' right: the new fit says "rarely right"
    # of answers its check queries get right, where the fit in the folder says "right"
    targets = (tmp_path / "val.tgt").read_text().splitlines()
    (tmp_path / "val.tgt").write_text("\n".join(["CC", "CC", "CC", *targets[3:]]) + "\n")
    assert main(["calibrate", *files, "--n-best", "2", "--force"]) == 0  # forced: written, the first fit kept
    assert (model / "calibration.json.bak").read_text() == first and (model / "calibration.json").read_text() != first
    worse = (model / "calibration.json").read_text()
    (model / "calibration.json").write_text(first)
    (model / "calibration.json.bak").unlink()
    capsys.readouterr()
    assert main(["calibrate", *files, "--n-best", "2"]) == 2
    written = capsys.readouterr()
    new_ece, old_ece = json.loads(worse)["ece"], json.loads(first)["ece"]
    assert f"judged on the same 1 query: error {old_ece:.4f}" in written.out and old_ece < new_ece
    assert written.err.strip().splitlines()[-1] == (
        f"error: the new fit judges worse than the fit in the folder on its own check queries ({new_ece:.4f} against "
        f"{old_ece:.4f}), so {model / 'calibration.json'} is kept and the new fit is written to "
        f"{model / 'calibration.json.refused'}: rename it to calibration.json to use it anyway (the earlier fit may "
        "have been fitted on some of these queries, which favours it)")
    assert (model / "calibration.json").read_text() == first and not (model / "calibration.json.bak").exists()
    # the refused fit's decoding is not lost: it is the fit --force wrote, which load never reads under that name
    assert (model / "calibration.json.refused").read_text() == worse


@pytest.mark.parametrize("query, message", [
    ("C1CC", "not a valid SMILES: RDKit cannot parse 'C1CC'"),
    ("[Xe]", "token '[Xe]' is not in the model's vocabulary"),
    ("", "empty query"),
    ("C" * 2001, "query is 2,001 characters long"),
    ("C1CC(>>CC", "the recorded reactants are not a valid SMILES"),  # this one was exit 2, the others 1
])
def test_predict_bad_smiles_is_an_error_line_and_exit_2_whatever_is_wrong(capsys, query, message):
    expect_refused(["predict", "--model", MODEL, "--smiles", query], capsys, message)


def test_the_command_line_says_which_stereo_marks_were_dropped(capsys):
    assert main(["predict", "--model", "forward", "--smiles", "C[C@H]=C=[C@H]C.Br"]) == 0
    assert "note: Stereo marks dropped: 2 atoms marked @" in capsys.readouterr().out


def test_predict_reads_a_hydride_as_ions_only_with_ion_writing(capsys):
    """The refusal offered the ions' writing to paste, and not the flag that reads the query so: it names both."""
    query = "c1ccc2[nH]ccc2c1.CI.[NaH]"  # NaH as drawing programs write it; USPTO writes [H-].[Na+]
    assert main(["predict", "--model", "forward", "--smiles", query]) == 2
    assert "the query so written is c1ccc2[nH]ccc2c1.CI.[H-].[Na+]; --ion-writing reads it so" in \
        capsys.readouterr().err
    assert main(["predict", "--model", "forward", "--smiles", query, "--ion-writing"]) == 0
    out = capsys.readouterr().out
    assert "query: CI.[H-].[Na+].c1ccc2[nH]ccc2c1" in out and "Cn1ccc2ccccc21" in out


def test_predict_csv_keeps_good_rows_and_reports_bad_ones(tmp_path):
    (tmp_path / "in.csv").write_text("id,smiles\n1,CCO\n2,xyz\n3,\n4,=cmd|' /C calc'!A0\n5,c1ccncc1\n")
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"), "--output", str(out),
                 "--method", "beam", "--n-best", "2"]) == 0
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    good = table[table["error"] == ""]
    assert sorted(set(good["row"])) == ["1", "5"] and len(good) == 4  # two ranks each
    bad = table[table["error"] != ""]
    assert sorted(bad["row"]) == ["2", "3", "4"]
    assert bad[bad["row"] == "4"]["query"].iloc[0].startswith("'=")  # formula neutralized


def test_predict_txt_file(tmp_path):
    (tmp_path / "q.txt").write_text("CCO\nCCN\n")
    out = tmp_path / "o.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(out)]) == 0
    with open(out) as f:
        assert [r["query"] for r in csv.DictReader(f)] == ["CCO", "CCN"]


def test_predict_sd_file_keeps_titles_and_fields_and_says_why_a_record_gave_no_query(tmp_path):
    (tmp_path / "drawn.sdf").write_text(sd_file_text())
    out = tmp_path / "o.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "drawn.sdf"), "--output", str(out)]) == 0
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(table.columns[:5]) == ["name", "ID", "note", "row", "query"]
    assert table["name"].tolist() == ["L-alanine", "broken", "five bonds", "4-chloropyridine"]
    assert table["query"].tolist() == ["C[C@H](N)C(=O)O", "", "", "Clc1ccncc1"]
    assert table["error"].tolist()[3] == ""  # (the copy model's vocabulary lacks alanine's [C@H])
    assert table["error"].tolist()[1] == "SD record 2: RDKit cannot read its molblock"
    assert table["error"].tolist()[2].startswith("SD record 3: RDKit cannot sanitize it: Explicit valence")


def test_predict_to_an_sd_name_writes_a_record_per_csv_row(tmp_path, capsys):
    (tmp_path / "drawn.sdf").write_text(sd_file_text())
    for out in ("o.csv", "o.sdf"):
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "drawn.sdf"), "--output",
                     str(tmp_path / out), "--method", "beam", "--n-best", "2"]) == 0
    assert capsys.readouterr().out.endswith("rejected (see the error field) -> " + str(tmp_path / "o.sdf") + "\n")
    table = pd.read_csv(tmp_path / "o.csv", dtype=str, keep_default_na=False)
    back = read_queries(tmp_path / "o.sdf")
    assert back.queries == [s if v == "True" else "" for s, v in zip(table["smiles"], table["valid"])]
    # the fields, each once: the titles, which repeat the name field (or the answer where it is empty), were a
    # second column called name
    assert back.columns[:2] == ("name", "ID") and sorted(set(back.columns)) == sorted(back.columns)
    assert set(back.columns) <= set(table.columns)  # (a field empty in every row is none)
    fields = pd.DataFrame(list(back.cells), columns=list(back.columns))
    for column in ("name", "ID", "row", "query", "rank", "score", "error"):  # every cell kept, "" where it is empty
        assert fields[column].tolist() == table[column].tolist(), column


def test_predict_reads_and_writes_excel_workbooks_row_for_row_as_csv(tmp_path, capsys, monkeypatch):
    import openpyxl

    from molspec_core import io as molspec_io

    book = openpyxl.Workbook()
    book.active.append(["ID", "smiles"])
    for row in ([101, "Clc1ccncc1"], [102, "xyz"], [103, "Oc1ccncc1"]):
        book.active.append(row)
    book.save(tmp_path / "in.xlsx")
    for out in ("o.csv", "o.xlsx"):
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.xlsx"), "--output",
                     str(tmp_path / out), "--method", "beam", "--n-best", "2"]) == 0
    assert capsys.readouterr().out.endswith("2 queries predicted, 1 rejected (see the error column) -> "
                                            + str(tmp_path / "o.xlsx") + "\n")
    from_book, from_csv = excel_and_csv(tmp_path / "o.xlsx", tmp_path / "o.csv")
    numbers = ["time_ms"]  # each run's own timing
    assert from_book.drop(columns=numbers).equals(from_csv.drop(columns=numbers))
    assert from_csv["ID"].tolist()[0] == "101" and from_csv["error"].str.len().gt(0).sum() == 1
    assert pd.read_excel(tmp_path / "o.xlsx")["score"].dtype == float  # a number, where Excel can sum it
    # a run that may need more rows than a sheet holds is refused before any query is predicted
    monkeypatch.setattr(molspec_io, "WORKBOOK_MAX_ROWS", 6)  # the header and 5: three queries x 2 answers is 6
    written = (tmp_path / "o.xlsx").read_bytes()
    monkeypatch.setattr("molspec_core.service.Predictor.load", lambda *a, **k: pytest.fail("the model loaded"))
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.xlsx"), "--output",
                 str(tmp_path / "o.xlsx"), "--method", "beam", "--n-best", "2"]) == 2
    assert "up to 6 rows of answers, more than an Excel sheet holds" in capsys.readouterr().err
    assert (tmp_path / "o.xlsx").read_bytes() == written


KNOWN_CSV = ("smiles,expected\nOc1ccncc1,Oc1ccncc1\nOc1ccncc1,OC1=CN=CC=C1\nClc1ccncc1,CCO\nxyz,CCO\n"
             "Clc1ccncc1,\nOc1ccncc1,not one\n")


def test_predict_names_the_known_column_as_the_file_does(tmp_path, capsys):
    """`--known-column EXPECTED` finds the column expected (ccb610e), and the summary called it 'the column EXPECTED',
    a column the file does not have, where the line above names the query column as the file writes it."""
    (tmp_path / "in.csv").write_text(KNOWN_CSV)
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"), "--output",
                 str(tmp_path / "out.csv"), "--known-column", "EXPECTED"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("known answers from the column expected: ")


def test_predict_marks_the_files_known_answers_and_says_how_often_they_come_back(tmp_path, capsys):
    (tmp_path / "in.csv").write_text(KNOWN_CSV)
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"), "--output", str(out),
                 "--method", "beam", "--n-best", "5", "--known-column", "expected"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "known answers from the column expected: first for 1 (33.3%) and listed for 2 (66.7%) of 3 queries "
        "(canonical SMILES, stereo kept); not counted: 1 known answer RDKit cannot read, 1 query with no known answer")
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(table.columns[-3:]) == ["matches_known", "model_folder", "model_weights"]  # the model's after it
    assert table.loc[table["matches_known"] == "True", ["row", "rank"]].values.tolist() == [["1", "2"], ["2", "1"]]
    assert set(table.loc[table["row"] == "3", "matches_known"]) == {"False"}
    assert set(table.loc[table["row"].astype(int) > 3, "matches_known"]) == {""}


def test_predict_reads_a_file_of_recorded_reactions_and_marks_their_recorded_outcome(tmp_path, capsys):
    # the copy fixture is no forward model: it predicts from a recorded reaction's products and knows its reactants
    (tmp_path / "in.txt").write_text("Oc1ccncc1>>Oc1ccncc1\nCCO>>Clc1ccncc1\nOc1ccncc1\nC1CC(>>CCO\n")
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.txt"), "--output", str(out),
                 "--method", "beam", "--n-best", "5"]) == 0
    printed = capsys.readouterr().out.splitlines()
    # 2 of 4: the third is no reaction, the fourth's recorded reactants are no SMILES
    assert printed[0] == ("2 of the file's 4 queries are recorded reactions: each is predicted from its products, and "
                          "its recorded reactants (column recorded_reactants) mark the answers")
    assert printed[-1].startswith("known answers from the column recorded_reactants: first for ")
    assert printed[-1].endswith("of 2 queries (canonical SMILES, stereo kept); not counted: 1 query with no known "
                                "answer")
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert table.columns[0] == "recorded_reactants" and table.columns[-3] == "matches_known"
    first = table.groupby("row").first()
    assert first["query"].tolist() == ["Oc1ccncc1", "Clc1ccncc1", "Oc1ccncc1", "C1CC(>>CCO"]  # nothing lost
    assert first["recorded_reactants"].tolist() == ["Oc1ccncc1", "CCO", "", ""]
    assert "recorded reactants are not a valid SMILES" in first.loc["4", "error"]
    assert set(table.loc[table["row"] == "2", "matches_known"]) == {"False"}  # a copier never writes ethanol


def test_a_misspelt_known_column_of_recorded_reactions_lists_the_files_own_columns(tmp_path, capsys):
    """A file of recorded reactions with --known-column misspelt was told 'its other columns: id, recorded_reactants,
    recorded_reaction', the last two the command's own (known.with_recorded), not the file's, after a line saying
    that column marks the answers; the Batch page lists the file's own since f7e0c41."""
    (tmp_path / "rec.csv").write_text("id,smiles\n1,CCO>>CC\n2,CCN>>CN\n")
    (tmp_path / "rec.txt").write_text("CCO>>CC\n")
    for name, listed in (("rec.csv", "id"), ("rec.txt", "none besides its queries")):
        code = main(["predict", "--model", MODEL, "--input", str(tmp_path / name), "--output", str(tmp_path / "o.csv"),
                     "--known-column", "prodcut"])
        printed = capsys.readouterr()
        assert code == 2 and printed.err.splitlines() == [f"error: {name} has no column 'prodcut' of known answers "
                                                          f"(its other columns: {listed})"], printed
        assert "recorded reactions" not in printed.out, printed.out
    assert not (tmp_path / "o.csv").exists()
    # the column the command adds may still be named
    assert run_cli(["predict", "--model", MODEL, "--input", tmp_path / "rec.txt", "--output", tmp_path / "o.csv",
                    "--known-column", "Recorded_Reactants"], capsys)[0] == 0


def test_a_file_of_one_query_is_told_of_in_the_singular(tmp_path, capsys):
    """A file of one recorded reaction was told '1 of the file's 1 queries are recorded reactions: each is
    predicted ...', and a file whose one query was refused 'error: none of the 1 queries could be predicted' (its
    words stay 'error: none of the', which test_fuzz reads)."""
    (tmp_path / "one.txt").write_text("CCO>>Oc1ccncc1\n")
    assert predict_file(tmp_path / "one.txt", tmp_path / "o.csv") == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "1 of the file's 1 query is a recorded reaction: it is predicted from its products, and its recorded "
        "reactants (column recorded_reactants) mark the answers")
    (tmp_path / "bad.txt").write_text("xyz\n")
    assert predict_file(tmp_path / "bad.txt", tmp_path / "o.csv") == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("error: none of the file's queries could be predicted: it "
                                                       "holds one, which was refused")
    # a reaction whose recorded outcome is no SMILES: '0 of the file's 1 queries are recorded reactions: each is ...'
    (tmp_path / "unread.txt").write_text("C1CC(>>Oc1ccncc1\n")
    assert predict_file(tmp_path / "unread.txt", tmp_path / "o.csv") == 2
    assert capsys.readouterr().out.splitlines()[0] == (
        "none of the file's 1 query is a recorded reaction whose recorded reactants RDKit reads: those written as "
        "reactions are refused (see the error column)")


def test_predict_one_recorded_reaction_says_where_its_outcome_ranks(capsys):
    assert main(["predict", "--model", MODEL, "--smiles", "CCO>>c1ccccc1", "--method", "beam", "--n-best", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("query: c1ccccc1") and out.splitlines()[-1] == "recorded outcome CCO: not among the 3 answers"


def test_predict_names_the_model_in_its_answers_and_resumes_rows_kept_before_it_did(tmp_path, capsys):
    """The app's files of answers end with model_folder and model_weights since 23c693d (io.MODEL_COLUMNS), and
    predict's did not: a file sent on could not be told from another model's answers. Its rows end with them too, the
    folder's name (io.model_cells: not its path) and the weights' fingerprint taken as the model loaded, in a file, on
    standard output and for one --smiles; rows an interrupted run kept before predict wrote them are resumed, as they
    are, each named by this run's model (not refused as another run's columns)."""
    from molspec_core.calibration import weights_fingerprint

    named = ["copy_model", weights_fingerprint(MODEL)]
    (tmp_path / "q.smi").write_text("OCCOc1ccccc1\nCCOc1ccccc1\nNc1ccncc1\n")
    out = tmp_path / "out.csv"
    predict = ["predict", "--model", MODEL, "--input", str(tmp_path / "q.smi"), "--output", str(out)]
    assert main(predict) == 0
    with open(out, newline="") as f:
        whole = list(csv.reader(f))
    assert whole[0][-2:] == ["model_folder", "model_weights"]
    assert {tuple(row[-2:]) for row in whole[1:]} == {tuple(named)}
    capsys.readouterr()
    assert main([*predict[:-1], "-"]) == 0
    piped = list(csv.reader(capsys.readouterr().out.splitlines()))
    assert piped[0] == whole[0] and {tuple(row[-2:]) for row in piped[1:]} == {tuple(named)}
    assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--output", str(tmp_path / "one.csv")]) == 0
    one = pd.read_csv(tmp_path / "one.csv", dtype=str)
    assert list(one.columns[-2:]) == ["model_folder", "model_weights"] and one.iloc[0, -2:].tolist() == named
    # the first record's rows as a run from before kept them: no model columns
    at = whole[0].index("row")
    with open(tmp_path / "out.interrupted.csv", "w", newline="") as f:
        csv.writer(f).writerows(row[:-2] for row in whole if row[at] in ("row", "1"))
    out.unlink()
    capsys.readouterr()
    assert main([*predict, "--resume"]) == 0
    assert "resuming: record 1 of 3 comes from out.interrupted.csv" in capsys.readouterr().out
    with open(out, newline="") as f:
        resumed = list(csv.reader(f))
    drop = whole[0].index("time_ms")  # a measurement, not the answer
    assert [row[:drop] + row[drop + 1:] for row in resumed] == [row[:drop] + row[drop + 1:] for row in whole]
    assert not (tmp_path / "out.interrupted.csv").exists()


def test_predict_one_smiles_writes_its_answers_to_the_output_as_a_file_query_would(tmp_path, capsys):
    """--output with --smiles was ignored (the table printed, exit 0, no file): the answers are written too, in
    --input's columns, with the recorded outcome marked where the query is a recorded reaction."""
    out = tmp_path / "one.csv"
    assert main(["predict", "--model", MODEL, "--smiles", "CCO>>c1ccccc1", "--method", "beam", "--n-best", "3",
                 "--output", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"-> {out}"
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert table.columns[0] == "recorded_reactants" and table.columns[-3] == "matches_known"
    assert table["rank"].tolist() == ["1", "2", "3"] and set(table["query"]) == {"c1ccccc1"}
    assert set(table["recorded_reactants"]) == {"CCO"} and set(table["matches_known"]) == {"False"}
    files = tmp_path / "files.csv"
    (tmp_path / "in.smi").write_text("CCO>>c1ccccc1\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.smi"), "--method", "beam",
                 "--n-best", "3", "--output", str(files)]) == 0
    from_file = pd.read_csv(files, dtype=str, keep_default_na=False)
    assert table.drop(columns="time_ms").equals(from_file.drop(columns="time_ms"))


def test_predict_one_smiles_refuses_an_output_it_cannot_write_before_loading_the_model(tmp_path, capsys,
                                                                                       no_model_load):
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--output", tmp_path / "none" / "o.csv"],
                   capsys, "does not exist")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--output", tmp_path / "o.csv.gz"], capsys,
                   "uncompressed")


def test_predict_refuses_options_it_would_ignore_before_loading_the_model(tmp_path, capsys, no_model_load):
    """They were ignored without a word: --round-trip-k without --round-trip, --column with --smiles or with a
    file that has no columns."""
    expect_refused(["predict", "--model", "retro", "--smiles", "CCO", "--round-trip-k", "3"], capsys,
                   "--round-trip-k goes with --round-trip FORWARD_MODEL")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--column", "smiles"], capsys,
                   "--column reads a file's column: give --input")
    (tmp_path / "in.smi").write_text("CCO ethanol\n")
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "in.smi", "--output", tmp_path / "o.csv",
                    "--column", "lab_id"], capsys,
                   "a column, 'lab_id', was named, but in.smi is read as a SMI file, which has no columns: its SMILES "
                   "are the first field of each line")
    assert not (tmp_path / "o.csv").exists()
    # --draft-len and --n-drafts with a method that drafts nothing (or one draft only) were ignored
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--method", "greedy", "--draft-len", "4"], capsys,
                   "greedy does not read --draft-len; the methods that do: spec-auto, spec-pointer")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--method", "spec-sample", "--n-drafts", "3"],
                   capsys, "spec-sample does not read --n-drafts; the methods that do: spec-auto,")
    # and so were the sampling knobs, set off their defaults for a method that samples nothing
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--method", "beam", "--temperature", "0.8"],
                   capsys, "beam does not read --temperature; the methods that do: sample, spec-sample,")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--method", "sample", "--tau", "0.5"],
                   capsys, "sample does not read --tau; the methods that do: relaxed")


def test_predict_refuses_answers_a_method_cannot_give_before_loading_the_model(tmp_path, capsys, no_model_load):
    """predict --input q.csv --output o.csv --n-best 2 (greedy by default) loaded the model, said its answers had no
    calibration, started the progress bar and printed 'stopped: no record finished; o.csv was not written' before
    the real error: the options are checked before the model loads, and the error is the one line."""
    (tmp_path / "q.csv").write_text("smiles\nCCO\nCCN\n")
    for query in (["--input", tmp_path / "q.csv"], ["--smiles", "CCO"]):
        code, err = run_cli(["predict", "--model", MODEL, *query, "--output", tmp_path / "o.csv", "--n-best", "2"],
                            capsys)
        assert code == 2 and err.splitlines() == [
            "error: greedy returns one prediction; for 2 use beam or another method that returns several: beam, "
            "sbs-exact, sbs, sample, spec-sample, spec-sample-draft, mentored (name it as the method; greedy is the "
            "method taken where none is named)"], err
    assert sorted(tmp_path.iterdir()) == [tmp_path / "q.csv"]


def test_predict_refuses_writings_its_model_cannot_read_before_predicting(tmp_path, capsys):
    """--augment 3 with a model trained on one writing went on to the calibration note and the progress bar, then
    'stopped: no record finished', before the error; it is refused once the model has loaded, before any of that."""
    (tmp_path / "q.csv").write_text("smiles\nCCO\nCCN\n")
    code = main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.csv"), "--output", str(tmp_path / "o.csv"),
                 "--augment", "3"])
    printed = capsys.readouterr()
    assert code == 2 and "calibration" not in printed.out and "stopped" not in printed.err, printed
    assert printed.err.splitlines()[-1] == ("error: copy_model was trained on one writing of each query (canonical "
                                            "SMILES), so other writings would only confuse it: leave augment at 1, "
                                            "its default (--augment on the command line)")
    assert sorted(tmp_path.iterdir()) == [tmp_path / "q.csv"]


def test_predict_refuses_a_known_column_the_file_lacks_before_loading_the_model(tmp_path, capsys, no_model_load):
    (tmp_path / "in.csv").write_text(KNOWN_CSV)
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "in.csv", "--output", tmp_path / "o.csv",
                    "--known-column", "product"], capsys,
                   "in.csv has no column 'product' of known answers (its other columns: expected)")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--known-column", "x"], capsys,
                   "--known-column reads a file's column: give --input")
    assert not (tmp_path / "o.csv").exists()


def test_predict_csv_with_wrong_column_is_refused(tmp_path, capsys):
    (tmp_path / "in.csv").write_text("name,formula\nethanol,C2H6O\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"),
                 "--output", str(tmp_path / "o.csv")]) == 2
    assert "needs a column named" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()


@pytest.fixture
def pair_files(tmp_path):
    sources = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1"]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")
    # the copy model drops 'C' atoms: its right answers are those strings
    (tmp_path / "tgt.txt").write_text("\n".join(s.replace("C", "") for s in sources) + "\n")
    (tmp_path / "idx").write_text("4\n0\n1\n")
    return tmp_path


def test_evaluate_writes_topk_json(pair_files):
    out = pair_files / "eval.json"
    assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"),
                 "--tgt", str(pair_files / "tgt.txt"), "--n-best", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 5 and {"top1", "top2", "top3", "invalid_smiles_rate", "flagged_rate"} <= set(report)
    assert report["top1"] <= report["top2"] <= report["top3"]
    assert report["ranked_top1"] <= report["ranked_top2"] <= report["ranked_top3"]
    assert report["ranked_top3"] == report["top3"]  # ranking reorders the n-best list; it adds nothing
    assert report["dtype"] == "float32" and report["engine"] in ("native", "numpy", "torch")  # what computed it


def test_evaluate_keeps_each_querys_place_for_compare(pair_files, capsys):
    out = pair_files / "eval.json"
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    assert main(["evaluate", "--model", MODEL, *files, "--n-best", "3", "--out", str(out)]) == 0
    assert "first_right" not in capsys.readouterr().out  # the screen gets the figures, the file the places too
    report = json.loads(out.read_text())
    assert sum(line.lstrip().startswith('"model_order": [') for line in out.read_text().splitlines()) == 1  # a line
    for order, key in (("model_order", "top"), ("app_order", "ranked_top")):
        places = report["first_right"][order]
        assert len(places) == 5
        for k in (1, 2, 3):  # the places add up to the top-k figures
            assert sum(p is not None and p <= k for p in places) / 5 == pytest.approx(report[f"{key}{k}"])


def test_evaluate_counts_the_targets_rdkit_cannot_read(pair_files, capsys, caplog):
    """They were misses without a word: the report counts them, and a warning says how many."""
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, *files, "--limit", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["unreadable_targets"] == 0 and not caplog.records
    targets = (pair_files / "tgt.txt").read_text().splitlines()
    assert targets[2] == "ON1N1"  # the copy model's answer to OCCN1CCNCC1 closes a ring on a bond it has
    targets[3] = ""  # a line left empty
    (pair_files / "tgt.txt").write_text("\n".join(targets) + "\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, *files, "--out", str(pair_files / "eval.json")]) == 0
    assert json.loads(capsys.readouterr().out)["unreadable_targets"] == 2  # stdout is still one JSON object
    assert json.loads((pair_files / "eval.json").read_text())["unreadable_targets"] == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"2 of 5 targets in {pair_files / 'tgt.txt'} are SMILES RDKit cannot read: those queries count as misses"]


def test_evaluate_warns_when_the_data_folder_was_prepared_for_the_other_task(pair_files, capsys, caplog):
    """A retrosynthesis model read a forward folder's queries without a word (every answer a miss): a
    prepare-data folder's stats.json names its task, and a mismatch is told before the run."""
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"), "--limit", "1"]
    task = json.loads((FIXTURES / "copy_model" / "config.json").read_text()).get("task", "forward")
    for stats, warned in (('{"task": "%s"}' % task, False), ("not json", False), ('["task"]', False),
                          ('{"task": "%s"}' % ("retro" if task == "forward" else "forward"), True)):
        (pair_files / "stats.json").write_text(stats)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
            assert main(["evaluate", "--model", MODEL, *files]) == 0
        capsys.readouterr()
        messages = [r.getMessage() for r in caplog.records]
        assert (messages == [f"{pair_files / 'src.txt'} was prepared for the "
                             f"{'retro' if task == 'forward' else 'forward'} task (its folder's stats.json) but "
                             f"the model is a {task} model: expect every answer to miss"]) if warned else not messages


def test_evaluate_warns_where_no_query_got_its_target(pair_files, capsys, caplog):
    """A forward model run on USPTO-50K's products and reactants (another task's files) reported 0% in every top-k
    as if that were the model's accuracy: a run where no query got its target says what to check."""
    (pair_files / "tgt.txt").write_text("O\n" * 5)
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--n-best", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["top2"] == 0
    task = json.loads((FIXTURES / "copy_model" / "config.json").read_text()).get("task", "forward")
    assert [r.getMessage() for r in caplog.records] == [
        f"none of the 5 queries has its target in its top-2: check that {pair_files / 'tgt.txt'} holds the answers to "
        f"{pair_files / 'src.txt'}, line by line, and that they are for a {task} model"]


def test_compare_counts_the_queries_each_report_gets_right_alone(tmp_path, capsys):
    base = {"n": 6, "n_best": 2, "src": "s", "tgt": "t", "index": None, "model": "m", "method": "beam"}
    a = dict(base, first_right={"model_order": [1, 1, 1, 1, 2, None], "app_order": [1, 1, 1, 1, 1, None]})
    b = dict(base, dtype="int8",
             first_right={"model_order": [None, None, None, 1, 1, 1], "app_order": [1, 1, 1, 1, 1, None]})
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    from molspec_core.evaluate import compare_reports, mcnemar_p

    table = compare_reports(a, b)
    assert [(r["only_a"], r["only_b"]) for r in table["model_order"]] == [(3, 2), (3, 1)]
    assert [(r["only_a"], r["only_b"]) for r in table["app_order"]] == [(0, 0), (0, 0)]
    assert table["model_order"][0]["a"] == pytest.approx(4 / 6) and table["model_order"][1]["b"] == pytest.approx(3 / 6)
    assert table["app_order"][0]["p"] == 1.0
    # exact McNemar: 10 against 0 is 2 x (1/2)^10; one-sided counts are symmetric
    assert mcnemar_p(10, 0) == pytest.approx(2 / 1024) and mcnemar_p(3, 7) == mcnemar_p(7, 3) == pytest.approx(0.34375)
    exact = 2 * sum(math.comb(2200, i) for i in range(1001)) / 2 ** 2200  # computed in logs, as exact as this
    assert mcnemar_p(1000, 1200) == pytest.approx(exact, rel=1e-9) and 0 < mcnemar_p(17_000, 20_000) < 1e-50
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "top-1: a 66.7%  b 50.0%  only a 3  only b 2" in out
    assert "6 queries (s); right only" in out
    for report in (a, b):  # reports that name no --src file: the header read "6 queries (None)"
        report.pop("src")
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "6 queries; right only" in capsys.readouterr().out
    a["n"] = b["n"] = 2000  # 1,999 right of 2,000 printed "100.0%", which no model gets
    a["first_right"] = {"model_order": [1] * 1999 + [None], "app_order": [1] * 2000}
    b["first_right"] = {"model_order": [1] * 2000, "app_order": [1] * 2000}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "top-1: a >99.9%  b 100.0%  only a 0  only b 1" in capsys.readouterr().out
    assert "method beam, dtype not recorded)" in out and "method beam, int8)" in out  # what each was computed in


def test_compare_names_the_writings_of_each_report_in_the_right_number(tmp_path, capsys):
    """Its header read '1 writing(s)' and '5 writing(s)' (the Models page counts in words since c658338)."""
    base = {"n": 2, "n_best": 1, "src": "s", "tgt": "t", "index": None, "model": "m", "method": "greedy",
            "first_right": {"model_order": [1, None], "app_order": [1, None]}}
    (tmp_path / "a.json").write_text(json.dumps(base))  # a report from before augment was recorded: one writing
    (tmp_path / "b.json").write_text(json.dumps(dict(base, augment=5)))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    header = capsys.readouterr().out.splitlines()[:2]
    assert ", 1 writing, method greedy" in header[0] and ", 5 writings, method greedy" in header[1], header


def test_compare_says_a_report_file_is_empty(tmp_path, capsys):
    """An empty report (a run's --out emptied, a redirect that failed) was refused 'is not a JSON report: Expecting
    value: line 1 column 1 (char 0)', json's own words."""
    (tmp_path / "a.json").write_text("")
    (tmp_path / "b.json").write_text(" \n")
    expect_refused(["compare", tmp_path / "a.json", tmp_path / "b.json"], capsys,
                   f"{tmp_path / 'a.json'} is empty: no JSON report is in it")


def test_compare_counts_in_words_with_thousands_apart_and_refuses_counts_that_are_not(tmp_path, capsys):
    """Counts in the command line's words have one home (words.counted), thousands apart as the app writes them
    ('2000 queries' beside predict's '12,345 queries predicted'). A report whose writings or stopped run's count of
    queries were edited into no number is refused naming it, not counted."""
    from molspec_core.words import counted

    assert [counted(1, "query", "queries"), counted(0, "step"), counted(12345, "molecule")] == [
        "1 query", "0 steps", "12,345 molecules"]
    base = {"n": 2000, "n_best": 1, "src": "s", "tgt": "t", "index": None, "model": "m", "method": "greedy",
            "first_right": {"model_order": [1] * 2000, "app_order": [1] * 2000}}
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "b.json").write_text(json.dumps(dict(base, partial={"of_n": 3000})))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "partial: stopped after 2,000 of 3,000 queries)" in out and "\n2,000 queries (s); right only" in out
    for edit, problem in (({"augment": "5"}, "'augment' is '5', not a whole number from 1"),
                          ({"partial": {}}, "'partial' is {}, not how many queries the stopped run was asked for")):
        (tmp_path / "b.json").write_text(json.dumps(dict(base, **edit)))
        expect_refused(["compare", tmp_path / "a.json", tmp_path / "b.json"], capsys,
                       f"b.json is not an evaluate report ({problem}")


def test_compare_and_evaluate_count_one_query_in_the_singular(tmp_path, pair_files, capsys, caplog):
    """Reports of one query were compared as '1 queries (...)', a stopped one 'stopped after 1 of 1 queries'; an
    evaluation of one query said 'none of the 1 queries has its target' and 'none of the 1 queries could be
    evaluated'."""
    base = {"n": 1, "n_best": 1, "src": "s", "tgt": "t", "index": None, "model": "m", "method": "greedy",
            "first_right": {"model_order": [1], "app_order": [1]}}
    (tmp_path / "a.json").write_text(json.dumps(dict(base, partial={"of_n": 1})))
    (tmp_path / "b.json").write_text(json.dumps(base))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; partial: stopped after 1 of 1 query)") and lines[2].startswith("1 query (s); right")
    (pair_files / "one.txt").write_text("CCOc1ccccc1\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "one.txt"), "--tgt",
                     str(pair_files / "one.txt")]) == 0
    assert caplog.records[-1].getMessage().startswith("the one query does not have its target in its top-1: check")
    (pair_files / "xe.txt").write_text("C[Xe]\n")
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "xe.txt", "--tgt", pair_files / "one.txt"],
                   capsys, "error: the one query could not be evaluated: it was refused (token '[Xe]' is not in")


def test_compare_refuses_one_report_given_twice(tmp_path, capsys):
    """`molspec compare eval.json eval.json` (a name typed twice) printed a table of no differences, p 1 at every k,
    which reads as two runs that agree."""
    report = {"n": 1, "n_best": 1, "first_right": {"model_order": [1], "app_order": [1]}}
    (tmp_path / "a.json").write_text(json.dumps(report))
    (tmp_path / "link.json").symlink_to(tmp_path / "a.json")
    expect_refused(["compare", tmp_path / "a.json", tmp_path / "link.json"], capsys,
                   f"{tmp_path / 'a.json'} and {tmp_path / 'link.json'} are one file: give two reports")


def test_compare_tells_apart_two_weights_of_one_model_folder(tmp_path, capsys):
    """A training run's last/ folder, evaluated before and after more training, read 'model runs/x/last' on both
    lines, as if one model had been compared with itself: each line names the weights' fingerprint too."""
    base = {"n": 2, "n_best": 1, "model": "/runs/x/last", "first_right": {"model_order": [1, None],
                                                                         "app_order": [1, None]}}
    (tmp_path / "a.json").write_text(json.dumps(dict(base, weights="3610ccf44096" + "0" * 52)))
    (tmp_path / "b.json").write_text(json.dumps(dict(base, weights="8a2b" + "1" * 60)))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    a_line, b_line = capsys.readouterr().out.splitlines()[:2]
    assert "(model /runs/x/last, weights 3610ccf44096," in a_line and "weights 8a2b11111111," in b_line


@pytest.mark.parametrize("change, message", [({"n": 7}, "not on the same queries: n 6 against 7"),
                                             ({"src": "other"}, "not on the same queries: src"),
                                             ({"first_right": None}, "no per-query results")])
def test_compare_refuses_reports_it_cannot_pair(tmp_path, capsys, change, message):
    report = {"n": 6, "n_best": 1, "src": "s", "tgt": "t", "index": None,
              "first_right": {"model_order": [1] * 6, "app_order": [1] * 6}}
    other = {key: value for key, value in dict(report, **change).items() if value is not None}
    (tmp_path / "a.json").write_text(json.dumps(report))
    (tmp_path / "b.json").write_text(json.dumps(other))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert message in capsys.readouterr().err
    (tmp_path / "c.json").write_text("not json")
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 2
    assert "is not a JSON report" in capsys.readouterr().err


def test_compare_knows_the_same_queries_by_their_digest_wherever_the_files_lie(pair_files, tmp_path):
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"), "--n-best", "2"]
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("src.txt", "tgt.txt", "idx"):
        (moved / name).write_bytes((pair_files / name).read_bytes())
    assert main(["evaluate", "--model", MODEL, *files, "--out", str(tmp_path / "a.json")]) == 0
    assert main(["evaluate", "--model", MODEL, "--src", str(moved / "src.txt"), "--tgt", str(moved / "tgt.txt"),
                 "--n-best", "2", "--out", str(tmp_path / "b.json")]) == 0
    assert main(["evaluate", "--model", MODEL, *files, "--index", str(pair_files / "idx"), "--limit", "2",
                 "--out", str(tmp_path / "c.json")]) == 0
    from molspec_core.evaluate import compare_reports

    a, b, c = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "abc")
    assert a["src"] != b["src"] and compare_reports(a, b)["app_order"][0]["only_a"] == 0  # moved: the same queries
    with pytest.raises(ValueError, match="not on the same queries"):
        compare_reports(a, dict(c, n=5))  # other lines, even at the same count


def test_compare_sets_a_stopped_run_beside_the_first_queries_of_a_whole_one(pair_files, tmp_path, capsys):
    """A run stopped after n queries (or one of --limit n) beside a whole run of the same files was refused, 'not on
    the same queries', though the whole run's first n are those queries: it is cut to them, where its files still give
    its queries, and says so; where a file changed since, it is refused as before."""
    files = ["--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
             "--n-best", "2"]
    assert main(["evaluate", *files, "--out", str(tmp_path / "whole.json")]) == 0
    assert main(["evaluate", *files, "--limit", "3", "--out", str(tmp_path / "first.json")]) == 0
    stopped = json.loads((tmp_path / "first.json").read_text())
    stopped["partial"] = {"of_n": 5, "stopped_by": "Terminated", "decoded_left_out": 0}  # as a stop writes it
    (tmp_path / "stopped.json").write_text(json.dumps(stopped))
    whole = json.loads((tmp_path / "whole.json").read_text())
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "whole.json"), str(tmp_path / "stopped.json")]) == 0
    out = capsys.readouterr().out
    assert (f"3 queries ({pair_files / 'src.txt'}); a cut to its first 3 of 5 queries, those of b, as its --src and "
            "--tgt give them; right only with a / only with b") in out
    from molspec_core.evaluate import compare_reports

    table = compare_reports(stopped, whole)
    assert (table["n"], table["cut"], table["of_n"]) == (3, "b", 5)
    assert [row["a"] for row in table["model_order"]] == [stopped["top1"], stopped["top2"]]
    assert [row["b"] for row in table["model_order"]] == [
        sum(r is not None and r <= k for r in whole["first_right"]["model_order"][:3]) / 3 for k in (1, 2)]
    (pair_files / "src.txt").write_text("CCO\n" + (pair_files / "src.txt").read_text())  # a query added on top
    assert main(["compare", str(tmp_path / "whole.json"), str(tmp_path / "stopped.json")]) == 2
    assert "not on the same queries: n 5 against 3" in capsys.readouterr().err


def test_bench_reports_every_method_with_index_file(pair_files):
    out = pair_files / "bench.json"
    methods = "greedy,greedy-uncached,spec-paper,spec-lookup,spec-pointer,spec-auto"
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
                 "--index", str(pair_files / "idx"), "--methods", methods, "--warmup", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n_queries"] == 3 and set(report["methods"]) == set(methods.split(","))
    for name, entry in report["methods"].items():
        assert {"median_ms", "p90_ms", "total_s", "model_calls", "accepted_per_call", "identical_to_greedy",
                "top1", "speedup_vs_greedy"} <= set(entry)
        assert entry["identical_to_greedy"] == 1.0, name
    assert report["methods"]["greedy"]["accepted_per_call"] == 0
    assert report["methods"]["spec-pointer"]["model_calls"] < report["methods"]["greedy"]["model_calls"]
    assert (pair_files / "bench.html").exists()


def test_a_bench_report_records_the_weights_code_and_queries_that_made_it(pair_files, monkeypatch, tmp_path):
    """A bench report named the model's folder alone, and its files as given on the command line ('../shared/...',
    meaningless from another folder): the timings in bench/ that the model cards cite could not be told from those of
    the weights and code that replaced them. It records them as an evaluate report does."""
    from molspec_core.calibration import weights_fingerprint
    from molspec_core.evaluate import queries_digest, read_pairs

    monkeypatch.chdir(pair_files)
    assert main(["bench", "--model", MODEL, "--src", "src.txt", "--tgt", "tgt.txt", "--index", "idx", "--methods",
                 "greedy", "--warmup", "0", "--out", str(tmp_path / "bench.json")]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["weights"] == weights_fingerprint(MODEL) and {"version", "commit"} <= set(report)
    assert (report["src"], report["tgt"], report["index"]) == tuple(str(pair_files / name)
                                                                    for name in ("src.txt", "tgt.txt", "idx"))
    assert report["queries_sha256"] == queries_digest(*read_pairs("src.txt", "tgt.txt", "idx"))


def test_a_bench_keeps_the_report_its_out_replaces(pair_files, caplog):
    """bench --out replaced the report there without a word, a whole run's with one Ctrl-C'd a batch in (bench keeps
    a stopped run's figures, marked interrupted): as evaluate's, the file it replaces is kept as <out>.bak. Its chart
    was replaced without a backup, the report's kept beside the next run's chart: it is kept as <chart>.bak too."""
    out, chart = pair_files / "bench.json", pair_files / "bench.html"
    out.write_text("the earlier report\n")
    chart.write_text("the earlier chart\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                     "--warmup", "0", "--out", str(out)]) == 0
    assert (pair_files / "bench.json.bak").read_text() == "the earlier report\n" and json.loads(out.read_text())
    assert (pair_files / "bench.html.bak").read_text() == "the earlier chart\n" and "plotly" in chart.read_text()
    for kept in (out, chart):
        assert any(f"the file it replaces is kept as {kept}.bak" in r.getMessage() for r in caplog.records)


def test_a_bench_report_named_near_the_limit_gets_a_chart_whose_name_fits(pair_files, capsys):
    """bench --out <253 letters> (no suffix: the chart adds .html, 258 bytes) was refused before the run with 'File
    name too long' naming the chart, a file its user never named. The chart's name is cut to fit (bench.chart_of)."""
    out = pair_files / ("r" * 253)
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                 "--warmup", "0", "--limit", "2", "--out", str(out)]) == 0
    charts = list(pair_files.glob("*.html"))
    assert len(charts) == 1 and len(os.fsencode(charts[0].name)) <= 255 and json.loads(out.read_text())
    assert f"(its chart: {charts[0]})" in capsys.readouterr().err


def test_bench_without_plotly_writes_its_report_and_table_and_says_there_is_no_chart(pair_files, capsys, monkeypatch,
                                                                                     caplog):
    """On the engine-only install (pip install -e .: no plotly) bench --out wrote its JSON, then stopped on a
    traceback (No module named 'plotly') before the table: the chart is left out, said before the run and after it,
    with an earlier run's chart there named as such."""
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if not installed
    out, chart = pair_files / "bench.json", pair_files / "bench.html"
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                     "--warmup", "0", "--limit", "2", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(out.read_text())["n_queries"] == 2 and "| greedy |" in captured.out and not chart.exists()
    assert f"-> {out} (no chart: plotly is not installed; pip install -e .[app] or pip install plotly)" in captured.err
    assert any("no chart will be written beside the report" in r.getMessage() for r in caplog.records)
    chart.write_text("an earlier run's chart")
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                 "--warmup", "0", "--limit", "2", "--out", str(out)]) == 0
    assert f"pip install plotly; {chart} is an earlier run's chart)" in capsys.readouterr().err


def test_a_stopped_bench_says_what_it_holds_in_words_that_fit_the_run(pair_files, capsys, monkeypatch):
    """Stopped without --tgt and --out, its last line read 'the figures are theirs, top-k of them alone; the table
    hold the batches measured by then': a run without targets has no top-k, and one table holds."""
    from molspec_core.service import Predictor

    decode, calls = Predictor.decode, []

    def stopped_at_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "decode", stopped_at_third)
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                 "--warmup", "0"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: the run stopped (Ctrl-C) after 2 of the 5 queries: the figures are theirs; the table holds the batches "
        "measured by then")


@pytest.mark.parametrize("name", ["out.csv", "out.sdf", "out.xlsx"])
def test_predict_keeps_the_file_its_output_replaces(tmp_path, caplog, name):
    """predict --output replaced an earlier run's file without a word, where evaluate, bench and calibrate keep the
    file they replace as <file>.bak: it is kept so too, once the new file is whole (one query, and a file of them)."""
    out = tmp_path / name
    out.write_bytes(b"the earlier results\n")
    (tmp_path / "q.txt").write_text("CCO\nCCN\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(out)]) == 0
    assert (tmp_path / f"{name}.bak").read_bytes() == b"the earlier results\n"
    assert read_queries(out, "query").queries == ["CCO", "CCN"]
    assert any(f"the file it replaces is kept as {out}.bak" in r.getMessage() for r in caplog.records)
    whole = out.read_bytes()
    assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--output", str(out)]) == 0
    assert (tmp_path / f"{name}.bak").read_bytes() == whole


def test_predict_keeps_the_file_an_output_named_near_the_limit_replaces(tmp_path, caplog):
    """predict --output <83 Japanese characters>.csv (253 bytes, where a name may take 255) over an earlier file
    decoded, then failed with 'File name too long' for the backup (<name>.csv.bak), and the new results were not
    written. The backup's name is cut to fit, as the output's other companions are (io.fitted_name)."""
    out = tmp_path / ("\u5316" * 83 + ".csv")
    out.write_bytes(b"the earlier results\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--output", str(out)]) == 0
    assert read_queries(out, "query").queries == ["CCO"]
    backups = [p for p in tmp_path.iterdir() if p != out]
    assert len(backups) == 1 and backups[0].name.endswith(".bak") and len(os.fsencode(backups[0].name)) <= 255
    assert backups[0].read_bytes() == b"the earlier results\n"
    assert any(f"the file it replaces is kept as {backups[0]}" in r.getMessage() for r in caplog.records)


def test_a_stopped_predict_keeps_its_output_as_it_was_and_makes_no_backup(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.csv"
    out.write_text("the earlier results\n")
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCO\n")
    ctrl_c_at_third_predict(monkeypatch)
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(out),
                 "--batch-size", "1"]) == 130
    assert out.read_text() == "the earlier results\n" and not (tmp_path / "out.csv.bak").exists()
    capsys.readouterr()


def test_predict_refuses_an_output_whose_backup_it_cannot_write_before_loading_the_model(tmp_path, capsys,
                                                                                        no_model_load):
    (tmp_path / "o.csv.bak").mkdir()
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--output", tmp_path / "o.csv"], capsys,
                   "is a folder")


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "molspec_core", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and "predict" in done.stdout


def test_threads_sets_torchs_thread_count_before_the_model_loads(monkeypatch, capsys):
    """--threads reaches torch before Predictor.load, and without it the default (one core left free,
    molspec_core/threads.py) does. Every command that computes with a model takes it."""
    from molspec_core.service import Predictor

    threads_at_load = []
    load = Predictor.load
    monkeypatch.setattr(Predictor, "load",
                        lambda *a, **k: threads_at_load.append(torch.get_num_threads()) or load(*a, **k))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("molspec_core.threads.usable_cpus", lambda: 4)
    before = torch.get_num_threads()
    try:
        assert main(["predict", "--model", MODEL, "--smiles", "OCCc1ccccc1", "--threads", "2"]) == 0
        torch.set_num_threads(4)  # as torch starts on 4 CPUs
        assert main(["predict", "--model", MODEL, "--smiles", "OCCc1ccccc1"]) == 0
    finally:
        torch.set_num_threads(before)
    assert threads_at_load == [2, 3] and before != 2  # asked; then one core left free
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    takes = {name for name, command in commands.items()
             if any("--threads" in action.option_strings for action in command._actions)}
    assert {"predict", "evaluate", "calibrate", "bench", "plan", "serve", "train"} <= takes
    with pytest.raises(SystemExit):
        main(["predict", "--model", MODEL, "--smiles", "CCO", "--threads", "-1"])
    assert "--threads" in capsys.readouterr().err


def test_every_option_of_every_command_says_what_it_does():
    """`molspec COMMAND --help` is the reference a user reads: no flag may be a bare name."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {action.option_strings[0] if action.option_strings else action.dest}"
            for name, command in commands.items() for action in command._actions if not action.help]
    assert bare == []
    train_help = commands["train"].format_help()  # TrainConfig's descriptions reach the flags
    assert "--freeze-encoder" in train_help and "peak learning rate" in train_help


def test_a_help_that_says_what_a_stop_keeps_names_both_stops():
    """evaluate --out and calibrate --force said what a run 'stopped by Ctrl-C' keeps, and a SIGTERM (a scheduler's
    stop) keeps the same since 92063f0; bench's --out said nothing of a stop, and bench keeps the batches measured by
    then for either (e3de4e7). Each help that names one stop names the other."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    helps = {f"{name} {action.option_strings[0]}": " ".join(action.help.split()) for name, command in commands.items()
             for action in command._actions if action.help and action.option_strings}
    one_stop = [flag for flag, text in helps.items() if ("Ctrl-C" in text) != ("SIGTERM" in text)]
    assert one_stop == []
    assert "SIGTERM" in helps["bench --out"]


@pytest.mark.parametrize("command", ["predict", "evaluate", "calibrate", "bench"])
def test_each_decoding_knobs_help_names_the_methods_that_read_it(command):
    """--n-drafts said 'the spec-* and sbs methods', and spec-sample and spec-sample-draft refuse it; --draft-len said
    only '0: no drafts'. Each knob's help names the methods that read it, from the one table (methods.readers_of)."""
    from molspec_core.methods import readers_of

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    helps = {action.dest: " ".join(action.help.split()) for action in commands[command]._actions if action.help}
    for knob in ("n_best", "draft_len", "n_drafts", "temperature", "top_k", "beta", "tau", "delta", "seed"):
        assert f"({readers_of(knob)}" in helps[knob], (knob, helps[knob])


def test_the_draft_knobs_helps_say_that_calibrate_refuses_them(capsys, no_model_load):
    """calibrate --help offered --draft-len and --n-drafts as any command's, and calibrate refuses both."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for knob in ("draft_len", "n_drafts"):
        assert "calibrate refuses it" in next(a for a in commands["calibrate"]._actions if a.dest == knob).help
    expect_refused(["calibrate", "--model", MODEL, "--src", "v.src", "--tgt", "v.tgt", "--n-drafts", "2"], capsys,
                   "leave out --draft-len and --n-drafts")


def test_predict_time_limit_help_says_what_a_stopped_query_keeps():
    """predict --time-limit said 'seconds per query before it is reported as an error': a query the limit stops keeps
    the answers it had found (marked), and one stopped before any is counted apart from those rejected (f958a16)."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = " ".join(next(a for a in commands["predict"]._actions if a.dest == "time_limit").help.split())
    assert "reported as an error" not in text and "the answers it had found are kept" in text
    assert "counted apart from those rejected" in text


def test_plan_stock_help_names_standard_input_and_compressed_files():
    """plan --stock's help named neither - (standard input, which plan reads and names so) nor .gz, the default stock's
    own form."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = " ".join(next(a for a in commands["plan"]._actions if a.dest == "stock").help.split())
    assert ".gz and .xz too; - reads standard input, one SMILES per line" in text


def test_bench_batch_size_help_says_how_its_batches_are_cut():
    """bench's --batch-size said its batches were cut from queries of like length, as predict's are; bench cuts them
    in file order unless --by-length."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    helps = {name: " ".join(next(a for a in commands[name]._actions if a.dest == "batch_size").help.split())
             for name in ("predict", "bench")}
    assert "cut from queries of like length" in helps["predict"]
    assert "cut from queries of like length" not in helps["bench"]
    assert "in file order (--by-length: of like length)" in helps["bench"]


def test_bench_reports_progress_per_batch(pair_files):
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor

    seen = []
    report = run_bench(Predictor.load(MODEL), ["CCO", "CCN", "c1ccncc1"], None, ["greedy", "spec-lookup"], warmup=0,
                       progress=False, on_progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)] and report["n_queries"] == 3


def test_bench_by_length_cuts_its_batches_as_predict_does(pair_files, monkeypatch):
    """--by-length: the batches hold queries of like token count, as Predictor.predict cuts them, so that a
    batched comparison (bench --peer ctranslate2 --batch-size 8) times the batches predict decodes."""
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor

    predictor = Predictor.load(MODEL)
    fed: list[list[int]] = []
    decode = Predictor.decode
    monkeypatch.setattr(Predictor, "decode", lambda self, sources, *a, **k: fed.append([len(s) for s in sources])
                        or decode(self, sources, *a, **k))
    queries = ["c1ccccc1CCCCO", "CO", "CCCCCN", "CCO", "c1ccncc1CC", "CCN"]
    report = run_bench(predictor, queries, None, ["greedy"], batch_size=2, warmup=0, progress=False, by_length=True)
    assert fed == [[2, 3], [3, 6], [10, 13]] and report["batch_order"] == "by length"
    fed.clear()
    assert run_bench(predictor, queries, None, ["greedy"], batch_size=2, warmup=0, progress=False)["batch_order"] \
        == "as given" and fed == [[13, 2], [6, 3], [10, 3]]
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                 "--batch-size", "2", "--by-length", "--warmup", "0", "--out", str(pair_files / "b.json")]) == 0
    assert json.loads((pair_files / "b.json").read_text())["batch_order"] == "by length"


def test_bench_runs_methods_on_other_engines_beside_the_first(pair_files):
    """"greedy@numpy": the same model on another engine (here the NumPy step beside the torch one; on
    a GPU, CUDA graphs beside eager torch: tools/gpu_kit.py speed --engines graphs), interleaved and
    compared with the first engine's greedy and beam."""
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor

    report = run_bench(Predictor.load(MODEL, engine="torch"), ["CCO", "CCN", "c1ccncc1"], None,
                       ["greedy@numpy", "spec-lookup@numpy", "beam@numpy"], n_best=2, warmup=0, progress=False,
                       engines={"numpy": Predictor.load(MODEL, engine="numpy")})
    methods = report["methods"]
    assert set(methods) == {"greedy", "beam", "greedy@numpy", "spec-lookup@numpy", "beam@numpy"}
    assert methods["greedy@numpy"]["identical_to_greedy"] == methods["spec-lookup@numpy"]["identical_to_greedy"] == 1.0
    assert methods["beam@numpy"]["identical_to_beam"] == 1.0 and "speedup_vs_beam" in methods["beam@numpy"]
    assert methods["spec-lookup@numpy"]["drafts"]["drafter"] == "lookup"
    assert report["engine"] == "torch" and report["other_engines"] == {"numpy": "numpy"}


def test_bench_engines_from_the_command_line(pair_files):
    out = pair_files / "engines.json"
    common = ["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy,spec-lookup",
              "--warmup", "0", "--engine", "torch"]
    assert main(common + ["--engines", "numpy", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["methods"]) == {"greedy", "spec-lookup", "greedy@numpy", "spec-lookup@numpy"}
    assert report["methods"]["spec-lookup@numpy"]["identical_to_greedy"] == 1.0


def test_bench_refuses_an_unknown_engine_before_loading(pair_files, capsys):
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--engines", "onnx"]) == 2
    assert "unknown engines ['onnx']" in capsys.readouterr().err


def test_predict_refuses_its_own_sd_results_read_without_a_query_column(tmp_path, capsys, no_model_load):
    """predict --input of its own --output F.sdf predicted each record's molecule, an answer, as a query, without a
    word (the Batch page refused it since 00c1a95; a CSV of results was refused already): refused before the model
    loads, asking which field to read (io.refuse_unnamed_results)."""
    (tmp_path / "out.sdf").write_text("Oc1ccccc1\n  MolSpec\n\n  0  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n"
                                      "> <query>\nCCOc1ccccc1\n\n> <canonical_query>\nCCOc1ccccc1\n\n> <rank>\n1\n\n"
                                      "> <smiles>\nOc1ccccc1\n\n$$$$\n")  # the fields predict writes, in short
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "out.sdf", "--output", tmp_path / "again.csv"],
                   capsys, "out.sdf is MolSpec's own results (fields query, rank, smiles, ...)")


def test_bench_refuses_an_engine_beside_itself(pair_files, capsys):
    """--engines auto beside --engine auto (the copy model's float32 weights: NumPy both) timed one engine beside
    itself, greedy@auto at '1.15x' greedy; --engines numpy,numpy ran one numpy row, the second load replacing the
    first. Each is refused, naming the engine both run on."""
    common = ["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy", "--warmup", "0"]
    expect_refused([*common, "--engines", "auto"], capsys, "--engines auto runs the decoder calls on the numpy engine "
                   "here, as --engine auto does")
    expect_refused([*common, "--engine", "torch", "--engines", "auto,numpy"], capsys, "--engines numpy runs the "
                   "decoder calls on the numpy engine here, as --engines' auto does")
    expect_refused([*common, "--engines", "torch,torch"], capsys, "--engines names torch twice")


def test_bench_refuses_method_which_it_would_ignore_before_loading(pair_files, capsys, no_model_load):
    """`bench --method beam` timed the six default greedy-family methods and no beam search, without a word: bench
    times --methods, so a --method is refused, naming the flag it reads."""
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "src.txt", "--method", "beam"], capsys,
                   "bench times the methods of --methods (comma-separated), not --method: give --methods beam")


@pytest.mark.parametrize("given, message", [
    (["--methods", "greedy,spec-auto", "--n-best", "5"], "--n-best 5 sets the beam width of beam, sbs-exact, sbs, "
     "beam-uncached, and --methods names none of them"),
    (["--methods", "greedy", "--beam-width", "5"], "--beam-width 5 sets the beam width"),
    (["--methods", "greedy,beam", "--draft-len", "4"], "none of --methods (greedy, beam) reads --draft-len; the "
     "methods that do: spec-auto"),
    (["--methods", "beam,spec-auto", "--temperature", "0.9"], "none of --methods (beam, spec-auto) reads "
     "--temperature")])
def test_bench_refuses_settings_none_of_its_methods_reads_before_loading(pair_files, capsys, no_model_load, given,
                                                                         message):
    """`bench --methods greedy,spec-auto --n-best 5` timed greedy decoding as if no width had been given (and
    --draft-len for greedy and beam, --temperature for beam search, were as silently dropped), while predict and
    evaluate refuse a setting the method does not read: bench refuses one that none of its methods reads."""
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "src.txt", *given], capsys, message)


def test_bench_sampling_family_reports_acceptance_formula_and_validity(pair_files, capsys):
    out = pair_files / "sampling.json"
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
                 "--methods", "sample,spec-sample,relaxed", "--warmup", "0", "--seed", "3", "--out", str(out)]) == 0
    methods = json.loads(out.read_text())["methods"]
    assert set(methods) == {"greedy", "sample", "spec-sample", "relaxed"}
    spec = methods["spec-sample"]
    assert 0 < spec["acceptance_rate"] <= 1 and spec["speedup_vs_sample"] > 0
    # the table gave speculative sampling's speed against greedy alone ('greedy 1.04x', where against plain sampling,
    # its own reference timed beside it, it was 1.68x); relaxed, a greedy method, has no such ratio
    rows = {line.split(" | ")[0][2:]: line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert (f"| greedy {spec['speedup_vs_greedy']:.2f}x, sample {spec['speedup_vs_sample']:.2f}x |"
            in rows["spec-sample"])
    assert ", sample " not in rows["relaxed"] and ", sample " not in rows["greedy"]
    from molspec_core.bench import expected_tokens_per_call

    gamma = spec["draft_tokens_proposed_per_call"]
    assert spec["expected_tokens_per_call"] == pytest.approx(expected_tokens_per_call(spec["acceptance_rate"], gamma))
    assert all(0 <= m["validity"] <= 1 for m in methods.values())
    assert methods["relaxed"]["identical_to_greedy"] == 1.0  # beta=1, tau=0 is exact


def test_bench_per_query_figures_at_a_batch_size_above_one(pair_files):
    """A decoder call serves a whole batch, so calls were counted once a batch while tokens and draft tokens were
    summed over its queries: plain greedy read 3.1 tokens a call at batch 4, and the expected tokens per call, fed
    the batch's draft tokens as one query's, did not predict what it was set beside."""
    from molspec_core.bench import expected_tokens_per_call, run_bench
    from molspec_core.methods import SamplingOptions
    from molspec_core.service import Predictor

    sources = (pair_files / "src.txt").read_text().split()
    report = run_bench(Predictor.load(MODEL), sources, None, ["greedy", "spec-sample"], batch_size=4, warmup=0,
                       progress=False, sampling=SamplingOptions(seed=3))
    greedy, spec = report["methods"]["greedy"], report["methods"]["spec-sample"]
    assert greedy["tokens_per_call"] > 1.5  # per batch call: 4, then 1 query's tokens a call
    assert greedy["tokens_per_query_call"] == pytest.approx(1.0)  # each query's own call writes one token
    assert spec["query_calls"] > spec["model_calls"]
    gamma = spec["draft_tokens_proposed_per_call"] * spec["model_calls"] / spec["query_calls"]
    assert gamma <= 4  # spec-sample's draft length: what a query's call verifies at most
    assert spec["expected_tokens_per_call"] == pytest.approx(expected_tokens_per_call(spec["acceptance_rate"], gamma))


def test_bench_counts_a_query_it_cannot_read_as_evaluate_does_and_says_so(pair_files, capsys):
    """bench left it out of its top-k (8 of 9 where evaluate said 8 of 10) and its table said nothing."""
    sources = (pair_files / "src.txt").read_text().splitlines()
    sources[1] = "C[Xe]"
    (pair_files / "src.txt").write_text("\n".join(sources) + "\n")
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    assert main(["evaluate", "--model", MODEL, *files]) == 0
    evaluated = json.loads(capsys.readouterr().out)["top1"]
    out = pair_files / "b.json"
    assert main(["bench", "--model", MODEL, *files, "--methods", "greedy", "--warmup", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["methods"]["greedy"]["top1"] == evaluated and report["n_queries"] == 4
    assert report["skipped_queries"] == [{"query": 2, "error": "token '[Xe]' is not in the model's vocabulary; this "
                                                               "model cannot read it"}]
    assert "1 of the 5 queries given was skipped" in capsys.readouterr().out
    (pair_files / "bad.txt").write_text("C[Xe]\nC1CC\n")
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "bad.txt", "--methods", "greedy"], capsys,
                   "the model reads none of the 2 queries (the first, query 1: token '[Xe]'")
    (pair_files / "bad.txt").write_text("C[Xe]\n")  # it read 'none of the 1 queries (the first, query 1: ...'
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "bad.txt", "--methods", "greedy"], capsys,
                   "the model cannot read the one query (query 1: token '[Xe]'")


def test_expected_tokens_per_call_formula():
    from molspec_core.bench import expected_tokens_per_call

    assert expected_tokens_per_call(0.0, 5) == 1.0
    assert expected_tokens_per_call(1.0, 5) == 6.0
    assert expected_tokens_per_call(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_bench_sweep_of_a_lossy_knob(pair_files, capsys):
    out = pair_files / "sweep.json"
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
                 "--methods", "relaxed", "--sweep", "tau=0,1,3", "--beta", "3", "--warmup", "0",
                 "--out", str(out)]) == 0
    sweep = json.loads(out.read_text())["sweep"]
    assert sweep["method"] == "relaxed" and [p["tau"] for p in sweep["points"]] == [0, 1, 3]
    assert sweep["points"][0]["identical_to_greedy"] == 1.0  # tau=0 stays exact even with beta=3
    assert all({"top1", "validity", "speedup_vs_greedy", "acceptance_rate"} <= set(p) for p in sweep["points"])
    assert "Sweep of relaxed over tau" in capsys.readouterr().out
    # the sweep ran at batch size 1 and the method's own draft length whatever the command said
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "relaxed", "--sweep",
                 "tau=0", "--draft-len", "7", "--batch-size", "2", "--warmup", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["batch_size"] == 2 and report["draft_len"] == 7 and report["methods"]["relaxed"]["drafts"][
        "draft_len"] == 7
    assert main(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy",
                 "--sweep", "tau=0,1"]) == 2


def test_query_files_keep_one_query_per_record():
    """Row numbers match the file's records: blank records stay (as empty queries), a quoted CSV cell
    may hold a line break, and control characters other than line breaks stay inside their query.
    (Found by the 10,000-row CLI fuzz: a lone carriage return in a cell once shifted later rows.)"""
    from molspec_core.io import parse_queries

    assert parse_queries("CCO\r\nCCN\n\nC\x0cC\rCCC\n", kind="txt").queries == ["CCO", "CCN", "", "C\x0cC", "CCC"]
    text = 'id,smiles\n1,CCO\n\n2,"C\rC"\n3,""\n4\n5,CCN\n\n\n'
    assert parse_queries(text, kind="csv").queries == ["CCO", "", "C\rC", "", "", "CCN"]


def test_crlf_csv_file_reads_like_lf(tmp_path):
    from molspec_core.io import read_queries

    (tmp_path / "a.csv").write_bytes(b"smiles\r\nCCO\r\n\"C\nC\"\r\nCCN\r\n")
    assert read_queries(tmp_path / "a.csv").queries == ["CCO", "C\nC", "CCN"]


# ---- files in, CSV out (issue 14 items 2-5, 7, 9; issue 18's export) --------------------------------


def predict_file(source, out, *extra) -> int:
    return main(["predict", "--model", MODEL, "--input", str(source), "--output", str(out), *extra])


def test_a_file_whose_every_query_is_refused_ends_with_an_error_and_exit_2(tmp_path, capsys):
    """It ended '0 queries predicted, 3 rejected' with exit 0, a CSV named .dat read as lines without a hint."""
    (tmp_path / "table.dat").write_text("smiles,id\nCCO,1\nc1ccncc1,2\n")
    assert predict_file(tmp_path / "table.dat", tmp_path / "out.csv") == 2
    written = capsys.readouterr()
    assert "0 queries predicted, 3 rejected" in written.out  # the file of errors is still written, row for row
    assert written.err.splitlines()[-1] == (
        "error: none of the 3 queries could be predicted; table.dat was read as TXT, one query a line, and its first "
        "line holds commas, semicolons or tabs: if it is a CSV, give --input-format csv (or name the file .csv or "
        ".tsv)")
    assert len(pd.read_csv(tmp_path / "out.csv")) == 3
    (tmp_path / "table.csv").write_text("smiles,id\nCCO,1\nc1ccncc1,2\n")
    assert predict_file(tmp_path / "table.csv", tmp_path / "out.csv") == 0
    assert predict_file(tmp_path / "table.dat", tmp_path / "out.csv", "--input-format", "csv") == 0
    assert list(pd.read_csv(tmp_path / "out.csv")["id"]) == [1, 2]


def test_blank_records_keep_their_rows_but_are_no_queries_neither_predicted_nor_rejected(tmp_path, capsys):
    """A blank line or empty cell counted as a rejected query ('empty query: paste or draw a molecule'), while the
    Batch page skipped it: both write io.BLANK_RECORD now and count it apart."""
    from molspec_core.io import BLANK_RECORD

    (tmp_path / "q.csv").write_text("smiles,id\nClc1ccncc1,1\n,2\nxyz,3\n  ,4\n")
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv") == 0
    assert capsys.readouterr().out.endswith(
        f"1 query predicted, 1 rejected (see the error column), 2 blank records skipped -> {tmp_path / 'out.csv'}\n")
    errors = pd.read_csv(tmp_path / "out.csv", keep_default_na=False).drop_duplicates("row")["error"].tolist()
    assert errors[0] == "" and errors[1] == errors[3] == BLANK_RECORD and errors[2].startswith("not a valid SMILES")
    (tmp_path / "blank.csv").write_text("smiles,id\n,1\n ,2\n")
    assert predict_file(tmp_path / "blank.csv", tmp_path / "out.csv") == 2  # records, but no query: an error
    assert capsys.readouterr().err.splitlines()[-1] == ("error: blank.csv holds no query to predict: its 2 records are "
                                                       "blank")  # was 'none of the 0 queries could be predicted'


def test_predict_reads_standard_input_as_txt_or_as_input_format_says(tmp_path, capsys, monkeypatch):
    """`--input -` was taken as a file named '-': a pipeline could not feed its queries through a pipe."""
    import io as stdlib_io

    def feed(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", stdlib_io.TextIOWrapper(stdlib_io.BytesIO(text.encode())))

    feed("CCO\nnot_a_smiles\nc1ccncc1\n")
    assert predict_file("-", tmp_path / "out.csv") == 0
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(out["row"]) == [1, 2, 3] and list(out["query"]) == ["CCO", "not_a_smiles", "c1ccncc1"]
    assert out["error"].notna().tolist() == [False, True, False]
    feed("id;smiles\n7;CCO\n")
    assert predict_file("-", tmp_path / "out.csv", "--input-format", "csv") == 0
    assert pd.read_csv(tmp_path / "out.csv")[["id", "query"]].values.tolist() == [[7, "CCO"]]
    capsys.readouterr()
    feed("id,smiles\n7,CCO\n")
    assert predict_file("-", tmp_path / "out.csv") == 2  # read as TXT: the hint names --input-format
    assert "standard input was read as TXT" in capsys.readouterr().err
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--input-format", "csv"], capsys,
                   "--input-format says how to read --input: give --input")


def test_predict_says_which_records_hold_cells_past_the_header(tmp_path, capsys):
    (tmp_path / "q.csv").write_text("smiles,id,note\nCCO,A1,ok\nCCN,A2,made, then washed\n")
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv") == 0
    assert "note: q.csv: 1 record (row 2) holds cells past the header's 3 names" in capsys.readouterr().out


@pytest.mark.parametrize("at,told", [(1, "no record finished; standard output holds the header alone"),
                                     (3, "standard output holds the rows of records 1-2 of 5, not every record's")])
def test_a_stopped_run_to_standard_output_says_how_far_its_rows_go(pair_files, capsys, monkeypatch, at, told):
    """Stopped with --output -, the line said 'standard output holds the rows of the records done before this': a
    pipeline's user could not tell where to go on from, where a file's run names its records ('records 1-2 of 5')."""
    import io

    with monkeypatch.context() as patched:
        ctrl_c_at_third_predict(patched, at)
        assert main(["predict", "--model", MODEL, "--input", str(pair_files / "src.txt"), "--output", "-",
                     "--batch-size", "1"]) == 130
    written = capsys.readouterr()
    assert f"stopped: {told}" in written.err
    assert pd.read_csv(io.StringIO(written.out))["row"].tolist() == list(range(1, at))


def test_output_dash_writes_the_csv_to_standard_output_and_every_other_line_to_standard_error(tmp_path, capsys):
    """--output - was refused as a name without .csv: a pipeline (| sort, | tee) had to go through a file. The rows
    go to standard output alone, as a file gets them; the counts, notes and the --smiles table to standard error."""
    import io

    (tmp_path / "q.csv").write_text("smiles,id\nCCO>>CCO,a1\nc1ccncc1,a2\nnot a smiles,a3\n")
    options = ("--method", "beam", "--n-best", "2")
    assert predict_file(tmp_path / "q.csv", "-", *options) == 0
    written = capsys.readouterr()
    assert "1 of the file's 3 queries is a recorded reaction: it is predicted from its products" in written.err
    assert "2 queries predicted, 1 rejected (see the error column) -> standard output" in written.err
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv", *options) == 0
    capsys.readouterr()
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(written.out)).drop(columns="time_ms"),
                                  pd.read_csv(tmp_path / "out.csv").drop(columns="time_ms"))

    assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--output", "-"]) == 0
    written = capsys.readouterr()
    assert "query: CCO" in written.err and "-> standard output" in written.err
    assert pd.read_csv(io.StringIO(written.out))["query"].tolist() == ["CCO"]
    for extra, message in [(["--resume"], "standard output keeps none"), (["--ray"], "--ray writes its rows to")]:
        assert predict_file(tmp_path / "q.csv", "-", *extra) == 2
        written = capsys.readouterr()
        assert message in written.err and not written.out

    class Closed(io.StringIO):  # a reader that stopped reading (| head)
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", Closed())
        assert predict_file(tmp_path / "q.csv", "-") == 141  # as a shell reports a writer whose reader left
    stops = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stopped:")]
    assert stops == ["stopped: standard output was closed by its reader before every row was written"]  # one line
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", None)  # started with it closed (>&-): refused, not read as a file named -
        assert predict_file(tmp_path / "q.csv", "-") == 2
    assert "error: --output - writes to standard output, which is closed" in capsys.readouterr().err


def test_output_dash_writes_utf8_whatever_the_terminals_encoding(tmp_path, monkeypatch):
    """Under a Latin-1 locale a name outside it ended the run half written ('latin-1' codec can't encode): the CSV on
    standard output is UTF-8, as every output file is."""
    import io

    (tmp_path / "q.csv").write_text("smiles,name\nCCO,\u5316\u5408\u7269\n", encoding="utf-8")
    terminal = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    monkeypatch.setattr(sys, "stdout", terminal)
    assert predict_file(tmp_path / "q.csv", "-") == 0
    terminal.flush()
    assert terminal.buffer.getvalue().decode("utf-8").splitlines()[1].startswith("\u5316\u5408\u7269,1,CCO,")


def test_predict_csv_keeps_input_columns_and_writes_numbers_as_numbers(tmp_path):
    """Issue 18: scores were text ('-4.6486) and the user's columns were dropped; issue 14 item 5:
    the output did not show the canonical query the model read."""
    (tmp_path / "in.csv").write_text("id,smiles,score,mass\n-7,OCC,high,46.07\n12,xyz,low,-1.5\n13,c1ccncc1,,79.1\n")
    assert predict_file(tmp_path / "in.csv", tmp_path / "out.csv", "--method", "beam", "--n-best", "2") == 0
    table = pd.read_csv(tmp_path / "out.csv")
    assert list(table.columns[:5]) == ["id", "input_score", "mass", "row", "query"]
    assert "canonical_query" in table.columns
    for column in ("score", "probability", "time_ms", "rank", "id", "mass", "row"):
        assert table[column].dtype.kind in "if", (column, table[column].dtype)
    assert (table["score"].dropna() < 0).all()
    assert table["id"].tolist() == [-7, -7, 12, 13, 13] and table["row"].tolist() == [1, 1, 2, 3, 3]
    assert table["mass"].tolist() == [46.07, 46.07, -1.5, 79.1, 79.1]
    assert table["input_score"].fillna("").tolist() == ["high", "high", "low", "", ""]
    assert table["query"][0] == "OCC" and table["canonical_query"][0] == "CCO"


@pytest.fixture
def clock(monkeypatch):
    """A stand-in for time.perf_counter as io.predict_batch reads it, at 0 s, moving only when a test moves `now`."""
    from molspec_core import io as molspec_io

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    stand_in = Clock()
    monkeypatch.setattr(molspec_io, "time", stand_in)
    return stand_in


def test_a_query_read_in_several_writings_is_timed_alone(tmp_path, monkeypatch, clock):
    """With --augment each query is decoded alone (its writings, one batch of their own), but the CLI handed predict
    256 at a time: every row read the window's mean time, not its query's (and a stop lost the rows of the window).
    It hands such queries over one at a time; here the n-th call takes n * 100 ms of a stand-in clock."""
    from molspec_core.service import Predictor

    monkeypatch.setattr(Predictor, "augmentable", property(lambda self: True))  # the copy model reads one writing
    predict = Predictor.predict
    calls: list[int] = []

    def timed(self, smiles, *args, **kwargs):
        calls.append(len(smiles))
        clock.now += 0.1 * len(calls)
        return predict(self, smiles, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", timed)
    (tmp_path / "q.txt").write_text("CCO\nCCN\nc1ccncc1\n")
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv", "--augment", "2") == 0
    assert calls == [1, 1, 1]
    table = pd.read_csv(tmp_path / "out.csv")
    assert table.groupby("row")["time_ms"].first().tolist() == [100.0, 200.0, 300.0]


def test_time_ms_is_the_querys_share_of_its_call(tmp_path, monkeypatch, clock):
    """Issue 18: time_ms was the batch's wall time on every row of the batch. The CLI hands predict a
    window of batches at a time (here 2 batches of 4, so that predict can group queries by length); each
    call takes 0.4 s of a stand-in clock: a query of the first window of 8 took 50 ms, one of the last
    window of 2, 200 ms."""
    from molspec_core import service
    from molspec_core.service import Predictor

    monkeypatch.setattr(service, "LENGTH_WINDOW_BATCHES", 2)
    predict = Predictor.predict
    calls: list[tuple[int, int]] = []

    def takes_400_ms(self, smiles, *args, **kwargs):
        calls.append((len(smiles), kwargs["batch_size"]))
        clock.now += 0.4
        return predict(self, smiles, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", takes_400_ms)
    (tmp_path / "q.txt").write_text("CCO\nCCN\nc1ccncc1\nOCC\n" * 2 + "CCO\nxyz\n")
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv", "--batch-size", "4") == 0
    assert calls == [(8, 4), (2, 4)]
    table = pd.read_csv(tmp_path / "out.csv")
    assert table["time_ms"].tolist()[:9] == [50.0] * 8 + [200.0]
    assert pd.isna(table["time_ms"][9])  # a rejected query was not decoded


def test_predict_and_evaluate_hand_predict_windows_of_batches(tmp_path, monkeypatch, pair_files):
    """predict cuts batches from queries of like length (service.Predictor.predict), so the CLI hands it a
    window of batches at a time (service.window_size): without --batch-size, batches of 8 (so batched,
    as fast per query as one query a call on a CPU or faster: README "Batches on a CPU"); at batch size
    1, one query a call."""
    from molspec_core import service
    from molspec_core.service import Predictor

    calls: list[tuple[int, int]] = []
    predict = Predictor.predict

    def counted(self, smiles, *args, **kwargs):
        calls.append((len(smiles) if isinstance(smiles, list) else 1, kwargs.get("batch_size")))
        return predict(self, smiles, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", counted)
    monkeypatch.setattr(service, "LENGTH_WINDOW_BATCHES", 2)
    (tmp_path / "q.txt").write_text("CCO\nCCN\nc1ccncc1\n" * 6)  # 18 queries
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv") == 0
    assert calls == [(16, 8), (2, 8)]
    calls.clear()
    assert predict_file(tmp_path / "q.txt", tmp_path / "out1.csv", "--batch-size", "1") == 0
    assert calls == [(1, 1)] * 18
    calls.clear()
    src, tgt = pair_files / "src.txt", pair_files / "tgt.txt"  # 5 queries
    assert main(["evaluate", "--model", MODEL, "--src", str(src), "--tgt", str(tgt), "--batch-size", "2"]) == 0
    assert calls == [(4, 2), (1, 2)]


def test_predict_refuses_to_overwrite_its_input(tmp_path, capsys):
    """Issue 14 item 4: --output equal to --input replaced the queries with results."""
    source = tmp_path / "q.csv"
    source.write_text("smiles\nCCO\n")
    assert predict_file(source, tmp_path / "." / "q.csv") == 2
    assert "is the input file" in capsys.readouterr().err and source.read_text() == "smiles\nCCO\n"


def stop_on_the_second_call(monkeypatch, stop: BaseException | None, at: int = 2) -> list:
    """Predictor.predict answers its first call and raises `stop` at its second (one query a call), or at call `at`;
    the calls' queries, a list a call."""
    from molspec_core.service import Predictor

    calls = []
    predict = Predictor.predict

    def stopping(self, queries, *args, **kwargs):
        calls.append(list(queries))
        if len(calls) == at and stop is not None:
            raise stop
        return predict(self, queries, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", stopping)
    return calls


def test_a_failed_run_keeps_the_earlier_output(tmp_path, monkeypatch):
    """Issue 14 item 4: a run that stopped left the output as a header line."""
    (tmp_path / "q.txt").write_text("CCO\n" * 20)
    out = tmp_path / "out.csv"
    out.write_text("yesterday's results\n")
    stop_on_the_second_call(monkeypatch, RuntimeError("the run stopped"))
    with pytest.raises(RuntimeError):
        predict_file(tmp_path / "q.txt", out, "--batch-size", "1")  # one query a call
    assert out.read_text() == "yesterday's results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no partial file left; the record finished is kept
        "out.csv", "out.interrupted.csv", "out.interrupted.json", "q.txt"]


def test_ctrl_c_is_one_line_and_exit_130_and_keeps_what_was_written(tmp_path, monkeypatch, capsys):
    """Ctrl-C during predict over a file printed a traceback."""
    (tmp_path / "q.txt").write_text("CCO>>CCO\n" * 20)  # recorded reactions: predict says so on stdout first
    out = tmp_path / "out.csv"
    out.write_text("yesterday's results\n")
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt())
    try:
        code = predict_file(tmp_path / "q.txt", out, "--batch-size", "1")
    except KeyboardInterrupt:  # not let through to pytest, which would stop the whole run
        pytest.fail("Ctrl-C escaped main")
    assert code == 130
    written = capsys.readouterr()
    assert written.err.splitlines()[-1] == "interrupted" and "Traceback" not in written.err
    assert "20 of the file's 20 queries are recorded reactions" in written.out
    assert out.read_text() == "yesterday's results\n"
    # the record finished before the stop is kept for --resume (lost until session 84); no partial file is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.interrupted.csv", "out.interrupted.json",
                                                          "q.txt"]


def test_a_predict_stopped_in_a_window_keeps_the_rows_of_its_first_records_done(tmp_path, monkeypatch, capsys):
    """Ctrl-C while a window of records (up to 256) was decoding lost every batch of it decoded by then, for --resume
    to predict again. The stop ends the batch being decoded and the rows of the first records done are kept: here
    the records are in order of length, as predict decodes them, two a batch; the third batch meets the stop."""
    queries = ["c1ccncc1", "CCOc1ccccc1", "CCOc1ccncc1", "Brc1cccnc1OCCO", "NC(=O)c1ccncc1"]
    (tmp_path / "q.txt").write_text("\n".join(queries) + "\n")
    signal_at_decode(monkeypatch, signal.SIGINT, at=3)
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv", "--batch-size", "2") == 130
    assert "the rows of records 1-4 of 5 are kept in" in capsys.readouterr().err
    kept = pd.read_csv(tmp_path / "out.interrupted.csv")
    assert kept["row"].tolist() == [1, 2, 3, 4] and kept["error"].isna().all()
    monkeypatch.undo()
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv", "--batch-size", "2", "--resume") == 0
    assert "resuming: records 1-4 of 5" in capsys.readouterr().out


def test_sigterm_is_one_line_and_exit_143_and_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    """SIGTERM killed the run where it stood and left the partial output file beside the one it replaced."""
    import signal

    from molspec_core.service import Predictor

    (tmp_path / "q.txt").write_text("CCO\n" * 20)
    out = tmp_path / "out.csv"
    out.write_text("yesterday's results\n")
    calls, predict = [], Predictor.predict

    def terminated(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # what SIGTERM runs in the main thread; the default action would be no function
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        return predict(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 143
    assert capsys.readouterr().err.splitlines()[-1] == "terminated"
    assert out.read_text() == "yesterday's results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no partial file left; the record finished is kept
        "out.csv", "out.interrupted.csv", "out.interrupted.json", "q.txt"]
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


@pytest.mark.parametrize("stop,code", [(KeyboardInterrupt(), 130), (Terminated(), 143)])
def test_an_interrupted_file_run_keeps_its_finished_records_and_resume_goes_on_from_them(tmp_path, monkeypatch,
                                                                                       capsys, stop, code):
    """Ctrl-C or SIGTERM (a scheduler's stop) during a long predict lost every finished row and said nothing of how
    far it had come; a rerun started again at the first record."""
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "", "OCCN1CCNCC1", "c1ccncc1", "CCN(CC)CC"]
    (tmp_path / "q.txt").write_text("\n".join(queries) + "\n")
    out, kept = tmp_path / "out.csv", tmp_path / "out.interrupted.csv"
    out.write_text("yesterday's results\n")
    options = ("--batch-size", "1", "--method", "beam", "--n-best", "2")  # one query a call, two rows a query
    stop_on_the_second_call(monkeypatch, stop, at=5)  # in record 5: records 1-4 written whole
    assert predict_file(tmp_path / "q.txt", out, *options) == code
    assert capsys.readouterr().err.splitlines()[-2] == (
        f"stopped: the rows of records 1-4 of 6 are kept in {kept}; run the same command with --resume to go on from "
        f"there ({out} is written once every record is done)")
    assert out.read_text() == "yesterday's results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.interrupted.csv", "out.interrupted.json",
                                                          "q.txt"]  # the rows, and the options they were made with
    assert pd.read_csv(kept)["row"].tolist() == [1, 1, 2, 2, 3, 4, 4]  # record 3 is blank: one row

    assert predict_file(tmp_path / "q.txt", out, *options) == 2  # a run that would replace them with fewer
    assert "give --resume to go on from them" in capsys.readouterr().err
    calls = stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, *options, "--resume") == 0
    assert calls == [[query] for query in queries[4:]]  # records 1-4 were not predicted again
    printed = capsys.readouterr().out
    assert "resuming: records 1-4 of 6 come from out.interrupted.csv" in printed
    # where none was rejected the line sent the reader to an error column holding nothing ('0 rejected (see ...)')
    assert "5 queries predicted, 0 rejected, 1 blank record skipped" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.csv.bak", "q.txt"]
    assert (tmp_path / "out.csv.bak").read_text() == "yesterday's results\n"  # replaced once the run was whole
    resumed = pd.read_csv(out).drop(columns="time_ms")
    assert predict_file(tmp_path / "q.txt", tmp_path / "whole.csv", *options) == 0
    pd.testing.assert_frame_equal(resumed, pd.read_csv(tmp_path / "whole.csv").drop(columns="time_ms"))


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_a_stopped_run_whose_output_name_is_near_the_limit_records_its_options_and_resumes(tmp_path, monkeypatch,
                                                                                        capsys, suffix):
    """An output of 240 letters: its .interrupted.csv is cut to 255 bytes (io.fitted_name), and the options beside it
    were named by swapping .csv for .json, 256 bytes: they were not recorded at the stop (the resume checked --method
    alone), and the resumed run failed at its end with 'File name too long' removing them."""
    (tmp_path / "q.txt").write_text("CCOc1ccccc1\nNC(=O)c1ccncc1\nc1ccncc1\n")
    out = tmp_path / ("a" * 240 + suffix)
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt())
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 130
    capsys.readouterr()
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "q.txt")
    assert len(left) == 2 and all(len(os.fsencode(name)) <= 255 for name in left)  # the rows and their options
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--augment", "2", "--resume") == 2
    assert "were made with other options (--augment" in capsys.readouterr().err
    stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--resume") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "q.txt"])


def test_a_disk_that_fills_mid_run_keeps_the_finished_records_and_resume_goes_on_from_them(tmp_path, monkeypatch,
                                                                                           capsys):
    """A write error in a long predict (the disk filled up) lost every finished row, which only Ctrl-C and SIGTERM
    kept: the records written whole are kept, the error line says why it stopped, and --resume goes on."""
    from test_io import filling_disk

    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "c1ccncc1", "CCN(CC)CC"]
    (tmp_path / "q.txt").write_text("\n".join(queries) + "\n")
    out, kept = tmp_path / "out.csv", tmp_path / "out.interrupted.csv"
    options = ("--batch-size", "1", "--method", "beam", "--n-best", "2")
    with monkeypatch.context() as patch:
        filling_disk(patch, writes=4)  # the header, records 1 and 2, then half of record 3
        assert predict_file(tmp_path / "q.txt", out, *options) == 2
    err = capsys.readouterr().err
    assert (f"stopped: the rows of records 1-2 of 5 are kept in {kept}; run the same command with --resume to go on "
            f"from there ({out} is written once every record is done)\nerror: No space left on device: {out}\n") in err
    assert pd.read_csv(kept)["row"].tolist() == [1, 1, 2, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.interrupted.csv", "out.interrupted.json", "q.txt"]
    calls = stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, *options, "--resume") == 0
    assert calls == [[query] for query in queries[2:]]
    assert predict_file(tmp_path / "q.txt", tmp_path / "whole.csv", *options) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out).drop(columns="time_ms"),
                                  pd.read_csv(tmp_path / "whole.csv").drop(columns="time_ms"))


def test_rows_of_a_run_whose_output_folder_is_removed_are_kept_elsewhere_and_the_line_says_where(tmp_path,
                                                                                                 monkeypatch, capsys):
    """A clean-up script removed the output's folder mid-run: the finished rows lived only in the open partial file.
    They are kept in a new temporary folder, and the stopped line says where and what to do to go on."""
    import shutil

    from molspec_core.service import Predictor

    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\nCCBr\n")
    calls, predict = [], Predictor.predict

    def removing(self, queries, *args, **kwargs):
        calls.append(queries)
        if len(calls) == 4:
            shutil.rmtree(folder)
        return predict(self, queries, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", removing)
    assert predict_file(tmp_path / "q.txt", folder / "out.csv", "--batch-size", "1") == 2
    [elsewhere] = tmp_path.glob("molspec-*")
    assert (f"stopped: the rows of records 1-4 of 4 are kept in {elsewhere} (its folder, {folder}, could not be "
            f"written: No such file or directory); move the files there to {folder} and run the same command with "
            "--resume") in capsys.readouterr().err
    shutil.move(elsewhere, folder)
    assert predict_file(tmp_path / "q.txt", folder / "out.csv", "--resume") == 0
    assert pd.read_csv(folder / "out.csv")["query"].tolist() == ["CCO", "CCN", "CCCl", "CCBr"]
    assert sorted(p.name for p in folder.iterdir()) == ["out.csv"]


def test_a_disk_without_room_for_the_output_is_refused_before_predicting(tmp_path, monkeypatch, capsys):
    """A disk too full for even the rows of the queries' errors was found only when the run filled it. The fewest
    bytes an output can take (io.least_output_bytes, which a file of rejected queries reaches) are checked first."""
    import collections
    import shutil

    from molspec_core.io import check_room, least_output_bytes

    (tmp_path / "q.csv").write_text("smiles,id,note\n" + "".join(f"xyz{i},A-{i},made on day {i}\n" for i in range(50)))
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv") == 2  # every query refused: the least rows
    least = least_output_bytes(read_queries(tmp_path / "q.csv"))
    assert 0 < least <= (tmp_path / "out.csv").stat().st_size
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10**9, 10**9 - least + 1, least - 1))
    calls = stop_on_the_second_call(monkeypatch, None)
    for out in ("again.csv", "again.sdf"):
        assert predict_file(tmp_path / "q.csv", tmp_path / out) == 2
        assert f"error: the disk of {tmp_path / out} has 0.0 MB free, and the output needs at least" in (
            capsys.readouterr().err)
    assert calls == [] and not (tmp_path / "again.csv").exists()

    def unsaid(folder):  # some network and FUSE mounts
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(shutil, "disk_usage", unsaid)
    check_room(tmp_path / "again.csv", 10**15)  # not refused: the run finds out


def test_a_resumed_run_is_refused_where_the_models_weights_were_replaced_since(tmp_path, monkeypatch, capsys):
    """predict --resume checked the kept rows' options and model folder, not its weights: a training run's export/,
    rewritten every few minutes, had a resumed run join its answers to rows another model made, without a word. The
    weights loaded (Predictor.weights) are recorded beside the kept rows, and a folder holding others is refused."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\n")
    out = tmp_path / "out.csv"
    predict = ["predict", "--model", str(model), "--input", str(tmp_path / "q.txt"), "--output", str(out),
               "--batch-size", "1"]
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt())
    assert main(predict) == 130
    from molspec_core.calibration import weights_fingerprint

    assert json.loads((tmp_path / "out.interrupted.json").read_text())["weights"] == weights_fingerprint(model)
    with open(next(model.glob("*.safetensors")), "ab") as weights:  # the folder's weights replaced
        weights.write(b"\0")
    capsys.readouterr()
    assert main([*predict, "--resume"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: the rows kept in out.interrupted.csv were made with other weights than those now in --model {model} "
        "(its weight files were replaced since, as a training run's export/ is): this run's answers would be joined to "
        "another model's; delete the kept rows to start again")
    assert (tmp_path / "out.interrupted.csv").exists() and not out.exists()


def test_a_resumed_run_checks_the_kept_rows_are_this_runs_and_never_keeps_fewer(tmp_path, monkeypatch, capsys):
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\nCCBr\n")
    out, kept = tmp_path / "out.csv", tmp_path / "out.interrupted.csv"
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt(), at=4)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 130
    rows = kept.read_bytes()
    capsys.readouterr()
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt(), at=1)  # interrupted again before a record finished
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--resume") == 130
    assert f"stopped: no further record finished; {kept} holds records 1-3 of 4 as before" in capsys.readouterr().err
    assert kept.read_bytes() == rows and not out.exists()
    (tmp_path / "other.txt").write_text("CCO\nCCS\nCCCl\nCCBr\n")
    assert predict_file(tmp_path / "other.txt", out, "--batch-size", "1", "--resume") == 2
    assert "out.interrupted.csv, line 3: record 2 holds another query than the input's" in capsys.readouterr().err
    # the options the rows were made with are recorded beside them: a resumed run with others would join their rows
    assert json.loads((tmp_path / "out.interrupted.json").read_text())["time_limit"] == 60.0
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--time-limit", "30", "--resume") == 2
    assert ("the rows kept in out.interrupted.csv were made with other options (--time-limit 60.0 there, 30.0 here)"
            in capsys.readouterr().err)
    assert predict_file(tmp_path / "q.txt", out, "--method", "spec-lookup", "--resume") == 2
    assert "--method 'greedy' there, 'spec-lookup' here" in capsys.readouterr().err
    (tmp_path / "out.interrupted.json").unlink()  # rows kept before settings were recorded: --method checked alone
    assert predict_file(tmp_path / "q.txt", out, "--method", "spec-lookup", "--resume") == 2
    assert "predicted with --method greedy, not spec-lookup" in capsys.readouterr().err
    assert kept.read_bytes() == rows and not out.exists()
    stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--resume") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt", "out.csv", "q.txt"]


def test_a_run_stopped_after_its_first_record_names_record_1_not_records_1_1(tmp_path, monkeypatch, capsys):
    """A predict stopped after its first record said 'the rows of records 1-1 of 3 are kept', and its --resume
    'resuming: records 1-1 of 3 come from ...' and, stopped again, 'holds records 1-1 of 3 as before'."""
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\n")
    out, kept = tmp_path / "out.csv", tmp_path / "out.interrupted.csv"
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt())
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 130
    assert capsys.readouterr().err.splitlines()[-2] == (
        f"stopped: the rows of record 1 of 3 are kept in {kept}; run the same command with --resume to go on from "
        f"there ({out} is written once every record is done)")
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt(), at=1)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--resume") == 130
    printed = capsys.readouterr()
    assert "resuming: record 1 of 3 comes from out.interrupted.csv" in printed.out
    assert f"stopped: no further record finished; {kept} holds record 1 of 3 as before" in printed.err


def test_a_resumed_run_of_recorded_reactions_marks_and_counts_the_kept_records_too(tmp_path, monkeypatch, capsys):
    (tmp_path / "q.txt").write_text("CCOc1ccccc1>>CCOc1ccccc1\nc1ccncc1>>c1ccncc1\nCCN(CC)CC>>CCNCC\nCCO>>CC\n")
    out = tmp_path / "out.csv"
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt(), at=4)  # the marks keep record 3 (was 1)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 130
    assert "the rows of records 1-3 of 4 are kept" in capsys.readouterr().err
    stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, "--resume") == 0
    resumed = capsys.readouterr().out.splitlines()[-1]
    assert predict_file(tmp_path / "q.txt", tmp_path / "whole.csv") == 0
    assert capsys.readouterr().out.splitlines()[-1] == resumed  # the known answers of all 4 queries counted
    pd.testing.assert_frame_equal(pd.read_csv(out).drop(columns="time_ms"),
                                  pd.read_csv(tmp_path / "whole.csv").drop(columns="time_ms"))


def test_resume_without_kept_rows_starts_at_the_first_record(tmp_path, capsys):
    """A job script that always says --resume runs from the start the first time."""
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\n")
    assert predict_file(tmp_path / "q.txt", tmp_path / "out.csv", "--resume") == 0
    assert "nothing to resume (out.interrupted.csv does not exist): starting at the first record" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("name", ["out.sdf", "out.xlsx"])
def test_an_sd_file_or_workbook_run_that_stops_keeps_its_finished_records_and_resume_goes_on(tmp_path, monkeypatch,
                                                                                            capsys, name):
    """An SD file or workbook is written only at its end, and a run to one that stopped lost every finished row
    (--resume was refused for them): their rows are kept as CSV beside it, and a resumed run writes the whole run's
    file."""
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\nc1ccncc1\n")
    out, kept = tmp_path / name, tmp_path / f"out.interrupted.{name[4:]}.csv"
    stop_on_the_second_call(monkeypatch, KeyboardInterrupt(), at=4)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1") == 130
    assert (f"stopped: the rows of records 1-3 of 4 are kept in {kept}; run the same command with --resume to go on "
            f"from there ({out} is written once every record is done)") in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name, kept.with_suffix(".json").name, "q.txt"]
    calls = stop_on_the_second_call(monkeypatch, None)
    assert predict_file(tmp_path / "q.txt", out, "--batch-size", "1", "--resume") == 0
    assert calls == [["c1ccncc1"]]
    assert f"resuming: records 1-3 of 4 come from {kept.name}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, "q.txt"]
    assert predict_file(tmp_path / "q.txt", tmp_path / f"whole{out.suffix}") == 0
    if name.endswith(".sdf"):
        def untimed(path):
            return re.sub(r"<time_ms>.*\n.*\n", "", path.read_text())
        assert untimed(out) == untimed(tmp_path / "whole.sdf")
    else:  # numbers as numbers, as the whole run's
        pd.testing.assert_frame_equal(pd.read_excel(out).drop(columns="time_ms"),
                                      pd.read_excel(tmp_path / "whole.xlsx").drop(columns="time_ms"))


@pytest.mark.parametrize("output,message", [("missing/o.csv", "does not exist"), (".", "is a folder"),
                                            ("/dev/full", "is a device")])
def test_unusable_output_paths_are_refused_before_predicting(tmp_path, output, message, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.txt").write_text("CCO\n")
    assert predict_file(tmp_path / "q.txt", output) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_special_input_files_are_refused(tmp_path, source, capsys):
    """Issue 14 item 2: --input /dev/zero read without end until memory ran out."""
    if source == "fifo":
        os.mkfifo(tmp_path / "fifo")
        source = tmp_path / "fifo"
    assert predict_file(source, tmp_path / "o.csv") == 2
    assert "not a file to read" in capsys.readouterr().err and not (tmp_path / "o.csv").exists()


def test_compressed_upper_case_csv_with_a_byte_order_mark(tmp_path):
    """Issue 14 items 7 and 9: Excel's "CSV UTF-8" (a byte-order mark) and .CSV.GZ were refused or
    misread (the header became query 1)."""
    (tmp_path / "Q.CSV.GZ").write_bytes(gzip.compress("smiles\r\nCCO\r\nCCN\r\n".encode("utf-8-sig")))
    out = tmp_path / "o.csv"
    assert predict_file(tmp_path / "Q.CSV.GZ", out) == 0
    assert pd.read_csv(out)["query"].tolist() == ["CCO", "CCN"]


def test_one_over_long_cell_is_one_bad_row(tmp_path):
    """Issue 14 item 9: a cell over 131,072 characters made the whole file unreadable."""
    (tmp_path / "q.csv").write_text("smiles\nCCO\n" + "C" * 140_000 + "\nCCN\n")
    out = tmp_path / "o.csv"
    assert predict_file(tmp_path / "q.csv", out) == 0
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert table["row"].tolist() == ["1", "2", "3"]
    assert (table["error"] != "").tolist() == [False, True, False] and "limit" in table["error"][1]


# ---- issue 14 item 8: one boundary, an `error:` line and exit 2 instead of a traceback -------------

def run_cli(argv, capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def expect_refused(argv, capsys, message: str) -> None:
    code, err = run_cli(argv, capsys)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, err


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if a model is loaded: these inputs must be refused before any work."""
    from molspec_core.service import Predictor

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")
    monkeypatch.setattr(Predictor, "load", refuse)


def test_predict_ray_without_ray_installed_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                                              no_model_load):
    """predict --ray without Ray (an extra: pip install -e .[scale]) was refused only once the model had loaded and
    the input had been read, as the run connected to the cluster; --peer's package is asked for before the load."""
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    (tmp_path / "q.csv").write_text("smiles\nCCO\n")
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "q.csv", "--output", tmp_path / "o.csv",
                    "--ray", "local"], capsys, "--ray needs Ray: pip install -e .[scale]")
    assert not (tmp_path / "o.csv").exists()


def test_a_plan_time_limit_over_an_hour_is_refused_before_the_models_load(tmp_path, capsys, no_model_load):
    """It was refused only once both models had loaded."""
    expect_refused(["plan", "--smiles", "CCO", "--time-limit", "4000", "--out", tmp_path / "r.json"], capsys,
                   "the time limit must be above 0 and at most 3600 s, not 4000.0")
    assert not list(tmp_path.iterdir())


def test_plan_outputs_may_not_replace_the_stock_or_a_models_files(tmp_path, capsys, no_model_load):
    """plan --out <retro model>/config.json (or --csv onto the stock) replaced that file once the search was done."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    (tmp_path / "stock.csv").write_text("smiles\nNO\n")
    before = {path: path.read_bytes() for path in (*model.iterdir(), tmp_path / "stock.csv")}
    plan = ["plan", "--smiles", "NCCO", "--stock", tmp_path / "stock.csv", "--time-limit", "2"]
    for extra, message in [(["--model", model, "--out", model / "config.json"], "lies in the folder of the model"),
                           (["--forward", model, "--out", tmp_path / "r.json", "--csv", model / "routes.csv"],
                            "lies in the folder of the model"),
                           (["--out", tmp_path / "stock.json"], "stock.csv is the input file"),
                           (["--out", tmp_path / "r.json", "--csv", tmp_path / "stock.csv"], "is the input file"),
                           # CSV text under a workbook's or an SD file's name
                           (["--out", tmp_path / "r.json", "--csv", tmp_path / "routes.xlsx"],
                            "routes.xlsx: plan writes its steps as CSV; give --csv a name ending in .csv"),
                           (["--out", tmp_path / "r.json", "--csv", tmp_path / "routes.sdf"], "ending in .csv")]:
        expect_refused([*plan, *extra], capsys, message)
    assert {path: path.read_bytes() for path in (*model.iterdir(), tmp_path / "stock.csv")} == before


def test_plan_stock_column_is_told_for_a_stock(tmp_path, capsys, no_model_load):
    """--stock-column on a stock of one SMILES a line was refused as 'a query column ... whose queries are the first
    field of each line', and its help gave canonical_smiles as a name to give it, a name read without giving it."""
    from molspec_core.cli import build_parser
    from molspec_core.io import STOCK_COLUMNS

    (tmp_path / "stock.smi").write_text("NO nitroxyl\n")
    expect_refused(["plan", "--smiles", "NCCO", "--stock", tmp_path / "stock.smi", "--stock-column", "SMILES_std",
                    "--out", tmp_path / "r.json"], capsys, "a column, 'SMILES_std', was named, but stock.smi is read "
                   "as a SMI file, which has no columns: its SMILES are the first field of each line. ")
    plan = next(action for action in build_parser()._actions if action.dest == "command").choices["plan"]
    said = next(action.help for action in plan._actions if action.dest == "stock_column")
    assert "canonical_smiles, say" not in said and all(name in said for name in STOCK_COLUMNS), said


def test_plan_names_under_each_route_the_steps_that_fail_the_round_trip(tmp_path, capsys):
    """plan checks each step with the forward model (--forward forward, the default), and its summary showed none of
    it: N-benzylacetamide's route 'from CC(=O)Cl, NCc1ccccc1' by way of the N-acylimine read as sound as the direct
    acylation, though the forward model gives the imine back from those reactants with probability 2.4e-05 (the CSV's
    round_trip 'no'). A step that fails the check is named under its route, as a stereo flag is; a step that passes,
    or that no forward model checked, is not."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, Route, RouteMolecule, RouteStep, SearchStats

    amide, imine, chloride, amine = "CC(=O)NCc1ccccc1", "CC(=O)N=Cc1ccccc1", "CC(=O)Cl", "NCc1ccccc1"
    bought = (RouteMolecule(chloride, True), RouteMolecule(amine, True))
    direct = RouteStep(amide, bought, -1.3, 2, round_trip=True, forward_prob=0.99)
    via_imine = RouteStep(amide, (RouteMolecule(imine, False, RouteStep(imine, bought, -1.29, 1, round_trip=False,
                                                                        forward_prob=2.384e-05)),), -3.21, 4,
                          round_trip=True, forward_prob=0.72)
    unchecked = RouteStep(amide, bought, -2.0, 3)  # no forward model
    routes = tuple(Route(RouteMolecule(amide, False, step), step.score + (-1.29 if step is via_imine else 0))
                   for step in (direct, via_imine, unchecked))
    result = PlanResult(amide, routes, SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", "forward", "stock", 2,
                        settings=PlanSettings(round_trip_k=3))
    report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
    printed = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(printed) if line.startswith("route 1:"))
    assert printed[first + 1].startswith("route 2:")
    assert printed[first + 2] == (f"  round trip: step 2 ({imine}) fails: the forward model does not give it back "
                                  f"from {chloride}.{amine} within its top 3 (its probability 2.38e-05)")
    assert printed[first + 3].startswith("route 3:") and printed[first + 4].startswith("->")


def test_plan_says_where_it_shows_as_many_routes_as_it_keeps(tmp_path, capsys):
    """A search that found more routes than --max-routes keeps listed them as if they were all there were (aspirin's
    8-second search finds over 200; plan keeps 10), where the Routes page says so since be8b0d3."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, Route, RouteMolecule, RouteStep, SearchStats

    amide = "CC(=O)NCc1ccccc1"
    steps = [RouteStep(amide, (RouteMolecule("CC(=O)Cl", True), RouteMolecule("NCc1ccccc1", True)), -1.3, 1),
             RouteStep(amide, (RouteMolecule("CC(=O)O", True), RouteMolecule("NCc1ccccc1", True)), -2.0, 2)]

    def printed(n_routes: int, max_routes: int) -> list[str]:
        routes = tuple(Route(RouteMolecule(amide, False, step), step.score) for step in steps[:n_routes])
        report_plan(PlanResult(amide, routes, SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "stock", 2,
                               settings=PlanSettings(), max_routes=max_routes), tmp_path / "r.json",
                    tmp_path / "r.csv", False)
        return capsys.readouterr().out.splitlines()

    kept_all = printed(2, 2)
    first = next(i for i, line in enumerate(kept_all) if line.startswith("route 1:"))
    assert kept_all[first - 1] == ("these are the best 2, as many as --max-routes 2 keeps: the search may have found "
                                   "more")
    assert "this is the best route, as many as --max-routes 1 keeps: the search may have found more" in printed(1, 1)
    assert not any("may have found more" in line for line in printed(2, 10) + printed(0, 2))


def test_plan_names_under_each_route_the_steps_whose_reactants_lack_atoms(tmp_path, capsys):
    """plan --allow-missing-atoms keeps steps whose reactants lack atoms of their product (ethanolamine 'made from'
    hydroxylamine): the JSON and CSV say so since a19189a, and the summary showed such a route as sound as the rest.
    Each such step is named under its route, as a failed round trip is; a step that lacks none is not."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, Route, RouteMolecule, RouteStep, SearchStats

    ethanolamine = "NCCO"
    lacking = RouteStep(ethanolamine, (RouteMolecule("NO", True),), -0.7, 1, missing=(("C", 2),))
    sound = RouteStep(ethanolamine, (RouteMolecule("C1CO1", True), RouteMolecule("N", True)), -1.5, 2)
    routes = tuple(Route(RouteMolecule(ethanolamine, False, step), step.score) for step in (lacking, sound))
    report_plan(PlanResult(ethanolamine, routes, SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "stock", 2,
                           settings=PlanSettings(check_atoms=False)), tmp_path / "r.json", tmp_path / "r.csv", True)
    printed = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(printed) if line.startswith("route 1:"))
    assert printed[first + 1] == ("  lacks atoms: step 1 (NCCO): its reactant set lacks atoms of the product (2 C), so "
                                  "as written it cannot make it")
    assert printed[first + 2].startswith("route 2:") and printed[first + 3].startswith("->")


def test_plan_summary_counts_a_compound_the_steps_use_twice_and_one_molecule_expanded(tmp_path, capsys):
    """Ethyl (Z)-cinnamate's route 7 (a phosphonate and two benzaldehydes) read 'from' exactly as route 1 (one
    benzaldehyde): the page said 'used twice' since 4982b72, the summary did not; and one molecule read 'molecules'."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import (ExpansionCounts, PlanResult, PlanSettings, Route, RouteMolecule, RouteStep,
                                       SearchStats)

    ester, aldehyde, phosphonate = "CCOC(=O)/C=C\\c1ccccc1", "O=Cc1ccccc1", "CCOC(=O)CP(=O)(OCC)OCC"
    once = RouteStep(ester, (RouteMolecule(phosphonate, True), RouteMolecule(aldehyde, True)), -0.5, 1)
    twice = RouteStep(ester, (RouteMolecule(phosphonate, True), RouteMolecule(aldehyde, True),
                              RouteMolecule(aldehyde, True)), -4.0, 9)
    routes = tuple(Route(RouteMolecule(ester, False, step), step.score) for step in (once, twice))
    stats = SearchStats("retro*", 1.0, 2.0, 1, 9, counts=ExpansionCounts(molecules=1))
    report_plan(PlanResult(ester, routes, stats, "retro", None, "stock", 2, settings=PlanSettings()),
                tmp_path / "r.json", tmp_path / "r.csv", False)
    printed = capsys.readouterr().out
    assert "retro*, 1.0 s: 1 molecule expanded (" in printed
    assert printed.count(f"from {phosphonate}, {aldehyde}\n") == 1
    assert f"from {phosphonate}, {aldehyde} (used twice)\n" in printed


def test_plan_summary_counts_in_the_right_number_and_leaves_out_what_the_search_never_had(tmp_path, capsys):
    """plan's summary called the answers lacking atoms of their product 'sane ones' (the Predict page flags them; the
    Routes page stopped saying so in b1ca962), read '1 decoder calls' and '1 search nodes', told '0 of 0 proposed
    reactant sets used (0 sane ones ...)' of a search that had no answers, and of a stopped search that had found no
    route 'the routes it had found are kept', its next line saying no route was found."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import ExpansionCounts, PlanResult, PlanSettings, Route, RouteMolecule, RouteStep, \
        SearchStats

    def lines(counts: ExpansionCounts, nodes: int, stopped_by: str | None = None, routes: tuple = (),
              allow: bool = False) -> list[str]:
        stats = SearchStats("retro*", 1.0, 30.0, None, nodes, counts=counts, search_s=1.0, stopped_by=stopped_by)
        report_plan(PlanResult("CC(=O)NCc1ccccc1", routes, stats, "retro", None, "stock", 2, settings=PlanSettings()),
                    tmp_path / "r.json", tmp_path / "r.csv", allow)
        return capsys.readouterr().out.splitlines()

    assert lines(ExpansionCounts(molecules=3, decoder_calls=40, answers=30, missing_atoms=4, kept=20), 9)[1] == (
        "retro*, 1.0 s: 3 molecules expanded (40 decoder calls), 20 of 30 proposed reactant sets used (4 lacked atoms "
        "of their product: skipped), 9 search nodes")
    assert lines(ExpansionCounts(molecules=1, decoder_calls=1, answers=1, missing_atoms=1, kept=1), 1, allow=True)[1] \
        == ("retro*, 1.0 s: 1 molecule expanded (1 decoder call), 1 of 1 proposed reactant set used (1 lacked atoms of "
            "their product: used, --allow-missing-atoms), 1 search node")
    stopped = lines(ExpansionCounts(), 1, "KeyboardInterrupt")
    assert stopped[1:4] == ["retro*, 1.0 s: 0 molecules expanded (0 decoder calls), 1 search node",
                            "the search was stopped (KeyboardInterrupt) 1.0 s into its 30 s",
                            "no route to the stock was found before the search was stopped, 1.0 s in"]
    step = RouteStep("CC(=O)NCc1ccccc1", (RouteMolecule("CC(=O)Cl", True), RouteMolecule("NCc1ccccc1", True)), -1.3, 2)
    found = lines(ExpansionCounts(molecules=1, decoder_calls=5, answers=5, kept=5), 4, "Terminated",
                  (Route(RouteMolecule(step.product, False, step), step.score),))
    assert found[2] == "the search was stopped (Terminated) 1.0 s into its 30 s; the routes it had found are kept"


def test_an_output_whose_backup_would_replace_the_input_is_refused_naming_the_output(tmp_path, capsys, no_model_load):
    """predict --input q.csv.bak --output q.csv was refused with 'q.csv.bak is the input file ... choose another output
    name', a name the user never gave as an output: the refusal now says it is where the file --output replaces would
    be kept. So for evaluate's and bench's reports and plan's routes."""
    (tmp_path / "o.csv.bak").write_text("CCO\n")
    (tmp_path / "o.csv").write_text("the earlier results\n")
    kept_as = (f"{tmp_path / 'o.csv'}: the file there would be kept as {tmp_path / 'o.csv.bak'} when it is replaced, "
               f"and {tmp_path / 'o.csv.bak'} is the input file")
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "o.csv.bak", "--input-format", "txt",
                    "--output", tmp_path / "o.csv"], capsys, kept_as)
    (tmp_path / "r.json.bak").write_text("NO\n")
    expect_refused(["plan", "--smiles", "CCO", "--stock", tmp_path / "r.json.bak", "--out", tmp_path / "r.json"],
                   capsys, f"{tmp_path / 'r.json'}: the file there would be kept as {tmp_path / 'r.json.bak'}")
    (tmp_path / "e.json.bak").write_text("CCO\n")
    expect_refused(["evaluate", "--model", MODEL, "--src", tmp_path / "e.json.bak", "--tgt", tmp_path / "e.json.bak",
                    "--out", tmp_path / "e.json"], capsys,
                   f"{tmp_path / 'e.json'}: the file there would be kept as {tmp_path / 'e.json.bak'}")
    assert (tmp_path / "o.csv").read_text() == "the earlier results\n"


def test_plan_keeps_the_routes_its_outputs_replace(tmp_path, capsys, caplog):
    """plan --out (and its CSV) replaced an earlier search's routes without a word, a stopped search's few routes
    replacing a whole one's too, where evaluate, bench and calibrate keep the file they replace as <file>.bak."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    for name in ("r.json", "r.csv"):
        (tmp_path / name).write_text(f"the earlier {name}\n")
    result = PlanResult("CCO", (), SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "stock", 2,
                        settings=PlanSettings())
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
    for name in ("r.json", "r.csv"):
        assert (tmp_path / f"{name}.bak").read_text() == f"the earlier {name}\n"
        assert any(f"the file it replaces is kept as {tmp_path / name}.bak" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "r.json").read_text())["target"] == "CCO"
    capsys.readouterr()


def test_a_sigterm_once_the_search_is_done_writes_the_routes_first(tmp_path, capsys, monkeypatch, caplog):
    """A SIGTERM after the search had ended, while its routes were being written, lost them: no JSON, no CSV. They
    are written, then the stop is obeyed (exit 143)."""
    from molspec_core import planning
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    result = PlanResult("CCO", (), SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "stock", 2,
                        settings=PlanSettings())
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: result)  # the search, done
    real = planning.routes_json

    def routes_json(*args, **kwargs):  # the routes being written
        signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "routes_json", routes_json)
    (tmp_path / "stock.csv").write_text("smiles\nNO\n")
    assert main(["plan", "--smiles", "CCO", "--stock", str(tmp_path / "stock.csv"), "--model", MODEL, "--forward",
                 "none", "--out", str(tmp_path / "r.json")]) == 143
    assert json.loads((tmp_path / "r.json").read_text())["target"] == "CCO" and (tmp_path / "r.csv").is_file()
    assert "stopping once the routes are written" in caplog.text


def test_plan_routes_named_near_the_limit_get_a_steps_csv_whose_name_fits(tmp_path, capsys, monkeypatch):
    """plan --out <253 letters> (no suffix: its steps' CSV adds .csv, 257 bytes) was refused with 'File name too
    long' naming the CSV, a file its user never named, as bench's chart was (f9bebde). Its name is cut to fit."""
    from molspec_core import planning
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    result = PlanResult("CCO", (), SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "stock", 2,
                        settings=PlanSettings())
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: result)  # the search, done
    (tmp_path / "stock.csv").write_text("smiles\nNO\n")
    out = tmp_path / ("r" * 253)
    assert main(["plan", "--smiles", "CCO", "--stock", str(tmp_path / "stock.csv"), "--model", MODEL, "--forward",
                 "none", "--out", str(out)]) == 0
    steps = [p for p in tmp_path.glob("*.csv") if p.name != "stock.csv"]
    assert len(steps) == 1 and len(os.fsencode(steps[0].name)) <= 255 and steps[0].name.startswith("r" * 200)
    assert json.loads(out.read_text())["target"] == "CCO"
    capsys.readouterr()


def test_plan_refuses_outputs_whose_backups_it_cannot_write_before_the_models_load(tmp_path, capsys, no_model_load):
    (tmp_path / "r.csv.bak").mkdir()
    expect_refused(["plan", "--smiles", "CCO", "--out", tmp_path / "r.json"], capsys, "r.csv.bak is a folder")


@pytest.mark.parametrize("split", ["test", "train"])
def test_calibrate_refuses_a_prepared_test_or_train_split_before_the_model_loads(tmp_path, capsys, no_model_load,
                                                                                 split):
    """calibrate's --src help says validation queries, never test, and a fit on a prepare-data folder's test.src was
    made without a word: its confidences then flatter every later test of them (and a fit on train.src, queries the
    model learned, makes its confidences too high). --judge, which reads the queries a saved fit was judged on, is
    not refused."""
    (tmp_path / "stats.json").write_text('{"task": "forward"}')
    for name in ("src", "tgt"):
        (tmp_path / f"{split}.{name}").write_text("CCO\n" * 3)
    files = ["--model", MODEL, "--src", str(tmp_path / f"{split}.src"), "--tgt", str(tmp_path / f"{split}.tgt"),
             "--force"]
    expect_refused(["calibrate", *files], capsys, f"is the {split} split of the prepare-data folder {tmp_path}")
    with pytest.raises(AssertionError, match="the model was loaded"):  # --judge goes on to load the model
        main(["calibrate", *files[:-1], "--judge"])
    # reached through links elsewhere (a user's own names for the files): the split the links lead to is refused
    (tmp_path / "mine").mkdir()
    for name in ("src", "tgt"):
        (tmp_path / "mine" / f"queries.{name}").symlink_to(tmp_path / f"{split}.{name}")
    expect_refused(["calibrate", "--model", MODEL, "--src", tmp_path / "mine" / "queries.src", "--tgt",
                    tmp_path / "mine" / "queries.tgt", "--force"], capsys,
                   f"is the {split} split of the prepare-data folder {tmp_path}")


@pytest.mark.parametrize("test_file", ["uspto_mit/derived/src-test.mixed.txt.gz",
                                       "uspto50k/gln_split_test_unmapped_faster_ml_casp/products.txt"])
def test_calibrate_refuses_the_uspto_datas_own_test_sets_before_the_model_loads(tmp_path, capsys, no_model_load,
                                                                              test_file):
    """calibrate --src ../shared/data/uspto_mit/derived/src-test.mixed.txt.gz (the test set the model cards report)
    made a fit on test queries without a word, only a prepare-data folder's test.src being refused; its confidences
    then flatter every later test on them."""
    src = tmp_path / "data" / test_file
    src.parent.mkdir(parents=True)
    src.write_text("CCO\n" * 3)
    valid = (f"give --src {tmp_path / 'data' / 'uspto_mit/derived/src-valid.mixed.txt.gz'}" if "mit" in test_file
             else "give the val.src and val.tgt of a prepare-data --task retro folder")
    expect_refused(["calibrate", "--model", MODEL, "--src", src, "--tgt", src, "--force"], capsys,
                   f"is a test set of the USPTO data ({test_file}), which the model cards test on: a fit belongs on "
                   f"validation queries, which the model neither learned nor is tested on; {valid}")
    calibrate = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "calibrate"]
    assert "the USPTO data's own test sets, are refused" in next(a.help for a in calibrate._actions if a.dest == "src")


@pytest.mark.parametrize("command,option,given,message", [
    (["evaluate", "--src", "s", "--tgt", "t"], "--out", "", "must name a file, such as report.json, not ''"),
    (["bench", "--src", "s"], "--out", " ", "must name a file, such as bench.json, not ' '"),
    (["predict", "--input", "s"], "--output", "", "must name a file, such as out.csv, not ''"),
    (["evaluate", "--src", "s", "--tgt", "t"], "--out", "reports/",
     "reports/ names a folder (it ends in /); give a file in it, such as reports/report.json"),
    (["plan", "--smiles", "CCO"], "--out", "r/", "r/ names a folder (it ends in /); give a file in it, such as "
     "r/routes.json"),
    # a folder: the current one, where prepare-data began minutes of work
    (["prepare-data", "--task", "forward"], "--out", "", "must name a folder, such as data/forward, not ''"),
    # fine-tune data encoded with a new vocabulary, not the model's; the default data read
    (["prepare-data", "--task", "forward-mit", "--out", "d"], "--vocab", "",
     "must name a file, such as models/forward/vocab.json, not ''"),
    (["prepare-data", "--task", "forward", "--out", "d"], "--data", " ", "must name a folder, such as ../shared/data"),
    (["average", "--model", "a", "--model", "b"], "--out", " ",
     "must name a folder, such as models/averaged, not ' '"),
    # inputs: --index "$IDX" with IDX unset evaluated the whole file, bench --tgt "" timed without accuracy
    (["evaluate", "--src", "s", "--tgt", "t"], "--index", "", "must name a file, such as test.idx, not ''"),
    (["bench", "--src", "s"], "--tgt", "", "must name a file, such as tgt.txt, not ''"),
    (["plan", "--smiles", "CCO", "--out", "r.json"], "--stock", "", "must name a file, such as stock.smi, not ''"),
    # a column: read as none given, and the file's own read instead
    (["predict", "--input", "q.csv", "--output", "o.csv"], "--column", "", "must name a column, not ''"),
    (["predict", "--input", "q.csv", "--output", "o.csv"], "--known-column", " ", "must name a column, not ' '"),
    (["plan", "--smiles", "CCO", "--out", "r.json", "--stock", "s.csv"], "--stock-column", "",
     "must name a column, not ''"),
    # a model: retrosynthesis answers written without their round trip, as if none were asked for
    (["predict", "--model", "retro", "--smiles", "CCOC(C)=O"], "--round-trip", "",
     "must name a folder, such as forward, not ''")])
def test_a_file_option_that_names_no_file_is_a_usage_error(tmp_path, monkeypatch, capsys, no_model_load, command,
                                                           option, given, message):
    """evaluate --out "$OUT" with OUT unset ran the whole evaluation and wrote no report, without a word (bench's
    --out too); --out reports/ wrote a file named reports; an empty --index, --tgt or --stock was read as none given.
    Each is refused before anything runs."""
    monkeypatch.chdir(tmp_path)  # where a run that is not refused writes (prepare-data's folder, say)
    with pytest.raises(SystemExit) as done:
        main([*command, option, given])
    assert done.value.code == 2 and f"argument {option}: {message}" in capsys.readouterr().err


def test_a_missing_prepare_data_vocab_is_named_with_its_flag(tmp_path, capsys):
    expect_refused(["prepare-data", "--task", "forward", "--out", tmp_path / "d", "--vocab", tmp_path / "none.json"],
                   capsys, "--vocab")


def test_a_bench_output_in_a_missing_folder_is_refused_before_the_run(pair_files, capsys, no_model_load):
    """It once failed after the whole run, and the run's JSON was lost."""
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "src.txt", "--methods", "greedy",
                    "--out", pair_files / "missing" / "b.json"], capsys, "does not exist")


@pytest.mark.parametrize("command", ["evaluate", "bench"])
def test_a_report_out_of_a_dash_is_refused_not_written_as_a_file_named_dash(pair_files, capsys, no_model_load,
                                                                           monkeypatch, command):
    """--out -, predict's way to standard output, wrote a file named '-' in the working folder (bench a '-.html'
    beside it, and each run the other's '-' kept as '-.bak')."""
    monkeypatch.chdir(pair_files)
    expect_refused([command, "--model", MODEL, "--src", "src.txt", "--tgt", "tgt.txt", "--out", "-"], capsys,
                   "--out -: the report is written to a file")
    assert not (pair_files / "-").exists()


@pytest.mark.parametrize("extra,message", [
    (["--methods", ""], "names no method"),
    (["--methods", " , "], "names no method"),
    (["--methods", "relaxed", "--sweep", "tau="], "has no values"),
    (["--methods", "relaxed", "--sweep", ""], "--sweep needs one of"),  # --sweep "$GRID" unset: timed without a sweep
    (["--methods", "relaxed", "--sweep", "tau=0,nan"], "tau must be"),
    (["--methods", "greedy,magic"], "unknown methods"),
    # a peer's name was an 'unknown method', and the list of choices after it did not name --peer
    (["--methods", "greedy,ct2-int8-greedy"], "ct2-int8-greedy is CTranslate2's, timed with --peer ctranslate2"),
    (["--methods", "ct2-beam", "--peer", "ctranslate2"], "leave ct2-beam out of --methods"),
    (["--methods", "relaxed", "--sweep", "tau=0,1", "--tau", "2"], "--tau 2 and --sweep tau=0,1"),  # --tau ignored
    (["--methods", "greedy", "--peer-threads", "1"], "--peer-threads sets the threads of the CTranslate2 peer's "
                                                     "process: give --peer ctranslate2 too"),  # it was ignored
    (["--methods", "beam", "--beam-width", "2", "--n-best", "5"], "--beam-width 2 and --n-best 5"),  # 5 was ignored
])
def test_bench_option_mistakes_are_refused_before_the_run(pair_files, capsys, no_model_load, extra, message):
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "src.txt", *extra], capsys, message)


def test_bench_with_targets_rdkit_cannot_read_refuses_or_warns(pair_files, capsys, monkeypatch, caplog):
    """bench scored every query a miss, top-1 0.000, where no target was a SMILES RDKit reads (the queries' file given
    twice, say), and a few such targets without a word: as evaluate, it refuses the first before the model loads and
    counts the others in a warning."""
    from molspec_core.service import Predictor

    (pair_files / "names.txt").write_text("ethanol\nwater\nbenzene\nacetone\npyridine\n")
    bench = ["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--methods", "greedy", "--warmup", "0"]
    load = Predictor.load
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    expect_refused([*bench, "--tgt", pair_files / "names.txt"], capsys, "none of the 5 targets is a SMILES RDKit "
                   "reads (the first: 'ethanol'), so every query would be a miss")
    monkeypatch.setattr(Predictor, "load", load)
    lines = (pair_files / "tgt.txt").read_text().splitlines()
    (pair_files / "some.txt").write_text("\n".join(["water", *lines[1:]]) + "\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):  # water, and the copy model's ON1N1
        assert main([*bench, "--tgt", str(pair_files / "some.txt")]) == 0  # it stopped at the end: no SMILES token
    assert (f"2 of 5 targets in {pair_files / 'some.txt'} are SMILES RDKit cannot read: those queries count as misses"
            in caplog.text)
    capsys.readouterr()


@pytest.mark.parametrize("index,message", [
    ("-1\n", "line number -1 is not among the 0-based lines 0..4"),  # once picked the last line, silently
    ("0\n99\n", "line 2: line number 99"),
    ("0\nthree\n", "'three' is not a line number"),
    ("\n", "selects no lines"),
    ("0\n1\n1\n", "line 3: line number 1 is given again (first on line 2)"),  # once counted three times
])
def test_evaluate_index_files_are_checked(pair_files, capsys, no_model_load, index, message):
    (pair_files / "idx").write_text(index)
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--index", pair_files / "idx"], capsys, message)


def test_evaluate_an_empty_or_missing_file(pair_files, capsys, no_model_load):
    (pair_files / "empty.txt").write_text("")
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "empty.txt", "--tgt", pair_files / "empty.txt"],
                   capsys, "is empty")
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "nope.txt", "--tgt", pair_files / "tgt.txt"],
                   capsys, "No such file")


def test_evaluate_names_the_source_line_of_each_query_it_refused(pair_files, capsys, caplog):
    """A refused query was named by its place among those evaluated alone: with --index, 'query 2' is not line 2 of
    --src, and an error such as a time limit run out does not quote the query. Each example names its line too."""
    sources = (pair_files / "src.txt").read_text().splitlines()
    sources[0] = "C[Xe]"  # line 1, the second query that the index (4, 0, 1) selects
    (pair_files / "src.txt").write_text("\n".join(sources) + "\n")
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--index", str(pair_files / "idx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["query"], e["line"]) for e in report["query_error_examples"]] == [(2, 1)]
    assert f"(query 2 of those evaluated, line 1 of {pair_files / 'src.txt'}: token '[Xe]'" in \
        caplog.records[0].getMessage()


def test_evaluate_names_the_queries_it_refused_and_records_how_it_decoded(pair_files, capsys, caplog):
    """A refused query (a token the model lacks, a time limit run out) was a miss without a word: a count in the
    report, nothing on the screen; and the report did not record --limit, --batch-size or the time limit."""
    sources = (pair_files / "src.txt").read_text().splitlines()
    sources[1] = "C[Xe]"
    (pair_files / "src.txt").write_text("\n".join(sources) + "\n")
    out = pair_files / "e.json"
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--limit", "4", "--batch-size", "2", "--time-limit", "30",
                     "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["query_errors"] == 1 and report["first_right"]["model_order"][1] is None
    assert report["query_error_examples"] == [{"query": 2, "line": 2, "error": "token '[Xe]' is not in the model's "
                                                                              "vocabulary; this model cannot read it"}]
    assert caplog.records[0].getMessage() == (  # the next warns of the target RDKit cannot read
        f"1 of 4 queries was refused, a miss in every top-k (query 2 of those evaluated, line 2 of "
        f"{pair_files / 'src.txt'}: token '[Xe]' is not in the model's vocabulary; this model cannot read it); the "
        "report lists the first ten")
    assert caplog.records[1].getMessage() == (  # one target: in the singular ('1 of 4 targets ... are SMILES')
        f"1 of 4 targets in {pair_files / 'tgt.txt'} is a SMILES RDKit cannot read: that query counts as a miss")
    assert (report["limit"], report["batch_size"], report["time_limit_s"], report["sampling"]) == (4, 2, 30.0, None)
    capsys.readouterr()
    targets = str(pair_files / "tgt.txt")
    assert main(["evaluate", "--model", MODEL, "--src", targets, "--tgt", targets, "--method", "sample",
                 "--n-best", "2", "--temperature", "1.5", "--seed", "3", "--limit", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["sampling"] == {"temperature": 1.5, "top_k": 0, "seed": 3}


def test_evaluate_tells_queries_the_time_limit_stopped_from_those_it_refused(pair_files, capsys, caplog,
                                                                            monkeypatch):
    """A query the time limit stopped was counted and told as 'refused' with those the model cannot read: a user took
    a slow query for one the model would not take. The report counts it apart (timed_out, its example marked), and
    the warning says it was stopped, not refused, and what decodes it whole."""
    from molspec_core.limits import QueryTimeout
    from molspec_core.service import Predictor

    sources = (pair_files / "src.txt").read_text().splitlines()
    sources[2] = "C[Xe]"
    (pair_files / "src.txt").write_text("\n".join(sources) + "\n")
    decode, calls = Predictor.decode, []

    def slow_second(self, *args, **kwargs):  # one query a batch: the second query read runs out of time
        calls.append(1)
        if len(calls) == 2:
            raise QueryTimeout()
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "decode", slow_second)
    out = pair_files / "e.json"
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--limit", "4", "--batch-size", "1", "--time-limit", "30",
                     "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["query_errors"], report["timed_out"]) == (2, 1)
    assert [(e["query"], e.get("timed_out")) for e in report["query_error_examples"]] == [(2, True), (3, None)]
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith("1 of 4 queries was refused, a miss in every top-k (query 3 of "
                                  "those evaluated, line 3 of")
    assert messages[1] == ("1 of 4 queries was stopped by the time limit (--time-limit 30 s) before its search "
                           "ended, a miss in every top-k: it was not refused; a longer --time-limit decodes it whole; "
                           "the report lists the first ten")


def test_a_limit_beyond_the_queries_there_are_is_told(pair_files, capsys, caplog):
    """evaluate --limit 10 on a file of 5 queries (bench's on an index of 3) ran on 5 without a word: its user
    believed 10 were read."""
    files = ["--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", *files, "--limit", "10"]) == 0
        assert main(["bench", *files, "--index", str(pair_files / "idx"), "--limit", "4", "--methods", "greedy",
                     "--warmup", "0"]) == 0
        assert main(["evaluate", *files, "--limit", "5"]) == 0  # as many as there are: nothing to tell
    assert [record.getMessage() for record in caplog.records if record.getMessage().startswith("--limit")] == [
        f"--limit 10: {pair_files / 'src.txt'} holds only 5 queries; the run evaluates all of them",
        f"--limit 4: {pair_files / 'idx'} selects only 3 queries; the run times all of them"]
    capsys.readouterr()


def test_evaluate_reads_targets_written_with_atom_maps(pair_files, capsys):
    """USPTO's raw files write the recorded answers with their atom maps: each was scored a miss, without a word."""
    from rdkit import Chem

    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    assert main(["evaluate", "--model", MODEL, *files]) == 0
    plain = json.loads(capsys.readouterr().out)
    mapped = []
    for target in (pair_files / "tgt.txt").read_text().splitlines():
        mol = Chem.MolFromSmiles(target)
        for number, atom in enumerate(mol.GetAtoms() if mol is not None else (), start=1):
            atom.SetAtomMapNum(number)
        mapped.append(Chem.MolToSmiles(mol) if mol is not None else target)
    assert sum(":" in t for t in mapped) == 4
    (pair_files / "mapped.txt").write_text("\n".join(mapped) + "\n")
    assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"),
                 "--tgt", str(pair_files / "mapped.txt")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["top1"] == plain["top1"] > 0 and report["unreadable_targets"] == plain["unreadable_targets"]


@pytest.mark.parametrize("out,message", [("missing/e.json", "does not exist"), (".", "is a folder")])
def test_evaluate_output_paths_are_checked_first(pair_files, capsys, no_model_load, out, message):
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--out", pair_files / out], capsys, message)


def test_a_full_disk_is_an_error_line_and_the_earlier_report_stays_whole(pair_files, capsys, monkeypatch):
    """evaluate wrote its report in place: a write that failed left half a file where the last report was. The
    temporary folder it then tries (write_report) is not left behind, and the error is the first one."""
    import tempfile

    out = pair_files / "e.json"
    out.write_text("the earlier report\n")
    disk_full(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(pair_files))
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--limit", "1", "--out", out], capsys, f"No space left on device: {out}")
    assert out.read_text() == "the earlier report\n" and not list(pair_files.glob(".*partial"))
    assert not list(pair_files.glob("molspec-*"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_device_for_a_report_is_refused_before_the_run(pair_files, capsys, no_model_load):
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--limit", "1", "--out", "/dev/full"], capsys, "is a device")


@pytest.mark.parametrize("command", ["evaluate", "bench"])
@pytest.mark.parametrize("given,message", [("tgt.txt", "is the input file"), ("src.txt", "is the input file"),
                                           ("idx", "is the input file"), ("e.json.gz", "plain JSON")])
def test_a_report_may_not_overwrite_its_own_inputs_nor_promise_compression(pair_files, capsys, no_model_load,
                                                                           command, given, message):
    """evaluate --out tgt.txt replaced the targets with the report, without a word; bench did the same."""
    before = {name: (pair_files / name).read_text() for name in ("src.txt", "tgt.txt", "idx")}
    expect_refused([command, "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--index", pair_files / "idx", "--out", pair_files / given], capsys, message)
    assert {name: (pair_files / name).read_text() for name in before} == before


@pytest.mark.parametrize("command", ["evaluate", "bench"])
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "calibration.json", "new.json"])
def test_a_report_may_not_be_written_into_the_model_folder(pair_files, capsys, no_model_load, command, name):
    """evaluate --out <model>/config.json replaced the config with the report, and the model no longer loaded."""
    import shutil

    model = pair_files / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    (pair_files / "link").symlink_to(model)  # the same folder by another path
    before = {path.name: path.read_bytes() for path in model.iterdir() if path.is_file()}
    for out in (model / name, pair_files / "link" / name):
        expect_refused([command, "--model", model, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                        "--out", out], capsys, f"{out} lies in the folder of the model being run, {model}: "
                       "it could replace the model's config, weights, vocabulary or calibration; write it outside the "
                       "model folder")
    assert {path.name: path.read_bytes() for path in model.iterdir() if path.is_file()} == before


def test_predict_output_may_not_be_written_into_the_model_folder(tmp_path, capsys, no_model_load):
    """predict --output <model>/answers.csv (or .sdf) wrote into the model's folder, as evaluate's --out once did."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    (tmp_path / "q.txt").write_text("CCO\n")
    for source in (["--input", tmp_path / "q.txt"], ["--smiles", "CCO"]):
        expect_refused(["predict", "--model", model, *source, "--output", model / "answers.csv"], capsys,
                       f"{model / 'answers.csv'} lies in the folder of the model being run, {model}")
    assert sorted(path.name for path in model.iterdir()) == sorted(
        path.name for path in (FIXTURES / "copy_model").iterdir())


@pytest.mark.parametrize("name,text", [("q.txt", ""), ("q.txt", "\n\n"), ("q.txt", "smiles\n"),
                                       ("q.csv", "smiles,id\n")])
def test_predict_refuses_a_file_without_records_before_the_model_loads(tmp_path, capsys, no_model_load, name, text):
    """An empty file ended '0 queries predicted, 0 rejected' with exit 0 and a CSV of a header, while a file of blank
    lines among records exits 2 (none could be predicted) and evaluate refuses an empty --src."""
    (tmp_path / name).write_text(text)
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / name, "--output", tmp_path / "o.csv"], capsys,
                   f"{name} holds no records to predict: it is empty, or holds a header and nothing under it")
    assert not (tmp_path / "o.csv").exists()


def test_evaluate_refuses_a_tokenized_target_file_before_the_model_loads(pair_files, capsys, no_model_load):
    """Tokenized targets (the published USPTO-MIT form) were scored on their first token: 0% and no warning."""
    targets = (pair_files / "tgt.txt").read_text().splitlines()
    (pair_files / "tok.txt").write_text("\n".join(" ".join(t) for t in targets) + "\n")
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tok.txt"],
                   capsys, f"{pair_files / 'tok.txt'}, line 1: 'O c 1 c c c c c 1' holds a space, and a SMILES has "
                   "none")


def test_predict_counts_a_known_answer_with_a_space_as_unreadable_not_as_its_first_token(tmp_path, capsys):
    (tmp_path / "in.csv").write_text("smiles,expected\nOc1ccncc1,Oc1ccncc1 pyridinol\n")
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"), "--output", str(out),
                 "--known-column", "expected"]) == 0  # the copy model's answer is Oc1ccncc1, the cell's first token
    assert capsys.readouterr().out.splitlines()[-1] == (
        "no predicted query has a known answer that RDKit reads in the column expected")
    assert set(pd.read_csv(out, dtype=str, keep_default_na=False)["matches_known"]) == {""}


def test_evaluate_fails_and_writes_no_report_when_nothing_could_be_scored(pair_files, capsys):
    """Every query refused (time-outs, tokenized queries, the wrong model) gave exit 0 and a report of 0% that
    compare took for a result, where predict fails such a file."""
    out = pair_files / "e.json"
    n = len((pair_files / "src.txt").read_text().splitlines())
    (pair_files / "xe.txt").write_text("C[Xe]\n" * n)
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "xe.txt", "--tgt", pair_files / "tgt.txt",
                    "--out", out], capsys, f"none of the {n} queries could be evaluated: each was refused (the first: "
                   "token '[Xe]' is not in the model's vocabulary; this model cannot read it)")
    (pair_files / "bad.txt").write_text("C1CC\n" * n)
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "bad.txt",
                    "--out", out], capsys, f"none of the {n} targets is a SMILES RDKit reads (the first: 'C1CC')")
    assert not out.exists()


def test_evaluate_refuses_drafts_its_method_ignores_and_records_the_drafts_it_used(pair_files, capsys, monkeypatch):
    """--method greedy --draft-len 3 was recorded as draft_len 3; a spec method left at its defaults as null."""
    files = ["--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"), "--limit",
             "1"]
    with monkeypatch.context() as patch:
        patch.setattr("molspec_core.service.Predictor.load", lambda *a, **k: pytest.fail("loaded before the check"))
        expect_refused(["evaluate", *files, "--method", "greedy", "--draft-len", "3"], capsys,
                       "greedy does not read --draft-len; the methods that do: spec-auto,")
        expect_refused(["evaluate", *files, "--n-best", "2", "--n-drafts", "2"], capsys,
                       "beam does not read --n-drafts")
        expect_refused(["evaluate", *files, "--method", "greedy", "--seed", "3"], capsys,
                       "greedy does not read --seed")
        expect_refused(["calibrate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                        str(pair_files / "tgt.txt"), "--top-k", "5"], capsys, "beam does not read --top-k")
    from molspec_core.service import Predictor

    assert main(["evaluate", *files, "--method", "spec-pointer"]) == 0
    report = json.loads(capsys.readouterr().out)
    shape = Predictor.load(MODEL, "cpu").resolve("spec-pointer", None, None, 8)
    assert (report["drafter"], report["draft_len"], report["n_drafts"]) == shape and shape[1] > 0
    assert main(["evaluate", *files, "--method", "spec-pointer", "--draft-len", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["draft_len"] == 3
    assert main(["evaluate", *files]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["drafter"], report["draft_len"], report["n_drafts"]) == ("none", None, None)


def test_evaluate_records_where_and_with_what_it_ran_and_compare_says_what_differs(pair_files, capsys, caplog,
                                                                                    monkeypatch):
    """The report kept the model and files as typed (relative), and no device or version; compare compared up to
    the smaller n_best without a word."""
    import os.path

    monkeypatch.chdir(pair_files)
    (pair_files / "model").symlink_to(FIXTURES / "copy_model")
    files = ["--model", "model", "--src", "src.txt", "--tgt", "tgt.txt", "--index", "idx", "--method", "beam"]
    assert main(["evaluate", *files, "--n-best", "3", "--out", "a.json"]) == 0
    report = json.loads((pair_files / "a.json").read_text())
    assert report["model"] == os.path.realpath(FIXTURES / "copy_model")
    assert (report["src"], report["tgt"], report["index"]) == tuple(str(pair_files / f) for f in ("src.txt", "tgt.txt",
                                                                                                  "idx"))
    assert report["device"] == "cpu" and report["device_name"] and report["version"] and "commit" in report
    assert main(["evaluate", *files, "--n-best", "2", "--out", "b.json"]) == 0
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["compare", "a.json", "b.json"]) == 0
    assert "method beam, float32 on cpu)" in capsys.readouterr().out
    assert [r.getMessage() for r in caplog.records] == [
        "the reports differ in n_best 3 against 2 (compared up to top-2; top-3 left out)"]


def test_a_bench_report_and_its_chart_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from molspec_core.bench import save_report

    report = {"methods": {"greedy": {"speedup_vs_greedy": 1.0}}, "n_queries": 1, "device": "cpu"}
    save_report(report, tmp_path / "b.json")
    kept = {name: (tmp_path / name).read_text() for name in ("b.json", "b.html")}
    disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        save_report({**report, "n_queries": 2}, tmp_path / "b.json")
    assert {name: (tmp_path / name).read_text() for name in kept} == kept and len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("command", ["evaluate", "bench"])
@pytest.mark.parametrize("name", ["results.csv", "results.xlsx", "results.sdf", "results.TSV"])
def test_a_report_named_as_a_table_is_refused_before_the_model_loads(pair_files, capsys, no_model_load, command,
                                                                     name):
    """evaluate --out results.csv (bench's too) wrote the JSON report under a table's name, which a spreadsheet then
    opened as a column of JSON lines; plan refuses such a name for its routes since f8ffa35."""
    expect_refused([command, "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--out", pair_files / name], capsys,
                   f"the report is written as JSON text, not as the {name[7:]} name says; give it a name such as "
                   "report.json")
    assert not (pair_files / name).exists()


def test_bench_refuses_a_report_named_as_its_chart(pair_files, capsys, no_model_load):
    """bench --out r.html wrote the JSON there, then the chart over it: the report was lost."""
    expect_refused(["bench", "--model", MODEL, "--src", pair_files / "src.txt", "--out", pair_files / "r.html"],
                   capsys, "give the report a name of its own")


@pytest.mark.parametrize("extra,message", [
    (["--method", "sample", "--temperature", "nan"], "temperature"),  # a torch RuntimeError escaped predict
    (["--method", "relaxed", "--tau", "-1"], "tau"),
    (["--device", "tpu"], "device"),
])
def test_bad_sampling_options_and_devices_are_error_lines(capsys, extra, message):
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", *extra], capsys, message)


def test_cuda_on_a_cpu_only_torch_is_an_error_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    expect_refused(["predict", "--model", MODEL, "--smiles", "CCO", "--device", "cuda"], capsys, "no CUDA device")


def test_a_malformed_model_folder_is_an_error_line(tmp_path, capsys):
    import shutil

    shutil.copytree(FIXTURES / "copy_model", tmp_path / "m")
    (tmp_path / "m" / "vocab.json").unlink()
    expect_refused(["predict", "--model", tmp_path / "m", "--smiles", "CCO"], capsys, "vocab.json is missing")
    shutil.copy(FIXTURES / "copy_model" / "vocab.json", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["model"]["n_heads"] = 3
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    expect_refused(["predict", "--model", tmp_path / "m", "--smiles", "CCO"], capsys, "n_heads (3) must divide")


def test_negative_counts_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as done:
        main(["predict", "--model", MODEL, "--smiles", "CCO", "--batch-size", "0"])
    assert done.value.code == 2 and "must be 1 or more" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["predict", "--model", MODEL, "--smiles", "CCO", "--method", "beam", "--n-best", "60"],
     "--n-best: must be between 1 and 50, not 60"),
    (["predict", "--model", MODEL, "--smiles", "CCO", "--draft-len", "100"], "--draft-len: must be between 0 and 64"),
    (["predict", "--model", MODEL, "--smiles", "CCO", "--n-drafts", "65"], "--n-drafts: must be between 1 and 64"),
    (["predict", "--model", MODEL, "--smiles", "CCO", "--augment", "21"], "--augment: must be between 1 and 20"),
    # refused as the first results were written, after the whole first window had decoded
    (["predict", "--model", "retro", "--smiles", "CCO", "--round-trip", "forward", "--round-trip-k", "20"],
     "--round-trip-k: must be between 1 and 10"),
    (["bench", "--model", MODEL, "--src", "s.txt", "--beam-width", "51"], "--beam-width: must be between 1 and 50"),
    (["plan", "--smiles", "CCO", "--n-best", "51"], "--n-best: must be between 1 and 50")])
def test_bounded_counts_are_usage_errors_in_the_flags_words(argv, message, capsys, no_model_load):
    """They were refused only once the model had loaded, in the Python API's words ("draft_len must be ...")."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_a_one_answer_method_asked_for_several_is_told_so_in_words_of_no_one_interface(capsys):
    code, err = run_cli(["predict", "--model", MODEL, "--smiles", "CCO", "--n-best", "5"], capsys)
    assert code == 2 and "error: greedy returns one prediction; for 5 use beam or another method that returns " \
                         "several: beam, " in err
    assert "method=" not in err and "n_best=" not in err  # it said "use method='beam' ... for n_best=5"


@pytest.mark.parametrize("command", [["predict", "--model", MODEL, "--smiles", "CCO"], ["plan", "--smiles", "CCO"]])
@pytest.mark.parametrize("limit", ["0", "-1", "nan", "inf", "soon"])
def test_a_time_limit_is_seconds_above_0(capsys, command, limit):
    """--time-limit -1 was told 'positive (or None for no limit)', the library's words, which no option can give."""
    with pytest.raises(SystemExit) as done:
        main([*command, "--time-limit", limit])
    assert done.value.code == 2 and "argument --time-limit: must be a number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["predict", "--model", MODEL, "--smiles", "CCO"],
                                     ["evaluate", "--model", MODEL, "--src", "s.txt", "--tgt", "t.txt"]])
def test_a_time_limit_past_the_librarys_cap_is_refused_under_the_flags_name(capsys, command):
    """--time-limit 100000 reached predict and was refused in the library's words ('time_limit_s must be ... (None for
    no limit)'), which name no option of the command line."""
    with pytest.raises(SystemExit) as done:
        main([*command, "--time-limit", "100000"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "argument --time-limit: must be a number of seconds above 0 and at most 86,400, " \
                                    "not 100000" in err and "time_limit_s" not in err


def test_read_pairs_limit_and_selection(pair_files):
    from molspec_core.evaluate import read_pairs

    sources, targets = read_pairs(pair_files / "src.txt", pair_files / "tgt.txt", pair_files / "idx", limit=2)
    assert sources == ["c1ccncc1", "CCOc1ccccc1"] and targets == ["c1ccncc1", "Oc1ccccc1"]
    with pytest.raises(ValueError, match="limit must be 1 or more"):
        read_pairs(pair_files / "src.txt", None, limit=0)


def test_evaluate_reads_its_files_like_query_files(tmp_path):
    """Bounded, decompressed, any-case suffix: the same reader as predict's input files."""
    from molspec_core.evaluate import read_pairs

    with gzip.open(tmp_path / "SRC.TXT.GZ", "wt") as f:
        f.write("CCO\nCCN\n")
    assert read_pairs(str(tmp_path / "SRC.TXT.GZ"), None)[0] == ["CCO", "CCN"]
    with pytest.raises(ValueError, match="device, pipe or socket"):
        read_pairs("/dev/zero", None)


def test_predict_retro_answers_round_trip_into_the_csv(tmp_path, capsys):
    """--round-trip checks every sane reactant set with the forward model; the CSV carries the result."""
    (tmp_path / "in.txt").write_text("CC(=O)Nc1ccc(O)cc1\n")
    out = tmp_path / "out.csv"
    assert main(["predict", "--model", "retro", "--input", str(tmp_path / "in.txt"), "--output", str(out),
                 "--method", "beam", "--n-best", "3", "--round-trip", "forward"]) == 0
    table = pd.read_csv(out)
    sane = table[table["sane"]]
    assert len(sane) and sane["round_trip"].notna().all() and sane["forward_prob"].between(0, 1).all()
    assert table[~table["sane"]]["round_trip"].isna().all()
    # the forward model that checked, as the app's files name it (io.CHECKER_COLUMNS), after the model's own: a file's
    # round_trip True said nothing of which model had said so
    from molspec_core.calibration import weights_fingerprint
    from molspec_core.io import CHECKER_COLUMNS, MODEL_COLUMNS
    from molspec_core.service import model_folder

    assert list(table.columns[-5:]) == [*MODEL_COLUMNS, *CHECKER_COLUMNS]
    assert set(zip(*(table[c] for c in [*MODEL_COLUMNS, *CHECKER_COLUMNS]))) == {
        ("retro", weights_fingerprint(model_folder("retro")), "forward", weights_fingerprint(model_folder("forward")),
         1)}
    assert main(["predict", "--model", "retro", "--smiles", "CC(=O)Nc1ccc(O)cc1", "--method", "beam",
                 "--n-best", "3", "--round-trip", "forward"]) == 0
    assert "round trip" in capsys.readouterr().out


def test_predict_says_a_retrosynthesis_query_of_several_molecules_is_read_as_one(capsys):
    """A hydrochloride's retrosynthesis built the Cl into every answer without a word on the command line, where the
    Predict page warns; it prints the page's note, naming the main product to predict alone."""
    assert main(["predict", "--model", "retro", "--smiles", "CN1CCN(C(=O)c2ccccc2)CC1.Cl", "--n-best", "2",
                 "--method", "beam"]) == 0
    assert ("note: The query holds 2 molecules, and retrosynthesis takes one product: the model reads them as one "
            "and proposes reactants for all of them, so a counter-ion, solvent or by-product moves into its answers. "
            "To take apart the main product alone, predict CN1CCN(C(=O)c2ccccc2)CC1.") in capsys.readouterr().out
    assert main(["predict", "--model", "retro", "--smiles", "CN1CCN(C(=O)c2ccccc2)CC1", "--method", "beam",
                 "--n-best", "2"]) == 0
    assert "molecules" not in capsys.readouterr().out


def test_predict_names_a_retrosynthesis_files_queries_of_several_molecules(tmp_path, capsys):
    """--input: a file of hydrochlorides got answers that built the Cl in, and not a word, where --smiles and the
    Predict page and Batch page warn."""
    salt = "CN1CCN(C(=O)c2ccccc2)CC1.Cl"
    src = tmp_path / "salts.txt"
    src.write_text(f"CC(=O)Nc1ccc(O)cc1\n{salt}\nxyz\nCCN(CC)CC.Cl\n")
    assert main(["predict", "--model", "retro", "--input", str(src), "--output", str(tmp_path / "out.csv"),
                 "--method", "greedy"]) == 0
    out = capsys.readouterr().out
    assert ("note: 2 queries hold several molecules (rows 2 and 4). Row 2: The query holds 2 molecules, and "
            "retrosynthesis takes one product") in out and "predict CN1CCN(C(=O)c2ccccc2)CC1." in out
    forward = tmp_path / "forward.txt"
    forward.write_text("CC(=O)Cl.Nc1ccccc1\n")  # forward queries are of several molecules by nature
    assert main(["predict", "--model", "forward", "--input", str(forward), "--output", str(tmp_path / "f.csv"),
                 "--method", "greedy"]) == 0
    assert "molecules" not in capsys.readouterr().out


@needs_native
def test_round_trip_checks_in_the_arithmetic_of_the_answers(tmp_path, monkeypatch):
    loaded = record_loads(monkeypatch)
    assert main(["predict", "--model", "retro", "--smiles", "CC(=O)Nc1ccc(O)cc1", "--method", "beam", "--n-best", "2",
                 "--round-trip", "forward", "--dtype", "int8"]) == 0
    assert [(p.task, p.dtype) for p in loaded] == [("retro", "int8"), ("forward", "int8")]


def test_round_trip_needs_a_retrosynthesis_model_and_one_process(tmp_path, capsys):
    assert main(["predict", "--model", MODEL, "--smiles", "CCO", "--round-trip", "forward"]) == 2
    assert "checks retrosynthesis answers" in capsys.readouterr().err
    (tmp_path / "in.txt").write_text("CCO\n")
    assert main(["predict", "--model", "retro", "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "out.csv"), "--round-trip", "forward", "--ray", "local"]) == 2
    assert "leave out --ray" in capsys.readouterr().err


def test_the_cli_samples_at_the_libraries_default_temperature():
    """One home for the default (methods.DEFAULT_TEMPERATURE): the CLI's flag does not restate it."""
    from molspec_core.cli import build_parser
    from molspec_core.methods import DEFAULT_TEMPERATURE, SamplingOptions

    for command in (["predict", "--smiles", "CCO"], ["bench", "--src", "q.txt"]):
        assert build_parser().parse_args(command).temperature == SamplingOptions().temperature == DEFAULT_TEMPERATURE


# ---- the CLI audit (findings 4, 5, 10, 11): refused input is an error line, before any work ----------

@pytest.mark.parametrize("change, message", [
    ({"n_best": None}, "missing 'n_best'"),
    ({"n": "6"}, "'n' is '6', not a whole number from 1"),
    ({"first_right": {"model_order": None, "app_order": None}}, "first_right 'model_order' is None, not a list"),
    ({"first_right": {"model_order": ["1"] * 6, "app_order": [1] * 6}}, "first_right 'model_order' holds '1'"),
    ({"first_right": [1] * 6}, "'first_right' is [1, 1"),
    # evaluate writes null for an answer beyond n_best: compare counted this report 0% where its top1 said 100%
    ({"first_right": {"model_order": [2] * 6, "app_order": [1] * 6}}, "first_right 'model_order' holds place 2, "
     "beyond its n_best 1"),
])
def test_compare_names_a_report_it_cannot_read_and_what_is_wrong(tmp_path, capsys, change, message):
    """Finding 4: an edited or old-format report was a KeyError or TypeError traceback."""
    report = {"n": 6, "n_best": 1, "src": "s", "tgt": "t", "index": None,
              "first_right": {"model_order": [1] * 6, "app_order": [1] * 6}}
    edited = {key: value for key, value in dict(report, **change).items() if value is not None}
    (tmp_path / "a.json").write_text(json.dumps(report))
    (tmp_path / "b.json").write_text(json.dumps(edited))
    expect_refused(["compare", tmp_path / "a.json", tmp_path / "b.json"], capsys,
                   f"{tmp_path / 'b.json'} is not an evaluate report ({message}")


def test_compare_says_a_bench_report_is_one(tmp_path, capsys):
    """compare on a bench --out report said it was 'not an evaluate report (missing 'n')'."""
    (tmp_path / "a.json").write_text(json.dumps({"n": 6, "n_best": 1, "first_right": {"model_order": [1] * 6,
                                                                                       "app_order": [1] * 6}}))
    (tmp_path / "b.json").write_text(json.dumps({"n_queries": 6, "methods": {"greedy": {"median_ms": 1.0}}}))
    expect_refused(["compare", tmp_path / "a.json", tmp_path / "b.json"], capsys,
                   f"{tmp_path / 'b.json'} is a bench report, which times methods on queries; compare reads the "
                   "reports of evaluate --out")


def test_train_refuses_negative_threads_and_a_missing_data_folder_before_making_its_run_folder(tmp_path, capsys):
    """Finding 5: --threads -1 was torch's RuntimeError traceback, and a missing --data left an empty --out."""
    with pytest.raises(SystemExit) as done:
        main(["train", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"), "--threads", "-1"])
    assert done.value.code == 2 and "--threads: must be 0 or more, not -1" in capsys.readouterr().err
    expect_refused(["train", "--data", tmp_path / "nowhere", "--out", tmp_path / "run"], capsys,
                   str(tmp_path / "nowhere"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["o.sdf.gz", "o.csv.gz", "o.xlsx.gz", "o.xls", "o.tsv", "o"])
def test_predict_refuses_an_output_suffix_it_does_not_write_before_loading_the_model(tmp_path, capsys,
                                                                                     no_model_load, name):
    """Finding 10: .sdf.gz, .csv.gz and .xlsx were written as plain CSV without a word (.xlsx is a workbook now)."""
    (tmp_path / "q.txt").write_text("CCO\n")
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "q.txt", "--output", tmp_path / name], capsys,
                   "predict writes CSV (.csv), an SD file (.sdf, .sd) or an Excel workbook (.xlsx), uncompressed")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["q.txt"]


@pytest.mark.parametrize("extra, message", [(["--n-val", "-5"], "--n-val: must be 1 or more, not -5"),
                                            (["--n-val", "0"], "--n-val: must be 1 or more, not 0"),
                                            (["--workers", "0"], "--workers: must be 1 or more, not 0"),
                                            # these two took any int; retro's --augment 0 is canonical pairs only
                                            (["--augment", "-1"], "--augment: must be between 0 and 50, not -1"),
                                            # 100000000 ran until it was killed
                                            (["--augment", "51"], "--augment: must be between 0 and 50, not 51"),
                                            (["--rows-before", "-3"], "--rows-before: must be 0 or more, not -3")])
def test_prepare_data_counts_are_bounded(tmp_path, capsys, extra, message):
    """Finding 11: --n-val -5 would have made all but 5 of the USPTO-MIT valid rows validation rows."""
    with pytest.raises(SystemExit) as done:  # an empty --data: were the count taken, no long run on the real data
        main(["prepare-data", "--task", "forward", "--data", str(tmp_path), "--out", str(tmp_path / "out"), *extra])
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_prepare_data_takes_retros_augment_0_canonical_pairs_only():
    args = build_parser().parse_args(["prepare-data", "--task", "retro", "--out", "o", "--augment", "0"])
    assert (args.augment, args.rows_before) == (0, 0)


def test_prepare_data_names_a_vocabulary_that_is_not_json(tmp_path, capsys):
    """Finding 11: the JSON error named no file."""
    (tmp_path / "bad.json").write_text("{tokens: []}")
    expect_refused(["prepare-data", "--task", "retro", "--out", tmp_path / "out", "--vocab", tmp_path / "bad.json"],
                   capsys, f"{tmp_path / 'bad.json'} is not a JSON vocabulary: Expecting property name")
    assert not (tmp_path / "out").exists()


def test_serve_on_a_port_in_use_names_the_host_and_port_before_loading_the_models(capsys, monkeypatch):
    """"error: Address already in use" named neither (session 65's audit), and came only after the models had loaded
    (minutes for the shipped two on a CPU)."""
    import socket

    from molspec_core.service import Predictor

    loaded = []
    load = Predictor.load
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: loaded.append(a) or load(*a, **k))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_cli(["serve", "--model", FIXTURES / "copy_model", "--host", "127.0.0.1", "--port", port],
                            capsys)
    assert code == 2 and f"error: cannot listen on 127.0.0.1:{port}: " in err
    assert loaded == []


def test_serve_logs_each_request_with_its_time_and_other_commands_without(tmp_path):
    """serve's log lines, its access log too, carried no time ('INFO molspec_core.server: 127.0.0.1 "GET /health
    HTTP/1.1" 200 -'): a server's log, read afterwards, could not say when a request or a failure came. Its lines
    begin with the time, to the second with the zone; a command's own lines, read as it runs, are as they were. Run
    as a user runs it (a process of its own: under pytest the root logger already has handlers, and main's logging
    set-up is not reached)."""
    import urllib.request

    command = [sys.executable, "-m", "molspec_core", "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0"]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=environment)
    try:
        serving = server.stdout.readline()  # 'serving copy_model on http://127.0.0.1:<port> ...' once it listens
        address = re.search(r"http://127\.0\.0\.1:\d+", serving)
        assert address, serving + server.stderr.read()
        with urllib.request.urlopen(f"{address.group()}/health", timeout=60) as answer:
            assert answer.status == 200
    finally:
        server.terminate()
        err = server.communicate(timeout=60)[1]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}"
    assert re.search(rf"^{stamp} INFO molspec_core\.server: 127\.0\.0\.1 \"GET /health HTTP/1\.1\" 200", err, re.M), err
    (tmp_path / "q.txt").write_text("CCO\n")  # --limit past it warns before the model (none there) is refused
    refused = subprocess.run([sys.executable, "-m", "molspec_core", "evaluate", "--model", str(tmp_path / "none"),
                              "--src", str(tmp_path / "q.txt"), "--tgt", str(tmp_path / "q.txt"), "--limit", "5"],
                             capture_output=True, text=True, cwd=ROOT, env=environment)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("WARNING molspec_core.cli: --limit 5: "), refused.stderr


def test_serve_refuses_two_models_of_one_name_before_loading_them(tmp_path, capsys, no_model_load):
    """serve --model runs/a/export --model runs/b/export (two runs' saves, both folders named export: a request names
    a model by its folder's name) loaded both models, minutes on a CPU, before it was refused as 'two models named
    export'; it is refused first, naming both."""
    for run in ("a", "b"):
        (tmp_path / run / "export").mkdir(parents=True)
    expect_refused(["serve", "--model", tmp_path / "a" / "export", "--model", tmp_path / "b" / "export", "--port", "0"],
                   capsys, f"--model {tmp_path / 'a' / 'export'} and --model {tmp_path / 'b' / 'export'} are both "
                   "named export, and a request names a model by its folder's name: give folders of different names")
    # one folder given twice (here once through a link) was told to be two folders to rename
    (tmp_path / "link").symlink_to(tmp_path / "a")
    expect_refused(["serve", "--model", tmp_path / "a" / "export", "--model", tmp_path / "link" / "export", "--port",
                    "0"], capsys, f"--model {tmp_path / 'link' / 'export'} is given twice (as --model "
                   f"{tmp_path / 'a' / 'export'} too): give each model once")


def test_predict_says_which_column_of_a_table_it_read_the_queries_from(tmp_path, capsys):
    """A file holding both a reactants and a product column said nowhere which one was read (the task's first
    name it found): predict names it, unless --column named it."""
    (tmp_path / "q.csv").write_text("id,Product,Reactants\n1,CCO,CC=O\n")
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv") == 0
    assert "q.csv: the queries are read from the column 'Reactants' (--column names another)" in (
        capsys.readouterr().out)
    assert predict_file(tmp_path / "q.csv", tmp_path / "out.csv", "--column", "Product") == 0
    assert "are read from the column" not in capsys.readouterr().out


def test_predict_says_which_sheet_of_a_workbook_it_read_the_queries_from(tmp_path, capsys):
    """A workbook of several sheets was read from the first whose header names a query column, and the command line
    said nowhere which (the Batch page names it)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.title = "Notes"
    book.active.append(["written by", "me"])
    reactions = book.create_sheet("Reactions")
    reactions.append(["id", "smiles"])
    reactions.append([1, "Oc1ccncc1"])
    book.save(tmp_path / "q.xlsx")
    assert predict_file(tmp_path / "q.xlsx", tmp_path / "out.csv", "--column", "smiles") == 0
    assert "q.xlsx: the queries are read from the sheet 'Reactions'\n" in capsys.readouterr().out
    assert predict_file(tmp_path / "q.xlsx", tmp_path / "out.csv") == 0
    assert "q.xlsx: the queries are read from the sheet 'Reactions'" in capsys.readouterr().out


@pytest.fixture
def clocked_loads(monkeypatch):
    """Every decoder call of a model the command line loads takes a second of a fake clock (conftest.decoder_clock)."""
    from conftest import decoder_clock
    from molspec_core.service import Predictor

    load = Predictor.load

    def clocked(*args, **kwargs):
        predictor = load(*args, **kwargs)
        decoder_clock(predictor.model, monkeypatch)
        return predictor

    monkeypatch.setattr(Predictor, "load", clocked)


def test_predict_one_smiles_stopped_at_its_time_limit_prints_the_answers_it_found(capsys, clocked_loads):
    """A beam search past --time-limit keeps the answers it had found, yet `predict --smiles` printed only an
    `error:` line and exited 2. It prints them with a note saying where it stopped; unfinished ones are marked."""
    from molspec_core.service import TIMED_OUT

    assert main(["predict", "--model", MODEL, "--smiles", "OCCOc1ccccc1", "--method", "beam", "--n-best", "3",
                 "--time-limit", "3.5"]) == 0
    out = capsys.readouterr().out
    assert "note: the search stopped after the 3.5 s time limit per query" in out
    assert out.count(f"({TIMED_OUT})") == 3 + 1  # the note and each unfinished answer


def test_predict_a_file_counts_a_query_stopped_with_answers_as_predicted_and_says_it_stopped(tmp_path, capsys,
                                                                                              clocked_loads):
    """A query stopped at --time-limit with answers found was counted as rejected; its rows hold the answers now,
    and the summary counts it predicted and says it stopped."""
    (tmp_path / "q.smi").write_text("OCCOc1ccccc1\nxyz\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.smi"), "--method", "beam", "--n-best", "3",
                 "--time-limit", "3.5", "--output", str(tmp_path / "out.csv")]) == 0
    assert ("1 query predicted (1 of them stopped at the time limit, with the answers found by then), 1 rejected"
            in capsys.readouterr().out)
    table = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert table["rank"].tolist() == ["1", "2", "3", ""]
    assert table["error"].str.startswith("stopped after the 3.5 s").tolist() == [True, True, True, False]


def test_predict_a_file_counts_queries_stopped_before_any_answer_apart_from_rejected_ones(tmp_path, capsys,
                                                                                          clocked_loads):
    """Queries the time limit stopped before any answer were counted rejected ('0 queries predicted, 2 rejected',
    'error: none of the 2 queries could be predicted'), as if the model would not take them: they are counted apart
    (service.stopped_by_time_limit's rule, QueryResult.timed_out), and the error says a longer time limit decodes
    them."""
    (tmp_path / "q.smi").write_text("OCCOc1ccccc1\nCCOc1ccccc1\n")
    args = ["predict", "--model", MODEL, "--input", str(tmp_path / "q.smi"), "--time-limit", "0.5", "--output",
            str(tmp_path / "out.csv")]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert ("0 queries predicted, 2 stopped by the time limit (--time-limit 0.5 s) before any answer, 0 rejected (see "
            "the error column)") in captured.out
    assert ("error: none of the 2 queries could be predicted: the time limit stopped each before any answer; a longer "
            "--time-limit decodes them") in captured.err
    (tmp_path / "q.smi").write_text("OCCOc1ccccc1\nxyz\n")
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "0 queries predicted, 1 stopped by the time limit (--time-limit 0.5 s) before any answer, 1 rejected" \
        in captured.out
    assert ("error: none of the 2 queries could be predicted: the time limit stopped 1 of them before any answer, and "
            "1 was refused; a longer --time-limit decodes it") in captured.err


def test_ctrl_c_while_the_command_line_loads_is_an_interrupted_line_and_exit_130(monkeypatch, capsys):
    """A Ctrl-C in the second or more that torch and RDKit take to load printed a KeyboardInterrupt traceback from
    inside torch: the `molspec` entry point (molspec_core.entry) loads the command line itself, and says
    `interrupted`, exit 130, as the boundary does for a Ctrl-C later on."""
    from importlib.metadata import entry_points

    from molspec_core import entry

    def interrupted(name: str):
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "import_module", interrupted)
    assert entry.main(["--help"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    script = next(iter(entry_points(group="console_scripts", name="molspec")))
    assert script.value == "molspec_core.entry:main"
    loaded = subprocess.run([sys.executable, "-c", "import sys, molspec_core.entry; print(sorted(m for m in "
                             "('torch', 'rdkit', 'numpy', 'molspec_core.cli') if m in sys.modules))"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"  # nothing heavy loads before the entry point's try


def ctrl_c_at_third_predict(monkeypatch, at: int = 3) -> None:
    """Predictor.predict as Ctrl-C meets it on its third call (the third query at --batch-size 1), or its `at`th."""
    from molspec_core.service import Predictor

    real, calls = Predictor.predict, []

    def predict(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", predict)


def test_an_evaluation_stopped_by_ctrl_c_writes_the_report_of_the_queries_it_scored(pair_files, capsys,
                                                                                     monkeypatch):
    """Ctrl-C an hour into `evaluate` lost every figure: --out holds the report of the queries scored before the
    stop, marked partial, and `compare` sets it beside a whole run of those queries (--limit), saying it is partial."""
    from molspec_core.service import Predictor

    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"), "--n-best", "3",
             "--batch-size", "1"]
    real = Predictor.predict
    ctrl_c_at_third_predict(monkeypatch)
    assert main(["evaluate", "--model", MODEL, *files, "--out", str(pair_files / "stopped.json")]) == 130
    report = json.loads((pair_files / "stopped.json").read_text())
    assert (report["n"], report["partial"]) == (2, {"of_n": 5, "stopped_by": "KeyboardInterrupt",
                                                    "decoded_left_out": 0})
    assert report["model"] and report["queries_sha256"]
    monkeypatch.setattr(Predictor, "predict", real)
    assert main(["evaluate", "--model", MODEL, *files, "--limit", "2", "--out", str(pair_files / "two.json")]) == 0
    capsys.readouterr()
    assert main(["compare", str(pair_files / "stopped.json"), str(pair_files / "two.json")]) == 0
    out = capsys.readouterr().out
    assert "partial: stopped after 2 of 5 queries" in out.splitlines()[0] and "2 queries" in out


@pytest.mark.parametrize("signum,code,name", [(signal.SIGINT, 130, "KeyboardInterrupt"),
                                              (signal.SIGTERM, 143, "Terminated")])
def test_an_evaluation_stopped_in_a_window_keeps_its_first_queries_done(pair_files, monkeypatch, caplog, signum, code,
                                                                        name):
    """Ctrl-C or SIGTERM while a window of queries (up to 256) was decoding lost every batch of it decoded by then:
    with one window, no report at all. The stop ends the batch being decoded; the report keeps the first queries
    done, in order, and says how many more were decoded and left out. predict decodes the window by length, two a
    batch: [5, 1], [3, 4], then [2], which meets the stop: query 1 is kept, 5, 3 and 4 are left out."""
    signal_at_decode(monkeypatch, signum, at=3)
    out = pair_files / "stopped.json"
    with caplog.at_level(logging.WARNING):
        assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--batch-size", "2", "--out", str(out)]) == code
    report = json.loads(out.read_text())
    assert (report["n"], report["partial"]) == (1, {"of_n": 5, "stopped_by": name, "decoded_left_out": 3})
    assert "stopped after 1 of 5 queries" in caplog.text and "(3 more decoded, after a query that was not, are left " \
                                                              "out: a report is of the first queries)" in caplog.text


@pytest.mark.parametrize("command", ["evaluate", "bench"])
def test_a_screen_that_cannot_take_the_report_loses_no_report(pair_files, monkeypatch, command):
    """`molspec evaluate ... --out r.json | head -3`: the reader gone, printing the report raised BrokenPipeError
    before it was written, and the whole run's report was lost (bench's table too). The file is written first."""
    import molspec_core.bench as bench_module
    import molspec_core.cli as cli_module

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_module, "show_report", broken)
    monkeypatch.setattr(bench_module, "markdown_table", broken)
    out = pair_files / "report.json"
    extra = ["--warmup", "0", "--methods", "greedy"] if command == "bench" else []
    assert main([command, "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                 str(pair_files / "tgt.txt"), "--out", str(out), *extra]) == 2
    assert json.loads(out.read_text())["model"]


@pytest.mark.parametrize("when", ["decode", "load"])
@pytest.mark.parametrize("command", ["evaluate", "bench", "calibrate"])
def test_a_report_names_the_weights_it_decoded_with_though_the_folder_changes_during_the_run(pair_files, monkeypatch,
                                                                                           command, when):
    """The weights were hashed once the run had ended: a training run's export/, rewritten every few minutes, gave a
    report the fingerprint of weights it never decoded with (and compare took two runs of one model for two), and
    calibrate a fit that the new weights then used. Then they were hashed again just after the model loaded, apart
    from Predictor.weights (taken as it loads): weights rewritten in between were named, not those loaded."""
    import shutil

    from molspec_core.calibration import weights_fingerprint
    from molspec_core.service import Predictor

    model = pair_files / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    loaded = weights_fingerprint(model)
    replaced = getattr(Predictor, when)

    def rewrite() -> None:  # the folder's weights replaced while the run loads or decodes
        with open(next(model.glob("*.safetensors")), "ab") as weights:
            weights.write(b"\0")

    if when == "decode":
        def rewritten(self, *args, **kwargs):
            rewrite()
            return replaced(self, *args, **kwargs)
    else:  # rewritten as the load ends, after its weights were read and fingerprinted
        def rewritten(*args, **kwargs):
            predictor = replaced(*args, **kwargs)
            rewrite()
            return predictor

    monkeypatch.setattr(Predictor, when, rewritten)
    out = pair_files / "report.json"
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt")]
    extra = {"evaluate": ["--out", str(out)], "bench": ["--out", str(out), "--warmup", "0", "--methods", "greedy"],
             "calibrate": ["--force"]}[command]
    assert main([command, "--model", str(model), *files, *extra]) == 0
    written = json.loads((model / "calibration.json" if command == "calibrate" else out).read_text())
    assert written["fingerprint" if command == "calibrate" else "weights"] == loaded != weights_fingerprint(model)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_after_the_last_query_is_scored_writes_the_whole_report_first(pair_files, monkeypatch, caplog, signum,
                                                                             code):
    """A Ctrl-C or SIGTERM after every query was scored, while the report was being made (the commit asked of git,
    the weights hashed), lost the whole run: no report at --out, none on the screen. The report is written, then the
    stop is obeyed (its exit code)."""
    import molspec_core.evaluate as evaluate_module

    real = evaluate_module.software

    def software():  # asked once every query is scored, to record what code wrote the report
        signal.raise_signal(signum)
        return real()

    monkeypatch.setattr(evaluate_module, "software", software)
    out = pair_files / "eval.json"
    assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                 str(pair_files / "tgt.txt"), "--out", str(out)]) == code
    report = json.loads(out.read_text())
    assert report["n"] == 5 and "partial" not in report and report["commit"] == real()["commit"]
    assert "stopping once the report is written" in caplog.text


def test_an_evaluation_stopped_without_out_prints_the_report_of_the_queries_it_scored(pair_files, capsys,
                                                                                       monkeypatch):
    """Ctrl-C on an `evaluate` without --out printed 'interrupted' and nothing else: the figures of every query scored
    before the stop were lost. Standard output holds their report, marked partial, as a finished run's."""

    ctrl_c_at_third_predict(monkeypatch)
    assert main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                 str(pair_files / "tgt.txt"), "--batch-size", "1"]) == 130
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # one JSON object, as a finished run prints
    assert (report["n"], report["partial"]) == (2, {"of_n": 5, "stopped_by": "KeyboardInterrupt",
                                                    "decoded_left_out": 0})
    assert "top1" in report and "first_right" not in report and report["queries_sha256"]


def test_an_evaluation_keeps_the_report_its_out_replaces(pair_files, capsys, monkeypatch, caplog):
    """A run Ctrl-C'd two queries in replaced, without a word, the whole report an earlier run had left at --out (hours
    of decoding) with its partial one: the file an evaluate report replaces is kept beside it as <out>.bak."""

    out = pair_files / "eval.json"
    files = ["--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"), "--batch-size", "1",
             "--out", str(out)]
    assert main(["evaluate", "--model", MODEL, *files]) == 0
    whole = out.read_text()
    ctrl_c_at_third_predict(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="molspec_core.cli"):
        assert main(["evaluate", "--model", MODEL, *files]) == 130
    assert json.loads(out.read_text())["partial"]["of_n"] == 5
    assert (pair_files / "eval.json.bak").read_text() == whole
    assert any(f"the file it replaces is kept as {out}.bak" in r.getMessage() for r in caplog.records)
    capsys.readouterr()


def test_bench_against_ctranslate2_without_the_package_is_refused_before_the_model_loads(pair_files, capsys,
                                                                                        monkeypatch, no_model_load):
    """It was refused only once the model had loaded (minutes on a CPU), as the conversion began."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "ctranslate2" else find_spec(name, *args))
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # imported by an earlier test: cli.installed asks here first
    expect_refused(["bench", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                    str(pair_files / "tgt.txt"), "--peer", "ctranslate2"], capsys,
                   "--peer ctranslate2 needs the ctranslate2 package (pip install -e .[peers])")


def test_plan_summary_names_the_column_the_stock_was_read_from(tmp_path, capsys):
    """plan's summary said 'stock: vendor.csv (9 molecules)' where the Routes page says which column (or SD data
    field, or sheet) the SMILES were read from (1f5bbbc): a file with two SMILES columns left the reader guessing."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    def summary(stock: str, column: str, sheet: str = "") -> str:
        result = PlanResult("CCO", (), SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, stock, 9,
                            settings=PlanSettings(), stock_column=column, stock_sheet=sheet)
        report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
        return capsys.readouterr().out.splitlines()[0]

    assert summary("vendor.csv", "Structure") == \
        "target: CCO; stock: vendor.csv, SMILES from the column Structure (9 molecules)"
    assert summary("blocks.xlsx", "SMILES", "Blocks") == \
        "target: CCO; stock: blocks.xlsx, SMILES from the column SMILES of the sheet Blocks (9 molecules)"
    assert summary("blocks.sdf", "SMILES") == \
        "target: CCO; stock: blocks.sdf, SMILES from the data field SMILES (9 molecules)"
    assert summary("blocks.smi", "") == "target: CCO; stock: blocks.smi (9 molecules)"


def test_plan_names_the_stock_and_its_column_option_where_the_stock_lacks_the_column(tmp_path, capsys,
                                                                                     no_model_load):
    """A CSV stock without a smiles column was refused as 'the CSV needs a column named ... give that column's name'
    naming neither --stock (which file) nor --stock-column (how to name it); and --stock-column's help said it names
    a CSV's or workbook's column, though it names an SD file's data field too."""
    from molspec_core.cli import build_parser

    (tmp_path / "vendor.csv").write_text("ID,Structure\n1,CCO\n")
    (tmp_path / "vendor.sdf").write_text("ethanol\n\n\n  0  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n"
                                         "> <ID>\n1\n\n$$$$\n")
    plan = ["plan", "--smiles", "NCCO", "--out", tmp_path / "r.json"]
    expect_refused([*plan, "--stock", tmp_path / "vendor.csv"], capsys,
                   f"--stock {tmp_path / 'vendor.csv'}: the CSV needs a column named 'smiles' or")
    expect_refused([*plan, "--stock", tmp_path / "vendor.csv"], capsys,
                   "or rename the column smiles. --stock-column names the column to read")
    expect_refused([*plan, "--stock", tmp_path / "vendor.csv", "--stock-column", "SMILES_std"], capsys,
                   f"--stock {tmp_path / 'vendor.csv'}: the CSV needs a column named 'SMILES_std' in a header line")
    expect_refused([*plan, "--stock", tmp_path / "vendor.sdf", "--stock-column", "SMILES"], capsys,
                   f"--stock {tmp_path / 'vendor.sdf'}: this SD file has no data field 'SMILES' (its fields: ID); "
                   "leave the field out to read each record's molecule")
    assert not list(tmp_path.glob("r.*"))
    parser = next(action for action in build_parser()._actions if action.dest == "command").choices["plan"]
    said = next(action.help for action in parser._actions if action.dest == "stock_column")
    assert "SD file" in said and "data field" in said, said


def test_predict_names_the_input_and_its_column_option_where_the_input_lacks_the_column(tmp_path, capsys):
    """predict --input vendor.csv, a CSV whose SMILES are under Structure, was refused as 'the CSV needs a column
    named ... give that column's name', naming neither the file nor --column, the option that names it."""
    (tmp_path / "vendor.csv").write_text("ID,Structure\n1,CCO\n")
    predict = ["predict", "--model", MODEL, "--input", tmp_path / "vendor.csv", "--output", tmp_path / "o.csv"]
    expect_refused(predict, capsys, f"--input {tmp_path / 'vendor.csv'}: the CSV needs a column named 'smiles' or")
    expect_refused(predict, capsys, "or rename the column smiles. --column names the column to read")
    expect_refused([*predict, "--column", "SMILES_std"], capsys,
                   f"--input {tmp_path / 'vendor.csv'}: the CSV needs a column named 'SMILES_std' in a header line")
    assert not (tmp_path / "o.csv").exists()


def test_plan_says_a_target_in_the_stock_without_routes_can_be_procured(tmp_path, capsys):
    """A target in the stock, for which the search found no route, was told 'no route to the stock was found within
    2 s' alone, as if nothing could be done, where the Routes page says to procure it as it is."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    def last_line(in_stock: bool) -> str:
        stats = SearchStats("retro*", 2.0, 2.0, 1, 9, target_in_stock=in_stock)
        report_plan(PlanResult("NCc1ccccc1", (), stats, "retro", None, "stock", 2, settings=PlanSettings()),
                    tmp_path / "r.json", tmp_path / "r.csv", False)
        return capsys.readouterr().out.splitlines()[-2]  # the last line names the files written

    assert last_line(True) == ("the target itself is in the stock: procure it as it is; no route to the stock was "
                               "found within 2 s")
    assert last_line(False) == "no route to the stock was found within 2 s"


def test_plan_names_the_steps_csv_it_chose_where_that_is_the_stock(tmp_path, capsys, no_model_load):
    """plan --stock r.csv --out r.json was refused as 'r.csv is the input file; writing it would destroy the queries',
    a file the user never named as an output (the steps' CSV beside --out) and a stock, which holds no queries."""
    (tmp_path / "r.csv").write_text("smiles\nNO\n")
    plan = ["plan", "--smiles", "NCCO", "--stock", tmp_path / "r.csv"]
    expect_refused([*plan, "--out", tmp_path / "r.json"], capsys,
                   f"{tmp_path / 'r.csv'} is the input file; writing it would destroy the stock. Choose another output "
                   f"name (there plan writes its steps, beside --out {tmp_path / 'r.json'}: --csv names another place)")
    expect_refused([*plan, "--out", tmp_path / "s.json", "--csv", tmp_path / "r.csv"], capsys,
                   f"{tmp_path / 'r.csv'} is the input file; writing it would destroy the stock. Choose another output "
                   "name")
    assert (tmp_path / "r.csv").read_text() == "smiles\nNO\n" and sorted(tmp_path.iterdir()) == [tmp_path / "r.csv"]


def test_our_own_results_as_an_input_or_a_stock_name_the_file_and_the_column_option(tmp_path, capsys, no_model_load):
    """predict --input results.csv (and plan --stock) of our own results were told 'this table is MolSpec's own
    results ... Name the column to read: query ...', naming neither the file nor the option (--column,
    --stock-column) that names it."""
    from conftest import molfile
    from molspec_core.io import csv_bytes, output_header

    header = output_header([])
    (tmp_path / "results.csv").write_bytes(csv_bytes(header, [[1, "NCCO", "NCCO", 1, "NO",
                                                               *[None] * (len(header) - 5)]]))
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "results.csv", "--output", tmp_path / "o.csv"],
                   capsys, f"--input {tmp_path / 'results.csv'}: this table is MolSpec's own results")
    expect_refused(["predict", "--model", MODEL, "--input", tmp_path / "results.csv", "--output", tmp_path / "o.csv"],
                   capsys, "to take its answers as new queries. --column names the column to read")
    expect_refused(["plan", "--smiles", "NCCO", "--stock", tmp_path / "results.csv", "--out", tmp_path / "r.json"],
                   capsys, "for a stock of its queries. --stock-column names the column to read")
    assert sorted(tmp_path.iterdir()) == [tmp_path / "results.csv"]
    (tmp_path / "results.sdf").write_text(molfile("NO", "1").rstrip("\n") + "\n>  <query>\nNCCO\n\n"
                                          ">  <canonical_query>\nNCCO\n\n>  <smiles>\nNO\n\n$$$$\n")
    code, err = run_cli(["plan", "--smiles", "NCCO", "--stock", tmp_path / "results.sdf", "--out", tmp_path / "r.json"],
                        capsys)
    assert code == 2 and err.startswith("error: results.sdf is MolSpec's own results"), err  # the file named once
    assert err.rstrip().endswith("for a stock of its queries. --stock-column names the column to read"), err


def test_plan_summary_counts_one_stock_molecule_and_names_standard_input(tmp_path, capsys):
    """echo CC(=O)Cl | plan --stock - printed 'stock: - (1 molecules)': the stock read from standard input is named
    as predict names its --input -, and one molecule is one."""
    from molspec_core.cli import report_plan
    from molspec_core.planning import PlanResult, PlanSettings, SearchStats

    result = PlanResult("CCO", (), SearchStats("retro*", 1.0, 2.0, 1, 9), "retro", None, "-", 1,
                        settings=PlanSettings())
    report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
    assert capsys.readouterr().out.splitlines()[0] == "target: CCO; stock: standard input (1 molecule)"


def test_an_evaluation_resumed_after_a_stop_writes_the_report_a_whole_run_writes(tmp_path, monkeypatch, capsys,
                                                                                 caplog):
    """An evaluation stopped at 90% of two hours kept the report of its first queries, and the only way on was to
    decode them all again: --resume keeps the partial report's queries, decodes only the rest and writes the report
    a whole run writes, per-query places and totals alike, without keeping the partial one as <out>.bak."""
    from molspec_core.service import Predictor

    sources = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "C1CC", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1"]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")  # the third is refused: not a SMILES
    (tmp_path / "tgt.txt").write_text("\n".join(s.replace("C", "") for s in sources) + "\n")
    files = ["evaluate", "--model", MODEL, "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"),
             "--n-best", "2", "--batch-size", "1"]
    assert main([*files, "--out", str(tmp_path / "whole.json")]) == 0
    real = Predictor.predict
    ctrl_c_at_third_predict(monkeypatch, at=4)
    out = tmp_path / "stopped.json"
    assert main([*files, "--out", str(out)]) == 130
    assert json.loads(out.read_text())["n"] == 3
    decoded = []

    def predict(self, queries, *args, **kwargs):
        decoded.extend(queries)
        return real(self, queries, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", predict)
    with caplog.at_level(logging.WARNING):
        assert main([*files, "--out", str(out), "--resume"]) == 0
    assert decoded == sources[3:]  # the queries kept are not decoded again
    assert "3 of 6 queries kept from" in caplog.text
    whole, resumed = json.loads((tmp_path / "whole.json").read_text()), json.loads(out.read_text())
    assert resumed.pop("resumed") == {"after": 3, "batch_size": 1, "version": whole["version"],
                                      "commit": whole["commit"]}
    assert resumed == dict(whole, src=resumed["src"]) and resumed["query_errors"] == 1
    assert not (tmp_path / "stopped.json.bak").exists()
    capsys.readouterr()


def test_an_evaluation_stopped_inside_a_window_and_resumed_gives_a_whole_runs_report(pair_files, monkeypatch):
    """A SIGTERM inside a window of queries (two a batch) keeps its first query only; resumed, the rest of that window
    and the windows after it are decoded, and the report is the whole run's."""
    files = ["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
             "--batch-size", "2", "--n-best", "2", "--method", "beam"]
    assert main([*files, "--out", str(pair_files / "whole.json")]) == 0
    with monkeypatch.context() as patched:
        signal_at_decode(patched, signal.SIGTERM, at=3)
        assert main([*files, "--out", str(pair_files / "stopped.json")]) == 143
    assert json.loads((pair_files / "stopped.json").read_text())["n"] == 1
    assert main([*files, "--out", str(pair_files / "stopped.json"), "--resume"]) == 0
    whole, resumed = (json.loads((pair_files / name).read_text()) for name in ("whole.json", "stopped.json"))
    assert resumed.pop("resumed")["after"] == 1 and resumed == whole


def test_a_stopped_report_saved_with_a_byte_order_mark_is_still_a_stopped_report(pair_files, monkeypatch, capsys):
    """A partial report opened and saved in Notepad (UTF-8 with a byte-order mark) was not read as a stopped run by a
    run without --resume: it was replaced, its queries set aside in <out>.bak. It is refused as any partial report
    is, and --resume goes on from it."""
    files = ["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
             "--batch-size", "1"]
    out = pair_files / "stopped.json"
    with monkeypatch.context() as patched:
        ctrl_c_at_third_predict(patched)
        assert main([*files, "--out", str(out)]) == 130
    out.write_bytes(b"\xef\xbb\xbf" + out.read_bytes())
    stopped = out.read_bytes()
    expect_refused([*files, "--out", str(out)], capsys, f"{out} holds the report of a run stopped after 2 of 5 ")
    assert out.read_bytes() == stopped and not (pair_files / "stopped.json.bak").exists()
    assert main([*files, "--out", str(out), "--resume"]) == 0
    assert json.loads(out.read_text())["resumed"]["after"] == 2
    capsys.readouterr()


def test_resume_from_a_bench_report_says_what_resume_reads(pair_files, capsys, no_model_load):
    """evaluate --resume --out bench.json (a bench report there) was told 'compare reads the reports of evaluate
    --out': the words of another command. It says what --resume goes on from, and what to do."""
    from molspec_core.calibration import backup_of

    (pair_files / "bench.json").write_text(json.dumps({"methods": {"greedy": {}}}))
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--out", pair_files / "bench.json", "--resume"], capsys,
                   "is a bench report, which times methods on queries; --resume goes on from the partial report of a "
                   "stopped evaluate: give another --out (without --resume the run replaces it, and keeps it as "
                   "bench.json.bak)")
    # a name near the file system's limit: the backup named is the one kept (calibration.backup_of cuts it to fit)
    long = pair_files / ("b" * 250 + ".json")
    long.write_text(json.dumps({"methods": {"greedy": {}}}))
    expect_refused(["evaluate", "--model", MODEL, "--src", pair_files / "src.txt", "--tgt", pair_files / "tgt.txt",
                    "--out", long, "--resume"], capsys, f"and keeps it as {backup_of(long).name})")


def test_resume_is_refused_naming_what_differs_from_the_stopped_run(pair_files, monkeypatch, capsys, caplog):
    """--resume joins a stopped run's queries to this run's: one with other options, other queries or no partial
    report to go on from is refused, saying which; with no report at --out yet, the run starts at the first query."""
    files = ["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
             "--batch-size", "1"]
    out = pair_files / "stopped.json"
    with monkeypatch.context() as patched:
        ctrl_c_at_third_predict(patched)
        assert main([*files, "--out", str(out)]) == 130
    stopped = out.read_text()
    expect_refused([*files, "--out", str(out), "--resume", "--n-best", "2"], capsys,
                   "differs in n_best 1 against 2; method 'greedy' against 'beam'")
    expect_refused([*files, "--out", str(out), "--resume", "--limit", "4"], capsys,
                   "differs in limit None against 4; the number of queries (5 against 4)")
    (pair_files / "tgt.txt").write_text("C\n" + (pair_files / "tgt.txt").read_text().split("\n", 1)[1])
    expect_refused([*files, "--out", str(out), "--resume"], capsys, "differs in the first 2 queries (--src, --tgt")
    expect_refused([*files, "--resume"], capsys, "--resume goes on from the partial report at --out: give --out")
    expect_refused([*files, "--out", str(out)], capsys, f"{out} holds the report of a run stopped after 2 of 5 "
                   "queries: give --resume to go on from it, or remove it (or give another --out) to start again")
    assert out.read_text() == stopped  # each refused before a word of it changed
    whole = pair_files / "whole.json"
    with caplog.at_level(logging.WARNING):
        assert main([*files, "--out", str(whole), "--resume"]) == 0
    assert "nothing to resume" in caplog.text and json.loads(whole.read_text())["n"] == 5
    expect_refused([*files, "--out", str(whole), "--resume"], capsys, "it is the report of a whole run")


@pytest.mark.parametrize("stop_at", [None, 3])
def test_an_evaluation_whose_out_folder_is_gone_keeps_its_report_in_a_temporary_folder(pair_files, tmp_path, capsys,
                                                                                        caplog, monkeypatch, stop_at):
    """A clean-up script removed the --out folder while an evaluation ran: its report, and the per-query places the
    screen never shows (compare's and --resume's), were lost with an error naming a hidden file. The report goes to a
    new temporary folder and the error (or, for a stopped run, a line beside its exit code) says where."""
    import shutil
    import tempfile

    from molspec_core.service import Predictor

    folder = tmp_path / "reports"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real, calls = Predictor.predict, []

    def predict(self, *args, **kwargs):
        calls.append(1)
        shutil.rmtree(folder, ignore_errors=True)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", predict)
    with caplog.at_level(logging.WARNING):
        code = main(["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt",
                     str(pair_files / "tgt.txt"), "--batch-size", "1", "--out", str(folder / "eval.json")])
    err = capsys.readouterr().err + caplog.text
    assert code == (2 if stop_at is None else 130), err
    kept = next(tmp_path.glob("molspec-*/eval.json"))
    assert f"{folder / 'eval.json'} could not be written (the folder of {folder / 'eval.json'} does not exist): the " \
           f"report is kept as {kept}" in err
    assert json.loads(kept.read_text())["n"] == (5 if stop_at is None else 2)


def test_a_run_stopped_out_of_memory_is_resumed_with_another_batch_size(pair_files, monkeypatch, caplog):
    """A run stopped out of memory is told to try a smaller --batch-size, which changes no answer (but at a near-tie):
    --resume takes another batch size, says so, and the report keeps the stopped run's in "resumed"."""
    import torch

    from molspec_core.service import Predictor

    files = ["evaluate", "--model", MODEL, "--src", str(pair_files / "src.txt"), "--tgt", str(pair_files / "tgt.txt"),
             "--n-best", "2", "--out", str(pair_files / "e.json")]
    real, calls = Predictor.predict, []

    def predict(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise torch.OutOfMemoryError("out of memory")
        return real(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(Predictor, "predict", predict)
        assert main([*files, "--batch-size", "1"]) == 2  # a window a query: two scored
    assert json.loads((pair_files / "e.json").read_text())["partial"]["stopped_by"] == "OutOfMemoryError"
    with caplog.at_level(logging.WARNING):
        assert main([*files, "--batch-size", "2", "--resume"]) == 0
    assert "--resume: batch_size 1 against 2 differ from the stopped run's" in caplog.text
    report = json.loads((pair_files / "e.json").read_text())
    assert (report["n"], report["batch_size"], report["resumed"]["batch_size"]) == (5, 2, 1)


def test_average_names_a_run_folder_given_as_a_model_and_its_model_folders(tmp_path, capsys):
    """`average --model runs/a` (the run folder, not its export) said only "runs/a/config.json is missing"."""
    import shutil

    run = tmp_path / "run"
    for part in ("export", "last"):
        shutil.copytree(FIXTURES / "copy_model", run / part)
        (run / part / "train_state.json").write_text("{}")
    assert main(["average", "--model", str(run), "--model", str(FIXTURES / "copy_model"),
                 "--out", str(tmp_path / "soup")]) == 2
    assert (f"--model {run} is a run folder (it holds export, last), not a model folder: give one of its folders, "
            f"e.g. --model {run / 'export'}") in capsys.readouterr().err
    assert not (tmp_path / "soup").exists()
