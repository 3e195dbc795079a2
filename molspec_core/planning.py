"""Multi-step retrosynthesis: routes from a target down to building blocks in a stock.

The search is syntheseus's (Retro* or MCTS); MolSpec supplies the single-step model and the stock.
`PredictorModel` wraps a retrosynthesis `Predictor` as a syntheseus backward reaction model: each
molecule the search expands is one query, its sane n-best answers (beam search's by default) become
reactions whose metadata carry the model's score and probability, its calibrated confidence and,
with a forward model, the round-trip check. `plan` runs the search under a time limit and returns
the solved routes best first (the highest product of step probabilities), each a tree of steps with
the molecules in stock marked and each step that sets or inverts a stereocentre, or sets or isomerizes a double
bond's E/Z geometry, flagged (stereo_flags), plus the search's statistics. Routes export as JSON (the trees) and CSV
(one row per step).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import itertools
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rdkit import Chem
from rdkit.Chem import rdCIPLabeler, rdFMCS
from rdkit.Chem.MolStandardize import rdMolStandardize
from syntheseus import Bag, BackwardReactionModel, Molecule, SingleProductReaction
from syntheseus.search.algorithms.best_first.retro_star import RetroStarSearch
from syntheseus.search.algorithms.mcts.base import pucb_bound
from syntheseus.search.algorithms.mcts.molset import MolSetMCTS
from syntheseus.search.analysis.route_extraction import _iter_top_routes, _route_has_solution
from syntheseus.search.graph.and_or import AndNode, AndOrGraph
from syntheseus.search.graph.molset import MolSetGraph
from syntheseus.search.graph.route import SynthesisGraph
from syntheseus.search.mol_inventory import SmilesListInventory
from syntheseus.search.node_evaluation.common import (ConstantNodeEvaluator, HasSolutionValueFunction,
                                                      ReactionModelLogProbCost, ReactionModelProbPolicy)

from .boundary import Terminated
from .centre import untraced_part
from .chem import (CXSMILES, LACKS_ATOMS, NONMETALS, ChemError, canonical, canonical_or_none, clear_maps, holds_carbon,
                   inchi_alone, main_molecule, missing_atoms, mol_from_smiles, product_alone, rdkit_quietly,
                   reaction_sides, salts_as_ions, smiles_from_inchi, stereo_notes)
from .io import (MAX_INPUT_BYTES, SMILES_FILE_HEADERS, STDIN, STDIN_NAME, STOCK_COLUMNS, QueryFile, TooManyRecords,
                 _decode_stream, parse_smiles_file, parse_upload, query_format, read_queries, read_text,
                 refuse_unnamed_results, rounded, significant, text_lines, txt_queries)
from .limits import abandon_when
from .methods import EXACT_NBEST
from .roundtrip import check_round_trip
from .service import MODELS_DIR, TIMED_OUT, PartlyDecoded, Prediction, Predictor, QueryResult

DEFAULT_STOCK = MODELS_DIR / "stock.smi.gz"  # tools/make_stock.py: reactants of >= 2 training reactions
ALGORITHMS = ("retro*", "mcts")
MAX_TIME_LIMIT_S = 3600.0  # an hour: past any interactive use; a bigger budget is a batch job
ROUTE_EXTRACTION_S = 5.0  # cap on reading the routes out of the search graph after the search
ROUTE_COLUMNS = ("route", "route_score", "route_probability", "route_steps", "step", "depth", "product",
                 "product_in_stock", "reactants", "reactants_in_stock", "score", "probability", "confidence",
                 "round_trip", "forward_prob", "model_rank", "stereo", "lacks_atoms")

# Called after each expansion, and every PROGRESS_EVERY_S of a search that expands nothing (MCTS walking the tree it
# has), with (seconds since the search started, molecules expanded so far); it may raise SearchStopped to end the
# search there.
Progress = Callable[[float, int], None]
# MCTS's iterations between expansions call no model: told only after each expansion, the Routes page's bar stood
# still and its Stop went unheard for 20 s of them (the copy model's search for NCCNCCNCCO), and could for the whole
# time limit
PROGRESS_EVERY_S = 0.5
# What an expansion that starts past the search's deadline still gets, all its molecules together: time to read a
# small molecule's answers; past it, the molecules left are not asked (NOT_ASKED), each counted as cut short
EXPANSION_FLOOR_S = 0.1
NOT_ASKED = "not asked: the search's time had run out"


class SearchStopped(Exception):
    """Raised by a progress callback to end the search after the expansion it reports (the Routes page's Stop): plan
    raises it again once the search has stopped, its `partial_result` holding the routes found, that expansion's too.
    Raised through the expansion, the stop lost the search, and the routes its last expansion had made."""


# ---- the stock --------------------------------------------------------------------------------


class Stock(SmilesListInventory):
    """Building blocks a route may start from: canonical SMILES without atom maps (a syntheseus inventory)."""

    def __init__(self, smiles: Iterable[str], source: str = "", n_unreadable: int = 0, first_unreadable: str = "",
                 column: str = "", sheet: str = ""):
        super().__init__(list(smiles), canonicalize=False)  # canonical already (stock_from_queries)
        self.source = source  # the file it came from, for people
        self.n_unreadable = n_unreadable  # entries RDKit could not read, left out
        # The first of them and why: '1 unreadable entry left out' sent a chemist through a catalogue to find it
        self.first_unreadable = first_unreadable
        # A table's column (an SD file's data field) and a workbook's sheet the SMILES were read from, as the file
        # names them ("" for SMILES lines, an SD file's molecules, a workbook of one sheet): the column is chosen by
        # preference (io.STOCK_COLUMNS), and nothing said which of a vendor's isosmiles and canonicalsmiles was read
        self.column = column
        self.sheet = sheet


@rdkit_quietly
def load_stock(path: str | Path = DEFAULT_STOCK, column: str | None = None) -> Stock:
    """The stock in a file: one SMILES per line (optionally followed by a name; '#' starts a comment line),
    an SD file, or a CSV or an Excel workbook (.xlsx) with a SMILES column (`column`, else one of io.STOCK_COLUMNS);
    .gz and .xz are read too. ValueError when it cannot be read or holds no readable molecule."""
    path = Path(path)
    try:
        try:
            table = read_queries(path, column, names=STOCK_COLUMNS)
        except TooManyRecords as exc:
            table = _one_per_line(path.name, column, exc, lambda: read_text(path))
    except OSError as exc:  # InputFileError (too large, no smiles column, not text) is a ValueError already
        raise ValueError(f"cannot read the stock {path}: {exc.strerror or exc}") from None
    # --stock - was named '-' in its refusals, its summary and its routes' JSON
    return stock_from_queries(table, STDIN_NAME if str(path) == STDIN else path.name)


@rdkit_quietly
def stock_from_upload(name: str, data: bytes, column: str | None = None) -> Stock:
    """The stock in an uploaded file, by the same rules as load_stock."""
    try:
        table = parse_upload(name, data, column, names=STOCK_COLUMNS)
    except TooManyRecords as exc:
        table = _one_per_line(name, column, exc, lambda: _decode_stream(io.BytesIO(data), name))
    return stock_from_queries(table, name)


def _one_per_line(name: str, column: str | None, too_many: TooManyRecords, text: Callable[[], str]) -> QueryFile:
    """A stock of more molecules than a batch file may hold records (io.MAX_INPUT_ROWS: a vendor's catalogue of
    building blocks holds several hundred thousand), read line by line as io reads a SMILES or TXT file, within
    the same bound on its text. A table or SD file that large is refused, saying how to give it: 'split it into
    files' was no advice for a stock, which is one file."""
    kind = query_format(name)[1]
    if kind not in ("smi", "txt") or column:
        raise ValueError(f"{too_many}. A larger stock is read as SMILES, one per line (.smi or .txt, .gz or .xz "
                         f"too), up to {MAX_INPUT_BYTES // 2**20} MB of text") from None
    lines = text_lines(text())
    return parse_smiles_file(lines) if kind == "smi" else QueryFile(txt_queries(lines, STOCK_COLUMNS))


def stock_from_queries(table: QueryFile, source: str) -> Stock:
    # an SD file of our own results: its records' molecules are answers, taken as the stock without a word (a table of
    # them is refused as it is read, io.header_of)
    refuse_unnamed_results(table, source, STOCK_COLUMNS)
    unread = [problem for problem in table.problems if problem]  # SD records RDKit cannot read
    molecules, n_unreadable, first_unreadable = set(), len(unread), unread[0] if unread else ""
    named = query_format(source)[1] in ("txt", "smi")  # a line's name may follow its SMILES (_stock_mol)
    for index, entry in enumerate(table.queries):
        fields = entry.split()
        # a TXT file headed as a SMILES file is ("SMILES Name", RDKit's): its header was left out as an unreadable entry
        header = named and index == 0 and bool(fields) and fields[0].casefold() in SMILES_FILE_HEADERS
        if not fields or fields[0].startswith("#") or header:
            continue  # blank line, comment, header, or an SD record counted above
        try:
            # An entry of several molecules (a salt, CCN(CC)CCO.Cl) gives each: a route's reactants are single
            # molecules, so the whole entry could never match one.
            mol = _stock_mol(entry, named)
            for part in Chem.GetMolFrags(mol, asMols=True) if "." in entry else (mol,):
                molecules.update(_stock_molecules(part))
        except ChemError as exc:  # its message names the entry (up to 80 characters of it)
            n_unreadable += 1
            first_unreadable = first_unreadable or str(exc)
    if not molecules:
        one, many = (("record is a molblock RDKit cannot read", "records are molblocks RDKit cannot read")
                     if query_format(source)[1] == "sdf"  # an SD file's were said to be no SMILES
                     else ("entry is not SMILES RDKit can read", "entries are not SMILES RDKit can read"))
        first = f"; the first: {first_unreadable}" if n_unreadable > 1 else f": {first_unreadable}"
        unreadable = f" ({n_unreadable} {one if n_unreadable == 1 else many}{first})" if n_unreadable else ""
        raise ValueError(f"the stock {source} holds no molecules{unreadable}: give one SMILES per line, "
                         f"an SD file, or a CSV or Excel workbook with a smiles column{_table_in_lines(table, named)}")
    return Stock(molecules, source, n_unreadable, first_unreadable, table.query_column, table.sheet)


def stock_read_from(source: str, column: str, sheet: str) -> str:
    """Where a stock file's SMILES were read, for its summary line: "the column isosmiles", "the column SMILES of the
    sheet Blocks", "the data field SMILES" (an SD file's, named); "" where it has no columns (SMILES lines, an SD
    file's molecules)."""
    if not column:
        return ""
    where = "data field" if query_format(source)[1] == "sdf" else "column"
    return f"the {where} {column}" + (f" of the sheet {sheet}" if sheet else "")


def stock_name(source: str, read_from: str) -> str:
    """A stock file's name, with where its SMILES were read (stock_read_from) where it has columns: the Routes page's
    and plan's summary say it alike."""
    return f"{source}, SMILES from {read_from}" if read_from else source


# A table's cell delimiters (io.CSV_DELIMITERS) as a person names them
TABLE_DELIMITERS = {",": "commas", ";": "semicolons", "\t": "tabs"}


def _table_in_lines(table: QueryFile, named: bool) -> str:
    """What to do with a table saved under a .txt name (a vendor's list, ID,SMILES), read a line an entry, none of them
    a SMILES: the refusal named its header line as an entry RDKit cannot read, and said to give a CSV, which it was."""
    lines = [entry for entry in table.queries if entry.strip()][:2]
    held = next((name for delimiter, name in TABLE_DELIMITERS.items() if named and lines
                 and all(delimiter in line for line in lines)), None)
    if held is None:
        return ""
    return (f". Its lines look like a table's (they hold {held}): save it with a .csv name, its SMILES under a header "
            "smiles")


def _stock_mol(entry: str, named: bool = True) -> Chem.Mol:
    """The molecule of a stock entry, its atom maps cleared: its first field where the entry may carry a name after
    it (`named`: a line of a TXT file, or of a SMILES file, whose name io splits off at a space or tab only, not at a
    no-break space), else the entry whole, which holds no white space (a table's cell, an SD record's molecule): a
    cell's SMILES pasted with a line break in it, CCOC(=O)c1ccccc1 and OC on two lines, put
    the ester in stock without a word, as RDKit reads what follows a space as a name. Read once: each entry was
    parsed, written and parsed again (and each ion a third time), which was
    most of the time `molspec plan` and the app's first search spent reading the default stock. A CXSMILES's
    centres in an AND group (a racemate) or an OR group (one configuration, not known which) are left unspecified:
    the stock holds no one configuration of them, and the SMILES alone, C[C@H](N)C(=O)O of racemic alanine, put
    L-alanine in stock."""
    cxsmiles = CXSMILES.match(entry.strip())
    smiles = cxsmiles[0] if cxsmiles is not None else entry.split()[0] if named else entry.strip()
    if any(char.isspace() for char in smiles) and cxsmiles is None:
        raise ChemError(f"{smiles[:80]!r} holds a space or a line break, which no SMILES holds (RDKit would read the "
                        "part before it alone): a cell holds one SMILES, whole")
    mol = mol_from_smiles(smiles)
    unknown = [atom for group in (mol.GetStereoGroups() if cxsmiles else ())
               if group.GetGroupType() != Chem.StereoGroupType.STEREO_ABSOLUTE for atom in group.GetAtoms()]
    if unknown:
        for atom in unknown:
            atom.SetChiralTag(Chem.ChiralType.CHI_UNSPECIFIED)
        smiles = Chem.MolToSmiles(mol)
        mol = mol_from_smiles(smiles)  # read again: a centre another one's mark made stereo is none now (rare: cheap)
    if ":" in smiles:  # only a bracket atom's map (or an aromatic bond) writes one: clear_maps looks at every atom
        clear_maps(mol)
    return mol


def _stock_molecules(part: Chem.Mol) -> Iterator[str]:
    """The SMILES one molecule of a stock entry puts in stock: as given; where it is drawn as USPTO never writes it (a
    salt with its metal bond, CCO[Na] as ChemDraw writes it; a sulfoxide with separated charges), also in USPTO's
    writing, the ions and S=O the model writes its reactants in (chem.salts_as_ions, through which every query is
    read: sodium ethoxide so drawn was in stock as CC[O][Na], and matched no reactant); and an organic ion's neutral
    parent (_neutral_parent)."""
    molecule = Chem.MolToSmiles(part)
    written = {molecule: part}
    if any(_drawn_otherwise(atom) for atom in part.GetAtoms()):  # rare: only these are read again
        written.update((ion, mol_from_smiles(ion)) for ion in salts_as_ions([molecule]) if ion != molecule)
    for smiles, mol in written.items():
        yield smiles
        parent = _neutral_parent(mol) if "+" in smiles or "-" in smiles else None  # charged ones
        if parent:
            yield parent


def _drawn_otherwise(atom: Chem.Atom) -> bool:
    """Whether an atom may be one that chem.salts_as_ions writes otherwise: a metal, or a charged S or P."""
    return atom.GetAtomicNum() not in NONMETALS or (atom.GetAtomicNum() in (15, 16) and atom.GetFormalCharge() > 0)


def _neutral_parent(mol: Chem.Mol) -> str | None:
    """The acid or base an organic ion is the salt of, which a work-up gives (RDKit's Uncharger, as chem.uncharged):
    a hydrochloride written CC[NH3+].[Cl-] gave no ethylamine where CCN.Cl gave it, and sodium benzoate no benzoic
    acid. None where a proton on N, O or S does not explain its charge (a quaternary ammonium, a nitro group, the
    hydride of a borohydride: NaBH(OAc)3 is no B(OAc)3) or where it holds no carbon ([Cl-] gives no HCl)."""
    if not any(atom.GetAtomicNum() == 6 for atom in mol.GetAtoms()):
        return None
    parent = rdMolStandardize.Uncharger().uncharge(mol)  # its atoms keep their indices
    moved = [atom.GetAtomicNum() for atom, neutral in zip(mol.GetAtoms(), parent.GetAtoms())
             if atom.GetFormalCharge() != neutral.GetFormalCharge()]
    if not moved or any(number not in (7, 8, 16) for number in moved):
        return None
    return canonical(Chem.MolToSmiles(parent))


# ---- the single-step model --------------------------------------------------------------------


@dataclass
class ExpansionCounts:
    """What the single-step model did during one search (mutable: counted as the search runs)."""
    molecules: int = 0  # products expanded (each once: syntheseus caches the reactions); failed ones are not
    decoder_calls: int = 0  # the decoder's forward passes, summed over those molecules (a batch's pass counts per row)
    answers: int = 0  # reactant sets proposed (a beam the time limit cut is none)
    missing_atoms: int = 0  # answers whose reactants lack heavy atoms of the product (skipped when checked)
    kept: int = 0  # the reactions the search could use: sane, and with every product atom when checked
    round_trips: int = 0  # of those kept, ones the forward model gave the product back for
    failed: int = 0  # products the model could not read, or cut at the time limit: never expanded
    cut: int = 0  # of those, ones whose expansion was under way when the search's time ran out (the last, mostly)
    first_failure: str = ""  # the first of those and why it failed, for people


def failure_note(counts: ExpansionCounts, escape: Callable[[str], str] = str) -> tuple[str, bool]:
    """What the Routes page and `molspec plan` say of the molecules the model gave no answers for, and whether it is a
    warning. The last expansion of a search that runs to its time limit is cut short there (a routine end): one
    molecule, or several where MCTS asked for a set of them at once. Any other failure, or the target's own expansion
    cut short, leaves routes unexplored. `escape`: for the molecule's text (markdown on the page)."""
    first = escape(counts.first_failure)
    if counts.failed == counts.cut:
        if counts.molecules > 0:
            more = counts.cut - 1  # "2 molecules could not be expanded (the model gave no answers for them)", warned
            also = (f"; so were those of {more} more molecule{'s' * (more != 1)} asked for with it (none of them "
                    "counted" if more else " (not counted")
            return f"{first}{also} among the molecules expanded).", False
        # It said the model 'gave no answers' for the target, as if it could not read it: it had no time to
        return ("The search's time ran out while the model was still proposing reactants for the target, so nothing "
                "was expanded: give the search more time (the larger the target, the longer the model takes).", True)
    them, first_of = ("it", "") if counts.failed == 1 else ("them", "the first, ")
    why = f"the model gave no answers for {them}"
    if counts.cut:  # not all of them: the search's end cut some short, which the model's failing did not explain
        why = (f"the model gave no answers for {counts.failed - counts.cut}, and the search's time ran out while it "
               f"was proposing reactants for {counts.cut}")
    molecules = f"{counts.failed} molecule{'s' * (counts.failed != 1)}"
    return f"{molecules} could not be expanded ({why}); {first_of}{first}.", True


class PredictorModel(BackwardReactionModel):
    """A retrosynthesis Predictor as a syntheseus backward reaction model.

    Each product's n-best answers become reactions; invalid and flagged answers (the product itself,
    radicals, ...) are skipped, and so are sets that lack heavy atoms of the product unless
    `check_atoms` is off. Metadata: score (log-prob) and probability, model_rank, confidence when
    the model is calibrated, and round_trip / forward_prob when a forward model is given (a flag for
    people: the search does not filter on it, so a step the forward model does not give back stays open).
    """

    def __init__(self, predictor: Predictor, forward: Predictor | None = None, method: str = EXACT_NBEST,
                 n_best: int = 10, batch_size: int = 8, round_trip_k: int = 1, check_atoms: bool = True,
                 progress: Progress | None = None, augment: int = 1):
        super().__init__(use_cache=True, default_num_results=n_best, remove_product_in_reactants=True)
        self.predictor, self.forward, self.method = predictor, forward, method
        self.batch_size, self.round_trip_k, self.check_atoms = batch_size, round_trip_k, check_atoms
        self.progress, self.augment = progress, augment
        self.counts = ExpansionCounts()
        self.started = time.monotonic()
        self.deadline: float | None = None  # monotonic time after which expansions are cut short
        self.stop: SearchStopped | None = None  # raised by the progress callback: the search ends (_Stoppable)
        self.reported = self.started  # when the progress callback was last called

    def _get_reactions(self, inputs: list[Molecule], num_results: int) -> list[Sequence[SingleProductReaction]]:
        # Read in several writings, the service decodes the molecules one after another, each under the limit given:
        # a share of the time left (MCTS asks for several at once) stopped a large one while the search had time, and
        # the page warned of a 'time limit per query' no one set. Each is asked alone, under the time left as it
        # starts. In one writing they are decoded together, the batch under the shares' sum: the time left.
        batches = [[mol] for mol in inputs] if self.augment > 1 else [inputs]
        # Past the deadline the expansion still gets EXPANSION_FLOOR_S, once for all its molecules: each had it, and a
        # batch of n ran n times it past the search's time limit
        end = None if self.deadline is None else max(self.deadline, time.monotonic() + EXPANSION_FLOOR_S)
        results: list[QueryResult] = []
        for batch in batches:
            if results:  # told between molecules, the count moving with them
                self.report()
            found = self._ask(batch, num_results, end)
            if found is None:  # stopped: this batch and the ones after it are not expanded (the search ends)
                break
            results += found
            self.counts.molecules += sum(result.ok for result in found)  # a failed one expanded nothing
        reactions = [[reaction(mol, p) for p in self._usable(mol, result)] for mol, result in zip(inputs, results)]
        self.report()
        return reactions + [[] for _ in inputs[len(results):]]

    def _ask(self, batch: list[Molecule], num_results: int, end: float | None) -> list[QueryResult] | None:
        """The model's results for a batch of molecules, or None where the search was stopped before or while it
        decoded them. The Routes page's Stop was heard only after a whole expansion: MCTS asks for several molecules
        at once, 5 writings each on the page, and a stop waited seconds for all of them. The progress callback is
        told between molecules and, every PROGRESS_EVERY_S, between the decoder's steps (limits.abandon_when), and a
        stop it raises ends the decoding there; a search it does not stop asks and finds what it did."""
        if self.stop is not None:
            return None
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:  # the expansion's floor spent on the molecules before: none is asked
            return [QueryResult(mol.smiles, method=self.method, error=NOT_ASKED) for mol in batch]
        # Without a callback nothing can stop it, and a caller's own abandon_when is left to be heard
        stoppable = abandon_when(self._stopped) if self.progress else contextlib.nullcontext()
        try:
            with stoppable:
                return self.predictor.predict([mol.smiles for mol in batch], method=self.method, n_best=num_results,
                                              batch_size=self.batch_size, augment=self.augment,
                                              time_limit_s=None if left is None else left / len(batch))
        except PartlyDecoded:
            if self.stop is None:  # another caller's abandon around the search: not ours to swallow
                raise
            return None

    def _stopped(self) -> str | None:
        """limits.abandon_when's reason: the progress callback told when due, and why it stopped the search."""
        self.report_if_due()
        return None if self.stop is None else "the search was stopped"

    def report(self) -> None:
        """Tell the progress callback where the search is, until it has stopped the search: a SearchStopped it raises
        ends the search at its next check (_Stoppable), with the reactions of the expansion just made in its graph."""
        self.reported = time.monotonic()
        if self.progress and self.stop is None:
            try:
                self.progress(self.reported - self.started, self.counts.molecules)
            except SearchStopped as stop:
                self.stop = stop

    def report_if_due(self) -> None:
        """report, where PROGRESS_EVERY_S have passed since it last did (a search between expansions)."""
        if time.monotonic() - self.reported >= PROGRESS_EVERY_S:
            self.report()

    def _usable(self, product: Molecule, result: QueryResult) -> tuple[Prediction, ...]:
        """The answers the search may use (sane, and with every product atom when checked), checked round
        trip when a forward model is given; counted as they go."""
        counts = self.counts
        counts.decoder_calls += result.stats.model_calls
        if not result.ok:
            counts.failed += 1
            # The last expansion of a search that runs to its limit stops there (_get_reactions): its per-query
            # limit is a slice of the search's, and the user set none, so it is named for what it is
            cut = self.deadline is not None and time.monotonic() >= self.deadline
            counts.cut += cut
            reason = "its expansion was cut short when the search's time ran out" if cut else result.error
            counts.first_failure = counts.first_failure or f"{product.smiles}: {reason}"
            # A beam search the time limit stopped hands on the answers it had ended (service.TIMED_OUT marks the
            # rest, which the filter below drops): syntheseus keeps this expansion, so they are all it will have.
        # Not the beams the time limit cut (TIMED_OUT): no answer the model proposed, they made 'Answers used' read
        # 50% where every answer it had ended was used
        counts.answers += sum(TIMED_OUT not in p.concerns for p in result.predictions)
        # Sane answers, and ones whose only concern is lacking product atoms (answer_concerns flags that for
        # a retrosynthesis model): those go when the atoms are checked, and are let through when not.
        candidates = [p for p in result.predictions if p.valid and all(c.startswith(LACKS_ATOMS) for c in p.concerns)]
        lacking = [bool(p.concerns or missing_atoms(p.smiles, product.smiles)) for p in candidates]
        usable = [p for p, lacks in zip(candidates, lacking) if not (self.check_atoms and lacks)]
        counts.missing_atoms += sum(lacking)  # counted whether or not they are skipped
        counts.kept += len(usable)
        if self.forward is not None and usable:  # only the answers kept cost a forward decode
            usable = list(check_round_trip(dataclasses.replace(result, predictions=tuple(usable)), self.forward,
                                           self.round_trip_k).predictions)
            counts.round_trips += sum(bool(p.round_trip) for p in usable)
        return tuple(usable)

    def get_parameters(self):
        return self.predictor.model.parameters()


def reaction(product: Molecule, prediction: Prediction) -> SingleProductReaction:
    """A sane answer as a syntheseus reaction (its SMILES are canonical, so Molecule keeps them)."""
    metadata = {"score": prediction.score, "log_probability": prediction.score, "probability": prediction.probability,
                "model_rank": prediction.model_rank}
    for name in ("confidence", "round_trip", "forward_prob"):
        if getattr(prediction, name) is not None:
            metadata[name] = getattr(prediction, name)
    reactants = Bag(Molecule(smiles) for smiles in prediction.smiles.split("."))
    return SingleProductReaction(reactants=reactants, product=product, metadata=metadata)  # type: ignore[arg-type]


# ---- routes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteMolecule:
    smiles: str
    in_stock: bool
    made_by: "RouteStep | None" = None  # None: a starting material of the route


@dataclass(frozen=True)
class RouteStep:
    """One reaction of a route, read retrosynthetically: the product and the reactants it is made from."""
    product: str
    reactants: tuple[RouteMolecule, ...]
    score: float  # the single-step model's log-probability of these reactants
    model_rank: int  # its rank in the model's own order (Prediction.model_rank; can pass n_best, pooled)
    product_in_stock: bool = False  # only a target can be: a molecule in stock is not expanded
    confidence: float | None = None
    round_trip: bool | None = None
    forward_prob: float | None = None
    stereo: tuple[str, ...] = ()  # stereo_flags: centres and double bonds the step sets or changes, a sentence each
    # Heavy atoms of the product its reactants lack, (element, count) by element: such a step, kept where the atom check
    # is off (PlanSettings.check_atoms), cannot make its product as written, and was shown as any other
    missing: tuple[tuple[str, int], ...] = ()

    @property
    def probability(self) -> float:
        return math.exp(self.score)


def missing_text(step: RouteStep) -> str:
    """The atoms a step's reactants lack, '3 C, 4 O' (the CSV's lacks_atoms); "" for none."""
    return ", ".join(f"{n} {element}" for element, n in step.missing)


def lacks_text(step: RouteStep) -> str:
    """'lacks atoms of the product (2 C)', as the Predict page flags such an answer; "" for a step that lacks none."""
    return f"{LACKS_ATOMS} ({missing_text(step)})" if step.missing else ""


@dataclass(frozen=True)
class Route:
    target: RouteMolecule  # its made_by is the last step of the synthesis
    score: float  # the sum of its steps' scores: the log of the product of their probabilities

    def steps(self) -> list[tuple[int, RouteStep]]:
        """(depth, step) depth first from the target's step (depth 1): the synthesis read backwards. A step two
        branches share (one intermediate, made once, used twice) is listed once, where it is first met, as the
        route's score counts it once."""
        found: list[tuple[int, RouteStep]] = []
        seen: set[RouteStep] = set()

        def visit(molecule: RouteMolecule, depth: int) -> None:
            step = molecule.made_by
            if step is not None and step not in seen:
                seen.add(step)
                found.append((depth, step))
                for reactant in step.reactants:
                    visit(reactant, depth + 1)

        visit(self.target, 1)
        return found

    @property
    def probability(self) -> float:
        """The product of its steps' probabilities, as the Routes page titles it (the exports wrote the log alone)."""
        return math.exp(self.score)

    @property
    def n_steps(self) -> int:
        return len(self.steps())

    @property
    def depth(self) -> int:
        """Reactions on the longest path from a starting material to the target. Not the deepest step of steps(),
        which lists a step two branches share where it is first met, perhaps on the shorter branch."""

        def longest(molecule: RouteMolecule) -> int:
            step = molecule.made_by
            return 0 if step is None else 1 + max(longest(reactant) for reactant in step.reactants)

        return longest(self.target)

    def starting_materials(self) -> list[RouteMolecule]:
        """The molecules a chemist would order (each once), in the order the steps list them."""
        seen: dict[str, RouteMolecule] = {}
        for _, step in self.steps():
            for reactant in step.reactants:
                if reactant.made_by is None:
                    seen.setdefault(reactant.smiles, reactant)
        return list(seen.values())

    def uses(self) -> dict[str, int]:
        """Each starting material's SMILES (starting_materials' order) and how many times the steps use it: twice
        where one step takes two of it, or two steps one each."""
        uses: dict[str, int] = {}
        for _, step in self.steps():
            for reactant in step.reactants:
                if reactant.made_by is None:
                    uses[reactant.smiles] = uses.get(reactant.smiles, 0) + 1
        return uses


def starting_materials_text(route: Route) -> str:
    """'CCOC(=O)CP(=O)(OCC)OCC, O=Cc1ccccc1 (used twice)': the compounds to procure, as the Routes page and `molspec
    plan` list them. Each once, it read alike for a Horner-Wadsworth-Emmons step from one benzaldehyde and the
    model's answer of two, which the route's step shows."""
    return ", ".join(smiles + ("" if n == 1 else " (used twice)" if n == 2 else f" (used {n} times)")
                     for smiles, n in route.uses().items())


@dataclass(frozen=True)
class SearchStats:
    algorithm: str
    time_s: float  # the search and the reading of its routes
    time_limit_s: float
    iterations: int | None  # None: unknown, the search was stopped
    nodes: int  # in the search graph
    counts: ExpansionCounts = field(default_factory=ExpansionCounts)
    target_in_stock: bool = False
    search_s: float = math.inf  # the search alone, before its routes were read (unknown: taken as the whole limit)
    # What stopped the search before its end, by its name (KeyboardInterrupt: Ctrl-C; Terminated: SIGTERM;
    # SearchStopped: the Routes page's Stop, or leaving the page); None: it ended, at its time limit or out of molecules
    stopped_by: str | None = None
    # Whether it left a molecule unexpanded because the step limit (PlanSettings.max_steps) was reached there: only then
    # may a higher limit find routes that this search could not
    step_limit_reached: bool = False

    @property
    def model_calls(self) -> int:
        """Calls of the single-step model: one per molecule it was asked to expand, failed ones included."""
        return self.counts.molecules + self.counts.failed

    @property
    def ran_out(self) -> bool:
        """Whether the search stopped before its time limit. Neither search stops early for any other reason,
        so it had no molecule left to expand: each one it reached was expanded (the model's usable answers
        taken), in the stock, or at the step limit. More time would have found nothing more. A search stopped
        (stopped_by) did not run out: it was cut off."""
        return self.stopped_by is None and self.search_s < self.time_limit_s


@dataclass(frozen=True)
class PlanSettings:
    """How the single-step model is asked and the search bounded; each PlanResult records its own."""
    method: str = EXACT_NBEST  # the fastest exact n-best method (methods.py)
    n_best: int = 10  # answers per expansion: a wider tree, at the cost of a longer expansion
    max_steps: int = 5  # Retro*: reactions on a path; MCTS: reactions in all. Longer routes are rarely made
    round_trip_k: int = 1  # the forward model's top-k that must give the product back
    check_atoms: bool = True  # skip reactant sets that lack heavy atoms of the product: they cannot make it
    batch_size: int = 8  # molecules per decoder batch (MCTS expands several at once)
    augment: int = 1  # writings of each molecule the model reads (Predictor.predict's augment): N times the work


@dataclass(frozen=True)
class PlanResult:
    target: str  # canonical
    routes: tuple[Route, ...]  # solved ones, best first
    stats: SearchStats
    model: str  # the retrosynthesis model's folder
    forward_model: str | None  # the round-trip checker's folder; None: no check
    stock: str  # the stock's source
    stock_size: int
    stock_unreadable: int = 0  # entries of the stock file RDKit could not read, left out
    # How the routes were made, recorded with them: a page whose settings change later must not relabel them
    settings: PlanSettings = PlanSettings()
    dtype: str = "float32"  # what the models' decoder calls computed with (Predictor.dtype)
    max_routes: int = 10
    # What the target's stereo says that the model does not read (chem.stereo_notes: a CXSMILES's racemate, an @ RDKit
    # drops): the routes are to the molecule as read, which the Predict page says and the Routes page did not; and a
    # form of the target the model was not trained on (target_form_notes: no carbon, an ion)
    target_notes: tuple[str, ...] = ()
    stock_first_unreadable: str = ""  # Stock.first_unreadable: which entry was left out first, and why
    stock_column: str = ""  # Stock.column: the column (or SD data field) its SMILES were read from, "" for none
    stock_sheet: str = ""  # Stock.sheet: the workbook's sheet they were read from, where it has several

    @property
    def stock_read_from(self) -> str:
        return stock_read_from(self.stock, self.stock_column, self.stock_sheet)

    @property
    def solved(self) -> bool:
        return bool(self.routes)


# ---- the search ---------------------------------------------------------------------------------


class _Stoppable:
    """A syntheseus search that also stops once its progress callback has asked it to (PredictorModel.stop; another
    reaction model has no callback), which it calls between expansions too (PredictorModel.report_if_due)."""

    def should_stop_search(self, graph) -> bool:
        model = self.reaction_model  # type: ignore[attr-defined]
        if isinstance(model, PredictorModel):
            model.report_if_due()
            if model.stop is not None:
                return True
        return super().should_stop_search(graph)  # type: ignore[misc]


class _RetroStar(_Stoppable, RetroStarSearch):
    pass


class _MCTS(_Stoppable, MolSetMCTS):
    """syntheseus's MCTS over molecule sets, which also stops once no node can be expanded: it would
    otherwise revisit the same dead ends until the time limit."""

    def should_stop_search(self, graph) -> bool:
        return super().should_stop_search(graph) or not any(self.can_expand_node(n, graph) for n in graph.nodes())


def search_algorithm(algorithm: str, model: PredictorModel, stock: Stock, time_limit_s: float, max_steps: int):
    """Retro* (constant value function, step cost -log p) or MCTS (PUCB with the model's probabilities as
    policy, reward 1 for a solved molecule set), configured as syntheseus's own command line does."""
    shared = dict(reaction_model=model, mol_inventory=stock, time_limit_s=time_limit_s,
                  prevent_repeat_mol_in_trees=True,  # no A -> ... -> A loops
                  expand_purchasable_target=True)  # a target in stock still gets its routes
    if algorithm == "retro*":
        return _RetroStar(**shared, max_expansion_depth=2 * max_steps,  # the AND/OR depth counts molecules too
                               value_function=ConstantNodeEvaluator(0.0), and_node_cost_fn=ReactionModelLogProbCost())
    return _MCTS(**shared, max_expansion_depth=max_steps, value_function=ConstantNodeEvaluator(0.5),
                 reward_function=HasSolutionValueFunction(), policy=ReactionModelProbPolicy(),
                 bound_function=pucb_bound, random_state=random.Random(0))  # seeded: the same run twice


def check_target(target: str, predictor: Predictor) -> str:
    """The canonical target, or ValueError saying why it cannot be planned for."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError("empty target: give the SMILES of the molecule to make")
    # A reaction SMILES first: its dots separate reactants, and what it needs to hear is that it is a reaction.
    smiles = written_smiles(target)
    # In a SMILES a dot only ever separates molecules. One with a space beside it is no SMILES, nor one RDKit cannot
    # read: a numbered list's '1. CCO' or '1.CCO', a note's '(1.5 g)' were refused as several molecules; prepare says
    # what it cannot read, or names the SMILES it reads out of them.
    if "." in smiles and ">" not in smiles and len(smiles.split()) == 1 and canonical_or_none(smiles) is not None:
        raise ValueError(several_molecules(target.strip(), smiles))
    return predictor.prepare(target, one_molecule=True).canonical  # ValueError for what it cannot read, saying why


def written_smiles(target: str) -> str:
    """The SMILES whose dots say whether a target holds several molecules: a CXSMILES's before its |...| part, whose
    coordinates (|(0,0,;1.5,0,)|) hold dots; an InChI's as the service reads it (its AuxInfo and InChIKey dropped:
    an InChI copied with its AuxInfo, whose coordinates hold dots too, was refused as several molecules, and a salt's
    InChI named no molecule to plan for); "" for an InChI RDKit cannot read, which prepare refuses saying why."""
    text = inchi_alone(target.strip())
    if text[:6].casefold() != "inchi=":
        return text.split("|")[0].strip()
    try:
        return smiles_from_inchi("InChI=" + text[6:])  # its prefix in any case, as the service reads it
    except ChemError:
        return ""


def several_molecules(target: str, smiles: str | None = None) -> str:
    """Why a target of several molecules (a salt, a solvate, a mixture) is refused, naming the molecule to plan for
    where RDKit reads it (`smiles`, the target as written_smiles reads it; the target itself where not given): its
    main molecule, and where that is a salt's ion its neutral form (chem.product_alone), as the Predict page names it:
    sodium benzoate was offered the benzoate ion, which the model's training data nearly never hold, and sodium
    chloride the sodium ion."""
    refusal = f"the target {target[:80]!r} has several molecules"
    smiles = target if smiles is None else smiles
    try:
        if not holds_carbon(smiles):
            return f"{refusal}, none of them holding carbon: {INORGANIC}"
        refusal += "; plan a route to one at a time"
        main, alone = canonical(main_molecule(smiles)), product_alone(smiles)
    except ChemError:
        return refusal
    if alone != main:
        return f"{refusal}: its main molecule (the most heavy atoms) is {main}, a salt's ion; plan for {alone}"
    return f"{refusal}: its main molecule (the most heavy atoms) is {main}"


# Why a search for a target without carbon means nothing (the Predict page's note says it of the model's answers)
INORGANIC = "the retrosynthesis model was trained on organic products (USPTO-50K), and its routes to an inorganic " \
            "compound mean nothing"


def target_form_notes(target: str) -> list[str]:
    """What a chemist should know of a target (canonical, one molecule) written in a form the model was not trained
    on, as the Predict page notes it of a retrosynthesis query (service.several_products_note): one holding no carbon,
    or an ion a proton explains (acetate, CC(=O)[O-]), named with its neutral form. Water and acetate were searched
    for without a word."""
    if not holds_carbon(target):
        return [f"The target holds no carbon: {INORGANIC}."]
    neutral = product_alone(target)
    if neutral == target:
        return []
    return [f"The target is written with charges a proton explains (an ion or a zwitterion), where the model's "
            f"training data write nearly every such product in its neutral form, and the model may take the charged "
            f"one apart as some other molecule. To plan for the neutral compound, give {neutral}."]


def recorded_reaction(target: str) -> tuple[str, tuple[str, ...]]:
    """A target pasted as a recorded reaction, 'reactants>>product' or 'reactants>reagents>product': its product, to
    plan for, and a note saying so, as the Predict page's retrosynthesis reads such a reaction for its product. The
    Routes page refused it, naming command-line tools. Any other target comes back as given, with no note."""
    parts = reaction_sides(target.strip())
    if len(parts) != 3 or not parts[0].strip() or not parts[2].strip():
        return target, ()
    product = parts[2].strip()
    return product, (f"Read as a reaction SMILES: the routes are planned for its product, {product}; its recorded "
                     f"reactants, {parts[0].strip()}, are not used by the search.",)


def check_time_limit(time_limit_s: float) -> None:
    """ValueError unless a search's time limit is above 0 and at most MAX_TIME_LIMIT_S (the CLI asks before it
    loads the models)."""
    if not 0 < time_limit_s <= MAX_TIME_LIMIT_S:  # also false for NaN
        raise ValueError(f"the time limit must be above 0 and at most {MAX_TIME_LIMIT_S:g} s, not {time_limit_s}")


@rdkit_quietly
def plan(target: str, predictor: Predictor, stock: Stock, time_limit_s: float = 30.0, algorithm: str = "retro*",
         max_routes: int = 10, *, forward: Predictor | None = None, settings: PlanSettings = PlanSettings(),
         progress: Progress | None = None) -> PlanResult:
    """Routes from `target` to molecules in `stock` found within `time_limit_s`, best first. Stopped part way (Ctrl-C,
    SIGTERM, a failure, SearchStopped from `progress`), what it raises carries the routes found before the stop as its
    `partial_result` (a PlanResult whose stats name the stop), or None where they could not be read: the caller keeps
    them."""
    if predictor.task == "forward":
        raise ValueError(f"planning needs a retrosynthesis model; {predictor.path.name} predicts forward")
    if forward is not None and forward.task != "forward":  # check_round_trip's refusal came mid-search
        raise ValueError(f"the round-trip check needs a forward model; {forward.path.name} is a {forward.task} model")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown search algorithm {algorithm!r}; choose {' or '.join(ALGORITHMS)}")
    check_time_limit(time_limit_s)
    if max_routes < 1 or settings.max_steps < 1:
        raise ValueError("max_routes and max_steps must be 1 or more")
    predictor.check_augment(settings.augment)
    target, reaction_notes = recorded_reaction(target)
    canonical_target = check_target(target, predictor)
    model = PredictorModel(predictor, forward, settings.method, settings.n_best, settings.batch_size,
                           settings.round_trip_k, settings.check_atoms, progress, settings.augment)
    search = search_algorithm(algorithm, model, stock, time_limit_s, settings.max_steps)
    target_mol = Molecule(canonical_target)
    notes = (*reaction_notes, *stereo_notes(target), *target_form_notes(canonical_target))
    graph = search.create_graph(target_mol)  # made here, not in run_from_mol: a stopped search keeps its routes

    def result(iterations: int | None, stopped_by: str | None = None) -> PlanResult:
        search_s = time.monotonic() - model.started
        routes = extract_routes(graph, stock, max_routes)
        stats = SearchStats(algorithm, time.monotonic() - model.started, time_limit_s, iterations, len(graph),
                            dataclasses.replace(model.counts), stock.is_purchasable(target_mol), search_s,  # a copy
                            stopped_by, reached_step_limit(search, graph))
        return PlanResult(canonical_target, tuple(routes), stats, predictor.path.name,
                          forward.path.name if forward else None, stock.source, len(stock), stock.n_unreadable,
                          settings, predictor.dtype, max_routes, notes, stock.first_unreadable,
                          stock.column, stock.sheet)

    model.started = model.reported = time.monotonic()
    model.deadline = model.started + time_limit_s
    try:
        iterations = search.run_from_graph(graph)
    # Ctrl-C after 50 minutes of an hour's search lost the routes it had found. Not for a BaseException of another
    # kind: Streamlit stops or reruns the Routes page with one, which reads no partial routes and should not wait
    except (Exception, KeyboardInterrupt, Terminated) as stop:
        try:
            stop.partial_result = result(None, type(stop).__name__)
        except Exception:  # noqa: BLE001  (a graph the stop left unreadable: the stop's own error is the one to see)
            stop.partial_result = None
        raise
    if model.stop is not None:
        model.stop.partial_result = result(iterations, type(model.stop).__name__)
        raise model.stop
    return result(iterations)


def reached_step_limit(search, graph: AndOrGraph | MolSetGraph) -> bool:
    """Whether the search left a molecule unexpanded, not in stock, because the step limit was reached there (the
    search's max_expansion_depth, which search_algorithm sets from it)."""
    return any(node.depth >= search.max_expansion_depth and not node.is_expanded and not node.has_solution
               for node in graph.nodes())


def no_route(stats: SearchStats) -> str:
    """Why a search found no route, for people: its time ran out, or (well before) its molecules to expand did,
    and then more time cannot help."""
    if stats.stopped_by:
        return f"no route to the stock was found before the search was stopped, {stats.search_s:.1f} s in"
    if not stats.ran_out:
        return f"no route to the stock was found within {stats.time_limit_s:g} s"
    stopped = f"no route to the stock was found, and the search stopped after {stats.search_s:.1f} s of its " \
              f"{stats.time_limit_s:g} s"
    if stats.counts.kept == 0:  # not a step from the target: its routes were not cut by the step limit or the stock
        return (f"{stopped}: the model proposed no usable reactants for the target itself{unusable(stats.counts)}, so "
                "neither more time nor a larger stock would help")
    return (f"{stopped}: it ran out of molecules to expand (the model proposed no usable reactants that lead to the "
            "stock within the step limit), so more time would not help")


def unusable(counts: ExpansionCounts) -> str:
    """Why none of the model's answers for a target could be used, where it gave any: a 400-carbon chain's came back
    shorter than the chain, each lacking atoms of it, and the Routes page said 'A larger stock might help'."""
    lacking, flagged = counts.missing_atoms, counts.answers - counts.missing_atoms
    if not counts.answers:
        return ""  # the model gave none (failure_note says why)
    if lacking and flagged:
        return f" (of its {counts.answers} answers, {flagged} {'was' if flagged == 1 else 'were'} invalid or " \
               f"flagged and {lacking} lacked atoms of the target)"
    why = "lacked atoms of the target" if lacking else f"{'was' if counts.answers == 1 else 'were'} invalid or flagged"
    return f" (its answer {why})" if counts.answers == 1 else f" (all {counts.answers} of its answers {why})"


def extract_routes(graph: AndOrGraph | MolSetGraph, stock: Stock, max_routes: int) -> list[Route]:
    """The solved routes of a search graph, cheapest first, each once. A route's cost is minus the sum of its
    reactions' log-probs, a reaction two branches share counted once, as Route.score counts it: syntheseus's own
    order counted it once per branch of Retro*'s tree, and put a 2% route above a 2.5% one."""
    for node in graph.nodes():
        node.data["route_reaction"] = _reaction_into(node, graph)
    routes: list[Route] = []
    seen: set[frozenset[str]] = set()
    # MCTS's molecule-set tree holds one route once per order its reactions can be made in: the iterator is asked
    # for every route (bounded by time), not for max_routes, which those copies used up (4 routes found, 2 given)
    for _, nodes in _iter_top_routes(graph, _route_cost, _partial_route_cost, sys.maxsize,
                                     max_time_s=ROUTE_EXTRACTION_S):
        if len(nodes) == 1:
            continue  # the target alone: in stock, but no reaction was found for it
        synthesis = graph.to_synthesis_graph(nodes)
        key = frozenset(r.reaction_smiles for r in synthesis.nodes())
        if key not in seen:
            seen.add(key)
            routes.append(to_route(synthesis, stock))
            if len(routes) == max_routes:
                break
    return routes


def _reaction_into(node, graph) -> SingleProductReaction | None:
    """The reaction a node stands for (AND/OR graph) or was reached by (molecule-set graph); None for a molecule."""
    if isinstance(node, AndNode):
        return node.reaction
    if isinstance(graph, MolSetGraph) and node is not graph.root_node:
        parent = next(iter(graph.predecessors(node)))
        return graph._graph.edges[parent, node]["reaction"]  # syntheseus keeps it on the edge
    return None


def _reactions_cost(nodes) -> float:
    """Minus the summed log-probs of the nodes' reactions, each distinct reaction once. fsum rounds exactly, so
    adding a node never lowers it: the partial cost stays a lower bound, as the route iterator asserts."""
    reactions = {node.data["route_reaction"] for node in nodes} - {None}
    return -math.fsum(reaction.metadata["score"] for reaction in reactions)


def _route_cost(nodes, graph) -> float:
    """A whole route's cost; infinite unless it is solved."""
    return _reactions_cost(nodes) if _route_has_solution(nodes, graph) else math.inf


def _partial_route_cost(nodes, graph) -> float:
    """A lower bound on the cost of every route that holds these nodes (steps' log-probs are at most 0)."""
    return _reactions_cost(nodes) if all(node.has_solution for node in nodes) else math.inf


def to_route(synthesis: SynthesisGraph, stock: Stock) -> Route:
    """The route a solved synthesis graph holds, as a tree read from the target. Each reactant is made by the
    reaction the graph links to its own parent (graph edges, not one reaction per molecule: two branches may
    make one intermediate two ways); a reaction two parents share appears under both, and Route.steps lists it
    once."""

    def molecule(mol: Molecule, rxn: SingleProductReaction | None, path: frozenset[Molecule]) -> RouteMolecule:
        if rxn is None or mol in path:  # the guard against a loop, which a solved route cannot have
            return RouteMolecule(mol.smiles, stock.is_purchasable(mol))
        meta = rxn.metadata
        made_by = {child.product: child for child in synthesis.successors(rxn)}
        # Each reactant as the model wrote it, twice where it is used twice (two anisic acids make the anhydride):
        # unique_reactants showed one, a step lacking half the product's atoms, which the search had not checked
        reactants = tuple(molecule(r, made_by.get(r), path | {mol}) for r in rxn.reactants)  # a Bag: sorted
        in_stock = stock.is_purchasable(mol)
        written = tuple(r.smiles for r in reactants)
        step = RouteStep(mol.smiles, reactants, meta["score"], meta["model_rank"], in_stock, meta.get("confidence"),
                         meta.get("round_trip"), meta.get("forward_prob"), stereo_flags(mol.smiles, written),
                         tuple(sorted(missing_atoms(".".join(written), mol.smiles).items())))
        return RouteMolecule(mol.smiles, in_stock, step)

    root = synthesis.root_node
    return Route(molecule(root.product, root, frozenset()), sum(rxn.metadata["score"] for rxn in synthesis.nodes()))


# ---- the stereo of a step ------------------------------------------------------------------------

TETRAHEDRAL = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
# A double bond's geometry as RDKit reads it from a SMILES (E, Z) or sets it otherwise (cis, trans): each relative to
# the bond's two stereo atoms, the first a neighbour of its begin atom, the second of its end atom
GEOMETRIES = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOZ, Chem.BondStereo.STEREOCIS, Chem.BondStereo.STEREOTRANS)
OPPOSITE_SIDES = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOTRANS)  # the stereo atoms across the bond
STEREO_MCS_TIMEOUT_S = 1  # per product and reactant (RDKit counts whole seconds); drug-sized pairs take milliseconds
MAX_PLACEMENTS = 256  # ways of laying the shared substructure on the product compared (a benzene ring has 12)
MAX_FITS = 8  # places it fits in the reactant compared
MAX_ORDERS = 6  # orders of the reactants tried: every order of three
STEREO_DEADLINE_S = 2.0  # per step (as centre.DEADLINE_S): past it the step says its stereo is unchecked
KEPT, INVERTED, UNDECIDED = "kept", "inverted", "undecided"  # a product centre traced to a reactant centre
# What the stereo trace follows: a tetrahedral centre by its atom, a double bond with a geometry by its two atoms
Element = int | tuple[int, int]


@functools.lru_cache(maxsize=4096)
def stereo_flags(product: str, reactants: tuple[str, ...]) -> tuple[str, ...]:
    """What a step does to stereo that a chemist must check, a sentence per kind; () where it does nothing of note.

    The rule: the product's atoms are traced to the reactants, one reactant after another, each by the largest
    substructure it shares with the product's atoms still untraced (elements matched, any bond order). A specified
    tetrahedral centre of the product (@ or @@) is *set in the step* where it is not traced to a specified centre
    of a reactant (a chiral product from reactants written without that stereo: it needs a stereoselective
    reaction or a separation), and *inverted* where the reactant centre it is traced to has the opposite
    arrangement of the neighbours the two share (D-alanine proposed for Boc-L-alanine; an SN2 step). A double bond
    of the product with its geometry given (/ and \\) is likewise *set* where its two atoms are not traced to the
    atoms of a reactant double bond with a geometry given (a Wittig or Heck reaction, an alkyne reduced), and
    *isomerized* where that double bond has the other geometry (a Z-alkene proposed for an E one). Of the orders
    the reactants can be taken in and the ways a substructure can be laid on the product (symmetric atoms swap),
    the trace that sets, then inverts, the fewest counts: a flag means no such reading spares it. A centre or
    double bond whose neighbours cannot be paired up is not flagged. It is an estimate, as the reaction centre is:
    the model writes no atom map."""
    product_mol = Chem.MolFromSmiles(product)
    if product_mol is None:
        return ()
    centres = [atom.GetIdx() for atom in product_mol.GetAtoms() if atom.GetChiralTag() in TETRAHEDRAL]
    # E/Z was not checked: a Z-alkene proposed for an E one passed without a word
    double_bonds = [(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()) for bond in product_mol.GetBonds()
                    if bond.GetBondType() == Chem.BondType.DOUBLE and bond.GetStereo() in GEOMETRIES]
    elements: list[Element] = [*centres, *double_bonds]
    reactant_mols = {smiles: Chem.MolFromSmiles(smiles) for smiles in reactants}
    if not elements or any(mol is None for mol in reactant_mols.values()):
        return ()
    deadline = time.monotonic() + STEREO_DEADLINE_S
    best: dict[Element, str] | None = None
    orders = list(dict.fromkeys(itertools.permutations(reactants)))  # a reactant used twice: its swap is no new order
    for order in orders[:MAX_ORDERS]:
        traced = _trace_stereo(product_mol, [reactant_mols[smiles] for smiles in order], elements, deadline)
        if traced is None:  # out of time: a partial trace would flag centres it never reached
            return ("was not checked for stereo: tracing its atoms to the reactants took too long",)
        if best is None or _flag_count(traced, elements) < _flag_count(best, elements):
            best = traced
        if _flag_count(best, elements) == (0, 0):
            break
    assert best is not None
    rdCIPLabeler.AssignCIPLabels(product_mol)
    set_here = [c for c in centres if c not in best]
    inverted = [c for c in centres if best.get(c) == INVERTED]
    bonds_set = [b for b in double_bonds if b not in best]
    isomerized = [b for b in double_bonds if best.get(b) == INVERTED]
    flags = []
    if set_here:
        flags.append(f"sets {_centres_text(product_mol, set_here)}: traced to no specified stereocentre of the "
                     "reactants (a stereoselective step or a separation)")
    if bonds_set:
        flags.append(f"sets the geometry of {_bonds_text(product_mol, bonds_set)}: traced to no double bond of the "
                     "reactants with its geometry given (an E/Z-selective step, such as a Wittig or Heck reaction, or "
                     "a separation)")
    if inverted:
        flags.append(f"inverts {_centres_text(product_mol, inverted)}: traced to a reactant stereocentre arranged "
                     "the other way")
    if isomerized:
        flags.append(f"isomerizes {_bonds_text(product_mol, isomerized)}: traced to a reactant double bond of the "
                     "other geometry")
    return tuple(flags)


def _flag_count(traced: dict[Element, str], elements: list[Element]) -> tuple[int, int]:
    """(centres and double bonds set in the step, those inverted or isomerized) by a trace."""
    return len(elements) - len(traced), sum(verdict == INVERTED for verdict in traced.values())


def _centres_text(mol: Chem.Mol, centres: list[int]) -> str:
    """'the stereocentre at atom 2 (S)' or 'the stereocentres at atoms 2 (S), 5 (R)', atoms counted from 1 along the
    product's SMILES."""
    many = len(centres) > 1
    labels = ", ".join(f"{c + 1} ({mol.GetAtomWithIdx(c).GetPropsAsDict().get('_CIPCode', '?')})" for c in centres)
    return f"the stereocentre{'s' if many else ''} at atom{'s' if many else ''} {labels}"


def _bonds_text(mol: Chem.Mol, bonds: list[tuple[int, int]]) -> str:
    """'the double bond at atoms 2=3 (E)' or 'the double bonds at atoms 2=3 (E), 6=7 (Z)', atoms counted as
    _centres_text counts them."""
    many = len(bonds) > 1
    labels = ", ".join(f"{a + 1}={b + 1} ({mol.GetBondBetweenAtoms(a, b).GetPropsAsDict().get('_CIPCode', '?')})"
                       for a, b in bonds)
    return f"the double bond{'s' if many else ''} at atoms {labels}"


def _trace_stereo(product: Chem.Mol, reactants: list[Chem.Mol], elements: list[Element],
                  deadline: float) -> dict[Element, str] | None:
    """Each product centre traced to a specified reactant centre, and each double bond to a reactant double bond with
    a geometry, KEPT, INVERTED or UNDECIDED, the reactants taken in the order given, each on the product atoms the
    ones before left untraced; None once past the deadline."""
    traced: dict[Element, str] = {}
    taken: set[int] = set()  # product atoms traced to a reactant before
    product_h = Chem.AddHs(product)  # heavy atoms keep their indices
    for reactant in reactants:
        if time.monotonic() > deadline:
            return None
        part, untraced = untraced_part(product, taken)
        found = rdFMCS.FindMCS([part, reactant], timeout=STEREO_MCS_TIMEOUT_S, ringMatchesRingOnly=True,
                               atomCompare=rdFMCS.AtomCompare.CompareElements,
                               bondCompare=rdFMCS.BondCompare.CompareAny)
        query = Chem.MolFromSmarts(found.smartsString) if found.numAtoms >= 2 else None
        if query is None:
            continue
        reactant_h = Chem.AddHs(reactant)
        reactant_centres = {atom.GetIdx() for atom in reactant.GetAtoms() if atom.GetChiralTag() in TETRAHEDRAL}
        best: tuple[dict[Element, str], tuple[int, ...]] | None = None
        for fit in reactant.GetSubstructMatches(query, maxMatches=MAX_FITS):
            for placement in part.GetSubstructMatches(query, uniquify=False, maxMatches=MAX_PLACEMENTS):
                to_reactant = {untraced[p]: r for p, r in zip(placement, fit)}
                verdicts: dict[Element, str] = {}
                for element in elements:
                    if isinstance(element, int) and to_reactant.get(element) in reactant_centres:
                        verdicts[element] = _arrangement(product_h, element, reactant_h, to_reactant[element],
                                                         to_reactant)
                    elif isinstance(element, tuple) and _reactant_geometry(reactant, element, to_reactant):
                        verdicts[element] = _geometry(product, element, reactant, to_reactant)
                if best is None or _flag_count(verdicts, elements) < _flag_count(best[0], elements):
                    best = verdicts, tuple(untraced[p] for p in placement)
        if best is not None:
            traced.update(best[0])
            taken.update(best[1])
    return traced


def _arrangement(product: Chem.Mol, centre: int, reactant: Chem.Mol, reactant_centre: int,
                 to_reactant: dict[int, int]) -> str:
    """KEPT where the product centre's neighbours stand around it as their reactant atoms stand around the reactant
    centre, INVERTED where mirrored, UNDECIDED where the neighbours do not pair up. Both molecules carry explicit
    hydrogens: a chiral tag orders a centre's bonds, and an implicit hydrogen has none. A neighbour outside the
    shared substructure on each side is taken as the one that replaced the other (a bromide by an azide)."""
    mapped = set(to_reactant.values())

    def neighbours(mol: Chem.Mol, atom: int, name: Callable[[int], str]) -> list[str]:
        out = []
        for bond in mol.GetAtomWithIdx(atom).GetBonds():
            other = bond.GetOtherAtom(mol.GetAtomWithIdx(atom))
            out.append("H" if other.GetAtomicNum() == 1 else name(other.GetIdx()))
        return out

    in_product = neighbours(product, centre, lambda i: str(to_reactant.get(i, "new")))
    in_reactant = neighbours(reactant, reactant_centre, lambda i: str(i) if i in mapped else "new")
    if sorted(in_product) != sorted(in_reactant) or len(set(in_product)) != len(in_product):
        return UNDECIDED
    order = [in_reactant.index(name) for name in in_product]
    odd = sum(a > b for i, a in enumerate(order) for b in order[i + 1:]) % 2 == 1
    same_tag = product.GetAtomWithIdx(centre).GetChiralTag() == reactant.GetAtomWithIdx(reactant_centre).GetChiralTag()
    return KEPT if same_tag != odd else INVERTED


def _reactant_geometry(reactant: Chem.Mol, ends: tuple[int, int], to_reactant: dict[int, int]) -> bool:
    """Whether the product double bond's two atoms are traced to the atoms of a reactant double bond with a geometry."""
    if ends[0] not in to_reactant or ends[1] not in to_reactant:
        return False
    bond = reactant.GetBondBetweenAtoms(to_reactant[ends[0]], to_reactant[ends[1]])
    return bond is not None and bond.GetBondType() == Chem.BondType.DOUBLE and bond.GetStereo() in GEOMETRIES


def _geometry(product: Chem.Mol, ends: tuple[int, int], reactant: Chem.Mol, to_reactant: dict[int, int]) -> str:
    """KEPT where a substituent of each end stands across the product's double bond as its reactant atom stands across
    the reactant's, INVERTED where the two stand the other way, UNDECIDED where no substituent of an end pairs up with
    one of the reactant's (_reactant_geometry holds). A substituent outside the shared substructure on each side is
    taken as the one that replaced the other (the aryl a Suzuki coupling puts where a vinyl bromide's bromine was)."""
    mapped = set(to_reactant.values())
    in_product, in_reactant = {}, {}  # each end's (in the product, in the reactant) substituent paired up
    for end, partner in (ends, ends[::-1]):
        theirs = [n.GetIdx() for n in product.GetAtomWithIdx(end).GetNeighbors() if n.GetIdx() != partner]
        ours = [n.GetIdx() for n in reactant.GetAtomWithIdx(to_reactant[end]).GetNeighbors()
                if n.GetIdx() != to_reactant[partner]]
        names = [to_reactant.get(atom, -1) for atom in theirs]  # -1: a new substituent
        reactant_names = [atom if atom in mapped else -1 for atom in ours]
        pair = next(((atom, name) for atom, name in zip(theirs, names)
                     if names.count(name) == 1 and reactant_names.count(name) == 1), None)
        if pair is None:
            return UNDECIDED
        in_product[end] = pair[0]
        in_reactant[to_reactant[end]] = ours[reactant_names.index(pair[1])]
    bond, reactant_bond = (product.GetBondBetweenAtoms(*ends),
                           reactant.GetBondBetweenAtoms(to_reactant[ends[0]], to_reactant[ends[1]]))
    if len(bond.GetStereoAtoms()) != 2 or len(reactant_bond.GetStereoAtoms()) != 2:  # RDKit gives them; if not
        return UNDECIDED
    return KEPT if _across(bond, in_product) == _across(reactant_bond, in_reactant) else INVERTED


def _across(bond: Chem.Bond, substituents: dict[int, int]) -> bool:
    """Whether the substituents given for the double bond's two atoms ({atom: substituent}) stand on opposite sides of
    it. RDKit gives the geometry of its stereo atoms; an atom of a double bond has at most two substituents, so the
    other one of an end stands on the other side."""
    first, second = bond.GetStereoAtoms()
    swapped = (substituents[bond.GetBeginAtomIdx()] != first) + (substituents[bond.GetEndAtomIdx()] != second)
    return (bond.GetStereo() in OPPOSITE_SIDES) != (swapped % 2 == 1)


def route_stereo(route: Route) -> list[str]:
    """The route's stereo flags, a line each, named by step number as steps() lists them (the page's and the CSV's
    numbers)."""
    return [f"step {number} ({step.product}) {flag}" for number, (_, step) in enumerate(route.steps(), start=1)
            for flag in step.stereo]


# ---- export -------------------------------------------------------------------------------------


def _molecule_json(molecule: RouteMolecule) -> dict:
    out: dict = {"smiles": molecule.smiles, "in_stock": molecule.in_stock}
    step = molecule.made_by
    if step is not None:
        out["reaction"] = {"score": rounded(step.score), "probability": significant(step.probability),
                           "model_rank": step.model_rank, "confidence": rounded(step.confidence),
                           "round_trip": step.round_trip, "forward_prob": significant(step.forward_prob),
                           "stereo": list(step.stereo), "lacks_atoms": dict(step.missing),  # {} where it lacks none
                           "reactants": [_molecule_json(r) for r in step.reactants]}
    return out


def routes_json(result: PlanResult) -> dict:
    """The plan as JSON: settings, search statistics, and each route as a tree (molecule -> reaction ->
    reactant molecules ...)."""
    stats = result.stats
    return {
        "target": result.target, "target_notes": list(result.target_notes), "solved": result.solved,
        "model": result.model, "forward_model": result.forward_model,
        "settings": settings_json(result),
        "stock": {"source": result.stock, "size": result.stock_size, "unreadable": result.stock_unreadable,
                  "first_unreadable": result.stock_first_unreadable or None,
                  "column": result.stock_column or None, "sheet": result.stock_sheet or None},
        "search": {"algorithm": stats.algorithm, "time_s": round(stats.time_s, 2), "time_limit_s": stats.time_limit_s,
                   "search_s": round(stats.search_s, 2) if math.isfinite(stats.search_s) else None,
                   "ran_out_of_molecules": stats.ran_out, "stopped_by": stats.stopped_by,
                   "iterations": stats.iterations, "nodes": stats.nodes, "model_calls": stats.model_calls,
                   "molecules_expanded": stats.counts.molecules,
                   "decoder_calls": stats.counts.decoder_calls, "answers": stats.counts.answers,
                   "answers_missing_atoms": stats.counts.missing_atoms, "answers_kept": stats.counts.kept,
                   # null without a forward model: no step was checked, where 0 would say none came back
                   "round_trips": stats.counts.round_trips if result.forward_model else None,
                   "failed_expansions": stats.counts.failed, "cut_at_time_limit": stats.counts.cut,
                   "first_failure": stats.counts.first_failure or None,
                   "target_in_stock": stats.target_in_stock},
        "routes": [{"rank": rank, "score": rounded(route.score), "probability": significant(route.probability),
                    "n_steps": route.n_steps, "depth": route.depth,
                    "starting_materials": [m.smiles for m in route.starting_materials()],
                    "starting_material_uses": route.uses(),  # {smiles: times the steps use it}
                    "tree": _molecule_json(route.target)}
                   for rank, route in enumerate(result.routes, start=1)],
    }


def settings_json(result: PlanResult) -> dict:
    """What made the routes: enough to run the same search again (`plan` on the command line takes each)."""
    settings = result.settings
    return {"model": result.model, "forward_model": result.forward_model, "algorithm": result.stats.algorithm,
            "time_limit_s": result.stats.time_limit_s, "max_routes": result.max_routes, "method": settings.method,
            "n_best": settings.n_best, "max_steps": settings.max_steps, "check_atoms": settings.check_atoms,
            "augment": settings.augment, "batch_size": settings.batch_size, "dtype": result.dtype,
            # null without a forward model: no step was checked, at any k
            "round_trip_k": settings.round_trip_k if result.forward_model else None}


def route_rows(result: PlanResult) -> Iterator[list[object]]:
    """One row per reaction step, in ROUTE_COLUMNS: routes best first, each from the target's step down."""
    for rank, route in enumerate(result.routes, start=1):
        for number, (depth, step) in enumerate(route.steps(), start=1):
            yield [rank, rounded(route.score), significant(route.probability), route.n_steps, number, depth,
                   step.product, _yes_no(step.product_in_stock), ".".join(r.smiles for r in step.reactants),
                   ";".join(_yes_no(r.in_stock) for r in step.reactants), rounded(step.score),
                   significant(step.probability), rounded(step.confidence), _yes_no(step.round_trip),
                   significant(step.forward_prob), step.model_rank, "; ".join(step.stereo), missing_text(step)]


def _yes_no(flag: bool | None) -> str:
    """A flag as the CSV writes every flag: yes or no, and empty where it was not checked (round trip without a
    forward model)."""
    return "" if flag is None else "yes" if flag else "no"
