"""Reading query files and writing safe CSV."""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from pathlib import Path

from .data import open_text

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
MAX_INPUT_ROWS = 100_000  # rows per batch file
MAX_INPUT_BYTES = 50 * 1024 * 1024
SMILES_COLUMNS = ("smiles", "SMILES", "query", "reactants", "product")


class InputFileError(ValueError):
    """A query file that cannot be read as a whole (wrong column, too large, not text)."""


def neutralize(cell: object) -> object:
    """Prefix text that a spreadsheet would run as a formula with a quote (OWASP CSV injection)."""
    if isinstance(cell, str) and cell.startswith(FORMULA_PREFIXES):
        return "'" + cell
    return cell


def read_queries(path: str | Path, column: str | None = None) -> list[str]:
    """Queries from a TXT (one per line) or CSV file (a SMILES column); blank lines are kept as
    empty queries so that row numbers stay aligned with the file."""
    path = Path(path)
    if path.stat().st_size > MAX_INPUT_BYTES:
        raise InputFileError(f"{path.name} is larger than {MAX_INPUT_BYTES // 2**20} MB")
    try:
        with open_text(path, newline="") as f:  # no newline translation: parse_queries splits records
            text = f.read()
    except UnicodeDecodeError:
        raise InputFileError(f"{path.name} is not UTF-8 text") from None
    return parse_queries(text, csv_format=path.name.endswith((".csv", ".csv.gz")), column=column)


def parse_queries(text: str, *, csv_format: bool, column: str | None = None) -> list[str]:
    """One query per record: a TXT line (split at \\n, \\r\\n or \\r only, so that other control
    characters stay inside their query and are rejected there), or a CSV record's SMILES column
    (quoted cells may hold line breaks). Blank records are kept as empty queries, so that row
    numbers match the file's records."""
    if not csv_format:
        rows = re.split(r"\r\n|\r|\n", text)
        if rows and rows[-1] == "":
            rows.pop()  # the file's final line break ends the last line; it does not start a new one
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            fields = next(reader, [])
            wanted = [column] if column else [c for c in SMILES_COLUMNS if c in fields]
            if not wanted or wanted[0] not in fields:
                expect = repr(column) if column else " or ".join(repr(c) for c in SMILES_COLUMNS)
                raise InputFileError(f"the CSV needs a column named {expect}; it has {fields}")
            at = fields.index(wanted[0])
            records = list(reader)
            while records and not records[-1]:
                records.pop()  # blank lines after the last record
            rows = [record[at] if at < len(record) else "" for record in records]
        except csv.Error as exc:
            raise InputFileError(f"malformed CSV: {exc}") from None
    if len(rows) > MAX_INPUT_ROWS:
        raise InputFileError(f"{len(rows)} rows; the limit is {MAX_INPUT_ROWS} per file")
    return rows


def write_csv(path: str | Path, header: list[str], rows: Iterable[list[object]]) -> None:
    """Write rows (any iterable, consumed as it goes: memory stays bounded) with cells neutralized."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            writer.writerow([neutralize(c) for c in row])
