"""Calibrated confidence (molspec_core.calibration): the isotonic fit, the reliability figures, and a
calibration stored with a model and dropped when the weights change."""
import dataclasses
import random
import shutil

import pytest

from conftest import FIXTURES, disk_full, signal_at_decode
from molspec_core import calibration
from molspec_core.calibration import isotonic_steps, reliability
from molspec_core.service import Predictor


def test_isotonic_fit_is_non_decreasing_and_pools_violators():
    edges, values = isotonic_steps([-5, -4, -3, -2, -1], [False, True, False, True, True])
    assert edges == [-5, -4, -2] and values == [0.0, 0.5, 1.0]


def test_shrunk_steps_never_say_never_or_always_and_stay_non_decreasing():
    edges, values = isotonic_steps([-5, -4, -3, -2, -1], [False, True, False, True, True], shrink=True)
    assert edges == [-5, -4, -2]
    assert values == pytest.approx([1 / 3, 1 / 2, 3 / 4])  # 0 of 1 right, 1 of 2 (kept), 2 of 2
    # 9 of 10 right (kept: 0.9), then 1 of 1 (2/3): kept at 0.9, never below the step before it
    edges, values = isotonic_steps(list(range(11)), [True] * 9 + [False] + [True], shrink=True)
    assert edges == [0, 10] and values == pytest.approx([0.9, 0.9])
    # a bottom step of 3 wrong answers would say 1/5, above the next step's 1/10: it takes 1/10
    edges, values = isotonic_steps(list(range(13)), [False] * 3 + [True] + [False] * 9, shrink=True)
    assert values[0] == pytest.approx(values[1]) and values == sorted(values)
    assert isotonic_steps([1, 2], [True, True], shrink=True)[1] == pytest.approx([3 / 4])  # one step


def test_tied_scores_get_one_value():
    edges, values = isotonic_steps([1, 2, 2], [True, False, True])
    assert edges == [1] and values == pytest.approx([2 / 3])


def test_isotonic_fit_keeps_the_share_of_right_answers_and_never_decreases():
    rng = random.Random(0)
    scores = [rng.uniform(-10, 0) for _ in range(500)]
    right = [rng.random() < 1 / (1 + 2.718 ** (-s - 4)) for s in scores]
    edges, values = isotonic_steps(scores, right)
    assert edges == sorted(edges) and values == sorted(values)
    cal = calibration.Calibration("", "beam", 5, 1, 1, tuple(edges), tuple(values), 0, 0, ())
    fitted = [cal.confidence(s) for s in scores]
    assert sum(fitted) == pytest.approx(sum(right))  # each pooled block's value is its share of right answers
    assert cal.confidence(-99) == values[0] and cal.confidence(99) == values[-1]


def test_first_answers_and_the_rest_take_their_own_map_and_old_files_one_map_for_all():
    two = calibration.Calibration("", "beam", 5, 1, 1, (-9.0, -1.0), (0.2, 0.8), 0, 0, (),
                                  rest_edges=(-9.0, -3.0), rest_values=(0.01, 0.1))
    assert [two.confidence(-0.5, rank) for rank in (1, 2, 5)] == [0.8, 0.1, 0.1]
    assert [two.confidence(-5.0, rank) for rank in (1, 2)] == [0.2, 0.01]
    one = calibration.Calibration("", "beam", 5, 1, 1, (-9.0, -1.0), (0.2, 0.8), 0, 0, ())
    assert [one.confidence(-0.5, rank) for rank in (1, 2, 5)] == [0.8, 0.8, 0.8]


def test_reliability_bins_and_expected_calibration_error():
    ece, table = reliability([0.1, 0.9, 0.95, 0.05], [False, True, True, True])
    assert table == [(0.05, 1.0, 1), (0.1, 0.0, 1), (pytest.approx(0.925), 1.0, 2)]
    assert ece == pytest.approx(0.25 * 0.95 + 0.25 * 0.1 + 0.5 * 0.075)
    assert reliability([0.3] * 10, [True] * 3 + [False] * 7)[0] == pytest.approx(0.0)


def test_fit_save_load_and_stale_weights(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    copier = Predictor.load(folder, device="cpu")
    assert copier.calibration_for("beam") is None
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1", "CCN(CC)CC"]
    targets = [q.replace("C", "") or "O" for q in queries]  # the copy model drops every C
    fitted = calibration.fit(copier, queries, targets, method="beam", n_best=3, progress=False)
    assert fitted.n_fit == 4 and fitted.n_check == 2 and 0 <= fitted.ece <= 1
    path = calibration.save(fitted, folder)
    reloaded = Predictor.load(folder, device="cpu")
    assert reloaded.calibration_for("beam") == fitted
    # a write that fails (a full disk) keeps the fit there was: it left half a file, which no model could read
    kept = path.read_text()
    with pytest.MonkeyPatch.context() as patch:
        disk_full(patch)
        with pytest.raises(OSError):
            calibration.save(dataclasses.replace(fitted, ece=0.5), folder)
    assert path.read_text() == kept and not list(folder.glob(".*partial"))
    answers = reloaded.predict("CCOc1ccccc1", method="beam", n_best=3).predictions
    assert all((p.confidence is None) == (not p.valid) for p in answers)
    assert all(0 <= p.confidence <= 1 for p in answers if p.valid)
    weights = next(folder.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes() + b" ")  # other weights: the calibration no longer applies
    assert calibration.load(folder) is None


def test_a_damaged_calibration_file_costs_the_answers_their_confidence_and_is_named(tmp_path, caplog):
    """An optional file: predict still answers (it raised a KeyError traceback before session 65), and the log
    names the file."""
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    for damaged in ('{"x": 1}', "not JSON", '{"fingerprint": "f", "reliability": 3}', "\udcff"):
        (folder / calibration.FILE).write_text(damaged, errors="surrogateescape")
        caplog.clear()
        answers = Predictor.load(folder, device="cpu").predict("CCOc1ccccc1", method="beam", n_best=2)
        assert answers.ok and all(p.confidence is None for p in answers.predictions)
        assert str(folder / calibration.FILE) in caplog.text and "no calibrated confidence" in caplog.text


def test_a_fit_saved_with_a_byte_order_mark_is_read_and_one_nested_too_deep_is_set_aside(tmp_path, caplog):
    """A calibration.json saved by an editor that writes a UTF-8 byte-order mark (Windows Notepad) was read as text,
    refused as JSON, and the answers lost their confidence; one of arrays nested 100,000 deep raised RecursionError
    out of load. The first is read (as checkpoint.read_json reads a model's JSON: bytes), the second set aside."""
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1", "CCN(CC)CC"]
    copier = Predictor.load(folder, device="cpu")
    fitted = calibration.fit(copier, queries, [q.replace("C", "") or "O" for q in queries], method="beam",
                             n_best=3, progress=False)
    path = calibration.save(fitted, folder)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert calibration.load(folder) == fitted and calibration.recorded_fingerprint(path) == fitted.fingerprint
    path.write_bytes(b"[" * 100_000)
    assert calibration.load(folder) is None and calibration.recorded_fingerprint(path) is None
    assert f"{path} is not a calibration this version reads (ValueError: its JSON is nested too deep)" in caplog.text


def test_a_calibration_that_is_a_folder_or_cannot_be_read_is_named_and_the_query_still_answered(tmp_path, caplog,
                                                                                                  monkeypatch):
    """A folder under a calibration's name was passed over without the warning a damaged file gets (as if no fit had
    been made), and a file that could not be read (its permissions) stopped the query with a PermissionError."""
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    (folder / calibration.FILE).mkdir()
    answers = Predictor.load(folder, device="cpu").predict("CCOc1ccccc1", method="beam", n_best=2)
    assert answers.ok and all(p.confidence is None for p in answers.predictions)
    assert f"{folder / calibration.FILE} is not a file, so not a calibration" in caplog.text
    (folder / calibration.FILE).rmdir()
    (folder / calibration.FILE).write_text("{}")
    caplog.clear()

    def unreadable(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(calibration.Path, "read_bytes", unreadable)
    answers = Predictor.load(folder, device="cpu").predict("CCOc1ccccc1", method="beam", n_best=2)
    assert answers.ok and all(p.confidence is None for p in answers.predictions)
    assert f"{folder / calibration.FILE} cannot be read (Permission denied)" in caplog.text


@pytest.mark.parametrize("edit, reason", [
    ({"values": [0.2, float("nan")]}, "values must be chances"),  # showed "nan%"
    ({"values": [0.2, 1.7]}, "values must be chances"),  # showed 170%
    ({"values": [0.9, 0.1]}, "never fall"),  # a higher score read as less sure
    ({"values": [0.2, "0.8"]}, "must be numbers"),  # a string where the page formats a number
    ({"values": [0.2]}, "as many steps"),  # stopped the query: IndexError
    ({"edges": [], "values": []}, "at least one"),  # stopped the query: IndexError
    ({"edges": [-1.0, -5.0]}, "edges must rise"),
    ({"rest_edges": [-3.0], "rest_values": []}, "rest_edges"),  # stopped the query below rank 1
    ({"method": "foo"}, "unknown method"),  # stopped the query: a ValueError outside the damaged-file check
    ({"augment": 5, "pool_power": 0.25}, "in 5 writing"),  # a pooled fit named as one writing's was used for it
    # the figures the Models page shows of a fit: each stopped the page (a string formatted as a number, a row
    # of two where it unpacks three)
    ({"ece": "0.1"}, "ece must be"), ({"ece_raw": float("nan")}, "ece_raw must be"),
    ({"reliability": [[0.5, 0.5]]}, "reliability"), ({"reliability": [[0.5, "x", 2]]}, "reliability"),
    ({"ece_by_rank": [0.1]}, "ece_by_rank"), ({"n_fit": "4"}, "n_fit must be"), ({"n_check": 0}, "n_check must be"),
])
def test_a_hand_edited_calibration_is_set_aside_and_named_and_the_query_still_answered(tmp_path, caplog, edit,
                                                                                       reason):
    import json

    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    fit = {"fingerprint": calibration.weights_fingerprint(folder), "method": "beam", "n_best": 3, "n_fit": 4,
           "n_check": 2, "edges": [-5.0, -1.0], "values": [0.2, 0.8], "ece": 0.1, "ece_raw": 0.2,
           "reliability": [[0.5, 0.5, 2]]}
    (folder / calibration.FILE).write_text(json.dumps(fit))
    assert calibration.load(folder) is not None  # the fit as written is read
    (folder / calibration.FILE).write_text(json.dumps({**fit, **edit}))
    caplog.clear()
    answers = Predictor.load(folder, device="cpu").predict("CCOc1ccccc1", method="beam", n_best=2)
    assert answers.ok and answers.predictions and all(p.confidence is None for p in answers.predictions)
    assert str(folder / calibration.FILE) in caplog.text and reason in caplog.text


def test_a_fit_with_enough_answers_below_the_first_maps_them_apart_and_predict_uses_each_answers_rank(
        tmp_path, monkeypatch):
    import json

    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "data_stats": {"augment": 5}}))  # reads many writings
    copier = Predictor.load(folder, device="cpu")
    # the copy model gives these two a second, wrong answer (from one writing and pooled over two, in turn):
    # both are fitted (first four) and judged (last two)
    two_answers = {1: "CCOc1ccccc1", 2: "OCCOc1ccccc1"}
    queries = [*two_answers.values(), "NC(=O)c1ccncc1", "Brc1cccnc1OCCO", *two_answers.values()]
    targets = [q.replace("C", "") or "O" for q in queries]
    one_map = calibration.fit(copier, queries, targets, method="beam", n_best=3, progress=False)
    assert one_map.rest_edges == () and one_map.ece_by_rank[0] is not None  # too few answers below rank 1
    monkeypatch.setattr(calibration, "second_map_pays", lambda queries: True)  # too few to tell here
    for augment in (1, 2):  # one writing, and answers pooled over two
        fitted = calibration.fit(copier, queries, targets, method="beam", n_best=3, progress=False, augment=augment)
        assert fitted.rest_edges and len(fitted.rest_edges) == len(fitted.rest_values)
        assert all(e is not None and 0 <= e <= 1 for e in fitted.ece_by_rank)
        calibration.save(fitted, folder)
        reloaded = Predictor.load(folder, device="cpu")
        assert reloaded.calibration_for("beam", augment) == fitted  # the second map survives the file
        result = reloaded.predict(two_answers[augment], method="beam", n_best=3, augment=augment)
        valid = [p for p in result.in_model_order() if p.valid]
        assert len(valid) >= 2 and all(p.confidence is None for p in result.predictions if not p.valid)
        assert [p.confidence for p in valid] == [fitted.confidence(p.score, rank) for rank, p in enumerate(valid, 1)]
    assert fitted.confidence(valid[1].score, 2) != fitted.confidence(valid[1].score, 1)  # the maps differ here


def test_a_second_map_is_chosen_only_where_it_predicts_held_out_answers_better():
    rng = random.Random(1)

    def lists(rank_matters: bool) -> list[list[tuple[float, bool]]]:
        # first and second answers share their scores; where rank matters, first ones are right 80% of the
        # time and second ones 20%; where it does not, both 50%
        queries = []
        for _ in range(300):
            s1, s2 = -rng.uniform(0, 2), -rng.uniform(0, 2)
            p1, p2 = (0.8, 0.2) if rank_matters else (0.5, 0.5)
            queries.append([(s1, rng.random() < p1), (s2, rng.random() < p2)])
        return queries

    assert calibration.second_map_pays(lists(True))
    assert not calibration.second_map_pays(lists(False))
    assert not calibration.second_map_pays(lists(True)[:50])  # 50 below the first: too few
    fitted = calibration.fit_answers(lists(True), "", "beam", 2)
    assert fitted.rest_edges and fitted.confidence(-1.0, 1) > 0.6 > 0.4 > fitted.confidence(-1.0, 2)


def test_a_query_stopped_at_its_time_limit_fits_nothing_as_a_refused_one_does(caplog):
    """Its row keeps the answers beam search had (service.TIMED_OUT: unfinished ones, their scores those of a part
    of an answer), an error beside them; collect fitted them as answers, where evaluate counts the query a miss. It
    was then told as 'refused', as a query the model cannot read: it is told as stopped by the time limit."""
    from molspec_core.service import TIMED_OUT, Prediction, QueryResult

    class Stopped:  # a predictor whose every query ran out of time, beam search's best unfinished answer kept
        def predict(self, queries, **options):
            cut = Prediction(rank=1, smiles="CCO", score=-0.01, valid=True, tokens=(), provenance=(), finished=False,
                             concerns=(TIMED_OUT,), model_rank=1)
            return [QueryResult(query=q, canonical_query=q, predictions=(cut,), error="stopped after the 60 s time "
                                "limit per query") for q in queries]

    with caplog.at_level("WARNING", logger="molspec_core.calibration"):
        assert calibration.collect(Stopped(), ["CCOC", "CCOCC"], ["CCOC", "CCO"], "beam", 1, progress=False,
                                   time_limit_s=60) == [[], []]
    # left out of the fit without a word, where evaluate counts and names them: the slowest queries, most often
    assert caplog.messages == ["2 of 2 queries were stopped by the time limit (60 s a query) before their search "
                               "ended: no answer of theirs fits or judges (the first, query 1 of those decoded); a "
                               "longer time limit decodes them whole"]
    caplog.clear()  # one of them: in the singular (it read '1 of 2 queries were stopped ... decodes them whole')
    with caplog.at_level("WARNING", logger="molspec_core.calibration"):
        calibration.collect(Stopped(), ["CCOC"], ["CCOC"], "beam", 1, progress=False, time_limit_s=60)
    assert caplog.messages == ["1 of 1 query was stopped by the time limit (60 s a query) before its search ended: "
                               "none of its answers fits or judges (query 1 of those decoded); a longer time limit "
                               "decodes it whole"]


def test_refused_queries_are_counted_in_words_that_fit_their_number(caplog):
    """One refused query of three was told '1 of 3 queries were refused: no answer of theirs fits or judges (the
    first, query 2 ...)'."""
    from molspec_core.service import QueryResult

    class Refusing:  # a predictor that cannot read the queries holding Xe (a refused query is never read)
        def predict(self, queries, **options):
            return [QueryResult(query=q, predictions=(), error="token '[Xe]' is not read")
                    if "Xe" in q else QueryResult(query=q, canonical_query=q, predictions=()) for q in queries]

    for sources, told in ((["CCO", "C[Xe]", "CCN"], "1 of 3 queries was refused: none of its answers fits or judges "
                           "(query 2 of those decoded: token '[Xe]' is not read)"),
                          (["CCO", "C[Xe]", "CC[Xe]"], "2 of 3 queries were refused: no answer of theirs fits or "
                           "judges (the first, query 2 of those decoded: token '[Xe]' is not read)")):
        caplog.clear()
        with caplog.at_level("WARNING", logger="molspec_core.calibration"):
            calibration.collect(Refusing(), sources, ["CCO"] * 3, "beam", 1, progress=False)
        assert caplog.messages == [told]


def test_a_target_rdkit_cannot_read_leaves_its_query_out_of_the_fit_and_is_counted(caplog):
    """Its answers were fitted as wrong, right or not: a validation file with a few such targets made every
    confidence lower than it should be, without a word."""
    from molspec_core.service import Prediction, QueryResult

    class Echo:  # a predictor that answers each query with itself
        def predict(self, queries, **options):
            return [QueryResult(query=q, canonical_query=q, predictions=(Prediction(
                rank=1, smiles=q, score=-0.1, valid=True, tokens=(), provenance=(), model_rank=1),)) for q in queries]

    with caplog.at_level("WARNING", logger="molspec_core.calibration"):
        answers = calibration.collect(Echo(), ["CCO", "CCN", "CCC"], ["CCO", "C1CC", "CCN"], "beam", 1, progress=False)
    assert answers == [[(-0.1, True)], [], [(-0.1, False)]]
    assert caplog.messages == ["1 of 3 targets is a SMILES RDKit cannot read: its query is left out (whether its "
                               "answers are right is not known)"]
    with pytest.raises(ValueError, match="none of the 2 targets is a SMILES RDKit reads"):
        calibration.collect(Echo(), ["CCO", "CCN"], ["C1CC", "x"], "beam", 1, progress=False)


def test_a_fit_counts_the_queries_whose_answers_fitted_and_judged_it():
    """Refused queries and unreadable targets give no answers (collect: []), yet were counted as fitting queries."""
    answers = [[(-0.1, True)], [], [(-0.5, False), (-2.0, False)], [], [(-0.2, True)], []]
    fitted = calibration.fit_answers(answers, "", "beam", 2)
    assert (fitted.n_fit, fitted.n_fit_answered, fitted.fitted_on) == (4, 2, 2)
    assert (fitted.n_check, fitted.n_check_answered, fitted.judged_on) == (2, 1, 1)
    older = dataclasses.replace(fitted, n_fit_answered=None, n_check_answered=None)  # a file from before the counts
    assert (older.fitted_on, older.judged_on) == (4, 2)
    calibration.check_figures(older)
    with pytest.raises(ValueError, match="n_fit_answered must be at most n_fit"):
        calibration.check_figures(dataclasses.replace(fitted, n_fit_answered=5))


def test_a_stopped_collection_keeps_the_answers_of_the_queries_decoded():
    """A stop (Ctrl-C) lost every query decoded: what is raised carries their answers (`collected`), those of the
    first queries; read in several writings, each query is handed over alone (service.window_size), so the
    answers of every query decoded before the stop, not of the 256-query windows done, are kept."""
    from molspec_core.service import Prediction, QueryResult

    class StopsAtFourth:  # answers each query with itself, and meets Ctrl-C on its fourth call
        calls = 0

        def predict(self, queries, **options):
            self.calls += 1
            if self.calls == 4:
                raise KeyboardInterrupt
            return [QueryResult(query=q, canonical_query=q, predictions=(Prediction(
                rank=1, smiles=q, score=-0.1, valid=True, tokens=(), provenance=(), model_rank=1),)) for q in queries]

    sources = ["CCO", "CCN", "CCC", "CCCO", "CCCN"]
    with pytest.raises(KeyboardInterrupt) as stopped:
        calibration.collect(StopsAtFourth(), sources, sources, "beam", 1, progress=False, augment=5)
    assert stopped.value.collected == [[(-0.1, True)]] * 3


def test_a_collection_stopped_by_ctrl_c_keeps_the_queries_of_its_window_done():
    """Ctrl-C while a window of queries (up to 256) was decoding lost every batch of it decoded by then. The stop ends
    the batch being decoded, and the first queries done are kept: here the queries are in order of length, as predict
    decodes them, so the four of the first two batches (the third meets the stop)."""
    import signal

    copier = Predictor.load(FIXTURES / "copy_model", device="cpu")
    sources = ["c1ccncc1", "CCOc1ccccc1", "CCOc1ccncc1", "Brc1cccnc1OCCO", "NC(=O)c1ccncc1"]
    targets = [source.replace("C", "") for source in sources]  # the copy model's answers, each one RDKit reads
    with pytest.MonkeyPatch.context() as monkeypatch:
        signal_at_decode(monkeypatch, signal.SIGINT, at=3)
        with pytest.raises(KeyboardInterrupt) as stopped:
            calibration.collect(copier, sources, targets, "beam", 2, batch_size=2, progress=False)
    whole = calibration.collect(copier, sources[:4], targets[:4], "beam", 2, batch_size=2, progress=False)
    assert stopped.value.collected == whole and len(whole) == 4 and all(whole)  # each query with its answers


def test_too_few_queries_are_refused():
    copier = Predictor.load(FIXTURES / "copy_model", device="cpu")
    with pytest.raises(ValueError, match="at least 3 queries"):
        calibration.fit(copier, ["CCO"], ["O"], progress=False)


# ---- one fit per kind of answers (session 43: the beam fit misjudged greedy's pooled answers) -----------

def test_each_method_takes_the_fit_made_for_its_answers():
    assert {m: calibration.kind_of(m) for m in ("greedy", "spec-auto", "spec-pointer", "spec-paper", "greedy-uncached",
                                                "beam", "sbs-exact", "beam-uncached", "sbs", "relaxed", "sample",
                                                "spec-sample", "mentored")} == {
        "greedy": "greedy", "spec-auto": "greedy", "spec-pointer": "greedy", "spec-paper": "greedy",
        "greedy-uncached": "greedy", "beam": "beam", "sbs-exact": "beam", "beam-uncached": "beam",
        "sbs": None, "relaxed": None, "sample": None, "spec-sample": None, "mentored": None}
    assert [calibration.file_name(a, k) for k in ("beam", "greedy") for a in (1, 5)] == [
        "calibration.json", "calibration.augment5.json", "calibration.greedy.json", "calibration.greedy.augment5.json"]
    with pytest.raises(ValueError, match="sampled or lossy"):
        calibration.require_kind("relaxed")


def test_greedy_and_beam_answers_get_their_own_fit(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    copier = Predictor.load(folder, device="cpu")
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1", "CCN(CC)CC"]
    targets = [q.replace("C", "") or "O" for q in queries]
    beam_fit = calibration.fit(copier, queries, targets, method="beam", n_best=3, progress=False)
    calibration.save(beam_fit, folder)
    reloaded = Predictor.load(folder, device="cpu")
    assert reloaded.predict("CCOc1ccccc1", method="beam", n_best=3).predictions[0].confidence is not None
    for method in ("greedy", "spec-auto", "sample", "relaxed"):  # no fit for their answers: no confidence
        answers = reloaded.predict("CCOc1ccccc1", method=method).predictions
        assert answers and all(p.confidence is None for p in answers), method
    greedy_fit = calibration.fit(copier, queries, targets, method="spec-auto", n_best=1, progress=False)
    assert calibration.save(greedy_fit, folder).name == "calibration.greedy.json"
    reloaded = Predictor.load(folder, device="cpu")
    assert reloaded.calibration_for("greedy") == reloaded.calibration_for("spec-pointer") == greedy_fit
    assert reloaded.calibration_for("beam") == beam_fit and reloaded.calibration_for("sample") is None
    greedy_answer = reloaded.predict("CCOc1ccccc1", method="spec-pointer").predictions[0]
    assert greedy_answer.confidence == greedy_fit.confidence(greedy_answer.score)
    # a beam fit under greedy's file name is not used for greedy's answers
    (folder / "calibration.greedy.json").write_text((folder / "calibration.json").read_text())
    assert calibration.load(folder, 1, "greedy") is None


def test_a_beam_of_width_one_takes_greedys_fit_as_it_gives_greedys_answer(tmp_path):
    """The sidebar's beam width 1 gave greedy's answers with beam's fit, made on lists of 5 or 10: in 5 writings
    it stated them far less sure than they were (session 80: ECE 0.101 forward, 0.180 retro; greedy's fit 0.031,
    0.046)."""
    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    fingerprint = calibration.weights_fingerprint(folder)
    beam_fit, greedy_fit = (calibration.Calibration(fingerprint, method, n_best, 4, 2, (-100.0,), (chance,), 0, 0, ())
                            for method, n_best, chance in (("beam", 5, 0.1), ("spec-auto", 1, 0.7)))
    assert [calibration.save(fit, folder).name for fit in (beam_fit, greedy_fit)] == [
        "calibration.json", "calibration.greedy.json"]
    predictor = Predictor.load(folder, device="cpu")
    for n_best, fit in ((1, greedy_fit), (2, beam_fit)):
        answer = predictor.predict("CCOc1ccccc1", method="beam", n_best=n_best).predictions[0]
        assert answer.valid and answer.confidence == fit.confidence(answer.score), n_best
    # calibrate writes a fit of beam width 1 as greedy's, and it is read as greedy's
    width_one = dataclasses.replace(beam_fit, n_best=1)
    assert calibration.path_of(folder, 1, "beam", 1).name == calibration.save(width_one, folder).name == \
        "calibration.greedy.json"
    assert calibration.load(folder, 1, "greedy") == width_one


@pytest.mark.parametrize("name", ["forward", "retro"])
def test_shipped_models_carry_every_fit_the_app_uses_for_their_weights(name):
    """Beam search's and greedy's answers, from one writing and pooled over 5: a model shipped with new
    weights but old fits would show no confidence (the fits' fingerprints no longer match)."""
    from conftest import ROOT

    folder = ROOT / "models" / name
    for kind in ("beam", "greedy"):
        for augment in (1, 5):
            fit = calibration.load(folder, augment, kind)
            assert fit is not None, calibration.file_name(augment, kind)
            assert fit.augment == augment and calibration.kind_of(fit.method) == kind
