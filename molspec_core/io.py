"""Query files in, result CSV (or SD file, or Excel workbook) out: the one reader and the one writer that the CLI
and the app share, so that both refuse the same files and export the same, equally safe columns.

Reading is bounded: the size limit counts the bytes that come out of a file (after decompression), so
a small archive of gigabytes, or a device that never ends, is refused instead of filling memory.
Writing neutralizes spreadsheet formulas in text cells (a workbook types them as text), keeps numbers numbers,
and replaces the output file only once every row is written.
"""
from __future__ import annotations

import codecs
import contextlib
import csv
import datetime
import errno
import functools
import gzip
import hashlib
import io
import itertools
import lzma
import math
import numbers
import os
import re
import secrets
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from .service import Predictor, QueryResult

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\n")
# The signs a spreadsheet also takes for the start of a formula where only white space comes before them (" =1+1" ran
# in spreadsheets that trim a cell), and in their full-width forms, which an East Asian input method types and Excel
# reads as the ASCII sign ("＝1+1").
FORMULA_SIGNS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
# A plain decimal number cannot run in a spreadsheet, so text that is one ("-3", "-4.6486") is left as
# it is and reads back as a number; anything else starting with '-' is quoted.
PLAIN_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
MAX_INPUT_ROWS = 100_000  # rows per batch file
MAX_INPUT_BYTES = 50 * 1024 * 1024  # text per file, counted after decompression
READ_CHUNK_BYTES = 1024 * 1024  # a bomb is stopped within one chunk of the limit
DECOMPRESSORS: dict[str, Callable[[IO[bytes]], IO[bytes]]] = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"), ".xz": lzma.LZMAFile}
# a CSV's query column when none is named, the first of these it has; the last four hold recorded reactions
# (known.with_recorded), the very last as USPTO-50K's files name it
SMILES_COLUMNS = ("smiles", "query", "reactants", "product", "rxn_smiles", "reaction_smiles", "reaction",
                  "reactants>reagents>production")  # matched in any case (query_column): "SMILES" too
# Retrosynthesis reads products: where a header names both, the product column holds its queries, not the reactants
# (a retro batch of a reactants,product file once took the reactants apart without a word).
RETRO_SMILES_COLUMNS = tuple("product" if c == "reactants" else "reactants" if c == "product" else c
                             for c in SMILES_COLUMNS)
# A stock's building blocks are molecules: its SMILES column, the first of these it has, as vendors and databases
# name it (ChEMBL's canonical_smiles, PubChem's IsomericSMILES, eMolecules' isosmiles). A stock was read under the
# query names, and a file with none of them was told of reactants and 'reactants>reagents>production'. The isomeric
# names come first: PubChem's canonical SMILES carry no stereo, and its download (isosmiles, canonicalsmiles) put
# L-alanine in stock as alanine of no configuration.
STOCK_COLUMNS = ("smiles", "isomeric_smiles", "isomericsmiles", "isosmiles", "canonical_smiles", "canonicalsmiles")
# Between a CSV's cells: a comma, else what its header line shows. Excel writes ';' where the decimal mark is a
# comma (most of Europe), and a tab-separated file (.tsv) is read as a CSV of tabs.
CSV_DELIMITERS = (",", ";", "\t")
# The delimiters as a person names them, in the order of CSV_DELIMITERS
CSV_DELIMITER_NAMES = {",": "commas", ";": "semicolons", "\t": "tabs"}
# A table's header is the first of its first HEADER_ROWS rows (a CSV's records, a sheet's rows) that names the query
# column: a report exported from Excel often has a title, a date or a blank row above its header. Rows above it are
# not read as queries.
HEADER_ROWS = 10
# A header that names no query column is quoted in the refusal by its first SHOWN_CELLS cells, each of at most
# SHOWN_CELL_CHARS characters (shown_cells): a few names say which line was read, and a wide line stays readable.
SHOWN_CELLS = 12
SHOWN_CELL_CHARS = 40
CSV_SUFFIXES = (".csv", ".tsv")
# A SMILES file (Daylight's format, what RDKit, Open Babel and most vendors write): per line a SMILES, then
# optionally whitespace and the molecule's name. Only these suffixes are read so: in a TXT file a space
# is part of the query and rejected there, never taken as the start of a name.
SMILES_FILE_SUFFIXES = (".smi", ".smiles")
NAME_COLUMN = "name"  # a SMILES file's names, when its first line is no header naming them otherwise
# A SMILES file's first line is a header where its first field (any case) is a name a table's query or stock column has:
# RDKit writes "SMILES Name", eMolecules' building blocks open "isosmiles version_id parent_id", which was read as a
# query and refused (in a stock, left out as an unreadable entry, 'isosmiles'). None of these names is a SMILES.
SMILES_FILE_HEADERS = frozenset((*SMILES_COLUMNS, *STOCK_COLUMNS))
SD_FILE_SUFFIXES = (".sdf", ".sd")  # SD files: each record's molecule is a query, its title and data fields cells
# An Excel workbook (openpyxl): read from the first sheet with a header row naming the query column, as a CSV is read;
# results written to one sheet with numbers as numbers and text as text. Excel's own limits: a sheet's rows,
# a cell's characters. The old binary format (.xls) is refused with what to do instead.
WORKBOOK_SUFFIX = ".xlsx"
MACRO_WORKBOOK_SUFFIX = ".xlsm"  # a workbook with macros: read as one (its macros are not run, nor read)
OLD_WORKBOOK_SUFFIX = ".xls"
# LibreOffice's spreadsheets (OpenDocument), refused with what to do instead
OPEN_DOCUMENT_SUFFIX = ".ods"
OPEN_DOCUMENT_MIMETYPE = b"application/vnd.oasis.opendocument.spreadsheet"  # its zip's "mimetype" member (_not_text)
# The spreadsheets not read here, by query_format's kind: what each is, and what to do instead (unread_spreadsheet)
UNREAD_SPREADSHEETS = {
    "xls": ("in Excel's old binary format (.xls)",
            "in Excel, save it as an Excel workbook (.xlsx) or as CSV UTF-8 (.csv)"),
    "ods": ("an OpenDocument spreadsheet (.ods)",
            "in LibreOffice, save it as an Excel workbook (.xlsx) or as CSV (.csv, UTF-8)")}
OLE_MAGIC = b"\xd0\xcf\x11\xe0"  # the first bytes of an .xls file, and of an .xlsx encrypted with a password
WORKBOOK_MAX_ROWS = 1_048_576  # the header included
WORKBOOK_MAX_COLUMNS = 16_384  # A to XFD
WORKBOOK_MAX_CELL = 32_767  # characters
# A workbook is a zip of XML, several times its cells' text: its members may hold this much once decompressed.
WORKBOOK_MAX_XML_BYTES = 4 * MAX_INPUT_BYTES
# and its table may hold this many cells (rows x named columns): a sparse sheet's XML is small, its rows are not
WORKBOOK_MAX_CELLS = 10_000_000
RESULT_SUFFIXES = (".csv", *SD_FILE_SUFFIXES, WORKBOOK_SUFFIX)  # what write_results writes (any case)
MOLFILE_SUFFIX = ".mol"  # a molfile is an SD file of one record without fields, and is read as one
# Every output row: the input's other columns come first (see output_header), then these.
# sane/concerns/model_rank: service.rank_answers; spellings: service.fold_repeats; confidence: calibration.py;
# round_trip/forward_prob: roundtrip.py (empty where the query was not checked); dtype: service.Predictor.dtype
# (empty on the row of a query that was not decoded). writings: of the query's writings, how many gave the answer
# (Prediction.views); writings_read: how many its answers were pooled from (QueryResult.writings), fewer than asked
# for where the molecule has fewer (CCO has 3) or the time limit stopped it: "writings 3" alone read as 3 of the 5
# asked for where all 3 read gave it.
RESULT_COLUMNS = ("row", "query", "canonical_query", "rank", "smiles", "score", "probability", "valid", "sane",
                  "concerns", "model_rank", "confidence", "writings", "writings_read", "spellings", "round_trip",
                  "forward_prob", "method", "dtype", "time_ms", "model_calls", "accepted_tokens", "error")
# The columns of RESULT_COLUMNS that mark a table as our results (is_results_header): an input's own smiles
# column is written as input_smiles there (output_header), so a header with all three is ours
RESULTS_SIGNATURE = ("query", "canonical_query", "smiles")
# What a refusal of our own results read without a query column named asks for (header_of, refuse_unnamed_results),
# and where the file is read as a stock (its names STOCK_COLUMNS): the Routes page told such a stock "to predict its
# queries again"
NAME_OWN_RESULTS_COLUMN = "query, to predict its queries again, or smiles, to take its answers as new queries"
NAME_OWN_RESULTS_STOCK_COLUMN = "smiles, for a stock of its answers, or query, for a stock of its queries"

# The csv module refuses a field over 131,072 characters, and one long cell made the whole file
# unreadable. No field can be longer than the file, so the file limit serves as the field limit: the
# long cell becomes a query that the service rejects, on its own row. The limit is process-wide; this
# only ever raises it.
csv.field_size_limit(max(csv.field_size_limit(), MAX_INPUT_BYTES))


class InputFileError(ValueError):
    """A query file that cannot be read as a whole (wrong column, too large, not text, not a file)."""


class MissingColumn(InputFileError):
    """A table without the column of queries named (or any of the names read without naming one), an SD file
    without the data field named, or our own results read without one named: a command line adds which option
    names it (plan's --stock-column)."""

    def __init__(self, message: str, column: str | None) -> None:
        super().__init__(message)
        self.column = column  # the column or field named, None where none was


class OutputFileError(ValueError):
    """An output path that must not be written (the input itself, a folder, a device)."""


# A record with no query (a blank line, an empty cell): its row stays, so that the rows match the file's records,
# with this error, and it is counted apart from the queries, predicted and rejected (the app and the command line)
BLANK_RECORD = "blank: this record holds no query (skipped, not counted as a query)"


@dataclass(frozen=True)
class QueryFile:
    """A query file's records in order: the queries, and each record's other cells, which the output
    carries in front of the results so that they join back to the user's compound IDs."""
    queries: list[str]
    columns: tuple[str, ...] = ()  # the input's other columns (a TXT file has none)
    cells: tuple[tuple[str, ...], ...] = ()  # per query, its cells in `columns`; empty when there are none
    # per query, why its record gave none ("" where it did; the query is then ""), e.g. an SD record that
    # RDKit cannot read; empty when every record gave one. result_rows reports it as the row's error.
    problems: tuple[str, ...] = ()
    # what reading left out of the file that its user should know (a record's cells past the header's last name)
    notes: tuple[str, ...] = ()
    # the header's name of the column the queries were read from ("" for TXT, SMILES and SD files): a file holding
    # both a reactants and a product column said nowhere which one it had read
    query_column: str = ""
    # the name of a workbook's sheet the queries were read from, where it has several ("" otherwise): the first sheet
    # naming a query column is read, and nothing said which one that was
    sheet: str = ""

    def cells_of(self, index: int) -> tuple[str, ...]:
        return self.cells[index] if self.cells else ()

    def _given_problem(self, index: int) -> str:
        return self.problems[index] if self.problems else ""

    def is_blank(self, index: int) -> bool:
        """A record with no query and no reason for none (a blank line, an empty cell): no query at all. (A file
        made from another's records, known.with_recorded, carries its BLANK_RECORD as given.)"""
        return not self.queries[index].strip() and self._given_problem(index) in ("", BLANK_RECORD)

    def problem_of(self, index: int) -> str:
        """Why the record gave no query: its reader's reason, BLANK_RECORD for a blank one, "" where it gave one."""
        return self._given_problem(index) or (BLANK_RECORD if self.is_blank(index) else "")

    def n_blank(self) -> int:
        return sum(map(self.is_blank, range(len(self.queries))))


# ---- reading ------------------------------------------------------------------------------------


def query_format(name: str) -> tuple[str | None, str]:
    """(compression suffix or None, "csv", "smi", "sdf", "xlsx", "xls", "ods" or "txt"), from the file's name and
    ignoring case: q.CSV, q.csv.GZ, q.Csv.xz and q.tsv are all CSV, q.smi.gz a SMILES file, q.SDF and q.mol SD files,
    q.XLSX and q.xlsm Excel workbooks (q.xls the old format and q.ods LibreOffice's, refused: they were read as TXT
    and refused as "not UTF-8 text"); any other name is TXT."""
    lower = name.lower()
    compression = next((suffix for suffix in DECOMPRESSORS if lower.endswith(suffix)), None)
    if compression:
        lower = lower.removesuffix(compression)
    if lower.endswith(CSV_SUFFIXES):
        return compression, "csv"
    if lower.endswith((*SD_FILE_SUFFIXES, MOLFILE_SUFFIX)):
        return compression, "sdf"
    if lower.endswith((WORKBOOK_SUFFIX, MACRO_WORKBOOK_SUFFIX)):
        return compression, "xlsx"
    if lower.endswith((OLD_WORKBOOK_SUFFIX, OPEN_DOCUMENT_SUFFIX)):
        return compression, lower.rsplit(".", 1)[1]
    return compression, "smi" if lower.endswith(SMILES_FILE_SUFFIXES) else "txt"


# What `read_as` may name: the kinds query_format gives a file by its name, less the formats refused (xls, ods).
READ_AS = ("txt", "smi", "sdf", "csv", "xlsx")
STDIN = "-"  # read_queries' path for standard input
STDOUT = "-"  # predict's --output for its CSV on standard output (cli.cmd_predict)
STDIN_NAME = "standard input"  # how messages name it


def input_kind(path: str | Path, read_as: str | None = None) -> str:
    """What read_queries reads `path` as: `read_as` where given, else TXT for standard input, else its name's."""
    return read_as or ("txt" if str(path) == STDIN else query_format(Path(path).name)[1])


def read_queries(path: str | Path, column: str | None = None, read_as: str | None = None, *,
                 task: str | None = None, names: Sequence[str] | None = None) -> QueryFile:
    """Queries from a TXT (one per line), SMILES, SD or CSV file (a SMILES column) or an Excel workbook (a SMILES
    column, parse_workbook), optionally .gz or .xz; blank records are kept as empty queries so that row numbers
    stay aligned with the file. The kind is the name's (query_format) unless `read_as` names one (READ_AS);
    compression is always the name's. `path` "-" (STDIN) reads standard input, as TXT unless `read_as` says.
    `task` (forward, retro) chooses among a table's query columns where none is named (query_columns); `names`, where
    given, are the names looked for instead, preferred first (a stock's: STOCK_COLUMNS)."""
    if read_as is not None and read_as not in READ_AS:
        raise InputFileError(f"an input is read as one of {', '.join(READ_AS)}, not {read_as!r}")
    names = names or query_columns(None, task)
    if str(path) == STDIN:
        return _parse_stream(sys.stdin.buffer, STDIN_NAME, column, input_kind(path, read_as), names)
    path = Path(path)
    with open_regular(path) as raw:
        return _parse_stream(raw, path.name, column, read_as, names)


def parse_upload(name: str, data: bytes, column: str | None = None, *, task: str | None = None,
                 names: Sequence[str] | None = None) -> QueryFile:
    """The queries of a file already in memory (an upload), by the same rules as read_queries."""
    return _parse_stream(io.BytesIO(data), name, column, names=names or query_columns(None, task))


def open_regular(path: Path, bounded: bool = True) -> IO[bytes]:
    """Open a file for reading, refusing anything but a regular file: a device (/dev/zero) or a FIFO
    reports size 0 and may never end, and a folder holds no queries. O_NONBLOCK lets opening a FIFO
    return at once instead of waiting for a writer; fstat then checks what was opened, not what the
    name pointed to a moment earlier. `bounded`: a file larger than MAX_INPUT_BYTES is refused at once."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, pipe or socket"
            raise InputFileError(f"{path} is {kind}, not a file to read")  # queries, targets, a report, a stock
        if bounded and info.st_size > MAX_INPUT_BYTES:  # the cheap check first; the bounded read is the real one
            raise InputFileError(f"{path.name} is larger than {MAX_INPUT_BYTES // 2**20} MB")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(stream: IO[bytes], name: str, limit: int = MAX_INPUT_BYTES, decompressed: bool = False) -> bytearray:
    """All of a stream, refused as soon as more than `limit` bytes have come out of it."""
    data = bytearray()
    while chunk := stream.read(READ_CHUNK_BYTES):
        data += chunk
        if len(data) > limit:
            counted = " once decompressed" if decompressed else ""
            raise InputFileError(f"{name} holds more than {limit // 2**20} MB of text{counted}")
    return data  # not bytes(data): that would copy up to the whole limit once more


def read_text(path: str | Path) -> str:
    """A regular file's text (.gz and .xz decompressed), bounded like every input file."""
    path = Path(path)
    with open_regular(path) as raw:
        return _decode_stream(raw, path.name)


# Where a file without columns holds its queries (a query column named for one is refused, not ignored). An SD
# file's data fields are its columns: one may be named (parse_sd_file).
SMILES_OF = {"txt": "its lines", "smi": "the first field of each line"}  # where a file without columns has them


def _parse_stream(raw: IO[bytes], name: str, column: str | None, kind: str | None = None,
                  names: Sequence[str] = SMILES_COLUMNS) -> QueryFile:
    """The queries of a stream, read as `kind` (READ_AS), else as its name says (query_format); a table's query column
    is `column`, else the first of `names` it has."""
    kind = kind or query_format(name)[1]
    if kind in UNREAD_SPREADSHEETS:
        raise InputFileError(unread_spreadsheet(name, kind))
    if column and kind in SMILES_OF:  # a batch's query column, or a stock's (plan --stock-column): worded for both
        raise InputFileError(f"a column, {column[:40]!r}, was named, but {name} is read as a {kind.upper()} file, "
                             f"which has no columns: its SMILES are {SMILES_OF[kind]}. A column is read from a CSV "
                             "(.csv, .tsv), an Excel workbook (.xlsx) or, as a data field, an SD file (.sdf)")
    try:
        if kind == "xlsx":
            return parse_workbook(_read_stream(raw, name), name, column, names=names)
        return parse_queries(_decode_stream(raw, name, structures=kind == "sdf"), kind=kind, column=column,
                             names=names)
    except TooManyRecords as exc:
        raise TooManyRecords(f"{name} holds {exc}") from None


def unread_spreadsheet(name: str, kind: str, renamed: bool = False) -> str:
    """The refusal of a spreadsheet not read here (UNREAD_SPREADSHEETS' `kind`), `renamed` where its name says
    another kind of file."""
    what, instead = UNREAD_SPREADSHEETS[kind]
    return f"{name} is {what}{' under another name' if renamed else ''}, which is not read here: {instead}"


def _is_open_document(archive: zipfile.ZipFile) -> bool:
    """Whether a zip is an OpenDocument spreadsheet: its "mimetype" member names one (read no further)."""
    try:
        with archive.open("mimetype") as member:
            return member.read(len(OPEN_DOCUMENT_MIMETYPE)) == OPEN_DOCUMENT_MIMETYPE
    except (KeyError, RuntimeError, NotImplementedError, zipfile.BadZipFile, OSError, EOFError):  # none, or encrypted
        return False


def _read_stream(raw: IO[bytes], name: str) -> bytearray:
    """A file's bytes, decompressed where its name says so, bounded like every input file."""
    compression = query_format(name)[0]
    if compression is None:
        return read_bounded(raw, name)
    try:
        return read_bounded(DECOMPRESSORS[compression](raw), name, decompressed=True)
    except (OSError, EOFError, lzma.LZMAError) as exc:  # not an archive, or a truncated one
        raise InputFileError(f"{name} cannot be decompressed as {compression}: {exc}") from None


def _decode_stream(raw: IO[bytes], name: str, structures: bool = False) -> str:
    """A stream's text: UTF-8 (a byte-order mark dropped) or UTF-16 with its mark; for `structures` (an SD file or
    molfile) holding a molblock, text that is not UTF-8 is read in Windows' code page 1252, where drawing programs
    write a title or field (ChemDraw's "Café"): its molblocks are ASCII, and the whole file was refused for one
    accent. Bytes with no molblock in them (a binary file named .mol) are still refused as not text."""
    data = _read_stream(raw, name)
    # Text that starts with UTF-16's byte-order mark is UTF-16 (Excel's "Unicode Text", Notepad's "Unicode"): it was
    # refused as "not UTF-8 text: line 1 (byte 0)". UTF-32's little-endian mark starts with UTF-16's and stays refused.
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(codecs.BOM_UTF32_LE):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise InputFileError(f"{name} starts as UTF-16 text, and its byte {exc.start:,} cannot be decoded as "
                                 "UTF-16; save the file as UTF-8 (in Excel: CSV UTF-8)") from None
    try:
        return data.decode("utf-8-sig")  # -sig: Excel's "CSV UTF-8" starts with a byte-order mark
    except UnicodeDecodeError as exc:
        if structures and b"M  END" in data:  # a molblock in it: text, whose title or a field is in a code page
            return data.decode("cp1252", errors="replace")  # its 5 undefined bytes read as U+FFFD
        line = data.count(b"\n", 0, exc.start) + 1
        advice = "" if structures else " (in Excel: CSV UTF-8)"
        raise InputFileError(_not_text(data, name) or f"{name} is not UTF-8 text: line {line:,} (byte {exc.start:,}) "
                             f"cannot be decoded; save the file as UTF-8{advice}") from None


# What a file read as text may be instead, by its first bytes (_not_text): a compression read where the name says so
# (DECOMPRESSORS), ones not read, and a zip (an archive, or an Excel workbook)
COMPRESSED_MAGIC = {b"\x1f\x8b": ("gzip", ".gz"), b"\xfd7zXZ\x00": ("xz", ".xz")}
UNREAD_MAGIC = {b"BZh": "bzip2-compressed", b"\x28\xb5\x2f\xfd": "zstd-compressed",
                b"7z\xbc\xaf\x27\x1c": "a 7-Zip archive", b"Rar!\x1a\x07": "a RAR archive"}
ZIP_MAGIC = b"PK\x03\x04"


def _not_text(data: bytes | bytearray, name: str) -> str | None:
    """What a file that is not text is and what to do, where its first bytes show a compression or an archive (a zipped
    CSV, a gzipped file named without .gz, an Excel workbook named .csv); None otherwise. Such a file was refused as
    'not UTF-8 text: line 1 (byte 10) ...; save the file as UTF-8 (in Excel: CSV UTF-8)', which mends none of them."""
    head = bytes(data[:8])
    named = name != STDIN_NAME  # a file, which can be named as read; standard input cannot
    for magic, (compression, suffix) in COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            rename = f"name it {name}" if named else "give it as a file named *"
            return f"{name} is {compression}-compressed: {rename}{suffix}, which is read decompressed"
    for magic, what in UNREAD_MAGIC.items():
        if head.startswith(magic):
            return (f"{name} is {what}, which is not read here: decompress it, and give the file inside (or compress "
                    "that file with gzip, .gz, or xz, .xz, which are read)")
    if not head.startswith(ZIP_MAGIC):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            workbook = "xl/workbook.xml" in archive.namelist()
            spreadsheet = _is_open_document(archive)  # it was told to be unzipped, which gives its XML, no table
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        workbook = spreadsheet = False
    if spreadsheet:
        return unread_spreadsheet(name, "ods", renamed=True)
    if workbook:
        rename = f"name it {Path(name).stem}" if named else "give it as a file named *"
        return f"{name} is an Excel workbook under another name: {rename}{WORKBOOK_SUFFIX}, which is read as one"
    return f"{name} is a zip archive, not text: unzip it and give the file inside (a .gz or .xz file is read as it is)"


def text_lines(text: str) -> list[str]:
    """A file's lines, split at \n, \r\n or \r only (str.splitlines also breaks at a form feed, \x1c-\x1e, \x85,
    U+2028 and U+2029, so a line holding one became two), without the blank lines after the last one, as a CSV's
    after its last record (the file's final line break ends the last line; it does not start a new one)."""
    lines = re.split(r"\r\n|\r|\n", text)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def parse_queries(text: str, *, kind: str, column: str | None = None,
                  names: Sequence[str] = SMILES_COLUMNS) -> QueryFile:
    """One query per record: a TXT line (split at \\n, \\r\\n or \\r only, so that other control
    characters stay inside their query and are rejected there; a first line that names the query column as a CSV's
    header would, "smiles" or "reactants" in any case, is a header),
    a SMILES file's line (parse_smiles_file), or a CSV record's SMILES column (quoted cells may hold line
    breaks; cells split at commas, or at the semicolons or tabs of a header that names the column only so,
    csv_delimiter; lines above the header, titles, are not read: header_of) with the record's other cells
    beside it, or an SD file's record (parse_sd_file). Blank records are kept as empty queries, so that row
    numbers match the file's records. kind: "txt", "smi", "sdf" or "csv" (query_format). A line that ends in \r\r\n
    (Python's csv module on Windows writes \r\n through a file that writes \n as \r\n) ends once: it read as a
    blank record after every record. `names`: the names the query column may have where `column` names none
    (query_column)."""
    text = text.replace("\r\r\n", "\r\n")
    if kind == "sdf":
        return parse_sd_file(text, column)
    if kind != "csv":
        lines = text_lines(text)
        if kind == "txt" and lines and "\t" in lines[0] and query_column(lines[0].split("\t"), None, names) is not None:
            # Excel saves a sheet as .txt of tabs ("Text (Tab delimited)", "Unicode Text"): its first line, a header
            # naming the query column, and every record were refused as queries holding tabs
            return parse_queries(text, kind="csv", names=names)
        if kind == "txt":
            lines = txt_queries(lines, names)
        _check_rows(len(lines))
        return parse_smiles_file(lines) if kind == "smi" else QueryFile(lines)
    try:
        reader = iter(csv_records(text, csv_delimiter(text, column, names)))
        top = list(itertools.islice(reader, HEADER_ROWS))
        if not any(field.strip() for record in top for field in record):
            raise InputFileError(f"the CSV is empty: its first line should name its columns, one of them "
                                 f"{_expected(column, names)}")
        found = header_of(top, column, names)
        if found is None:
            split, cells = widest_split(text)
            tried = " and ".join(name for d, name in CSV_DELIMITER_NAMES.items() if d != split)
            advice = _no_header_advice(top, column, names) or _another_name(column, names)
            raise MissingColumn(f"the CSV needs a column named {_expected(column, names)} in a header line (the first "
                                f"line, or one of the first {HEADER_ROWS} under titles); its first line has "
                                f"{shown_cells(cells)} (cells split at {CSV_DELIMITER_NAMES[split]}; {tried} were "
                                f"tried too){advice}", column)
        line, at = found
        records = top[line + 1:] + list(reader)
    except csv.Error as exc:
        raise InputFileError(f"malformed CSV: {exc}") from None
    return table_queries(top[line], at, records)


def txt_queries(lines: list[str], names: Sequence[str] = SMILES_COLUMNS) -> list[str]:
    """A TXT file's queries, a line each: its lines less the first where that names the query column as a CSV's header
    does ("smiles", "Reactants", any case: query_column; no such name is a SMILES). Only "smiles" was taken for a
    header, and a file headed "Query" or "Product" had it refused as its first query."""
    return lines[1:] if lines and query_column([lines[0]], None, names) is not None else lines


def csv_records(text: str, delimiter: str) -> list[list[str]]:
    """A CSV's records, read strictly first: where a quote opens a cell and is never closed, a lenient reader reads
    every line after it into that cell and the queries on them are lost without a word (refused, saying where).
    Other departures from strict CSV, such as a quote inside an unquoted cell, are read leniently, as Excel does."""
    strict = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records: list[list[str]] = []
    ended = 0  # the line the last whole record ended on
    try:
        for record in strict:
            records.append(record)
            ended = strict.line_num
        return records
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise InputFileError(f"malformed CSV: a quoted cell on line {ended + 1:,} is never closed, so every line "
                                 "after it would be read into that cell: close the quote (a quote inside a quoted "
                                 'cell is written twice, "")') from None
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))


def header_of(rows: Sequence[Sequence[str]], column: str | None,
              names: Sequence[str] = SMILES_COLUMNS) -> tuple[int, int] | None:
    """The header among a table's first rows: (its index, the query column's index in it) for the first of the
    first HEADER_ROWS rows that names the query column (query_column); None where none does. Refuses, unless
    `column` names one, a header of our own results (is_results_header)."""
    for index, fields in enumerate(rows[:HEADER_ROWS]):
        at = query_column(fields, column, names)
        if at is not None:
            if not column and is_results_header(fields):
                raise MissingColumn(
                    "this table is MolSpec's own results (columns query, rank, smiles, ...): its smiles column holds "
                    "the answers, a row each, and its query column the queries, once per answer. Name the column to "
                    f"read: {own_results_column(names)}", None)
            refuse_repeated_column(fields, at, column)
            return index, at
    return None


def refuse_repeated_column(fields: Sequence[str], at: int, column: str | None) -> None:
    """Refuse a header that gives the column read (`at`) a name other columns have too, as query_column compares names
    (`column` named exactly, once, is no repeat): a CSV headed smiles,smiles,id had its queries (or a stock its
    molecules) read from the first column alone, and the second's SMILES were not read, without a word."""
    if column and list(fields).count(column) == 1:
        return
    same = [i for i, field in enumerate(fields) if column_key(field) == column_key(fields[at])]
    if len(same) > 1:
        named = ", ".join(f"{fields[i]!r} in column {i + 1}" for i in same)
        raise InputFileError(f"the header names the SMILES column {len(same)} times ({named}): only the first would be "
                             "read, and the molecules in the others not at all. Give each column a name of its own "
                             "(and name the one to read where it is not the first)")


def refuse_unnamed_results(table: QueryFile, name: str, names: Sequence[str] = SMILES_COLUMNS) -> None:
    """Refuse, as header_of refuses a table of them, our own results read without a query column named: an SD file of
    them (predict's --output F.sdf, the Batch page's Download SDF), whose records' molecules are the answers, a record
    each. Uploaded again, the answers were predicted as the queries without a word. (A reader of such a file for its
    records, a test, calls read_queries alone.) `names`: those the file was read under (a stock's: STOCK_COLUMNS)."""
    if not table.query_column and is_results_header(table.columns):
        raise MissingColumn(f"{name} is MolSpec's own results (fields query, rank, smiles, ...): each record's "
                            "molecule is an answer, a record each, and its query field the queries, once per answer. "
                            f"Name the field to read: {own_results_column(names)}", None)


def own_results_column(names: Sequence[str]) -> str:
    """Which column of our own results to name, and what each gives, for a file read under `names`: a stock's
    (STOCK_COLUMNS) takes molecules from it, where a batch predicts them."""
    return NAME_OWN_RESULTS_STOCK_COLUMN if tuple(names) == STOCK_COLUMNS else NAME_OWN_RESULTS_COLUMN


def is_results_header(fields: Sequence[str]) -> bool:
    """Whether a header is one output_header wrote: it holds RESULTS_SIGNATURE. Its smiles column, the first of
    SMILES_COLUMNS, holds answers: a results file uploaded again had its answers predicted as the queries."""
    return {column_key(field) for field in fields}.issuperset(RESULTS_SIGNATURE)


def query_columns(column: str | None, task: str | None = None) -> tuple[str, ...]:
    """The names a header may give the query column, preferred first: `column` where one is named, else
    SMILES_COLUMNS (RETRO_SMILES_COLUMNS for retrosynthesis)."""
    if column:
        return (column,)
    return RETRO_SMILES_COLUMNS if task == "retro" else SMILES_COLUMNS


def query_column(fields: Sequence[str], column: str | None, names: Sequence[str] = SMILES_COLUMNS) -> int | None:
    """Where a header names the query column: `column`, else the first of `names` it holds (query_columns gives a
    task's), as written, else as column_key folds both (a ChEMBL export's "Smiles"); None if nowhere."""
    if column and column in fields:
        return fields.index(column)
    folded = [column_key(field) for field in fields]
    for wanted in map(column_key, (column,) if column else names):
        if wanted in folded:
            return folded.index(wanted)
    return None


def column_key(name: str) -> str:
    """A column's name as query_column compares it: in any case, each run of white space one space, none around it. A
    header wrapped in Excel (Alt+Enter: "SMILES\n(canonical)") could not be named at all: the app's one-line box and
    a command line give no line break, and the error listed the name with its \n."""
    return " ".join(name.split()).casefold()


def shown_cells(fields: Sequence[str], quoted: bool = True, noun: str = "cell") -> str:
    """A line's cells (a file's columns) as a refusal names them: a list of its first SHOWN_CELLS, each cut at
    SHOWN_CELL_CHARS, and how many more `noun`s it has; `quoted` as Python writes a list (a header's blank or spaced
    cells show), else joined by commas (""). The whole line went into the message: a CSV whose first line was 4 MB of
    cells was refused in a message of 10 MB, which the Batch page drew in full."""
    cells = [f if len(f) <= SHOWN_CELL_CHARS else f"{f[:SHOWN_CELL_CHARS]}..." for f in fields[:SHOWN_CELLS]]
    listed = str(cells) if quoted else ", ".join(cells)
    more = len(fields) - len(cells)
    if not more:
        return listed
    return f"{listed} and {more:,} more {noun if more == 1 else noun + 's'}"


def _no_header_advice(rows: Sequence[Sequence[str]], column: str | None, names: Sequence[str],
                      sheet: str | None = None) -> str:
    """Where a CSV's (or a workbook `sheet`'s) first cell reads as a SMILES, what to do with a table of queries that
    has no header line (a list of SMILES saved as .csv, or pasted into a sheet), else "": the refusal named the
    columns it needs, and a chemist looking at a file of SMILES saw no header that could be missing."""
    from .chem import canonical_or_none  # chem reads this module: imported where needed, as a refusal is rare

    first = next((cell.strip() for cell in rows[0] if cell.strip()), "") if rows else ""
    molecules = first.split(">")[0]  # of a recorded reaction, its reactants
    if not molecules or canonical_or_none(molecules) is None:
        return ""
    named = column or names[0]
    whose, table = (f"The first cell of the sheet {sheet!r}", "the sheet has no header row") if sheet is not None \
        else ("Its first cell", "the file has no header line")
    advice = f". {whose}, {first[:60]!r}, reads as a SMILES: where {table}, add one above its first record, naming " \
             f"the query column {named}"
    if sheet is None and all(sum(bool(cell.strip()) for cell in row) <= 1 for row in rows):  # a query a line alone
        advice += ", or save the file with a .txt name (a query a line)"
    return advice


def _another_name(column: str | None, names: Sequence[str]) -> str:
    """How to read a table whose queries are under a name of its own, where none was given: the refusal listed the
    names it looks for, not that a column can be named (a command's column option, the Batch page's column box,
    read_queries' `column`, plan's --stock-column, the Routes page's stock column box), nor renamed."""
    if column:
        return ""
    return ("; where the SMILES are under another name, give that column's name, or rename the column "
            f"{names[0]}")


def _expected(column: str | None, names: Sequence[str]) -> str:
    return repr(column) if column else " or ".join(repr(c) for c in names)


def table_queries(fields: Sequence[str], at: int, records: list[list[str]],
                  problems: dict[int, str] | None = None) -> QueryFile:
    """A table's records under its header `fields` (a CSV's, a worksheet's): the cells in column `at` are the queries,
    the others carried beside them; blank records after the last are dropped, a short record's missing cells are
    empty and a long one's extra cells (under no name) dropped, which a note says where any is not empty (a cell
    with an unquoted comma split in two, whose second half was lost without a word); empty columns under no name
    are no columns (they gave the output columns called "" and "input_"). `problems`: why a record's empty query cell
    gave none, by record index (QueryFile.problems); such a record is no blank one."""
    problems = problems or {}
    while records and not any(records[-1]) and len(records) - 1 not in problems:
        records.pop()  # blank lines (or rows) after the last record
    _check_rows(len(records))
    longer = [i for i, record in enumerate(records, start=1) if any(cell.strip() for cell in record[len(fields):])]
    # an empty column under no name is none (Excel's CSV ends its lines ";;"; a sheet's table starts at column B)
    others = [i for i in range(len(fields)) if i != at and (fields[i].strip() or any(
        i < len(record) and record[i].strip() for record in records))]
    padding = [""] * len(fields)
    queries, cells = [], []
    for record in records:
        record = record + padding[len(record):]
        queries.append(str(record[at]))  # a query is text (a workbook's number in the column named too)
        cells.append(tuple(record[i] for i in others))
    reasons = tuple(problems.get(i, "") for i in range(len(records))) if problems else ()
    several = len(longer) != 1
    notes = (f"{len(longer):,} record{'s' * several} (row{'s' * several} {', '.join(map(str, longer[:5]))}"
             f"{', ...' if len(longer) > 5 else ''}) hold{'s' * (not several)} cells past the "
             f"header's {len(fields)} names, which are not read: a cell that holds the delimiter (a comma, say) "
             "must be quoted, or the cells after it move one column on",) if longer else ()
    return QueryFile(queries, tuple(fields[i] for i in others), tuple(cells) if others else (), reasons, notes,
                     fields[at])


def parse_workbook(data: bytes | bytearray, name: str, column: str | None = None, *,
                   names: Sequence[str] = SMILES_COLUMNS) -> QueryFile:
    """The queries of an Excel workbook (.xlsx), read as a CSV is (table_queries): the first sheet with a header
    row naming the query column (`column`, else one of `names`; header_of: among its first HEADER_ROWS rows)
    is the table, the rows under the header its records. Each
    cell is read as the text Excel shows for its value (stored values only: a formula gives the value Excel last
    saved with it, and nothing is computed here); a number that is a whole number reads without a decimal point
    (compound IDs), a date as ISO 8601. Bounded: the zip's members may hold WORKBOOK_MAX_XML_BYTES once
    decompressed, read as their headers declare (Python's zipfile stops at the declared size), and the table
    WORKBOOK_MAX_CELLS cells and MAX_INPUT_ROWS rows."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
            open_document = _is_open_document(archive)
    except (zipfile.BadZipFile, NotImplementedError, ValueError, OSError, EOFError) as exc:  # no zip, or damaged
        if bytes(data[:4]) == OLE_MAGIC:  # Excel writes a workbook with a password (and .xls) in this container
            raise InputFileError(f"{name} is protected by a password (or is an .xls file renamed), which is not read "
                                 "here: in Excel, remove the password or save it as an Excel workbook (.xlsx) or as "
                                 "CSV UTF-8 (.csv)") from None
        if (text_kind := _text_named_as_workbook(data, name)) is not None:
            raise InputFileError(text_kind) from None
        raise InputFileError(f"{name} is not an Excel workbook (.xlsx): it is not the zip archive one is "
                             f"({exc})") from None
    if open_document:  # an .ods named .xlsx: "cannot be read as an Excel workbook: KeyError: ... [Content_Types].xml"
        raise InputFileError(unread_spreadsheet(name, "ods", renamed=True))
    if unpacked > WORKBOOK_MAX_XML_BYTES:
        raise InputFileError(f"{name} holds more than {WORKBOOK_MAX_XML_BYTES // 2**20} MB once decompressed")
    import openpyxl  # only where a workbook is read

    headers, advice = [], ""
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
        try:
            for sheet in book.worksheets:
                # read to its last row and cell, not to the extent its <dimension> claims: a program that wrote "A1"
                # there (an exporter's sheet) gave a header and no record, and its queries were lost without a word
                sheet.reset_dimensions()
                top = [[_cell_text(cell) for cell in cells] for cells in sheet.iter_rows(max_row=HEADER_ROWS)]
                found = header_of(top, column, names)
                if found is None:
                    headers.append(f"{sheet.title!r}: {shown_cells([f for f in top[0] if f] if top else [])}")
                    advice = advice or _no_header_advice(top, column, names, sheet.title)
                    continue
                line, at = found
                fields = [str(name) for name in top[line]]  # a header's names are text (a column called 2026 too)
                while fields and not fields[-1]:
                    fields.pop()  # a sheet's rows reach its widest row; a header ends at its last name
                records: list[list[str]] = []
                blank = 0  # blank rows since the last record: kept only where a record comes after them
                # cells past the header's last name are not read: a row is as wide as the sheet's widest
                for cells in sheet.iter_rows(min_row=line + 2, max_col=len(fields)):
                    record = [_cell_text(cell) for cell in cells]
                    if not any(record):  # a sheet's rows reach its last formatted cell (a border, bold, far down):
                        blank += 1  # such rows under the last record were counted against the limit, and refused
                        continue
                    records += [[""] * len(fields) for _ in range(blank)] + [record]
                    blank = 0
                    if len(records) > MAX_INPUT_ROWS:
                        _check_rows(len(records))  # a sheet of a million rows is refused before all are read
                    if len(records) * len(fields) > WORKBOOK_MAX_CELLS:
                        raise InputFileError(f"{name}: sheet {sheet.title!r} holds more than {WORKBOOK_MAX_CELLS:,} "
                                             f"cells under its header, which names {len(fields):,} columns; delete "
                                             "the columns the queries do not need")
                if blank and _holds_formulas(data):  # a row under the last record may hold only formulas saved
                    held = _formula_rows(data, sheet.title, line + 2 + len(records), blank, len(fields))
                    records += [[""] * len(fields) for _ in range(held)]  # without their values: said why, as ever
                table = table_queries(fields, at, records, _unsaved_formulas(data, sheet.title, line, at, records))
                return replace(table, sheet=sheet.title) if len(book.worksheets) > 1 else table
        finally:
            book.close()
    except InputFileError:
        raise
    except Exception as exc:  # openpyxl's account of a damaged or foreign file: KeyError, ValueError, XML errors
        raise InputFileError(f"{name} cannot be read as an Excel workbook: {type(exc).__name__}: {exc}") from None
    raise MissingColumn(f"{name} needs a sheet with a header row naming a column {_expected(column, names)} (its "
                        f"first row, or one of its first {HEADER_ROWS} under titles); its sheets' first rows hold "
                        f"{'; '.join(headers) or 'nothing'}{advice or _another_name(column, names)}", column)


def _text_named_as_workbook(data: bytes | bytearray, name: str) -> str | None:
    """Why a workbook's name holds text (a CSV a web export named .xlsx), and what to name it: a table where its first
    line holds a comma, semicolon or tab, else a TXT file; None where it is no UTF-8 text. It was refused as 'not the
    zip archive one is (File is not a zip file)', which said nothing of what it was."""
    try:
        text = bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    first = next((line for line in text_lines(text) if line.strip()), "")
    if not first:  # an empty file (or white space) is no text to name
        return f"{name} is empty: it holds no workbook" if not data else None
    kind, read = ("csv", "a table (a CSV)") if any(d in first for d in CSV_DELIMITERS) else ("txt", "one query a line")
    refusal = f"{name} is not an Excel workbook (.xlsx) but text"
    if name == STDIN_NAME:
        return refusal
    stem = Path(re.sub(r"(?i)\.(gz|xz)$", "", name)).stem
    return f"{refusal}: name it {stem}.{kind}, which is read as {read}"


def _unsaved_formulas(data: bytes | bytearray, title: str, line: int, at: int, records: list[list[str]]
                      ) -> dict[int, str]:
    """Where a sheet's empty cells hold a formula saved without its value: a workbook written by a program (openpyxl,
    pandas) stores formulas that only Excel computes, and read as values they are empty. An empty query cell so gives
    its record a reason for no query (returned, by record index); another cell (an ID, a note) is given its formula as
    text, as Excel's formula bar shows it, in `records`: it was read as empty, and an ID made by a formula was lost
    without a word (the exports write it as text, never as a formula). A formula whose saved value is empty text
    (Excel's =IF(B2="","",...)) stays empty. Read again (values with their types, and formulas) only where a cell is
    empty and the workbook holds a formula."""
    if not any("" in record for record in records) or not _holds_formulas(data):
        return {}
    import openpyxl

    problems = {}
    opened = [openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=data_only, keep_links=False)
              for data_only in (True, False)]
    try:
        saved, written = opened
        rows = dict(min_row=line + 2, max_row=line + 1 + len(records), max_col=max(map(len, records)))
        cells = saved[title].iter_rows(**rows)  # the saved values with their types
        formulas = written[title].iter_rows(**rows, values_only=True)
        for i, (record, typed, texts) in enumerate(zip(records, cells, formulas)):
            for j, (cell, formula) in enumerate(zip(typed, texts[:len(record)])):
                if record[j] or cell.data_type == "str" or not (isinstance(formula, str) and formula.startswith("=")):
                    continue  # a value, a formula's saved empty text ("str"), or no formula
                if j == at:
                    problems[i] = (f"the cell holds a formula, {formula[:80]}, saved without its value (a program "
                                   "wrote the workbook, and only Excel computes formulas): open and save it in Excel, "
                                   "or paste the values")
                else:
                    record[j] = formula
    finally:
        for book in opened:
            book.close()
    return problems


def _formula_rows(data: bytes | bytearray, title: str, first: int, count: int, width: int) -> int:
    """How many of the `count` rows from row `first` of a sheet reach the last of them holding a formula in its first
    `width` columns (0: none does)."""
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, keep_links=False)
    try:
        rows = book[title].iter_rows(min_row=first, max_row=first + count - 1, max_col=width, values_only=True)
        return max((n for n, values in enumerate(rows, start=1)
                    if any(isinstance(value, str) and value.startswith("=") for value in values)), default=0)
    finally:
        book.close()


# a cell's formula in a worksheet's XML: <f>, <f t="shared" .../>, or with a namespace prefix (<x:f>)
FORMULA_TAG = re.compile(rb"<(?:\w+:)?f[\s>/]")


def _holds_formulas(data: bytes | bytearray) -> bool:
    """Whether any worksheet of a workbook holds a formula (its members are bounded: parse_workbook)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return any(FORMULA_TAG.search(archive.read(member)) for member in archive.namelist()
                   if member.startswith("xl/worksheets/") and member.endswith(".xml"))


class TypedCell(str):
    """A workbook cell's text, as every reader of a QueryFile sees it (the CSV writes it so), that keeps the cell's
    typed value and number format: an Excel output writes it back as the number, TRUE/FALSE, date or time it was, not
    as text (a yield 87.5 or an ID 7 became a text cell that Excel flags). Where its text gives its value back (TRUE,
    a whole number, a number to 15 digits) and its format is General, the cell holds no more than its text: a sheet
    of numbers took 7 times the memory of its text."""
    number_format = "General"  # the cell's own, where it has another

    def __new__(cls, text: str, value: object, number_format: str = "General") -> TypedCell:
        cell = super().__new__(cls, text)
        if number_format != "General":
            cell.number_format = number_format
        read = cell._read_back()
        if read is None or read != value or isinstance(read, bool) != isinstance(value, bool):
            cell.given = value
        return cell

    @property
    def value(self) -> object:
        return self.__dict__["given"] if "given" in self.__dict__ else self._read_back()

    def _read_back(self) -> object:
        """The value the text gives (TRUE, FALSE, a number), or None."""
        if self in ("TRUE", "FALSE"):
            return self == "TRUE"
        for number in (int, float):
            with contextlib.suppress(ValueError):
                return number(self)
        return None

    def __reduce__(self) -> tuple[type, tuple[str, object, str]]:  # pickled (Ray's workers) with its value
        return TypedCell, (str(self), self.value, self.number_format)


def _cell_text(cell: object) -> str:
    """A worksheet cell's value as text: "" for an empty cell, 12 for 12.0, a number to the 15 significant digits Excel
    shows and keeps (0.3 for a formula's 0.30000000000000004), a whole number in a format of leading zeros as it is
    shown (padded_number: an ID 007, plain text from then on), TRUE / FALSE, ISO 8601 dates, a duration in hours
    (26:30:00). A number, truth value, date, time or duration is a TypedCell, which a workbook output writes as it
    was."""
    value = getattr(cell, "value", None)
    number_format = getattr(cell, "number_format", None) or "General"
    if value is None:
        return ""
    if isinstance(value, bool):
        return TypedCell("TRUE" if value else "FALSE", value)
    if isinstance(value, (int, float)) and float(value).is_integer():
        padded = padded_number(int(value), number_format)
        if padded is not None:
            return padded
    if isinstance(value, float):
        return TypedCell(str(int(value)) if value.is_integer() else f"{value:.15g}", value, number_format)
    if isinstance(value, int):
        return TypedCell(str(value), value, number_format)
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        # a date (a workbook holds every date as a date and time)
        return TypedCell(value.date().isoformat(), value, number_format)
    if isinstance(value, (datetime.date, datetime.time)):
        return TypedCell(value.isoformat(), value, number_format)
    if isinstance(value, datetime.timedelta):  # a duration ([h]:mm, a reaction's time): read as "1 day, 2:30:00"
        seconds = round(value.total_seconds())
        hours, rest = divmod(abs(seconds), 3600)
        return TypedCell(f"{'-' * (seconds < 0)}{hours}:{rest // 60:02d}:{rest % 60:02d}", value, number_format)
    if hasattr(value, "isoformat"):
        return value.isoformat()  # type: ignore[no-any-return, attr-defined]
    return str(value)


# A number format that shows a whole number with leading zeros, as a compound ID is kept in a workbook (000 shows 7 as
# 007; "CPD-"0000 as CPD-0007): in its first section, zeros between literal text (quoted, or a character after a
# backslash). Read as a number, the ID lost its zeros (and its prefix) and joined no other table.
PADDED_FORMAT = re.compile(r'((?:"[^"]*"|\\.)*)(0{2,})((?:"[^"]*"|\\.)*)')
FORMAT_LITERAL = re.compile(r'"([^"]*)"|\\(.)')


def padded_number(value: int, number_format: str) -> str | None:
    """A whole number as a format of leading zeros (PADDED_FORMAT) shows it, or None for any other format."""
    match = PADDED_FORMAT.fullmatch(number_format.split(";")[0])
    if match is None:
        return None
    prefix, zeros, suffix = (FORMAT_LITERAL.sub(lambda m: m[1] if m[1] is not None else m[2], part)
                             for part in match.groups())
    sign = "-" if value < 0 else ""
    return f"{sign}{prefix}{abs(value):0{len(zeros)}d}{suffix}"


def csv_delimiter(text: str, column: str | None = None, names: Sequence[str] = SMILES_COLUMNS) -> str:
    """What separates a CSV's cells: the first of CSV_DELIMITERS whose split of the header line names the query
    column (`column`, else one of `names`); a comma where none does, so that the error shows the header as
    a comma-separated file reads. A SMILES holds no comma, semicolon or tab outside a quoted cell, and a header is
    read whole before any record, so no query decides how its own line is split. The header is the first of the first
    HEADER_ROWS lines that names the column (header_of)."""
    for delimiter in CSV_DELIMITERS:
        try:
            top = list(itertools.islice(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), HEADER_ROWS))
        except csv.Error:
            continue  # malformed so split; the reader at the delimiter chosen says where
        if header_of(top, column, names) is not None:
            return delimiter
    return CSV_DELIMITERS[0]


def widest_split(text: str) -> tuple[str, list[str]]:
    """The delimiter of CSV_DELIMITERS that splits a CSV's first line into the most cells (the first of them on a
    tie), and those cells: how a refusal shows a header that names no query column. It was shown split at commas
    whatever it held, a vendor's 'Catalog ID;Structure' as one cell, ['Catalog ID;Structure']."""
    def first_line(delimiter: str) -> list[str]:
        return next(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), [])

    splits = [(delimiter, first_line(delimiter)) for delimiter in CSV_DELIMITERS]
    return max(splits, key=lambda split: len(split[1]))  # max keeps the first of equals


def parse_smiles_file(lines: list[str]) -> QueryFile:
    """A SMILES file's lines: each one's SMILES is its text up to the first space or tab (a CXSMILES's up to the
    end of its |...| extension), the rest (spaces and tabs around it dropped) its name, carried in a column of its
    own. A first line whose first field
    is one of SMILES_FILE_HEADERS (any case) is a header, and names that column with its rest (RDKit's writer puts
    "SMILES Name" there). A file with no header and no name reads like a TXT file. A line whose first field begins
    with # is a comment, not a record, as RDKit's SmilesMolSupplier reads it (no SMILES begins so): it was read as
    the query "#" and rejected; a note counts them."""
    comments = sum(line.lstrip(" \t").startswith("#") for line in lines)
    lines = [line for line in lines if not line.lstrip(" \t").startswith("#")]
    notes = (f"{comments} comment line{'s' * (comments != 1)} (beginning with #) not read as queries",) if comments \
        else ()
    header = ""
    first = _smiles_and_name(lines[0]) if lines else ("", "")
    if first[0].casefold() in SMILES_FILE_HEADERS:
        header, lines = first[1] or NAME_COLUMN, lines[1:]
    pairs = [_smiles_and_name(line) for line in lines]
    if not header and not any(name for _, name in pairs):
        return QueryFile([smiles for smiles, _ in pairs], notes=notes)
    return QueryFile([smiles for smiles, _ in pairs], (header or NAME_COLUMN,), tuple((name,) for _, name in pairs),
                     notes=notes)


SMILES_FILE_LINE = re.compile(r"[ \t]*([^ \t]*)(?:[ \t]+(.*?))?[ \t]*", re.DOTALL)


def _smiles_and_name(line: str) -> tuple[str, str]:
    from .chem import CXSMILES  # RDKit only where a SMILES file is read

    start = len(line) - len(line.lstrip(" \t"))
    extended = CXSMILES.match(line, start)  # a CXSMILES: the SMILES, a space and |...|, then the name
    if extended is not None:
        return extended[0], line[extended.end():].strip(" \t")
    match = SMILES_FILE_LINE.fullmatch(line)
    assert match is not None  # every string matches: each part may be empty
    return match[1], match[2] or ""


def parse_sd_file(text: str, column: str | None = None) -> QueryFile:
    """An SD file's records (chem.sd_records, which needs RDKit): each molecule's SMILES is a query, its
    title goes in a `name` column and its data fields in columns of their own, in the order the file
    first gives them. A record RDKit cannot read gives an empty query and its reason (QueryFile.problems).
    `column` names a data field (as query_column reads a header) whose text is the query instead, the records'
    molecules then not read (a note says so): our own results' query field, where a file of them is read to be
    predicted again (refuse_unnamed_results refuses it otherwise).
    Where a field is itself called name (any case), as in predict's SD output (answer_records: the title is the
    name field, or the answer's SMILES where there is none), the title is left out where every record's title says
    no more than that field or its `smiles` field, and is called `title` otherwise: reading such a file gave two
    columns called name."""
    from .chem import sd_records

    # line breaks as \n: an SD file or molfile saved with a carriage return alone (a classic Mac program's) read as one
    # record that RDKit cannot read, and every molecule in it was lost
    records = sd_records(re.sub(r"\r\n?", "\n", text))
    _check_rows(len(records))
    fields = list(dict.fromkeys(name for record in records for name in record.fields))
    at = query_column(fields, column) if column else None
    if column and at is None:
        listed = shown_cells(fields, quoted=False, noun="field") or "none"
        # queries' or a stock's: 'the query column' was said of a stock's field too
        raise MissingColumn(f"this SD file has no data field {column[:40]!r} (its fields: {listed}); leave the field "
                            "out to read each record's molecule", column)
    column_name = fields.pop(at) if at is not None else ""  # its cells are the queries, not another column
    named = next((name for name in fields if _header_key(name) == NAME_COLUMN), None)
    if named is None:
        titled: tuple[str, ...] = (NAME_COLUMN,)
    elif all(r.title in ("", r.fields.get(named, ""), r.fields.get("smiles", "")) for r in records):
        titled = ()
    else:
        titled = ("title",)
    cells = tuple((*(r.title for _ in titled), *(r.fields.get(name, "") for name in fields)) for r in records)
    if not column_name:
        return QueryFile([r.smiles for r in records], (*titled, *fields), cells,
                         tuple(r.problem for r in records) if any(r.problem for r in records) else ())
    note = f"the queries are the SD field {column_name!r}; the records' molecules are not read"
    # A record without the field is no blank one: it was said to hold no query ('blank'), its molecule beside it
    lacking = tuple("" if column_name in r.fields else f"the record has no data field {column_name!r}, the query "
                    "column named (its molecule is not read: the field named is the query)" for r in records)
    return QueryFile([r.fields.get(column_name, "") for r in records], (*titled, *fields), cells,
                     lacking if any(lacking) else (), notes=(note,), query_column=column_name)


class TooManyRecords(InputFileError):
    """A file of more records than MAX_INPUT_ROWS (_parse_stream names the file)."""


def _check_rows(n_rows: int) -> None:
    if n_rows > MAX_INPUT_ROWS:
        raise TooManyRecords(f"more than {MAX_INPUT_ROWS:,} records, the limit per file: split it into files of at "
                             f"most {MAX_INPUT_ROWS:,} records")


# ---- writing ------------------------------------------------------------------------------------


# What files of answers (the Batch page's, the Predict page's, predict --output's) end with, after every other column:
# the model that gave them, its folder's name and its weights' fingerprint (service.Predictor.weights, as evaluate's
# and bench's reports record it; model_cells). A file sent on said which answers and not which model gave them
# (with_model).
MODEL_COLUMNS = ("model_folder", "model_weights")
# After them, where a retrosynthesis run's answers were checked round trip (round_trip, forward_prob): the forward model
# that checked them, as MODEL_COLUMNS name a model, and the top-k within which it had to give the product back. Only
# the page's caption named it, and a file's round_trip said 'True' of no model anyone could tell (with_checker).
CHECKER_COLUMNS = ("round_trip_model_folder", "round_trip_model_weights", "round_trip_k")
# the columns a run may add after RESULT_COLUMNS: known.MATCHES_KNOWN where it has known answers, MODEL_COLUMNS and
# CHECKER_COLUMNS
ADDED_COLUMNS = ("matches_known", *MODEL_COLUMNS, *CHECKER_COLUMNS)


def output_header(input_columns: Iterable[str]) -> list[str]:
    """The input's other columns in front, then RESULT_COLUMNS. A name already taken (one of ours, ADDED_COLUMNS, or
    a repeat), in any case and with spaces around it as query_column reads a header, gets an `input_` prefix, so that
    every output column has a name of its own: an input's Smiles beside our smiles was read back as the query
    column, and its matches_known was written twice."""
    taken = {_header_key(name) for name in (*RESULT_COLUMNS, *ADDED_COLUMNS)}
    header = []
    for name in input_columns:
        while _header_key(name) in taken:
            name = "input_" + name
        taken.add(_header_key(name))
        header.append(name)
    return header + list(RESULT_COLUMNS)


def _header_key(name: str) -> str:
    return name.strip().casefold()


def model_cells(folder: str | Path, weights: str) -> tuple[str, str]:
    """A model's cells of MODEL_COLUMNS (or of CHECKER_COLUMNS' first two): its folder's own name, as the app's sidebar
    and --model name a shipped model (forward, retro), and its weights' fingerprint. Not the folder's path: that says
    where the model lay on the machine that wrote the file (its user's folders with it), which a colleague receiving
    the file cannot open, and two runs of one model from two places named it two ways; the fingerprint tells one
    model's weights from another's whatever their folder is called."""
    return Path(os.path.abspath(folder)).name, weights


def with_model(header: Sequence[str], rows: Iterable[Sequence[object]],
               models: Iterable[tuple[str, str]]) -> tuple[list[str], list[list[object]]]:
    """`header` and `rows` with MODEL_COLUMNS after every other column, each row's cells from `models` in turn (the
    model folder's name and its weights' fingerprint; itertools.repeat for one model's rows). Added last, they move
    no column a reader finds by its place, and nothing reads them back: a file with them or without is read alike
    (uploaded again, they are input columns, renamed input_model_folder and input_model_weights by output_header)."""
    return [*header, *MODEL_COLUMNS], [[*row, *model] for row, model in zip(rows, models)]


# A row's CHECKER_COLUMNS cells where no check ran on it (a history's forward entry beside a checked one)
NO_CHECKER = ("", "", "")


def with_checker(header: Sequence[str], rows: Iterable[Sequence[object]],
                 checkers: Iterable[tuple[str, str, int | str]]) -> tuple[list[str], list[list[object]]]:
    """`header` and `rows` with CHECKER_COLUMNS after every other column, each row's cells from `checkers` in turn
    (the round-trip check's forward model folder, its weights' fingerprint and its top-k; NO_CHECKER where none ran;
    itertools.repeat for one run's rows), as with_model adds a model's."""
    return [*header, *CHECKER_COLUMNS], [[*row, *checker] for row, checker in zip(rows, checkers)]


def predict_batch(predictor: Predictor, queries: Sequence[str], batch_size: int | None = None,
                  through: Callable[..., list[QueryResult]] | None = None,
                  **options: object) -> tuple[list[QueryResult], float]:
    """Predict queries in one call, in batches of batch_size (default: all of them in one): their results,
    and each query's time_ms, the call's wall time divided by its queries. A batch's queries are decoded
    together (each model call advances all of them), so no query has a time of its own beyond this
    share; alone in a call, the share is its whole time. (The decoders' wall_time_s is the whole batch's
    time for greedy and beam search.) `through`: what calls predictor.predict, with its arguments (the command
    line's evaluate.predict_window, which ends the call between batches on Ctrl-C); predictor.predict itself if None."""
    if isinstance(queries, (str, bytes)):  # a str is a Sequence[str]: its characters were predicted
        raise ValueError("predict_batch takes a list of queries; for one SMILES pass [smiles] or call "
                         "Predictor.predict")
    started = time.perf_counter()
    predict = through or predictor.predict
    results = predict(list(queries), batch_size=batch_size or max(1, len(queries)), **options)
    return results, (time.perf_counter() - started) * 1000 / max(1, len(queries))


@dataclass
class Outcomes:
    """How a run's records came out, read from each record's first output row: rejected (an error, no answers and
    no query read), stopped at the time limit with answers (beside the error, QueryResult.stopped_with_answers) or
    before any (`unanswered`: service.stopped_by_time_limit's rule, QueryResult.timed_out's), the rest
    predicted; and the answered ones whose query a retrosynthesis run notes (several molecules, an ion alone, no
    carbon: several_molecules). The command line and Ray count them so, resumed rows too; blank records are not
    counted. A query stopped before any answer was counted rejected: '0 queries predicted, 4 rejected' for a time
    limit too short, and a user took slow queries for ones the model would not take."""
    rejected: int = 0
    stopped: int = 0  # with answers, which count as predicted
    unanswered: int = 0  # stopped before any answer: neither predicted nor rejected
    several: list[tuple[int, str]] = field(default_factory=list)

    def count(self, first_row: Sequence[object], offset: int = 0) -> None:
        """Count a record by its first row, whose result columns begin at `offset` (after the input's columns)."""
        from .service import stopped_by_time_limit

        error = first_row[offset + RESULT_COLUMNS.index("error")]
        if error:
            answered = first_row[offset + RESULT_COLUMNS.index("rank")] not in (None, "")
            timed_out = stopped_by_time_limit(error, first_row[offset + RESULT_COLUMNS.index("canonical_query")])
            self.stopped += answered
            self.unanswered += timed_out and not answered
            self.rejected += not timed_out and not answered
        if several := several_molecules(first_row, offset):
            self.several.append(several)


def several_molecules(first_row: Sequence[object], offset: int = 0) -> tuple[int, str] | None:
    """(record number, canonical query) of an answered record that a retrosynthesis run notes, read from its first
    output row (the result columns from `offset`); None otherwise. The note is the Predict page's
    (service.several_products_note): a query of several molecules (a salt or a solvent that the model builds into
    its answers), and also one molecule written as an ion (acetate, CC(=O)[O-]) or holding no carbon ([NH4+]),
    which a file run passed over without a word (several_molecules_note)."""
    answered = first_row[offset + RESULT_COLUMNS.index("rank")] not in (None, "")
    query = str(first_row[offset + RESULT_COLUMNS.index("canonical_query")] or "")
    if not answered or not ("." in query or _noted_alone(query)):  # "." first: a forward run's queries, nearly all
        return None  # of several molecules, are not read by RDKit for a note they never print
    return int(str(first_row[offset + RESULT_COLUMNS.index("row")])), query


@functools.lru_cache(maxsize=4096)
def _noted_alone(canonical: str) -> bool:
    """Whether service.several_products_note speaks of a retrosynthesis query of one molecule (an ion, no carbon).
    Cached: the Batch page asks it of each of a record's answer rows, and RDKit reads the query each time. A query
    RDKit cannot read (a resumed run's kept rows, edited by hand) has no note: it stopped the run on a ChemError."""
    from .chem import ChemError
    from .service import several_products_note

    try:
        return bool(several_products_note("retro", canonical))
    except ChemError:
        return False


# What the records of each kind of several_products_note have in common, as several_molecules_note counts them
# (one record, several): the kinds in the order that note tests them.
_NOTED_KINDS = (("holds no carbon", "hold no carbon"),
                ("is written with charges a proton explains", "are written with charges a proton explains"),
                ("holds several molecules", "hold several molecules"))


def _noted_kind(canonical: str) -> int | None:
    """The index in _NOTED_KINDS of the note several_products_note gives a noted retrosynthesis query; None for one
    RDKit cannot read (a resumed run's kept row edited by hand), which has no note (_noted_alone)."""
    from .chem import ChemError, holds_carbon

    try:
        if not holds_carbon(canonical):
            return 0
    except ChemError:
        return None
    return 2 if "." in canonical else 1


def several_molecules_note(several: Sequence[tuple[int, str]]) -> str:
    """What the Batch page and `predict --input` say of a retrosynthesis file's noted queries (several_molecules):
    for each kind of note, how many and which records, and for the first the Predict page's note
    (service.several_products_note), in its words; "" where RDKit reads none of their queries."""
    from .service import several_products_note

    kinds: dict[int, list[tuple[int, str]]] = {}
    for row, canonical in several:
        if (kind := _noted_kind(canonical)) is not None:
            kinds.setdefault(kind, []).append((row, canonical))
    notes = []
    for kind, records in kinds.items():
        row, canonical = records[0]
        one, many = _NOTED_KINDS[kind]
        count = f"1 query {one}" if len(records) == 1 else f"{len(records):,} queries {many}"
        notes.append(f"{count} ({row_list(tuple(r for r, _ in records))}). Row {row:,}: "
                     f"{several_products_note('retro', canonical)}")
    return " ".join(notes)


def row_list(rows: tuple[int, ...], shown: int = 5) -> str:
    """'row 3', 'rows 3 and 5', 'rows 3, 5, 7, 9, 11 and 4 more': record numbers as a person reads them."""
    if len(rows) == 1:
        return f"row {rows[0]:,}"
    listed = [f"{n:,}" for n in rows[:shown + 1]]
    if len(rows) > shown + 1:  # "and 1 more" would take the room of the row it hides
        return f"rows {', '.join(listed[:shown])} and {len(rows) - shown:,} more"
    return f"rows {', '.join(listed[:-1])} and {listed[-1]}"


class LastRow(list):
    """The last output row of a record (result_rows marks it so): a run that stops after it keeps the record
    (kept_through), where a row without the mark waits for the next record's first row to say its record is whole."""


def result_rows(row: int, cells: tuple[str, ...], result: QueryResult,
                time_ms: float | None = None, problem: str = "") -> list[list[object]]:
    """The output rows of one query, matching output_header: one per prediction, or one holding the
    error of a rejected query; the last is a LastRow. `row` is the query's 1-based record number in the input;
    `time_ms` its time from predict_batch, or, unset, the decoder's own wall time (the query's when it was decoded
    alone, as the app does). `problem` (QueryFile.problem_of): why the record gave no query, which is
    then its error rather than the empty query's. A query stopped with answers (stopped_with_answers) writes them,
    each row holding its error; one stopped without (greedy and its speculative kin) writes, beside its error, the
    calls it made, as a decoded query's rows do (a query refused before decoding made none: its cells stay empty)."""
    stats = result.stats
    if time_ms is None:
        time_ms = stats.wall_time_s * 1000
    if problem or not (result.ok or result.stopped_with_answers):
        made = ((result.dtype, round(time_ms, 2), stats.model_calls, stats.draft_tokens_accepted)
                if stats.model_calls and not problem else (None,) * 4)
        return [LastRow([*cells, row, result.query, result.canonical_query, None, "", None, None, None, None, "", None,
                         None, None, None, None, None, None, result.method, *made, problem or result.error])]
    rows = [[*cells, row, result.query, result.canonical_query, p.rank, p.smiles, rounded(p.score),
             significant(p.probability), p.valid, p.sane, "; ".join(p.concerns), p.model_rank,
             rounded(p.confidence), p.views, result.writings, p.spellings, p.round_trip,
             significant(p.forward_prob),
             result.method, result.dtype, round(time_ms, 2), stats.model_calls, stats.draft_tokens_accepted,
             result.error or ""]
            for p in result.predictions]
    return [*rows[:-1], LastRow(rows[-1])] if rows else rows


def significant(probability: float | None) -> float | None:
    """A probability as the exports write it: 4 significant digits, so that a small one stays visible; None stays
    None (an empty cell)."""
    return None if probability is None else float(f"{probability:.4g}")


def percent(share: float, places: int = 0) -> str:
    """A share (a chance, a fraction of queries) in percent to `places` decimals, never rounded to an impossible 0%
    or 100%: a calibrated confidence of 0.25% read "0%", a probability of 0.9996 "100.0%", and 1,999 known answers
    found of 2,000 "100.0%". Such a share reads "<1%" or ">99.9%" (at 1 place) instead."""
    shown = f"{share:.{places}%}"
    step = 10.0 ** -places  # the smallest step shown, in percent
    if share > 0 and float(shown[:-1]) == 0:
        return f"<{step:.{places}f}%"
    if share < 1 and float(shown[:-1]) == 100:
        return f">{100 - step:.{places}f}%"
    return shown


def rounded(value: float | None) -> float | None:
    """A confidence (or a score) as the exports write it: 4 decimals; None stays None (an empty cell)."""
    return None if value is None else round(value, 4)


# control characters other than tab and line breaks: XML 1.0 cannot hold them, so a worksheet cannot, and a NUL cuts
# a line short in many tools that read a CSV or an SD file; every export writes them as \x00 and the like. XML cannot
# hold the noncharacters U+FFFE and U+FFFF either (a UTF-8 file may hold them: a workbook with one would not open),
# nor UTF-8 a lone surrogate (the CSV's write failed on one): written as \ufffe and the like.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def visible_controls(text: str) -> str:
    """Text with its control characters (CONTROL_CHARACTERS) written out as \\x00, \\ufffe and the like."""
    return CONTROL_CHARACTERS.sub(lambda m: f"\\x{ord(m[0]):02x}" if m[0] < "\x80" else f"\\u{ord(m[0]):04x}", text)


def neutralize(cell: object) -> object:
    """Prefix text that a spreadsheet would run as a formula with a quote (OWASP CSV injection): text that starts with
    one of FORMULA_PREFIXES, or with one of FORMULA_SIGNS after white space, unless it is a plain number."""
    if not isinstance(cell, str) or PLAIN_NUMBER.fullmatch(cell):
        return cell
    lead = cell.lstrip()
    if cell.startswith(FORMULA_PREFIXES) or (lead.startswith(FORMULA_SIGNS) and not PLAIN_NUMBER.fullmatch(lead)):
        return "'" + cell
    return cell


def csv_cell(cell: object) -> object:
    """A cell as it goes to the CSV: None empty, numbers as numbers, anything else text, its control characters
    written out (a NUL went into the file raw) and neutralized."""
    if cell is None:
        return ""
    if isinstance(cell, numbers.Number):  # bool included: written True / False
        return cell
    return neutralize(visible_controls(str(cell)))


def write_rows(f: IO[str], header: Iterable[object], rows: Iterable[Iterable[object]]) -> None:
    """Rows (any iterable, consumed as it goes: memory stays bounded) through the csv module, whose
    minimal quoting quotes every cell holding a line break, a lone carriage return included."""
    writer = csv.writer(f)
    writer.writerow([csv_cell(c) for c in header])  # input column names are user text too
    for row in rows:
        writer.writerow([csv_cell(c) for c in row])


def csv_bytes(header: Iterable[object], rows: Iterable[Iterable[object]]) -> bytes:
    """The CSV in memory, for a download from the app: UTF-8 with a byte-order mark, which Excel needs to read a
    double-clicked CSV as UTF-8 (without it, its ANSI code page garbled names and ids outside ASCII); the app's
    readers and pandas take it. (The command line's files have none: programs read them.)"""
    buffer = io.StringIO(newline="")
    write_rows(buffer, header, rows)
    return buffer.getvalue().encode("utf-8-sig")


# Each output row holds, besides its record's cells and query, at least a row number, a method and a comma between
# each two of RESULT_COLUMNS: what a record's rows take at the least (least_output_bytes).
LEAST_ROW_BYTES = len(RESULT_COLUMNS) + len("1,greedy\r\n")


def least_output_bytes(table: QueryFile) -> int:
    """The fewest bytes the output of `table` can take (one row a record, with no answer): a disk with less room
    cannot hold it whatever the answers (check_room)."""
    return sum(len(query.encode("utf-8", "replace")) + sum(len(cell.encode("utf-8", "replace"))
                                                           for cell in table.cells_of(i)) + LEAST_ROW_BYTES
               for i, query in enumerate(table.queries))


def check_room(output: str | Path, needed: int) -> None:
    """Refuse an output whose disk has less free room than `needed` bytes, before any query is predicted: a run
    that fills the disk stops at it after hours (its rows are kept, write_csv, but no answer comes)."""
    import shutil

    folder = Path(os.path.realpath(output)).parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:  # a file system that does not say (some network and FUSE mounts): the run finds out
        return
    if free < needed:
        raise OutputFileError(f"the disk of {output} has {free / 2**20:,.1f} MB free, and the output needs at least "
                              f"{needed / 2**20:,.1f} MB: free some room, or write it elsewhere")


def check_output(output: str | Path, input_path: str | Path | None = None, holding: str = "the queries") -> Path:
    """The output path to write, or OutputFileError: it must not be the input (hard and symbolic links
    included), a folder, or a device (renaming onto /dev/null would replace the device itself), and its
    folder must exist. A symbolic link is followed, so that the file it points to is the one written.
    `holding`: what the input holds, which writing it would destroy (plan's: the stock)."""
    path = Path(os.path.realpath(output))
    if path.is_dir():
        raise OutputFileError(f"{output} is a folder; give a file name for the output")
    if path.exists() and not path.is_file():
        raise OutputFileError(f"{output} is a device, pipe or socket; give a regular file for the output")
    if not path.parent.is_dir():
        raise OutputFileError(f"the folder of {output} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise OutputFileError(f"no permission to write in the folder of {output}")
    if input_path is not None:
        source = Path(os.path.realpath(input_path))
        if path == source or (path.exists() and source.exists() and os.path.samefile(path, source)):
            raise OutputFileError(f"{output} is the input file; writing it would destroy {holding}. "
                                  "Choose another output name")
    return path


def check_results_name(output: str | Path, max_rows: int | None = None) -> None:
    """Refuse a results name whose suffix promises what write_results does not write (.sdf.gz and .csv.gz were
    written as plain CSV without a word), and a workbook that may need more rows than a sheet holds: `max_rows`,
    the most data rows the run can give (queries x answers a query), checked before any query is predicted."""
    if not str(output).lower().endswith(RESULT_SUFFIXES):
        raise OutputFileError(f"{output}: predict writes CSV (.csv), an SD file ({', '.join(SD_FILE_SUFFIXES)}) or an "
                              f"Excel workbook ({WORKBOOK_SUFFIX}), uncompressed; give a name ending in one of those, "
                              f"or {STDOUT} for CSV on standard output")
    if is_workbook_name(output) and max_rows is not None and max_rows + 1 > WORKBOOK_MAX_ROWS:
        raise OutputFileError(f"{output}: up to {max_rows:,} rows of answers, more than an Excel sheet holds "
                              f"({WORKBOOK_MAX_ROWS - 1:,} under its header); write CSV (.csv) or fewer answers "
                              "a query")


def is_workbook_name(path: str | Path) -> bool:
    """Whether results written to `path` go out as an Excel workbook (.xlsx, any case)."""
    return str(path).lower().endswith(WORKBOOK_SUFFIX)


def is_sd_name(path: str | Path) -> bool:
    """Whether results written to `path` go out as an SD file (.sdf or .sd, any case) rather than CSV."""
    return str(path).lower().endswith(SD_FILE_SUFFIXES)


def answer_records(header: Sequence[str], rows: Iterable[Sequence[object]]
                   ) -> Iterator[tuple[str, str, dict[str, object]]]:
    """The SD records (chem.write_sd) of output rows in output_header's columns: one per row, so the SD
    file holds what the CSV holds. The molecule is the row's answer (`smiles`); a rejected query's row, or
    an answer RDKit cannot read, gives a record without atoms that keeps its fields (`error`, `valid`).
    The title is the input's name (its first column called name, in any case and with spaces around it, as
    query_column reads a header) where it has one, else the answer. Every cell is a field."""
    if "smiles" not in header:
        raise ValueError(f"an SD file holds each row's answer as its molecule: the header needs a smiles column "
                         f"(output_header gives one), and it has {', '.join(map(str, header)) or 'none'}")
    answer = header.index("smiles")
    name = next((i for i, column in enumerate(header) if _header_key(column) == NAME_COLUMN), None)
    for row in rows:
        smiles = str(row[answer] or "")
        title = str(row[name] or "") if name is not None else ""
        yield smiles, title, dict(zip(header, row))


def write_sd_rows(f: IO[str], header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Output rows as an SD file (answer_records), written as they come: memory stays bounded."""
    from .chem import write_sd

    write_sd(f, answer_records(header, rows))


def sd_bytes(header: Sequence[str], rows: Iterable[Sequence[object]]) -> bytes:
    """The SD file of output rows in memory, for a download."""
    from .chem import sdf_text

    return sdf_text(answer_records(header, rows)).encode("utf-8")


# ---- Excel workbooks ----------------------------------------------------------------------------

WORKBOOK_SHEET = "predictions"


def write_workbook_rows(f: IO[bytes], header: Iterable[object], rows: Iterable[Iterable[object]],
                        sheet_name: str = WORKBOOK_SHEET) -> None:
    """Output rows as an Excel workbook of one sheet (`sheet_name`), header row frozen, written as they come (openpyxl's
    write-only mode: memory stays bounded). Numbers stay numbers (a NaN or infinity, which a sheet cannot hold, as
    its text); text stays text, typed so that none is taken for a formula or an error value and shown as given,
    without the CSV's quote; see workbook_text for what Excel cannot hold. Refuses a row past the sheet's last
    (check_results_name refuses such a run before it starts), and a row wider than a sheet (the header is the first
    row written, before any answer is asked for)."""
    import openpyxl  # only where a workbook is written
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.cell.cell import ERROR_CODES  # text openpyxl would store as Excel's error value

    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet(sheet_name)
    sheet.freeze_panes = "A2"

    def cell_of(value: object) -> object:
        if isinstance(value, TypedCell):  # an input workbook's number, date or truth value, as it was
            typed = WriteOnlyCell(sheet, value=value.value)
            typed.number_format = value.number_format
            return typed
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, numbers.Real):
            return value if math.isfinite(value) else str(value)
        text = workbook_text(str(value))
        if not text:  # an empty cell: openpyxl wrote <c t="inlineStr"/>, a text cell without its text, which some
            return None  # readers refuse (R's openxlsx2: a SAS export so)
        if text.startswith("=") or text in ERROR_CODES:  # what openpyxl would type as a formula or an error
            typed = WriteOnlyCell(sheet, value=text)
            typed.data_type = "s"
            return typed
        return text

    try:
        for n, row in enumerate(itertools.chain([header], rows), start=1):
            if n > WORKBOOK_MAX_ROWS:
                raise OutputFileError(f"more than {WORKBOOK_MAX_ROWS:,} rows, the most an Excel sheet holds; write CSV")
            cells = [cell_of(value) for value in row]
            if len(cells) > WORKBOOK_MAX_COLUMNS:  # openpyxl wrote cells past XFD, which Excel drops as damaged
                raise OutputFileError(f"{len(cells):,} columns, more than the {WORKBOOK_MAX_COLUMNS:,} an Excel sheet "
                                      "holds; write CSV")
            sheet.append(cells)
    except BaseException:
        # end the sheet's stream to its temporary file now (openpyxl deletes the file at exit), not at garbage
        # collection, where it fails writing to the file it already closed
        with contextlib.suppress(Exception):
            sheet.close()
        raise
    book.save(f)


def workbook_text(text: str) -> str:
    """Text as a worksheet cell can hold it: a character XML cannot hold written as \\x01 and the like, a line break
    as Excel writes one (\\n; XML would read \\r\\n and a lone \\r so anyway), and a text longer than Excel's
    32,767 characters cut there, ending in a note of how many characters were cut (the whole text is in the CSV)."""
    text = visible_controls(text.replace("\r\n", "\n").replace("\r", "\n"))
    if len(text) <= WORKBOOK_MAX_CELL:
        return text
    note = f" [... {{}} characters cut: an Excel cell holds {WORKBOOK_MAX_CELL:,}]"
    kept = WORKBOOK_MAX_CELL - len(note.format(len(text)))
    return text[:kept] + note.format(f"{len(text) - kept:,}")


def workbook_bytes(header: Iterable[object], rows: Iterable[Iterable[object]],
                   sheet_name: str = WORKBOOK_SHEET) -> bytes:
    """The workbook in memory, for a download (a route planner's sheet is called "routes")."""
    buffer = io.BytesIO()
    write_workbook_rows(buffer, header, rows, sheet_name)
    return buffer.getvalue()


def write_results(path: str | Path, header: Sequence[str], rows: Iterable[Sequence[object]],
                  keep: Kept | None = None) -> None:
    """Output rows to `path` as write_csv writes them: an SD file or an Excel workbook where the name says so
    (is_sd_name, is_workbook_name), else CSV; a name promising anything else (.csv.gz) is refused
    (check_results_name). With `keep`, a run that stops before the file is in place keeps its whole records' rows at
    keep.path as CSV: the CSV itself (write_csv), or a copy of an SD file's or workbook's rows made as they pass."""
    check_results_name(path)
    sd, workbook = is_sd_name(path), is_workbook_name(path)
    if not (sd or workbook):
        write_csv(path, header, rows, keep)
        return

    def write(f: IO, rows: Iterable[Sequence[object]]) -> None:
        if sd:
            write_sd_rows(f, header, rows)
        else:
            write_workbook_rows(f, header, rows)

    if keep is None:
        _write_replacing(path, lambda f: write(f, rows), binary=workbook)
        return
    # An SD file or workbook is whole only at its end: its rows go to a kept CSV too as they pass (kept_through),
    # which is dropped once the file is in place and kept (_keep_partial) where anything stops it before.
    journal, kept_csv = _new_partial(check_output(keep.path), binary=True, keep=True)
    with kept_csv:
        try:
            _write_replacing(path, lambda f: write(f, kept_through(kept_csv, list(header), rows, keep)), workbook)
        except BaseException:
            _keep_or_drop(kept_csv, journal, keep)
            raise
        journal.unlink()


def write_text_file(path: str | Path, text: str) -> None:
    """Write text as write_csv writes a CSV: to a new file renamed into place, never half a file at `path`."""
    _write_replacing(path, lambda f: f.write(text))


def write_csv(path: str | Path, header: Iterable[object], rows: Iterable[Iterable[object]],
              keep: Kept | None = None) -> None:
    """Write the CSV to a new file beside `path`, renamed into place once every row is written: a run
    that fails leaves any earlier file at `path` as it was, never half a file. With `keep` (rows of output_header,
    in record order), a run that stops before its file is in place (Ctrl-C, SIGTERM, a full disk, a failed rename, a
    failed prediction) keeps the rows of its whole records at keep.path instead (write_kept_rows, _keep_partial),
    where they are more records than keep.held."""
    if keep is None:
        _write_replacing(path, lambda f: write_rows(f, header, rows))
    else:
        _write_replacing(path, lambda f: write_kept_rows(f, list(header), rows, keep), keep=keep)


@dataclass
class Kept:
    """Where a predict that stops keeps the CSV rows it wrote (write_csv), and how far they go: the rows of records
    1 to last_row (0: none). `held`: the records the file there already holds (a run resumed from it), which a run
    that stops keeps only by writing more. `moved`: why the rows are not where path first said (its folder could not
    be written, _keep_partial), "" where they are. `journal`: the rows are kept apart from their output, an SD file or
    workbook, which gets them back as they were given (journal_cell), not as a CSV shows them."""
    path: Path
    held: int = 0
    last_row: int = 0
    moved: str = ""
    journal: bool = False


def interrupted_name(output: str | Path) -> Path:
    """Where a predict that stops keeps the rows it wrote to `output`, as CSV: out.csv -> out.interrupted.csv,
    out.xlsx -> out.interrupted.xlsx.csv (and out.sdf so), which no other output's run shares."""
    path = Path(output)
    tail = f".interrupted{path.suffix}" + ("" if path.suffix.lower() == ".csv" else ".csv")
    return path.with_name(fitted_name(path.stem, tail))


NAME_MAX_BYTES = 255  # the most bytes a file name may take (ext4, XFS, APFS; NTFS counts 255 UTF-16 units)


def fitted_name(stem: str, tail: str) -> str:
    """stem + tail where that fits in NAME_MAX_BYTES, else the stem cut (at a character's end) and marked with 8 hex
    digits of its whole, which keep two long names apart. The hidden file an output is first written to and the
    .interrupted.csv a stopped predict keeps its rows in add to the output's name: one named near the limit (80
    Japanese characters, 244 of its 255 bytes) failed with 'File name too long', naming a file its user never gave."""
    if len(os.fsencode(stem + tail)) <= NAME_MAX_BYTES:
        return stem + tail
    mark = "~" + hashlib.sha256(os.fsencode(stem)).hexdigest()[:8]
    room = NAME_MAX_BYTES - len(os.fsencode(mark + tail))
    return os.fsencode(stem)[:room].decode("utf-8", "ignore") + mark + tail


def write_kept_rows(f: IO[bytes], header: Sequence[object], rows: Iterable[Sequence[object]], keep: Kept) -> None:
    """The rows to the kept CSV `f` (kept_through), the output file itself where it is a CSV."""
    for _ in kept_through(f, header, rows, keep):
        pass


def kept_through(f: IO[bytes], header: Sequence[object], rows: Iterable[Sequence[object]], keep: Kept
                 ) -> Iterator[Sequence[object]]:
    """The rows as they come, each written (as write_rows writes it) to an unbuffered binary file as it passes, a
    record's rows at a time (the `row` column): a record's rows go to the file once its LastRow passes, else once the
    next record's first row comes (or the rows end), so that whatever stops the run (an error raised by `rows`, or by
    a write on a full disk) the file is cut back to its last whole record, keep.last_row. (A buffered file could not be
    cut so: the cut flushed its buffer first, and failed again on a full disk.)"""
    at = header.index("row")
    cell_of = journal_cell if keep.journal else csv_cell
    pending = io.StringIO(newline="")  # the rows not yet in the file
    writer = csv.writer(pending)
    whole = 0  # the bytes of the file that are whole records (the header first)

    def write_pending() -> None:
        nonlocal whole
        data = memoryview(pending.getvalue().encode("utf-8"))
        pending.seek(0)
        pending.truncate()
        while data:  # a write on a filling disk may take part of its bytes, and fails at the next
            written = f.write(data)
            if not written:
                raise OSError(errno.EIO, "a write took none of its bytes")
            data = data[written:]
        whole = f.tell()

    try:
        writer.writerow([cell_of(c) for c in header])
        write_pending()
        current = None
        for row in rows:
            if row[at] != current:
                if current is not None:
                    write_pending()
                    keep.last_row = int(current)  # type: ignore[call-overload]
                current = row[at]
            writer.writerow([cell_of(c) for c in row])
            if isinstance(row, LastRow):  # the record is whole: a run stopped while the next is predicted keeps it
                write_pending()
                keep.last_row = int(current)  # type: ignore[call-overload]
            yield row
        write_pending()
        if current is not None:
            keep.last_row = int(current)  # type: ignore[call-overload]
    except GeneratorExit:  # its reader stopped (an SD file's or workbook's write failed): no record is half written
        raise
    except BaseException:
        with contextlib.suppress(OSError):  # what stopped the run is the error to report
            f.truncate(whole)  # an unbuffered file: nothing is written on the way
        raise


# The result columns that hold numbers or TRUE/FALSE (result_rows): typed again where kept rows are read back
# (kept_rows), as a workbook resumed from them holds them as numbers; every other cell is text.
RESULT_TYPES: dict[str, Callable[[str], object]] = {
    **dict.fromkeys(("row", "rank", "model_rank", "writings", "writings_read", "spellings", "model_calls",
                     "accepted_tokens"), int),
    **dict.fromkeys(("score", "probability", "confidence", "forward_prob", "time_ms"), float),
    **dict.fromkeys(("valid", "sane", "round_trip"), lambda text: {"True": True, "False": False}[text])}


def journal_cell(cell: object) -> object:
    """A cell as the kept rows of an SD file or workbook hold it: as csv_cell writes it (a spreadsheet runs none of
    it), and a quote more in front of text that begins with one, so that kept_rows can take off the quote that
    neutralize adds and give the text back as it was ("=1" and "'=1" both read "'=1" from the output's CSV)."""
    text = csv_cell(cell)
    if isinstance(text, str) and text.startswith("'") and text == visible_controls(str(cell)):
        return "'" + text  # the text's own quote, told apart from one neutralize adds
    return text


def check_kept(keep: Kept, header: Sequence[str], queries: Sequence[str], method: str) -> None:
    """Check the rows an interrupted predict kept at keep.path (kept_rows) before a run goes on from them, and set
    keep.held to the last record they hold."""
    at = header.index("row")
    for row in kept_rows(keep, header, queries, method):
        keep.held = row[at]  # type: ignore[assignment]


def kept_rows(keep: Kept, header: Sequence[str], queries: Sequence[str], method: str,
              cells: Sequence[Sequence[str]] = ()) -> Iterator[list[object]]:
    """The rows an interrupted predict kept at keep.path (kept_through), read as they come (the file may be far larger
    than an input), as that run gave them (an empty cell None, RESULT_TYPES typed; text as given where keep.journal;
    an input cell that reads as the record's cell in `cells`, QueryFile.cells, as that cell: a workbook's number stays
    a number in a resumed workbook). Refused unless they are rows of `header` for records 1, 2, ... in order, each
    holding its record's query (`queries`) and, where predicted, `method`: rows of another file or other options would
    be joined to this run's without a word."""
    path = keep.path
    written = journal_cell if keep.journal else csv_cell
    with open_regular(path, bounded=False) as raw:  # read row by row: memory stays bounded
        reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        if next(reader, None) != [str(written(c)) for c in header]:
            raise InputFileError(f"{path.name} was written with other columns than this run writes (another input "
                                 "file, --column or --known-column, or an earlier MolSpec, whose results had other "
                                 "columns): resume with the command that was interrupted, or delete the file to start "
                                 "again")
        at, query, by = (header.index(column) for column in ("row", "query", "method"))
        types = {at + i: RESULT_TYPES[column] for i, column in enumerate(RESULT_COLUMNS) if column in RESULT_TYPES}
        held = 0
        for record in reader:
            where = f"{path.name}, line {reader.line_num:,}"
            if len(record) != len(header) or not record[at].isdigit() or int(record[at]) not in (held or 1, held + 1):
                raise InputFileError(f"{where}: not the next record's row as predict writes it; resume with the "
                                     "command that was interrupted, or delete the file to start again")
            held = int(record[at])
            if held > len(queries) or record[query] != str(written(queries[held - 1])):
                raise InputFileError(f"{where}: record {held:,} holds another query than the input's; resume with the "
                                     "input that was interrupted, or delete the file to start again")
            if record[by] and record[by] != method:
                raise InputFileError(f"{where}: predicted with --method {record[by]}, not {method}: resume with the "
                                     "options that were interrupted")
            given = cells[held - 1] if cells else ()
            try:
                yield [None if not cell else types[i](cell) if i in types
                       else given[i] if i < len(given) and cell == str(written(given[i]))
                       else _given_text(cell, keep.journal) for i, cell in enumerate(record)]
            except (KeyError, ValueError):
                raise InputFileError(f"{where}: a number or TRUE/FALSE column holds other text; resume with the file "
                                     "as predict wrote it, or delete the file to start again") from None


def _given_text(cell: str, journal: bool) -> str:
    """A kept text cell as it was given: a journal's quote in front taken off (journal_cell)."""
    return cell[1:] if journal and cell.startswith("'") else cell


def _write_replacing(path: str | Path, write: Callable[[IO], None], binary: bool = False,
                     keep: Kept | None = None) -> None:
    """Call `write` on a new file (text, or `binary`) beside `path`, then rename it into place (write_csv's
    guarantee). With `keep` the file is binary and unbuffered (write_kept_rows), and where anything stops it before
    it is in place its rows are kept (_keep_partial) if they are more records than keep.held; it is renamed while
    still open, as a folder removed under it leaves the rows only in the open file."""
    target = check_output(path)
    partial, f = _new_partial(target, binary, keep is not None)
    with f:
        try:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the rows are on disk before the name points at them
            os.replace(partial, target)
        except BaseException as exc:
            _keep_or_drop(f, partial, keep)
            if isinstance(exc, OSError) and exc.filename is None:  # "File too large" said which file of the run's
                exc.filename = str(path)
            raise


def _new_partial(target: Path, binary: bool = False, keep: bool = False) -> tuple[Path, IO]:
    """A new file beside `target`, under a name of its own, open for writing: text, or `binary`, or for `keep` binary,
    unbuffered and readable (kept_through, _keep_partial)."""
    while True:
        partial = target.with_name(fitted_name(f".{target.name}", f".{secrets.token_hex(8)}.partial"))
        try:
            # mode "x" creates the file with the permissions a plain open would give (tempfile: 0o600)
            if keep:
                return partial, open(partial, "xb+", buffering=0)  # read too: _keep_partial may copy it elsewhere
            return partial, open(partial, "xb") if binary else open(partial, "x", encoding="utf-8", newline="")
        except FileExistsError:  # another run drew the same 16 hex digits: draw again
            continue


def _keep_or_drop(f: IO, partial: Path, keep: Kept | None) -> None:
    """A stopped run's file `f`, named `partial`: its rows kept (_keep_partial) where they are more records than
    keep.held, else the file removed."""
    if keep is not None and keep.last_row > keep.held:
        _keep_partial(f, partial, keep)
    else:
        partial.unlink(missing_ok=True)


def _keep_partial(f: IO[bytes], partial: Path, keep: Kept) -> None:
    """Keep a stopped run's rows (the open file `f`, named `partial`) at keep.path; where that folder cannot be
    written (removed, or its permission taken away, while the run went on), copy them to a new folder in the system's
    temporary folder under keep.path's name, set keep.path there and say why in keep.moved. The rows are lost only
    where neither can be written."""
    try:
        os.replace(partial, keep.path)
        return
    except OSError as exc:
        reason = exc.strerror or str(exc)
    with contextlib.suppress(OSError):
        partial.unlink()
    import shutil
    import tempfile

    moved = f"its folder, {keep.path.parent}, could not be written: {reason}"
    try:
        elsewhere = Path(tempfile.mkdtemp(prefix="molspec-")) / keep.path.name
        f.seek(0)
        with open(elsewhere, "xb") as copy:
            shutil.copyfileobj(f, copy)
    except OSError as exc:  # what stopped the run is the error to report; this one is said beside it
        keep.moved, keep.last_row = f"{moved}, nor the temporary folder: {exc.strerror or exc}", keep.held
        return
    keep.moved, keep.path = moved, elsewhere
