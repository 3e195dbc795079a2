"""CTranslate2 as a benchmark peer: our checkpoint converted with its spec API, decoded by its engine.

CTranslate2 is the optimized C++ engine a practitioner converts an OpenNMT-style Transformer to, so
it is the speed anchor of `bench --peer ctranslate2`. The conversion maps our layers one to one onto
its pre-norm Transformer spec; the sinusoidal table is written out because CTranslate2's own layout
differs from ours. `ctranslate2` is an optional extra (`pip install -e .[peers]`).
"""
from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import checkpoint
from .calibration import weights_fingerprint
from .decoding.batch import target_budget
from .tokenizer import BOS, EOS, UNK

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which our model uses


def _linear(spec, layer) -> None:
    spec.weight = layer.weight.detach().float().numpy()
    spec.bias = layer.bias.detach().float().numpy()


def _norm(spec, norm) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _concat_linear(spec, *layers) -> None:
    spec.weight = np.concatenate([layer.weight.detach().float().numpy() for layer in layers])
    spec.bias = np.concatenate([layer.bias.detach().float().numpy() for layer in layers])


# The model settings the conversion maps onto CTranslate2's spec (the rest of its shape is fixed: pre-norm layers, ReLU,
# sinusoidal positions, tied embeddings). A model with any other setting is refused rather than converted as if it
# had none (a field added to ModelConfig must be mapped here first).
CONVERTED_SETTINGS = frozenset({"vocab_size", "n_encoder_layers", "n_decoder_layers", "d_model", "n_heads", "d_ff",
                                "dropout", "max_positions"})

# Written last into a conversion: the model folder it was made from, that folder's fingerprint and its positions. A
# folder without it is not a whole conversion of ours; one whose fingerprint is not the model's holds other weights.
SOURCE_FILE = "molspec_source.json"


def model_fingerprint(model_dir: str | Path) -> str:
    """sha256 of what a conversion reads from a model folder: its sizes, vocab.json and its weight files (hashed as
    calibration.weights_fingerprint hashes them for a calibration's fit)."""
    folder = Path(model_dir)
    _, cfg = checkpoint.read_config(folder)
    digest = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode())
    digest.update((folder / "vocab.json").read_bytes())
    digest.update(weights_fingerprint(folder).encode())
    return digest.hexdigest()


def read_source(ct2_dir: str | Path, model_dir: str | Path | None = None) -> dict:
    """A conversion's SOURCE_FILE; a ValueError for a folder that is no whole conversion of ours, or (model_dir
    given) one converted from other weights than model_dir holds now."""
    path = Path(ct2_dir) / SOURCE_FILE
    try:
        source = json.loads(path.read_text())
        if not (isinstance(source, dict) and isinstance(source.get("fingerprint"), str)
                and type(source.get("max_positions")) is int):
            raise ValueError(f"{path.name} lacks the fingerprint or the positions")
    except (OSError, ValueError):
        raise ValueError(f"{ct2_dir} is not a whole CTranslate2 conversion made by convert_to_ctranslate2 ({path.name} "
                         "is missing or unreadable: an older or interrupted conversion, or another folder); "
                         "convert the model again") from None
    if model_dir is not None and source.get("fingerprint") != model_fingerprint(model_dir):
        raise ValueError(f"{ct2_dir} was converted from other weights ({source.get('model')}) than {model_dir} holds: "
                         "the peer would decode another model; convert the model again")
    return source


def convert_to_ctranslate2(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Write a float32 CTranslate2 model of a MolSpec model folder (int8 is chosen at load time) into out_dir: a new or
    empty folder, or an earlier conversion, which is replaced whole once the new one is written (an interrupted
    conversion leaves it as it was). Any other folder is refused, untouched."""
    from ctranslate2.specs import transformer_spec

    out_dir = Path(out_dir)
    if out_dir.exists() and not (out_dir / SOURCE_FILE).is_file() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ValueError(f"{out_dir} exists and is not a CTranslate2 conversion made by convert_to_ctranslate2 (no "
                         f"{SOURCE_FILE}): it is left as it is; give a new folder")
    fingerprint = model_fingerprint(model_dir)  # before the weights are read: new weights then cannot pass as these
    model, vocab, _ = checkpoint.load(model_dir)
    cfg = model.cfg
    unmapped = sorted(set(cfg.to_dict()) - CONVERTED_SETTINGS)
    if unmapped:
        raise ValueError(f"{model_dir}: the CTranslate2 conversion does not know the model settings {unmapped}; "
                         "it maps only " + ", ".join(sorted(CONVERTED_SETTINGS)))
    spec = transformer_spec.TransformerSpec.from_config((cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads,
                                                        pre_norm=True)
    embeddings = model.embed.weight.detach().float().numpy()
    positions = model.positions.detach().float().numpy()
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = embeddings
    encoder.position_encodings.encodings = positions
    _norm(encoder.layer_norm, model.encoder_norm)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        attention = layer_spec.self_attention
        _norm(attention.layer_norm, layer.norm1)
        _concat_linear(attention.linear[0], layer.attn.query, layer.attn.key_value)  # fused q, k, v
        _linear(attention.linear[1], layer.attn.out)
        _norm(layer_spec.ffn.layer_norm, layer.norm2)
        _linear(layer_spec.ffn.linear_0, layer.ff.up)
        _linear(layer_spec.ffn.linear_1, layer.ff.down)
    decoder.embeddings.weight = embeddings
    decoder.position_encodings.encodings = positions
    _norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = embeddings  # tied output projection, no bias
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _concat_linear(layer_spec.self_attention.linear[0], layer.self_attn.query, layer.self_attn.key_value)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.norm2)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.query)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.key_value)  # fused k, v
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.ffn.layer_norm, layer.norm3)
        _linear(layer_spec.ffn.linear_0, layer.ff.up)
        _linear(layer_spec.ffn.linear_1, layer.ff.down)
    spec.register_source_vocabulary(list(vocab.tokens))
    spec.register_target_vocabulary(list(vocab.tokens))
    config = spec.config
    config.bos_token, config.eos_token, config.unk_token, config.decoder_start_token = BOS, EOS, UNK, BOS
    config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.validate()
    spec.optimize()  # float32 as given
    source = {"model": str(Path(model_dir).resolve()), "fingerprint": fingerprint,
              "max_positions": cfg.max_positions}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        partial.chmod(0o755)  # mkdtemp's 0700 would follow it into place
        spec.save(str(partial))
        (partial / SOURCE_FILE).write_text(json.dumps(source, indent=1))
        if out_dir.exists():  # an earlier conversion, or an empty folder: moved aside, removed once replaced
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
            os.replace(partial, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out_dir


class PeerError(OSError):
    """The peer failed: its process ended or hung, or CTranslate2 refused a request or the model. An OSError, as a
    broken pipe to a process is, so that the command line reports it as one `error:` line (boundary.py)."""


@dataclass(frozen=True)
class PeerHypothesis:
    tokens: tuple[str, ...]  # output tokens, without bos/eos
    score: float  # sum of token log-probabilities (no length normalization, as our beam search)


# The OpenMP wait policy of the peer's process, by compute type: what measured fastest there, at two
# threads in a process of its own (the figures: the README's "CTranslate2 in a process of its own").
# The process is stopped between requests, so active threads spinning while idle cost our methods nothing.
PEER_WAIT_POLICY: dict[str, str | None] = {"float32": None, "int8": "active"}

# How long the peer may take to load or to answer one request before it is taken to hang: far beyond a batch of 32
# at beam 10 on one thread (seconds), short of a bench that waits for ever.
PEER_TIMEOUT_S = 600.0


class CTranslate2Peer:
    """A converted model decoded by CTranslate2 on CPU, a batch of queries a request (as our decoders get it), in a
    process of its own (peer_worker.py says why), stopped between requests; each decode is timed in that process.
    A process that ends, or gives no answer within timeout_s (then it is ended), raises a PeerError that says so.
    ct2_dir must be a whole conversion (convert_to_ctranslate2), of model_dir's weights where model_dir is given
    (read_source: a ValueError otherwise); max_positions is the converted model's unless given."""

    def __init__(self, ct2_dir: str | Path, compute_type: str = "float32", threads: int = 1,
                 max_positions: int | None = None, timeout_s: float = PEER_TIMEOUT_S,
                 model_dir: str | Path | None = None):
        source = read_source(ct2_dir, model_dir)
        self.max_positions = int(max_positions or source["max_positions"])
        self.compute_type, self.threads = compute_type, threads
        self.timeout_s = timeout_s
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        policy = PEER_WAIT_POLICY.get(compute_type)
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        self.wait_policy = policy
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                          env.get("PYTHONPATH")]))
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (lives with the process; _stop_process closes it)
        self._pending = b""  # what the process wrote after the last line read
        self._stopped_by_us: str | None = None  # why, once _stop has ended the process
        self._process = subprocess.Popen(
            [sys.executable, "-m", "molspec_core.peer_worker", str(ct2_dir), compute_type, str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self._finalizer = weakref.finalize(self, _stop_process, self._process, self._stderr)
        self._receive()  # {"ready": true}
        self._pause()

    def _pause(self) -> None:
        """Stop the process and wait until it is stopped (the signal is asynchronous): none of its threads
        may still run when our next method's clock starts. A process that has ended is left as it is."""
        if not hasattr(signal, "SIGSTOP") or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(self._process.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):  # it ended before the signal, and this wait collected it
            self._process.returncode = os.waitstatus_to_exitcode(status)

    def _stop(self, why: str) -> None:
        """End a process whose state is unknown: no later request may go to it, and each says why."""
        self._process.kill()
        self._stopped_by_us = why

    def _resume(self) -> None:
        if hasattr(signal, "SIGCONT"):
            self._process.send_signal(signal.SIGCONT)

    def _ended(self) -> PeerError:
        """The error for a process that has ended: how it ended, and the last lines it wrote to stderr."""
        try:
            code = self._process.wait(timeout=5)  # its stdout is closed: it is ending
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = "exit status unknown" if code is None else f"exit status {code}"
        self._stderr.seek(0)
        detail = self._stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        return PeerError(f"the CTranslate2 peer process ended ({how}): {' | '.join(detail) or 'no message'}")

    def _read_line(self) -> bytes | None:
        """The process's next line (b"" once it has closed its output), or None after timeout_s without one."""
        assert self._process.stdout is not None
        if os.name != "posix":  # select takes no pipes there: no time limit
            return self._process.stdout.readline()
        fd = self._process.stdout.fileno()  # read raw: a buffered reader could hold a line select does not see
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line + b"\n"

    def _receive(self) -> dict:
        line = self._read_line()
        if line is None:
            why = f"gave no answer in {self.timeout_s:g} s (it hangs, or the request is beyond it)"
            self._stop(f"it {why}, and its process was ended")
            raise PeerError(f"the CTranslate2 peer {why}; its process was ended")
        if not line:
            raise self._ended()
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(f"CTranslate2: {answer['error']}")
        return answer

    def decode_timed(self, sources: list[list[str]], width: int = 1, n_best: int = 1
                     ) -> tuple[list[list[PeerHypothesis]], float]:
        """Greedy (width 1) or beam search of a batch, as one CTranslate2 batch, with our length budget and
        ranking by summed log-probs: each query's hypotheses, and the seconds CTranslate2 took, timed in its
        process (the pipe and the signals are not counted). CTranslate2 takes one length budget for a batch: the
        longest query's, so a shorter query's answer that never ends may run past its own (ours stop it there)."""
        if self._stopped_by_us:
            raise PeerError(f"the CTranslate2 peer takes no more requests: {self._stopped_by_us}")
        if self._process.poll() is not None:
            raise self._ended()
        request = {"src": [list(src) for src in sources], "width": width, "n_best": n_best,
                   "max_len": max(target_budget(len(src), self.max_positions) for src in sources)}
        self._resume()
        try:
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
            answer = self._receive()
        except BrokenPipeError:  # it ended before reading the request
            raise self._ended() from None
        except PeerError:
            raise
        except BaseException:  # Ctrl-C, a stop: the answer it still owes would be read as the next request's
            self._stop("a request to it was interrupted, and its process ended")
            raise
        finally:
            self._pause()
        batch = [[PeerHypothesis(tuple(h), float(s)) for h, s in zip(hypotheses, scores)]
                 for hypotheses, scores in zip(answer["hypotheses"], answer["scores"], strict=True)]
        return batch, float(answer["seconds"])

    def decode(self, src_tokens: list[str], width: int = 1, n_best: int = 1) -> list[PeerHypothesis]:
        """One query's hypotheses (a batch of one)."""
        return self.decode_timed([src_tokens], width, n_best)[0][0]

    def close(self) -> None:
        self._finalizer()


def _stop_process(process: subprocess.Popen, stderr) -> None:
    """End a peer process, stopped or not, and close its files."""
    if process.poll() is None:
        process.kill()  # SIGKILL ends a stopped process too
        process.wait()
    for stream in (process.stdin, process.stdout):
        if stream:
            try:
                stream.close()
            except BrokenPipeError:  # a request it never read, flushed on closing
                pass
    stderr.close()
