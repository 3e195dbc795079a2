"""Atom-level SMILES tokenizer (Schwaller et al. 2019) and the shared source/target vocabulary."""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

# The Molecular Transformer's regex: bracket atoms, two-letter halogens, aromatic atoms, bonds,
# branches, ring closures (including %nn, and OpenSMILES' %(nnn), which RDKit writes past 99 open rings) and the
# reaction arrow; and a dative bond, one token either way RDKit writes it ('->', '<-': its '<' was no token, its '>'
# taken for the arrow's).
SMILES_REGEX = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|->|<-|-|\+|\\|\/|:|~|@|\?|>|\*|\$|\%[0-9]{2}"
    r"|\%\([0-9]+\)|[0-9])"
)

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


class TokenizeError(ValueError):
    """The text cannot be split into SMILES tokens, or holds a token the vocabulary lacks."""


def tokenize(smiles: str) -> list[str]:
    """Split a SMILES string into atom-level tokens; raises if any character is not covered."""
    tokens = SMILES_REGEX.findall(smiles)
    if "".join(tokens) != smiles:
        covered = 0
        for token in tokens:
            at = smiles.find(token, covered)
            if at != covered:
                break
            covered += len(token)
        raise TokenizeError(f"not a SMILES token at character {covered + 1}: {smiles[covered:covered + 10]!r}")
    return tokens


def what_it_writes(token: str) -> str:
    """For a token whose meaning a chemist may not see in it, that meaning in parentheses after a space, else ""."""
    if "*" in token:
        return " (a wildcard atom: an attachment point or R-group, which stands for no one atom)"
    if token in ("->", "<-"):
        return " (a dative bond)"
    if re.match(r"\[[0-9]", token):
        return " (an atom with an isotope label)"
    if token.startswith("%("):
        return " (a ring-closure number written in parentheses)"
    return ""


def detokenize(tokens: Iterable[str]) -> str:
    return "".join(tokens)


class Vocab:
    """One vocabulary for source and target (the embeddings are tied)."""

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with {SPECIALS}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("vocabulary has duplicate tokens")
        # '' or 'CC' was taken (prepare-data --vocab), trained on, and refused only in the model it made: the
        # tokenizer never writes such a token
        odd = next((i for i, token in enumerate(tokens) if i >= len(SPECIALS) and not SMILES_REGEX.fullmatch(token)),
                   None)
        if odd is not None:
            shown = repr(tokens[odd]) if len(tokens[odd]) <= 40 else repr(tokens[odd][:40]) + "..."
            raise ValueError(f"token {odd}, {shown}, is not one SMILES token")
        self.tokens: tuple[str, ...] = tuple(tokens)
        self.index: dict[str, int] = {token: i for i, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def build(cls, smiles: Iterable[str], min_count: int = 1, max_size: int | None = None) -> "Vocab":
        """Tokens seen at least min_count times, sorted; with max_size, the count rises until the
        vocabulary (specials included) fits, so ties are kept or dropped together."""
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"a vocabulary of at most {max_size} tokens cannot hold its {len(SPECIALS)} special "
                             f"tokens {SPECIALS}")
        counts: Counter[str] = Counter()
        for s in smiles:
            counts.update(tokenize(s))
        if max_size is not None:
            # The kept set only changes where min_count passes a count, so try the counts, not every integer
            # (counting up one by one from 1 took as many steps as the commonest token's count).
            room = max_size - len(SPECIALS)
            fits = (t for t in sorted({min_count, *(n + 1 for n in counts.values())})
                    if t >= min_count and sum(n >= t for n in counts.values()) <= room)
            min_count = next(fits)
        kept = sorted(t for t, n in counts.items() if n >= min_count)
        return cls(list(SPECIALS) + kept)

    def encode(self, smiles: str, *, strict: bool = True) -> list[int]:
        """Token ids of a SMILES (no bos/eos). strict: a token outside the vocabulary is an error."""
        ids = []
        for token in tokenize(smiles):
            idx = self.index.get(token)
            if idx is None:
                if strict:
                    raise TokenizeError(f"token {token!r}{what_it_writes(token)} is not in the model's vocabulary")
                idx = UNK_ID
            ids.append(idx)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """SMILES of token ids, stopping at eos and skipping pad/bos."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(self.tokens[i])
        return detokenize(out)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"tokens": list(self.tokens)}, indent=0))

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        if Path(path).is_dir():  # prepare-data --vocab models/forward said "error: Is a directory: models/forward"
            inside = Path(path) / "vocab.json"
            hint = f": its vocabulary is {inside}" if inside.is_file() else ""
            raise ValueError(f"{path} is a folder, not a vocabulary file{hint}")
        try:  # read as bytes, as a model folder's vocab.json is (checkpoint.read_json): a Windows editor's byte order
            data = json.loads(Path(path).read_bytes())  # mark was "Unexpected UTF-8 BOM" here, and taken there
        # their messages name no file; a number of 5,000 digits is a ValueError, and arrays nested 100,000 deep a
        # RecursionError, which the command lines printed as a traceback (as checkpoint.read_json reads a model's)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path} is not a JSON vocabulary: {str(exc)[:200]}") from None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"{path}: expected {{'tokens': [str, ...]}}")
        try:
            return cls(tokens)
        except ValueError as exc:  # the special tokens not first, or a token twice: the message named no file
            raise ValueError(f"{path}: {exc}") from None
