"""tools/stereo_check.py's report: written compactly, read back the same, and two reports compared reaction by
reaction (the decoding itself needs the shipped model and USPTO-50K: the tool's own run)."""
import json

import pytest

from conftest import load_tool


@pytest.fixture(scope="module")
def tool():
    return load_tool("stereo_check")


def report(kept: list[int], created: list[int], none: list[int]) -> dict:
    groups = {name: {"n": len(each), "first_exact": sum(each), "lines": list(range(len(each))),
                     "first_exact_each": each} for name, each in (("kept", kept), ("created", created), ("none", none))}
    return {"model": "forward", "augment": 5, **groups}


def test_the_report_reads_back_the_same_with_each_list_on_one_line(tool):
    r = report([1, 0, 1], [0], [1, 1])
    text = tool.report_text(r)
    assert json.loads(text) == r
    assert '"first_exact_each": [1, 0, 1]' in text


def test_two_reports_are_compared_reaction_by_reaction(tool):
    old = report([1] * 10 + [0] * 5, [0, 0], [1, 1, 0])
    new = report([0] * 8 + [1] * 2 + [0] * 5, [0, 1], [1, 1, 0])
    got = tool.paired(old, new)
    assert (got["kept"]["only_old"], got["kept"]["only_new"]) == (8, 0)
    assert got["kept"]["p"] == pytest.approx(2 / 2 ** 8)
    assert (got["created"]["only_old"], got["created"]["only_new"], got["created"]["p"]) == (0, 1, 1.0)
    assert got["none"] == {"only_old": 0, "only_new": 0, "p": 1.0}


def test_reports_on_other_reactions_are_refused(tool):
    old, new = report([1, 0], [0], [1]), report([1, 0], [0], [1])
    new["kept"]["lines"] = [0, 2]
    with pytest.raises(ValueError, match="kept"):
        tool.paired(old, new)


def test_reactions_fall_in_groups_by_the_stereo_of_the_known_answer_and_of_the_query(tool):
    reactants = ["C[C@H](N)C(=O)O.CC(=O)Cl", "CC(=O)C=C", "CCO.CC(=O)O", "C[C@@H](O)CC.CC(=O)Cl"]
    products = ["C[C@H](NC(C)=O)C(=O)O", "C[C@H](O)C=C", "CCOC(C)=O", "CC[C@@H](C)OC(C)=O"]
    forward = tool.group_lines(reactants, products, seen=set())
    assert forward == {"kept": [0, 3], "created": [1], "none": [2]}
    assert tool.group_lines(reactants, products, seen={"CCOC(C)=O", "CC[C@@H](C)OC(C)=O"}) == {
        "kept": [0], "created": [1], "none": []}
    # retro: the product is the query, the reactants the answer
    assert tool.group_lines(products, reactants, seen=set()) == {"kept": [0, 3], "created": [], "none": [1, 2]}


def test_an_earlier_reports_reactions_are_decoded_again_unless_a_fine_tune_trained_on_them(tool):
    earlier = report([1, 0], [0], [1])  # lines 0 and 1 kept, 0 created, 0 none
    earlier["created"]["lines"], earlier["none"]["lines"] = [2], [3]
    knowns = ["C[C@H](O)CC", "CC[C@@H](C)O", "C[C@H](O)C=C", "CCO"]
    assert tool.lines_of(earlier, knowns, seen={"CCC"}) == {"kept": [0, 1], "created": [2], "none": [3]}
    with pytest.raises(ValueError, match="1 of the reactions"):
        tool.lines_of(earlier, knowns, seen={"CCO"})


class NoModel:
    @staticmethod
    def load(*args, **kwargs):
        raise AssertionError("a model was loaded: the run went past its checks")


@pytest.mark.parametrize("flag", ["--against", "--lines-from"])
def test_a_report_of_another_task_or_other_reactions_is_one_error_line(tool, flag, tmp_path, monkeypatch, capsys):
    """A forward report given to a retro run (or one of other reactions) ended in a ValueError's traceback."""
    test = tmp_path / "gln_test"
    test.mkdir()
    (test / "reactants.txt").write_text("C[C@H](N)C(=O)O.CC(=O)Cl\nCCO.CC(=O)O\n")
    (test / "products.txt").write_text("C[C@H](NC(C)=O)C(=O)O\nCCOC(C)=O\n")
    monkeypatch.setattr(tool, "Predictor", NoModel)
    forward = {**report([1], [], [1]), "task": "forward", "test": "gln_test", "left_out_as_trained_on": 0}
    forward["none"]["lines"] = [1]
    for old, said in (({**forward}, "is a forward report, and this run is retro"),
                      ({key: value for key, value in forward.items() if key != "task"},  # written before --task
                       "is a forward report, and this run is retro"),
                      ({**forward, "task": "retro", "test": "other_test"},
                       "decoded other_test, and this run decodes gln_test")):
        (tmp_path / "old.json").write_text(json.dumps(old))
        monkeypatch.setattr("sys.argv", ["stereo_check.py", "--task", "retro", "--test", str(test), flag,
                                         str(tmp_path / "old.json")])
        with pytest.raises(SystemExit) as stop:
            tool.main()
        err = capsys.readouterr().err
        assert stop.value.code == 2 and f"{flag} {tmp_path / 'old.json'} {said}" in err, err
    if flag == "--against":  # the same task and test, other reactions: refused before any decoding, in one line
        retro = {**forward, "task": "retro"}
        retro["kept"]["lines"] = [5]
        (tmp_path / "old.json").write_text(json.dumps(retro))
        with pytest.raises(SystemExit) as stop:
            tool.main()
        assert stop.value.code == 2 and "decoded other reactions in group 'kept'" in capsys.readouterr().err


def test_the_report_names_the_weights_and_the_code_that_made_it(tool, tmp_path, monkeypatch):
    """Reports (bench/accuracy/*stereo*) named the model by the path it was given (runs/cpu_fwd40/export, 'forward'),
    which later held other weights, and no code version; evaluate's and bench's reports record both."""
    from types import SimpleNamespace

    from conftest import FIXTURES
    from molspec_core.calibration import weights_fingerprint

    test = tmp_path / "gln_test"
    test.mkdir()
    (test / "reactants.txt").write_text("C[C@H](N)C(=O)O.CC(=O)Cl\nCCO.CC(=O)O\n")
    (test / "products.txt").write_text("C[C@H](NC(C)=O)C(=O)O\nCCOC(C)=O\n")

    class Stand:  # a Predictor that answers nothing, with the copy model's folder for its weights
        path = FIXTURES / "copy_model"

        @classmethod
        def load(cls, *args, **kwargs):
            return cls()

        def predict(self, queries, **options):
            return [SimpleNamespace(ok=True, predictions=[]) for _ in queries]

        def check_augment(self, augment):  # reads the default 5 writings
            pass

    monkeypatch.setattr(tool, "Predictor", Stand)
    monkeypatch.setattr("sys.argv", ["stereo_check.py", "--task", "retro", "--test", str(test), "--out",
                                     str(tmp_path / "r.json")])
    tool.main()
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["weights"] == weights_fingerprint(FIXTURES / "copy_model") and "commit" in saved
    assert saved["command"].endswith(f"--out {tmp_path / 'r.json'}")
