import codecs
import gzip
import json
import re

import pytest

from molspec_core.tokenizer import SPECIALS, UNK_ID, TokenizeError, Vocab, detokenize, tokenize
from conftest import SHARED_DATA, needs_data


def test_tokenize_atoms_bonds_rings():
    assert tokenize("CC(=O)Cl") == ["C", "C", "(", "=", "O", ")", "Cl"]
    assert tokenize("c1ccccc1Br") == ["c", "1", "c", "c", "c", "c", "c", "1", "Br"]
    assert tokenize("[C@@H](N)O.[Na+]") == ["[C@@H]", "(", "N", ")", "O", ".", "[Na+]"]
    assert tokenize("C%12CC%12") == ["C", "%12", "C", "C", "%12"]


def test_a_dative_bond_is_one_token_either_way_rdkit_writes_it():
    """RDKit writes a complex's dative bonds '->' and '<-' (Cl[Pd](Cl)(<-N)<-N is [NH3]->[Pd](<-[NH3])([Cl])[Cl]):
    '<' was no token, so a chemist's query was refused with "not a SMILES token at character 16" of a text they never
    typed, and '->' was a bond and a reaction arrow."""
    assert tokenize("[NH3]->[Pd](<-[NH3])Cl") == ["[NH3]", "->", "[Pd]", "(", "<-", "[NH3]", ")", "Cl"]
    assert tokenize("CC-C") == ["C", "C", "-", "C"]
    with pytest.raises(TokenizeError, match="token '<-' [(]a dative bond[)] is not in the model's vocabulary"):
        Vocab.build(["CCN", "[Pd]"]).encode("[Pd]<-N")


@pytest.mark.parametrize("query, said", [
    ("*CC", "token '*' (a wildcard atom: an attachment point or R-group, which stands for no one atom) is not in"),
    ("[1*]CC", "token '[1*]' (a wildcard atom: an attachment point or R-group, which stands for no one atom) is not"),
    ("C->C", "token '->' (a dative bond) is not in the model's vocabulary"),
    ("[13CH3]C", "token '[13CH3]' (an atom with an isotope label) is not in the model's vocabulary"),
    ("CC[Pt]", "token '[Pt]' is not in the model's vocabulary"),
])
def test_a_token_outside_the_vocabulary_says_what_it_writes_where_a_chemist_may_not_know(query, said):
    """'*' was refused as a token alone: a chemist who drew an attachment point was not told it is one."""
    with pytest.raises(TokenizeError, match=re.escape(said)):
        Vocab.build(["CCO"]).encode(query)


def test_untokenizable_text_is_an_error_with_position():
    with pytest.raises(TokenizeError, match="character 3"):
        tokenize("CCX")


def test_vocab_encode_decode_and_oov_names_the_token():
    vocab = Vocab.build(["CCO", "c1ccccc1"])
    assert vocab.tokens[: len(SPECIALS)] == SPECIALS
    assert vocab.decode(vocab.encode("OCC")) == "OCC"
    with pytest.raises(TokenizeError, match=r"'\[Pt\]' is not in the model's vocabulary"):
        vocab.encode("CC[Pt]")
    assert vocab.encode("CC[Pt]", strict=False)[-1] == UNK_ID


def test_capped_vocab_drops_the_rarest_tokens_ties_together():
    smiles = ["CCCC", "OO", "[Pd]", "[Pt]", "N"]  # C 4, O 2, [Pd] [Pt] N 1 each
    assert Vocab.build(smiles).tokens[len(SPECIALS):] == ("C", "N", "O", "[Pd]", "[Pt]")
    assert Vocab.build(smiles, max_size=len(SPECIALS) + 4).tokens[len(SPECIALS):] == ("C", "O")
    assert Vocab.build(smiles, max_size=len(SPECIALS) + 5).tokens[len(SPECIALS):] == ("C", "N", "O", "[Pd]", "[Pt]")
    assert Vocab.build(smiles, max_size=len(SPECIALS) + 1).tokens[len(SPECIALS):] == ("C",)


def test_a_cap_below_the_special_tokens_is_refused_and_a_cap_of_just_them_keeps_none():
    """Vocab.build(..., max_size=3) counted min_count up for ever (no number of tokens fits in -1 places), and a cap
    that kept few tokens took one step per occurrence of the commonest token."""
    with pytest.raises(ValueError, match=f"at most {len(SPECIALS) - 1} tokens cannot hold its {len(SPECIALS)} special"):
        Vocab.build(["CCO"], max_size=len(SPECIALS) - 1)
    assert Vocab.build(["C" * 5000, "O"], max_size=len(SPECIALS)).tokens == SPECIALS


def test_a_parenthesised_ring_closure_is_one_token_named_when_the_vocabulary_lacks_it():
    """OpenSMILES (and RDKit past 99 open rings) writes ring closures '%(nnn)': the tokenizer refused them as "not a
    SMILES token at character 2" of a valid SMILES."""
    assert tokenize("C%(123)CC%(123)") == ["C", "%(123)", "C", "C", "%(123)"]
    assert tokenize("C%123CC3%12") == ["C", "%12", "3", "C", "C", "3", "%12"]  # %nn then a one-digit closure
    with pytest.raises(TokenizeError, match=re.escape("'%(123)' (a ring-closure number written in parentheses) is")):
        Vocab.build(["C1CC1"]).encode("C%(123)CC%(123)")
    with pytest.raises(TokenizeError, match="character 2"):
        tokenize("C%1CC%1")  # '%' needs two digits or parentheses


def test_vocab_save_load(tmp_path):
    vocab = Vocab.build(["CCO", "N#N"])
    vocab.save(tmp_path / "vocab.json")
    assert Vocab.load(tmp_path / "vocab.json").tokens == vocab.tokens


def test_a_vocabulary_saved_with_a_byte_order_mark_loads(tmp_path):
    """A vocab.json re-saved by a Windows editor (a UTF-8 byte order mark first) was refused by prepare-data --vocab and
    train ('Unexpected UTF-8 BOM'), though a model folder's vocab.json so saved loads (checkpoint.read_json)."""
    vocab = Vocab.build(["CCO", "N#N"])
    path = tmp_path / "vocab.json"
    path.write_bytes(codecs.BOM_UTF8 + json.dumps({"tokens": list(vocab.tokens)}).encode())
    assert Vocab.load(path).tokens == vocab.tokens
    path.write_bytes(b'{"tokens": ["\xff"]}')  # not UTF-8 at all: refused, naming the file
    with pytest.raises(ValueError, match=f"^{path} is not a JSON vocabulary"):
        Vocab.load(path)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"tokens": [' + "1" * 5000 + "]}"], ids=["nested", "long number"])
def test_a_vocabulary_file_json_cannot_read_is_refused_naming_the_file(text, tmp_path):
    """Arrays nested 100,000 deep stopped prepare-data --vocab and train with a RecursionError's traceback, and a
    number of 5,000 digits with Python's words on its digit limit, naming no file."""
    path = tmp_path / "vocab.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path} is not a JSON vocabulary"):
        Vocab.load(path)


@pytest.mark.parametrize("tokens,said", [(["C", "O"], "vocabulary must start with"),
                                         ([*SPECIALS, "C", "C"], "vocabulary has duplicate tokens")])
def test_a_vocabulary_file_that_is_no_vocabulary_is_refused_naming_the_file(tokens, said, tmp_path):
    """prepare-data --vocab FILE said "error: vocabulary must start with ...", naming no file."""
    (tmp_path / "mine.json").write_text(json.dumps({"tokens": tokens}))
    with pytest.raises(ValueError, match=f"^{tmp_path / 'mine.json'}: {said}"):
        Vocab.load(tmp_path / "mine.json")


def test_a_model_folder_given_for_its_vocabulary_file_is_named_with_the_file_inside(tmp_path):
    """prepare-data --vocab models/forward said "error: Is a directory: models/forward"."""
    Vocab.build(["CCO"]).save(tmp_path / "vocab.json")
    with pytest.raises(ValueError, match=f"^{tmp_path} is a folder, not a vocabulary file: its vocabulary is "
                                         f"{tmp_path / 'vocab.json'}$"):
        Vocab.load(tmp_path)
    with pytest.raises(ValueError, match=f"^{tmp_path / 'sub'} is a folder, not a vocabulary file$"):
        (tmp_path / "sub").mkdir()
        Vocab.load(tmp_path / "sub")


@pytest.mark.parametrize("token", ["Xx", "CC", "", "[Pd"])
def test_a_vocabulary_with_a_token_the_tokenizer_never_writes_is_refused_naming_the_file(token, tmp_path):
    """prepare-data --vocab took such a file, train trained on it, and only the model it wrote was refused
    (checkpoint.read_vocab: "is not one SMILES token"), after the minutes of training."""
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps({"tokens": [*SPECIALS, "C", token]}))
    with pytest.raises(ValueError, match=f"^{path}: token 5, {re.escape(repr(token))}, is not one SMILES token$"):
        Vocab.load(path)
    with pytest.raises(ValueError, match="token 5, .* is not one SMILES token"):
        Vocab([*SPECIALS, "C", token])


@needs_data
@pytest.mark.parametrize("name", ["src-test.mixed.txt.gz", "tgt-test.txt.gz", "src-valid.mixed.txt.gz"])
def test_round_trip_on_every_uspto_mit_smiles(name):
    with gzip.open(SHARED_DATA / "uspto_mit" / "derived" / name, "rt") as f:
        lines = f.read().splitlines()
    assert len(lines) >= 30000
    assert all(detokenize(tokenize(s)) == s for s in lines)


@needs_data
def test_round_trip_on_uspto50k_test():
    folder = SHARED_DATA / "uspto50k" / "gln_split_test_unmapped_faster_ml_casp"
    for name in ("products.txt", "reactants.txt"):
        lines = (folder / name).read_text().splitlines()
        assert all(detokenize(tokenize(s)) == s for s in lines)
