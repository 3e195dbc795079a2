"""Known answers in a query file: how often the model gives them.

A chemist who uploads reactions with their recorded outcome (a CSV with a reactants and a product
column, say) wants to know how the model does on their own chemistry before trusting it. Output rows
(io.output_header's columns) get a last column, `matches_known`: whether the row's answer is the one
in the input's known-answer column, both canonical with stereo kept as `molspec evaluate` compares them, and
here each molecule once, a salt ionic or not alike and, for forward, both read by the rule the training products
were written by (answer_key); a forward answer that is the known product's main molecule alone counts too
(known_answers). A summary counts the queries whose known answer comes first, or
anywhere in the list.

A query that is itself a recorded reaction (`reactants>reagents>products`, as USPTO and most ELNs export them)
brings its known answer along: `recorded_reaction` splits one, `with_recorded` a whole file, whose recorded
outcomes then mark the answers as a known-answer column would.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .chem import (CXSMILES, MAX_QUERY_CHARS, ChemError, canonical, canonical_fragments, canonical_or_none, inchi_alone,
                   main_molecule, markup_refusal, mol_from_smiles, organometal_cation, product_alone, rdkit_quietly,
                   reaction_sides, rinchi_refusal, smiles_from_cxsmiles, smiles_from_inchi, uncharged)
from .data import forward_target
from .io import InputFileError, LastRow, QueryFile, column_key, percent, shown_cells

if TYPE_CHECKING:  # service imports torch; this module is read before a model loads
    from .service import QueryResult

MATCHES_KNOWN = "matches_known"
REACTION_COLUMN = "recorded_reaction"  # a recorded reaction as written (with_recorded)


def recorded_side(task: str) -> str:
    """The side of a recorded reaction a model of `task` predicts: its products (forward), else its reactants."""
    return "products" if task == "forward" else "reactants"


def recorded_column(task: str) -> str:
    """The column with_recorded adds for `task`: each recorded reaction's outcome."""
    return f"recorded_{recorded_side(task)}"


@rdkit_quietly  # a library's call: the ValueError says what RDKit cannot read, its own lines would repeat it
def recorded_reaction(text: str, task: str) -> tuple[str, str] | None:
    """A reaction SMILES with its outcome, 'reactants>reagents>products' (or 'reactants>>products'), as the query
    to predict and the recorded answer (canonical, atom maps removed). Forward predicts from the reactants and
    reagents and knows the products as the model was trained to write them (data.forward_target: those not among
    the reactants and reagents, an HCl salt's Cl or a counter-ion kept, as USPTO-MIT's targets keep them;
    known_answers also takes the main product alone). Retrosynthesis predicts from the main product (the largest
    product that is not a reactant or reagent, nor one protonated or not: its by-products were read as part of it,
    and a base's salt, triethylammonium chloride, was the query, larger than the amide it was made beside; a salt's
    ion in its neutral form, chem.product_alone, as Predictor.prepare's refusal of a salt names it) and knows
    the reactants (the reagents left out, as USPTO-50K lists reactants; in an atom-mapped record, only the molecules
    that give the product an atom: contributing; and never one the products list too, protonated or not: a base
    written among the reactants and again among the products passed through, so no answer could name the route
    the record was known by). None for any other text (Predictor.prepare reads it); ValueError where the recorded
    side is not a SMILES."""
    text = text.strip()
    if CXSMILES.fullmatch(text):
        try:
            text = smiles_from_cxsmiles(text)
        except ChemError:
            return None  # Predictor.prepare refuses it, saying why
    parts = reaction_sides(text)  # split at '>' alone, a record with a complex's dative bond ('->') was no reaction
    if len(parts) != 3 or not parts[0] or not parts[2]:
        return None
    refusal = markup_refusal(text) or rinchi_refusal(text)  # '<b>bold</b> text' was told 'the recorded products
    if refusal:  # are not a valid SMILES'; a reaction InChI's '<>' read as an arrow too
        raise ValueError(refusal)
    reactants, reagents, products = parts
    side = recorded_side(task)
    for name, written in zip(("reactants", "reagents", "products"), parts):  # before RDKit: a 5,000-atom ring's
        if len(written) > MAX_QUERY_CHARS:  # outcome took seconds, as no query may (a query's side is one)
            raise ValueError(f"the recorded {name} are {len(written):,} characters long; each side of a recorded "
                             f"reaction may hold {MAX_QUERY_CHARS:,}, as a query may")
    try:
        recorded = canonical_fragments(products if side == "products" else contributing(reactants, products))
        if side == "reactants":
            recorded = _not_among(recorded, _readable_fragments(products)) or recorded
    except ChemError as exc:
        raise ValueError(f"the recorded {side} are not a valid SMILES: {exc} (the text holds '>', so it was read as "
                         "a recorded reaction, reactants>reagents>products)") from None
    if not recorded:
        raise ValueError(f"the recorded {side} hold no molecule")
    sources = _readable_fragments(f"{reactants}.{reagents}")  # what the forward model reads
    if side == "products":  # a record whose every product is a reactant or reagent keeps them all
        return f"{reactants}>{reagents}>", canonical(forward_target(sources, recorded) or ".".join(recorded))
    made = _readable_fragments(products)  # none: Predictor.prepare refuses the products as written, saying why
    if len(made) > 1:  # retrosynthesis takes one product: the main one, as USPTO-50K lists its products (a salt's
        products = product_alone(".".join(_not_among(made, sources) or made))  # ion neutral, as prepare names it)
    return products, canonical(".".join(recorded))


def _not_among(molecules: list[str], others: list[str]) -> list[str]:
    """The canonical `molecules` that are none of `others`, each compared without the charges a proton explains
    (chem.uncharged: triethylamine and its ammonium ion alike), sorted."""
    seen = {_uncharged(other) for other in others}
    return sorted(m for m in molecules if _uncharged(m) not in seen)


def _readable_fragments(smiles: str) -> list[str]:
    """chem.canonical_fragments of a SMILES, or none where RDKit cannot read it."""
    try:
        return canonical_fragments(smiles)
    except ChemError:
        return []


def contributing(reactants: str, products: str) -> str:
    """The molecules of a recorded reaction's reactant side that give the product an atom, where the record is
    atom-mapped: those with an atom whose map number a product atom carries. USPTO's records often list a base,
    catalyst or solvent among the reactants, unmapped; USPTO-50K, which the retrosynthesis model learned from,
    lists the reactants alone. The reactant side as written where nothing tells (no maps, none shared, a side
    RDKit cannot read: canonical_fragments then says why)."""
    try:
        made = _map_numbers(products)
        molecules = [(part, _map_numbers(part)) for part in reactants.split(".") if part]
    except ChemError:
        return reactants
    kept = [part for part, maps in molecules if maps & made]
    return ".".join(kept) if kept else reactants


def _map_numbers(smiles: str) -> set[int]:
    """The atom-map numbers of a SMILES's atoms (0, unmapped, left out); ChemError where RDKit cannot read it."""
    return {atom.GetAtomMapNum() for atom in mol_from_smiles(smiles).GetAtoms()} - {0}


def known_answers(known: str | None, task: str, query: str = "") -> frozenset[str]:
    """The answers (answer_key's, for the same query) that are a known answer: the known answer itself and, for
    forward, where it lists several molecules, its main molecule alone (chem.main_molecule). A chemist asks
    whether the model made the product: one recorded as its HCl salt or beside its by-product is made by an answer
    that names the product alone, and the model, trained on USPTO-MIT's targets, writes either form. An answer
    with a molecule the record lacks is not the recorded product, and a retrosynthesis answer lacking a recorded
    reactant is not the recorded route (any task but forward is compared so; a salt's alkali cation is no reactant
    there: _key). Empty where `known` is None, empty
    or no molecule RDKit reads (read_known)."""
    want = _key(read_known(known) if known else None, task, query)
    if want is None:
        return frozenset()
    if task == "forward" and "." in want:
        return frozenset({want, _molecules(main_molecule(want))})
    return frozenset({want})


@rdkit_quietly  # None says RDKit cannot read the answer
def answer_key(answer: str, task: str, query: str = "") -> str | None:
    """An answer to `query` (the canonical query the model read) as known answers are compared with it: canonical
    (atom maps removed, stereo kept), each molecule once and without the charges a proton explains (chem.uncharged),
    and for forward without the molecules the model read (data.forward_target's rule, by which its training
    products were written; all of them where each is one); None for one RDKit cannot read. A reaction SMILES
    repeats a molecule for its equivalents (a dihydrochloride's 'X.Cl.Cl', two of a reagent as 'A.A.B'), which
    neither model's training targets do (USPTO-MIT's products and USPTO-50K's reactants list each molecule once),
    so the models write each once; a salt is written ionic or not (an amine's HCl salt as 'CC[NH3+].[Cl-]' or
    'CCN.Cl': USPTO-MIT's targets hold both), the same compound either way; and an HCl salt made with HCl among
    the reagents is recorded 'X.Cl' or, by the training rule, 'X', which the model may write either way."""
    return _key(canonical_or_none(answer), task, query)


# Lone alkali metal cations: USPTO-50K, which the retro model learned from, lists none among a reaction's reactants
# (none in its 39,964 training reactant sets: sodium azide is [N-]=[N+]=[N-] there, potassium acetate CC(=O)[O-]),
# and the shipped retro model's vocabulary cannot write one.
ALKALI_CATIONS = frozenset({"[Li+]", "[Na+]", "[K+]", "[Rb+]", "[Cs+]"})


def _key(smiles: str | None, task: str, query: str) -> str | None:
    """answer_key of a canonical SMILES (None stays None): a known answer is read so too. Reactants (any task but
    forward) are compared without a salt's alkali cation (ALKALI_CATIONS): a known route through sodium azide or
    sodium acetate, as a chemist writes it, matched no answer the model could write."""
    molecules = _molecules(smiles)
    if molecules is None:
        return None
    if task != "forward":
        return ".".join(part for part in molecules.split(".") if part not in ALKALI_CATIONS) or molecules
    sources = (_molecules(canonical_or_none(query)) or "").split(".")
    return forward_target(sources, molecules.split(".")) or molecules


def _molecules(smiles: str | None) -> str | None:
    """A canonical SMILES's molecules, each uncharged (chem.uncharged) and once, sorted (None stays None); a Grignard
    or organozinc reagent as its cation (chem.organometal_cation): the retro model writes methylmagnesium bromide
    as USPTO-50K does, [CH3][Mg+], and its answer was not the known C[Mg]Br (the textbook Grignard addition's)."""
    if smiles is None:
        return None
    return ".".join(sorted({_uncharged(organometal_cation(part)) for part in smiles.split(".")}))


def _uncharged(molecule: str) -> str:
    """chem.uncharged, or the molecule as it is where RDKit cannot read it alone (a part of a SMILES it read whole:
    never seen, but a marked file of 100,000 queries is not lost for it)."""
    try:
        return uncharged(molecule)
    except ChemError:
        return molecule


@rdkit_quietly  # None says RDKit reads no molecule; its own lines, on a library caller's stderr, would be noise
def read_known(text: str) -> str | None:
    """A known answer as a query is read (Predictor.prepare): a SMILES, a CXSMILES (as Marvin and ChemDraw copy
    one) or an InChI (as registration systems export one), canonical without atom maps; None where RDKit reads no
    molecule in it (a tokenized 'C C O' included: chem.canonical_or_none)."""
    text = text.strip()
    try:
        if CXSMILES.fullmatch(text):
            text = smiles_from_cxsmiles(text)
        elif text[:6].casefold() == "inchi=":  # as prepare reads one: its prefix in any case, its AuxInfo dropped
            text = smiles_from_inchi("InChI=" + inchi_alone(text)[6:])
    except ChemError:
        return None
    return canonical_or_none(text)


def is_known(answer: str, known: str | None, result: QueryResult) -> bool:
    """Whether an answer in `result` is the known one (known_answers, for the model's task and its query), as
    known_rank ranks it and KnownMarks marks it: the Predict page's badge on each answer."""
    return answer_key(answer, result.task, result.canonical_query) in known_answers(known, result.task,
                                                                                    result.canonical_query)


def known_rank(result: QueryResult, known: str | None) -> int | None:
    """The rank of the first valid answer in `result` that is the known answer (known_answers, for the model's
    task, QueryResult.task, and its query), or None when none is it."""
    wanted = known_answers(known, result.task, result.canonical_query)
    return next((p.rank for p in result.predictions
                 if p.valid and answer_key(p.smiles, result.task, result.canonical_query) in wanted), None)


def with_recorded(table: QueryFile, task: str) -> tuple[QueryFile, str | None]:
    """A file whose queries include recorded reactions: those queries become what `task` predicts from, their
    recorded outcome goes in a column of its own (recorded_column, after the file's columns), and that column's
    name comes back, for KnownMarks; the reaction as written goes in the column after it (REACTION_COLUMN: the
    query and the outcome hold only what the model reads and the outcome canonical, so the reagents of a
    retrosynthesis query, say, would be lost). Other queries keep their text and get empty cells. A recorded
    outcome that is no SMILES refuses that row alone (its problem, which io.result_rows reports; its text kept).
    The file unchanged, and None, where no query holds an outcome."""
    split: list[tuple[str, str] | str | None] = []  # per query: (query, known), a refusal, or None (as it was)
    for text in table.queries:
        try:
            split.append(recorded_reaction(text, task))
        except ValueError as exc:
            split.append(str(exc))
    if all(s is None for s in split):
        return table, None
    column = recorded_column(task)
    for taken in (column, REACTION_COLUMN):
        if taken in table.columns:
            raise InputFileError(f"the file has a column {taken!r} already, and its queries are recorded reactions; "
                                 "rename that column")
    queries, cells, problems = [], [], []
    for i, (text, s) in enumerate(zip(table.queries, split, strict=True)):
        if isinstance(s, tuple):
            (query, known), problem, written = s, "", text
        elif s is None:
            query, known, problem, written = text, "", table.problem_of(i), ""
        else:  # the refusal; the text stays in the output's query column, and its problem is the row's error
            query, known, problem, written = text, "", s, ""
        queries.append(query)
        cells.append((*table.cells_of(i), known, written))
        problems.append(problem)
    return QueryFile(queries, (*table.columns, column, REACTION_COLUMN), tuple(cells), tuple(problems), table.notes,
                     table.query_column, table.sheet), column


def count_recorded(table: QueryFile, column: str | None) -> int:
    """How many of with_recorded's queries are recorded reactions whose outcome is a SMILES: the filled cells of
    `column`, the name it gave back (0 where it gave None)."""
    if column is None:
        return 0
    at = table.columns.index(column)
    return sum(bool(cells[at]) for cells in table.cells)


def column_index(columns: Sequence[str], file_name: str, column: str) -> int:
    """Where a file's known answers are among its other columns (QueryFile.columns); InputFileError,
    naming the columns it has, where it has no such column. Named as a query column is (io.column_key): in any case,
    white space runs as one space; `--column smiles` found SMILES where `--known-column product` missed Product."""
    if column in columns:
        return list(columns).index(column)
    folded = [column_key(name) for name in columns]
    if folded.count(column_key(column)) == 1:  # two columns alike but for case: only the exact name tells them apart
        return folded.index(column_key(column))
    # listed as a header is where it names no query column: ten were listed, and a wide file seemed to have no more
    listed = shown_cells(columns, quoted=False, noun="column") or "none besides its queries"
    raise InputFileError(f"{file_name} has no column {column!r} of known answers (its other columns: {listed})")


@dataclass(frozen=True)
class KnownSummary:
    column: str  # the input column that holds the known answers
    queries: int  # predicted queries whose known answer is a readable SMILES: the denominator
    first: int  # of those, the known answer is rank 1 (the app's order: sane answers first)
    listed: int  # ... is among the answers at any rank
    unreadable: int  # predicted queries whose known cell is not a SMILES RDKit reads
    empty: int  # predicted queries with nothing in the known column
    output_column: str = ""  # that column's name in the output (io.output_header may prefix a taken name)
    task: str = ""  # the model's: forward also takes the known product's main molecule alone (known_answers)

    def describe(self) -> str:
        """One line for a person: the counts, and what was left out."""
        if not self.queries:
            return f"no predicted query has a known answer that RDKit reads in the column {self.column}"
        first, listed = percent(self.first / self.queries, 1), percent(self.listed / self.queries, 1)
        text = (f"known answers from the column {self.column}: first for {self.first} ({first})"
                f" and listed for {self.listed} ({listed}) of {self.queries} "
                f"{'query' if self.queries == 1 else 'queries'} "
                "(canonical SMILES, stereo kept"
                + ("; a product recorded with a salt or by-product also matches alone)" if self.task == "forward"
                   else ")"))
        left_out = []
        if self.unreadable:
            left_out.append(f"{self.unreadable} known answer{'s' * (self.unreadable > 1)} RDKit cannot read")
        if self.empty:
            left_out.append(f"{self.empty} quer{'ies' if self.empty > 1 else 'y'} with no known answer")
        return text + (f"; not counted: {', '.join(left_out)}" if left_out else "")


class KnownMarks:
    """Marks output rows as they stream past (a file of 100,000 queries is never held whole) and counts
    the queries. A query's rows come together and share `row` (io.result_rows)."""

    def __init__(self, header: Sequence[str], known_at: int, column: str, task: str) -> None:
        self.header = [*header, MATCHES_KNOWN]
        self.known_at, self.column = known_at, column  # the known cells' index in a row; their input name
        self.task = task  # the model's, which says what matches (known_answers)
        self._row_at, self._rank_at, self._answer_at = header.index("row"), header.index("rank"), header.index("smiles")
        self._query_at = header.index("canonical_query")
        self._counts = dict(queries=0, first=0, listed=0, unreadable=0, empty=0)

    def rows(self, rows: Iterable[Sequence[object]]) -> Iterator[list[object]]:
        """The rows with MATCHES_KNOWN after their last column: True where the row's answer is the known
        answer (known_answers), False where another, None (empty) where the row has no answer (a rejected query)
        or the known cell is empty or not a SMILES. A record's rows go out as its LastRow (io.result_rows) passes,
        the mark kept, so a run stopped while the next record is predicted keeps the record; rows without the mark
        go out once the next record's first row comes."""
        group: list[Sequence[object]] = []
        for row in rows:
            if group and row[self._row_at] != group[0][self._row_at]:
                yield from self._marked(group)
                group = []
            group.append(row)
            if isinstance(row, LastRow):
                yield from self._marked(group)
                group = []
        if group:
            yield from self._marked(group)

    def _marked(self, answers: list[Sequence[object]]) -> list[list[object]]:
        known, query = str(answers[0][self.known_at] or "").strip(), str(answers[0][self._query_at] or "")
        wanted = known_answers(known, self.task, query)
        marked = [(LastRow if isinstance(row, LastRow) else list)(
            [*row, None if not wanted or row[self._rank_at] is None
             else answer_key(str(row[self._answer_at]), self.task, query) in wanted]) for row in answers]
        self._count(marked, known, bool(wanted))
        return marked

    def _count(self, marked: list[list[object]], known: str, readable: bool) -> None:
        if marked[0][self._rank_at] is None:  # rejected: no answers to judge
            return
        if not known:
            self._counts["empty"] += 1
        elif not readable:
            self._counts["unreadable"] += 1
        else:
            self._counts["queries"] += 1
            self._counts["first"] += any(row[-1] and row[self._rank_at] == 1 for row in marked)
            self._counts["listed"] += any(row[-1] for row in marked)

    def summary(self) -> KnownSummary:
        """The counts of the rows marked so far."""
        return KnownSummary(self.column, **self._counts, output_column=self.header[self.known_at], task=self.task)
