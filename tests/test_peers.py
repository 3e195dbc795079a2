"""The CTranslate2 peer: our weights converted with its spec API decode like our own decoders."""
import shutil
import signal

import pytest

from conftest import FIXTURES, random_model

ctranslate2 = pytest.importorskip("ctranslate2",
                                  reason="the CTranslate2 peer is an optional extra: pip install -e .[peers]")

from molspec_core import checkpoint  # noqa: E402
from molspec_core.bench import run_bench  # noqa: E402
from molspec_core.decoding.beam import beam_search  # noqa: E402
from molspec_core.decoding.greedy import greedy  # noqa: E402
from molspec_core.drafting import NullDrafter  # noqa: E402
from molspec_core.peers import SOURCE_FILE, CTranslate2Peer, PeerError, convert_to_ctranslate2  # noqa: E402
from molspec_core.service import Predictor  # noqa: E402
from molspec_core.tokenizer import Vocab  # noqa: E402

QUERIES = ["CCO", "CC(=O)Cl.NCc1ccccc1", "c1ccncc1Br", "CC(C)(C)OC(=O)N1CCC(CO)CC1"]


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
    """A random tiny model (not a copier: its outputs are long and varied) saved as a model folder."""
    folder = tmp_path_factory.mktemp("random_model")
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "C", "O", "N", "(", ")", "=", "1", "c", "Cl", "Br"])
    checkpoint.save(random_model(7, len(vocab)), vocab, folder, meta={"task": "forward"})
    return folder


@pytest.mark.parametrize("folder", ["copy", "random"])
def test_converted_model_decodes_greedy_and_beam_like_ours(folder, random_checkpoint, tmp_path):
    model_dir = FIXTURES / "copy_model" if folder == "copy" else random_checkpoint
    model, vocab, _ = checkpoint.load(model_dir)
    peer = CTranslate2Peer(convert_to_ctranslate2(model_dir, tmp_path / "ct2"), max_positions=model.cfg.max_positions)
    sources = [[4, 5, 6, 4, 4], [11, 11, 12, 7, 4, 8, 9, 5], [13, 4, 4, 6], [10, 11, 11, 11, 11, 11, 10]]
    for src in sources:
        ours = greedy(model, [src], NullDrafter)[0].hypotheses[0]
        theirs = peer.decode([vocab.tokens[i] for i in src])[0]
        assert theirs.tokens == tuple(vocab.tokens[i] for i in ours.tokens)
        assert theirs.score == pytest.approx(ours.score, abs=1e-3)
        best = beam_search(model, [src], 3)[0].hypotheses[0]
        top = peer.decode([vocab.tokens[i] for i in src], width=3, n_best=3)[0]
        assert top.tokens == tuple(vocab.tokens[i] for i in best.tokens)


@pytest.mark.parametrize("folder", ["copy", "random"])
def test_a_batch_decodes_as_each_of_its_queries_alone(folder, random_checkpoint, tmp_path):
    """A batch (bench --batch-size) goes to CTranslate2 as one batch, in order; each query's answers are those it
    gets alone (the copy model's end at their query's length; the random model's run to the length budget, alike
    here for queries of one length: decode_timed takes the longest query's budget for the whole batch)."""
    model_dir = FIXTURES / "copy_model" if folder == "copy" else random_checkpoint
    model, _, _ = checkpoint.load(model_dir)
    peer = CTranslate2Peer(convert_to_ctranslate2(model_dir, tmp_path / "ct2"), max_positions=model.cfg.max_positions)
    varied = [["C", "C", "O"], ["c", "1", "c", "c", "c", "c", "c", "1", "Br"], ["N", "C", "=", "O"]]
    alike = [["C", "O", "N", "C", "C"], ["c", "c", "Cl", "(", "C"], ["Br", "C", "C", "N", "O"]]
    sources = varied if folder == "copy" else alike
    for width in (1, 3):
        batch, seconds = peer.decode_timed(sources, width=width, n_best=width)
        assert len(batch) == len(sources) and seconds > 0
        assert [[(h.tokens, round(h.score, 3)) for h in hypotheses] for hypotheses in batch] == \
            [[(h.tokens, round(h.score, 3)) for h in peer.decode(src, width, width)] for src in sources]
        if folder == "copy":  # answers of several lengths, each its own query's
            assert len({len(hypotheses[0].tokens) for hypotheses in batch}) == len(sources)


def test_bench_times_the_peer_beside_our_methods_and_reports_agreement(tmp_path):
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    ct2_dir = convert_to_ctranslate2(predictor.path, tmp_path / "ct2")
    report = run_bench(predictor, QUERIES, None, ["spec-lookup", "ct2-greedy", "ct2-int8-greedy"], warmup=1,
                       progress=False, ct2_dir=ct2_dir)
    methods = report["methods"]
    assert methods["ct2-greedy"]["identical_to_greedy"] == 1.0  # float32: the same tokens as our greedy
    assert 0.0 <= methods["ct2-int8-greedy"]["identical_to_greedy"] <= 1.0
    for name in ("greedy", "spec-lookup"):
        assert methods[name]["speedup_vs_ct2_greedy"] > 0 and methods[name]["speedup_vs_ct2_int8_greedy"] > 0
    beams = run_bench(predictor, QUERIES, None, ["beam", "ct2-beam"], n_best=3, warmup=0, progress=False,
                      ct2_dir=ct2_dir)
    assert (beams["methods"]["beam"]["speedup_vs_ct2_beam"] > 0
            and "speedup_vs_ct2_greedy" not in beams["methods"]["beam"])
    batched = run_bench(predictor, QUERIES, None, ["spec-lookup", "ct2-greedy", "beam", "ct2-beam"], batch_size=3,
                        n_best=3, warmup=0, progress=False, ct2_dir=ct2_dir)  # batches of 3 and 1, on both engines
    assert batched["batch_size"] == 3 and batched["n_queries"] == report["n_queries"] == 3
    assert batched["methods"]["ct2-greedy"]["identical_to_greedy"] == 1.0
    assert batched["methods"]["ct2-beam"]["identical_to_beam"] == 1.0


def test_peer_methods_without_a_conversion_are_refused():
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    with pytest.raises(ValueError, match="CTranslate2"):
        run_bench(predictor, QUERIES, None, ["ct2-greedy"], warmup=0, progress=False)


def test_cli_bench_with_peer_adds_the_matching_ctranslate2_methods(tmp_path):
    from molspec_core.cli import main

    src = tmp_path / "src.txt"
    src.write_text("\n".join(QUERIES) + "\n")
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", str(FIXTURES / "copy_model"), "--src", str(src),
                 "--methods", "spec-lookup,sbs-exact", "--beam-width", "3", "--warmup", "0", "--peer", "ctranslate2",
                 "--out", str(out)]) == 0
    import json

    methods = json.loads(out.read_text())["methods"]
    assert {"ct2-greedy", "ct2-int8-greedy", "ct2-beam", "ct2-int8-beam"} <= set(methods)
    assert methods["ct2-greedy"]["identical_to_greedy"] == 1.0 and "speedup_vs_ct2_beam" in methods["sbs-exact"]


@pytest.mark.parametrize("policy", [None, "active"])
def test_cli_bench_warns_of_spinning_openmp_threads_beside_the_peer(tmp_path, monkeypatch, caplog, policy):
    """With several threads, OMP_WAIT_POLICY=active would keep our idle threads spinning while the peer's
    process decodes (PEER_THREADS_WARNING); the report records our policy and each peer's own."""
    import json

    import torch

    from molspec_core.cli import PEER_THREADS_WARNING, main

    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    src = tmp_path / "src.txt"
    src.write_text("\n".join(QUERIES[:2]) + "\n")
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()
    try:
        with caplog.at_level("WARNING"):
            assert main(["bench", "--model", str(FIXTURES / "copy_model"), "--src", str(src), "--methods", "greedy",
                         "--warmup", "0", "--threads", "2", "--peer", "ctranslate2", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert (PEER_THREADS_WARNING in caplog.text) == (policy == "active")
    report = json.loads(out.read_text())
    assert report["omp_wait_policy"] == policy
    assert report["peers"]["ct2-greedy"]["omp_wait_policy"] is None and report["peers"]["ct2-greedy"]["threads"] == 2
    assert report["peers"]["ct2-int8-greedy"]["omp_wait_policy"] == "active"
    # The peer at its own thread count (CTranslate2 int8 at batch size 1 may be fastest on one).
    assert main(["bench", "--model", str(FIXTURES / "copy_model"), "--src", str(src), "--methods", "greedy",
                 "--warmup", "0", "--peer", "ctranslate2", "--peer-threads", "1", "--out", str(out)]) == 0
    assert {peer["threads"] for peer in json.loads(out.read_text())["peers"].values()} == {1}


def test_the_peer_decodes_in_a_process_of_its_own_without_torch_and_stopped_between_requests(tmp_path):
    """Beside torch and our engine CTranslate2 ran several times slower (peer_worker.py): its process
    must not load torch, must rest stopped while our methods run, and must end with the peer."""
    import os
    import signal

    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"), "int8", 2)
    pid = peer._process.pid
    try:
        (hypotheses,), seconds = peer.decode_timed([["C", "C", "O"]], width=2, n_best=2)
        assert len(hypotheses) == 2 and 0 < seconds < 60
        if hasattr(signal, "SIGSTOP"):
            assert open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T"  # stopped
        maps = open(f"/proc/{pid}/maps").read()
        assert "libtorch" not in maps and "ctranslate2" in maps.lower()
        assert open(f"/proc/{pid}/environ").read().split("\0").count("OMP_WAIT_POLICY=active") == 1
    finally:
        peer.close()
    assert peer._process.poll() is not None and not os.path.exists(f"/proc/{pid}/maps")


class _AfterWrite:
    """The peer's stdin, doing `action` once a request is written (a crash, a hang, a Ctrl-C mid-request)."""

    def __init__(self, stream, action):
        self.stream, self.action = stream, action

    def write(self, data):
        return self.stream.write(data)

    def flush(self):
        self.stream.flush()
        self.action()

    def close(self):
        self.stream.close()


def signal_after_write(peer, signum):
    peer._process.stdin = _AfterWrite(peer._process.stdin, lambda: peer._process.send_signal(signum))


def test_a_peer_process_that_dies_during_a_request_says_so(tmp_path):
    """A peer killed mid-request (out of memory, a crash) raised ChildProcessError from the pause that followed;
    the error says the process ended and how, and a later request says the same."""
    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"))
    try:
        signal_after_write(peer, signal.SIGKILL)
        with pytest.raises(PeerError, match="peer process ended .killed by SIGKILL"):
            peer.decode(["C", "C", "O"])
        with pytest.raises(PeerError, match="peer process ended .killed by SIGKILL"):
            peer.decode(["C", "C", "O"])
    finally:
        peer.close()


def test_a_peer_process_killed_between_requests_says_how_it_ended(tmp_path):
    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"))
    try:
        peer._process.kill()
        with pytest.raises(PeerError, match="peer process ended .killed by SIGKILL"):
            peer.decode(["C", "C", "O"])
    finally:
        peer.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_peer_process_that_ends_as_a_request_is_sent_says_so_and_closes_quietly(tmp_path):
    """The request it never read stayed in the pipe's buffer, and closing the peer raised BrokenPipeError
    (printed as an exception ignored in a finalizer)."""
    import os

    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"))

    def end():  # instead of resuming it: killed, and waited for (without collecting it) so that the write fails
        peer._process.kill()
        os.waitid(os.P_PID, peer._process.pid, os.WEXITED | os.WNOWAIT)

    peer._resume = end
    with pytest.raises(PeerError, match="peer process ended .killed by SIGKILL"):
        peer.decode(["C", "C", "O"])
    peer.close()


def test_a_peer_that_gives_no_answer_is_ended_after_its_time_limit(tmp_path):
    """A hung peer (here: left stopped, as it rests between requests) left bench waiting for ever."""
    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"))
    peer.timeout_s = 1  # once started (its start may take longer on a busy machine)
    try:
        peer._resume = lambda: None
        with pytest.raises(PeerError, match="gave no answer in 1 s"):
            peer.decode(["C", "C", "O"])
        assert peer._process.poll() is not None
        with pytest.raises(PeerError, match="takes no more requests: it gave no answer in 1 s"):
            peer.decode(["C", "C", "O"])
    finally:
        peer.close()


def ctrl_c():
    raise KeyboardInterrupt


def test_a_request_interrupted_by_ctrl_c_is_not_answered_by_the_next(tmp_path):
    """Stopped by Ctrl-C while the peer decoded, the next request read the answer the first was owed (the answers
    one query off, silently); the peer ends its process and refuses further requests."""
    peer = CTranslate2Peer(convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2"))
    try:
        first = peer.decode(["C", "C", "O"])
        stdin = peer._process.stdin
        peer._process.stdin = _AfterWrite(stdin, ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            peer.decode(["N", "C", "C", "C", "C", "N"])
        peer._process.stdin = stdin
        with pytest.raises(PeerError, match="takes no more requests: a request to it was interrupted"):
            assert peer.decode(["C", "C", "O"]) == first
    finally:
        peer.close()


def test_a_peer_without_ctranslate2_in_its_process_says_so(tmp_path, monkeypatch):
    """CTranslate2 missing where the peer's process runs: its error, not the lines of a traceback."""
    ct2_dir = convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2")
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ctranslate2.py").write_text("raise ImportError('No module named ctranslate2')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    with pytest.raises(PeerError, match=r"^CTranslate2: cannot load .*ImportError: No module named ctranslate2$"):
        CTranslate2Peer(ct2_dir)


def test_a_model_with_a_setting_the_conversion_does_not_map_is_refused(tmp_path, monkeypatch):
    """A model setting the converter does not know (a new ModelConfig field, say its activation) was converted as
    if the model had none: another model, decoded silently as the peer."""
    import dataclasses

    from molspec_core import peers
    from molspec_core.model import ModelConfig

    load = checkpoint.load
    Gelu = dataclasses.make_dataclass("Gelu", [("activation", str, "gelu")], bases=(ModelConfig,), frozen=True)

    def load_with_a_new_setting(folder):
        model, vocab, config = load(folder)
        model.cfg = Gelu(**model.cfg.to_dict())
        return model, vocab, config

    monkeypatch.setattr(peers.checkpoint, "load", load_with_a_new_setting)
    with pytest.raises(ValueError, match=r"does not know the model settings \['activation'\]"):
        convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_converting_into_a_folder_that_is_no_conversion_is_refused_and_leaves_it_alone(tmp_path):
    """Converting into the model folder itself wrote model.bin (a pickle suffix: the folder was refused from then
    on) and CTranslate2's config.json over the model's."""
    model_dir = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model_dir)
    before = {path.name: path.read_bytes() for path in model_dir.iterdir()}
    with pytest.raises(ValueError, match="not a CTranslate2 conversion .* left as it is"):
        convert_to_ctranslate2(model_dir, model_dir)
    assert {path.name: path.read_bytes() for path in model_dir.iterdir()} == before
    checkpoint.load(model_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (convert_to_ctranslate2(model_dir, empty) / "model.bin").is_file()


def test_a_conversion_of_other_weights_is_refused_and_converting_again_replaces_it(random_checkpoint, tmp_path):
    """A stale conversion (another model's, or these weights' before they changed) decoded silently as the peer."""
    ct2_dir = convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2")
    with pytest.raises(ValueError, match="converted from other weights .*copy_model"):
        CTranslate2Peer(ct2_dir, model_dir=random_checkpoint)
    assert convert_to_ctranslate2(random_checkpoint, ct2_dir) == ct2_dir
    peer = CTranslate2Peer(ct2_dir, model_dir=random_checkpoint)
    try:
        model, vocab, _ = checkpoint.load(random_checkpoint)
        ours = greedy(model, [[4, 5, 6]], NullDrafter)[0].hypotheses[0]
        assert peer.decode(["C", "O", "N"])[0].tokens == tuple(vocab.tokens[i] for i in ours.tokens)
        assert peer.max_positions == model.cfg.max_positions  # the converted model's own
    finally:
        peer.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]  # nothing left beside it


def test_weights_replaced_while_converting_do_not_pass_as_the_converted_ones(random_checkpoint, tmp_path, monkeypatch):
    """A training run exporting into the model folder as it is converted: the conversion holds the weights it read,
    and was labelled with the new ones."""
    from molspec_core import peers

    model_dir = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model_dir)
    load = checkpoint.load

    def load_then_export(folder):
        loaded = load(folder)
        model, vocab, _ = load(random_checkpoint)
        checkpoint.save(model, vocab, model_dir, meta={"task": "forward"})
        return loaded

    monkeypatch.setattr(peers.checkpoint, "load", load_then_export)
    ct2_dir = convert_to_ctranslate2(model_dir, tmp_path / "ct2")
    monkeypatch.setattr(peers.checkpoint, "load", load)
    with pytest.raises(ValueError, match="converted from other weights"):
        CTranslate2Peer(ct2_dir, model_dir=model_dir)


def test_an_interrupted_conversion_leaves_the_earlier_one_whole(random_checkpoint, tmp_path, monkeypatch):
    """Stopped while writing model.bin, a conversion left the new vocabulary beside a cut model.bin and the old
    config.json; the peer started on it."""
    from ctranslate2.specs import model_spec

    ct2_dir = convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2")
    before = {path.name: path.read_bytes() for path in ct2_dir.iterdir()}

    def cut(self, path):
        with open(path, "wb") as f:
            f.write(b"\0" * 100)
        raise KeyboardInterrupt

    monkeypatch.setattr(model_spec.ModelSpec, "_serialize", cut)
    for out in (ct2_dir, tmp_path / "fresh"):
        with pytest.raises(KeyboardInterrupt):
            convert_to_ctranslate2(random_checkpoint, out)
    assert {path.name: path.read_bytes() for path in ct2_dir.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]
    half = tmp_path / "half"  # a folder cut short by other means (a copy, a kill) has no SOURCE_FILE
    shutil.copytree(ct2_dir, half)
    (half / SOURCE_FILE).unlink()
    with pytest.raises(ValueError, match="not a whole CTranslate2 conversion"):
        CTranslate2Peer(half)


def test_cli_bench_reports_a_peer_that_dies_as_one_error_line(tmp_path, monkeypatch, capsys):
    """A peer process killed mid-run (out of memory) ended `molspec bench` with a traceback; it is one error line
    and exit 2, and the table keeps our own methods' figures."""
    from molspec_core.cli import main

    monkeypatch.setattr(CTranslate2Peer, "_resume", lambda peer: peer._process.kill())
    src = tmp_path / "src.txt"
    src.write_text("\n".join(QUERIES[:2]) + "\n")
    assert main(["bench", "--model", str(FIXTURES / "copy_model"), "--src", str(src), "--methods", "greedy",
                 "--warmup", "0", "--peer", "ctranslate2"]) == 2
    out, err = capsys.readouterr()
    assert "error: the CTranslate2 peer process ended (killed by SIGKILL)" in err and "ct2-greedy is left out" in err
    assert "| greedy |" in out


def test_the_peer_reads_a_source_past_1024_tokens_whole(tmp_path):
    """CTranslate2 cuts a source at 1,024 tokens unless told not to; our encoder reads all of it (a model of more
    positions): the peer's answer must score under our model as the peer scored it."""
    import torch

    from molspec_core.model import Seq2SeqTransformer, preset
    from molspec_core.tokenizer import BOS_ID, EOS_ID

    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "C", "O", "N", "(", ")", "=", "1", "c", "Cl", "Br"])
    torch.manual_seed(0)
    checkpoint.save(Seq2SeqTransformer(preset("tiny", len(vocab), max_positions=1100)).eval(), vocab, tmp_path / "m")
    model, vocab, _ = checkpoint.load(tmp_path / "m")
    peer = CTranslate2Peer(convert_to_ctranslate2(tmp_path / "m", tmp_path / "ct2"))
    try:
        src = ["C"] * 1024 + ["O"] * 6
        answer = peer.decode(src)[0]
    finally:
        peer.close()
    ids = [vocab.index[t] for t in answer.tokens]
    ended = len(ids) < peer.max_positions - 1  # an answer cut at the length budget has no eos
    target = torch.tensor([ids + [EOS_ID] if ended else ids])
    fed = torch.tensor([[BOS_ID] + target[0, :-1].tolist()])  # teacher-forced: bos, then the answer but its last
    with torch.no_grad():
        logits = model(torch.tensor([[vocab.index[t] for t in src]]), fed)
    ours = logits.log_softmax(-1).gather(-1, target.unsqueeze(-1)).sum().item()
    assert answer.score == pytest.approx(ours, abs=1e-2)


def test_bench_refuses_a_conversion_of_other_weights_before_timing_anything(random_checkpoint, tmp_path):
    """run_bench(ct2_dir=...) timed a stale conversion (another model's, or these weights' before they changed) as
    the peer, silently: it is refused, naming the folder, before any peer process starts."""
    ct2_dir = convert_to_ctranslate2(FIXTURES / "copy_model", tmp_path / "ct2")
    predictor = Predictor.load(random_checkpoint, device="cpu")
    with pytest.raises(ValueError, match="converted from other weights"):
        run_bench(predictor, QUERIES, None, ["greedy", "ct2-greedy"], warmup=0, progress=False, ct2_dir=ct2_dir)


def test_a_peer_that_fails_mid_run_is_left_out_and_our_figures_stand(tmp_path, monkeypatch):
    """A peer process that died part way through `bench` (out of memory, say) ended the run with an error, and every
    figure of our own methods, timed until then, was lost: the peer is closed and left out, the report says why."""
    from molspec_core import bench

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    ct2_dir = convert_to_ctranslate2(predictor.path, tmp_path / "ct2")
    real, calls = bench._peer_decode, []

    def dying(peer, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise PeerError("the CTranslate2 peer's process ended (killed by SIGKILL)")
        return real(peer, *args, **kwargs)

    monkeypatch.setattr(bench, "_peer_decode", dying)
    report = run_bench(predictor, QUERIES, None, ["spec-lookup", "ct2-greedy"], warmup=1, progress=False,
                       ct2_dir=ct2_dir)
    assert set(report["methods"]) == {"greedy", "spec-lookup"}
    for entry in report["methods"].values():
        assert entry["model_calls"] > 0 and "speedup_vs_ct2_greedy" not in entry
    assert report["peers"]["ct2-greedy"] == {"failed": "the CTranslate2 peer's process ended (killed by SIGKILL)"}
    assert len(calls) == 3  # not asked again after it failed
