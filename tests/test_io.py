"""The shared reader and writer (molspec_core/io.py): bounded reads, file kinds, suffixes, encodings,
and a CSV where text cannot run as a formula while numbers stay numbers."""
import codecs
import functools
import csv
import gc
import gzip
import io
import itertools
import lzma
import os
import re
import signal
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import molfile, sd_file_text
from molspec_core import io as molspec_io
from molspec_core.io import (MAX_INPUT_BYTES, READ_CHUNK_BYTES, RESULT_COLUMNS, InputFileError, OutputFileError,
                             QueryFile, check_output, csv_bytes, csv_cell, neutralize, output_header, read_bounded,
                             parse_upload, read_queries, sd_bytes, workbook_text, write_csv)

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


@pytest.fixture(autouse=True)
def no_hang():
    """A read that waits forever (a FIFO without a writer, /dev/zero) fails the test instead."""
    def fail(*_):
        raise TimeoutError("the read did not return")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ---- bounded reads ------------------------------------------------------------------------------------


class Endless(io.RawIOBase):
    """A stream that never ends, counting what it hands out."""
    def __init__(self):
        self.given = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        buffer[:] = b"C" * len(buffer)
        self.given += len(buffer)
        return len(buffer)


def test_a_read_stops_one_chunk_past_the_limit():
    stream = Endless()
    with pytest.raises(InputFileError, match="more than 4 MB"):
        read_bounded(stream, "endless", limit=4 * 2**20)
    assert stream.given <= 4 * 2**20 + READ_CHUNK_BYTES


@pytest.mark.parametrize("suffix,compress", [(".txt.gz", lambda b: gzip.compress(b, compresslevel=1)),
                                             (".csv.xz", lambda b: lzma.compress(b, preset=0))])
def test_a_decompression_bomb_is_refused_by_what_comes_out(tmp_path, suffix, compress):
    """Issue 14 item 2: the limit used to read the compressed size, so a small archive filled memory."""
    text = b"smiles\n" + b"C" * (MAX_INPUT_BYTES + 1) + b"\n"  # one long line: no row limit stops it either
    path = tmp_path / f"bomb{suffix}"
    path.write_bytes(compress(text))
    assert path.stat().st_size < MAX_INPUT_BYTES // 100
    with pytest.raises(InputFileError, match="more than 50 MB of text once decompressed"):
        read_queries(path)


def test_special_files_are_refused(tmp_path):
    """Issue 14 item 2: /dev/zero reports size 0 and never ends; a FIFO blocked opening it."""
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "link.txt").symlink_to("/dev/zero")
    for path, kind in [("/dev/zero", "a device"), ("/dev/null", "a device"), (tmp_path / "pipe.txt", "a device"),
                       (tmp_path / "link.txt", "a device"), (tmp_path / "folder.csv", "a folder")]:
        with pytest.raises(InputFileError, match=f"is {kind}"):
            read_queries(path)


def test_a_broken_archive_is_a_clear_error(tmp_path):
    (tmp_path / "plain.txt.gz").write_text("CCO\n")
    (tmp_path / "cut.csv.xz").write_bytes(lzma.compress(b"smiles\nCCO\n" * 1000)[:50])
    for name in ("plain.txt.gz", "cut.csv.xz"):
        with pytest.raises(InputFileError, match="cannot be decompressed"):
            read_queries(tmp_path / name)


# ---- names, encodings, long cells --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q.CSV", "q.Csv", "q.CSV.GZ", "q.csv.Gz", "q.CSV.XZ"])
def test_csv_suffixes_ignore_case(tmp_path, name):
    """Issue 14 item 9: an upper-case .CSV was read as TXT, its header becoming query 1."""
    text = b"id,smiles\n7,CCO\n8,c1ccncc1\n"
    lower = name.lower()
    data = gzip.compress(text) if lower.endswith(".gz") else lzma.compress(text) if lower.endswith(".xz") else text
    (tmp_path / name).write_bytes(data)
    table = read_queries(tmp_path / name)
    assert table.queries == ["CCO", "c1ccncc1"] and table.columns == ("id",) and table.cells == (("7",), ("8",))


def test_excel_csv_utf8_with_a_byte_order_mark(tmp_path):
    """Issue 14 item 7: the CLI saw the column as '\\ufeffsmiles' and refused the file."""
    (tmp_path / "excel.csv").write_bytes("smiles,name\r\nCCO,ethanol\r\n".encode("utf-8-sig"))
    table = read_queries(tmp_path / "excel.csv")
    assert table.queries == ["CCO"] and table.columns == ("name",)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_with_a_byte_order_mark_is_read(tmp_path, encoding):
    """Excel's "Unicode Text" and Notepad's "Unicode" are UTF-16 with a byte-order mark: refused as 'not UTF-8
    text: line 1 (byte 0)'. Tabs between the cells, as Excel writes them."""
    text = "smiles\tname\r\nCCO\t\u00e9thanol\r\nCCN\tamine\r\n"
    mark = {"utf-16": b"", "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}[encoding]
    data = mark + text.encode(encoding)  # Python's utf-16 writes the mark itself
    (tmp_path / "unicode.tsv").write_bytes(data)
    table = read_queries(tmp_path / "unicode.tsv")
    assert table.queries == ["CCO", "CCN"] and table.cells == (("\u00e9thanol",), ("amine",))
    (tmp_path / "odd.txt").write_bytes(codecs.BOM_UTF16_LE + "CCO\n".encode("utf-16-le") + b"\x00")  # an odd byte
    with pytest.raises(InputFileError, match="^odd.txt starts as UTF-16 text, and its byte 10 cannot be decoded"):
        read_queries(tmp_path / "odd.txt")
    (tmp_path / "utf32.txt").write_bytes("CCO\n".encode("utf-32"))
    with pytest.raises(InputFileError, match="^utf32.txt is not UTF-8 text"):
        read_queries(tmp_path / "utf32.txt")

@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_a_txt_file_of_tabs_headed_by_a_query_column_is_read_as_the_table_excel_saved(tmp_path, encoding):
    """Excel saves a sheet as .txt, its cells split at tabs ("Text (Tab delimited)"; "Unicode Text" in UTF-16): read
    one query a line, its header and every record were refused as queries holding tabs, and its IDs were lost."""
    (tmp_path / "sheet.txt").write_text("SMILES\tID\tnote\nCCO\tA-1\t\"dry, 2\tL\"\nCCN\tA-2\t\n", encoding=encoding)
    table = read_queries(tmp_path / "sheet.txt")
    assert (table.queries, table.columns, table.cells) == (["CCO", "CCN"], ("ID", "note"),
                                                           (("A-1", "dry, 2\tL"), ("A-2", "")))
    (tmp_path / "lines.txt").write_text("CCO\tA-1\nCCN\n")  # no header: lines, as ever (the tab is refused there)
    assert read_queries(tmp_path / "lines.txt").queries == ["CCO\tA-1", "CCN"]


@pytest.mark.parametrize("header", ["smiles", "SMILES", "Query", "reactants", " Product ", "rxn_smiles"])
def test_a_txt_files_first_line_naming_the_query_column_is_a_header_not_a_query(tmp_path, header):
    """Only "smiles" was taken for a TXT file's header: one headed "Query" or "Reactants", names a CSV's header
    gives the query column, had its header refused as the first query ("it reads like a name")."""
    (tmp_path / "q.txt").write_text(f"{header}\nCCO\nCCN\n")
    assert read_queries(tmp_path / "q.txt", task="forward").queries == ["CCO", "CCN"]
    assert read_queries(tmp_path / "q.txt", task="retro").queries == ["CCO", "CCN"]
    (tmp_path / "r.txt").write_text("Reactant\nCCO\n")  # no query column's name: a line, refused as a query there
    assert read_queries(tmp_path / "r.txt").queries == ["Reactant", "CCO"]



@pytest.mark.parametrize("name, text, queries", [("q.txt", "CCO\n", "its lines"),
                                                 ("q.smi", "CCO ethanol\n", "the first field of each line")])
def test_a_column_named_for_a_file_without_columns_is_refused_not_ignored(tmp_path, name, text, queries):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputFileError, match=f"^a column, 'id', was named, but {name} is read as a "
                                             f"{name[2:].upper()} file, which has no columns: its SMILES are "
                                             f"{queries}. "):
        read_queries(tmp_path / name, column="id")
    assert read_queries(tmp_path / name).queries == ["CCO"]


def test_a_column_named_for_an_sd_file_is_one_of_its_fields_or_refused_naming_them(tmp_path):
    (tmp_path / "q.sdf").write_text(molfile("CCO", "ethanol") + ">  <Reagent>\nCCN\n\n>  <id>\nA-1\n\n$$$$\n")
    assert read_queries(tmp_path / "q.sdf").queries == ["CCO"]
    named = read_queries(tmp_path / "q.sdf", column="reagent")  # in any case, as a header's column
    assert (named.queries, named.columns, named.cells, named.query_column) == (["CCN"], ("name", "id"),
                                                                              (("ethanol", "A-1"),), "Reagent")
    assert named.notes == ("the queries are the SD field 'Reagent'; the records' molecules are not read",)
    with pytest.raises(InputFileError, match=r"^this SD file has no data field 'smiles' \(its fields: Reagent, id\); "
                                             r"leave the field out to read each record's molecule$"):
        read_queries(tmp_path / "q.sdf", column="smiles")


def test_an_sd_record_without_the_field_named_says_so_and_is_no_blank_record(tmp_path):
    """A record lacking the data field named as the query column was a 'blank' record, 'holds no query', though it
    held a molecule: its reason says the field is missing."""
    with_field = molfile("CCO", "a") + ">  <Reagent>\nCCN\n\n$$$$\n"
    (tmp_path / "q.sdf").write_text(with_field + molfile("CCC", "b") + "$$$$\n")
    table = read_queries(tmp_path / "q.sdf", column="Reagent")
    assert table.queries == ["CCN", ""] and not table.is_blank(1) and table.n_blank() == 0
    assert table.problem_of(0) == "" and table.problem_of(1).startswith("the record has no data field 'Reagent'")


def test_a_txt_file_headed_smiles_reads_its_queries_below_as_a_smiles_file_does(tmp_path):
    """The header line 'smiles' was a query of its own, refused as no SMILES."""
    (tmp_path / "q.txt").write_text("SMILES\nCCO\nc1ccncc1\n")
    (tmp_path / "plain.txt").write_text("CCO\nsmiles\n")  # a later line is a query like any other
    assert read_queries(tmp_path / "q.txt").queries == ["CCO", "c1ccncc1"]
    assert read_queries(tmp_path / "plain.txt").queries == ["CCO", "smiles"]


def test_a_quote_never_closed_is_refused_where_it_opens_not_read_as_one_cell_to_the_end(tmp_path):
    """The lenient reader read every line after an unclosed quote into its cell: 1 query predicted of 2, no word."""
    (tmp_path / "open.csv").write_text('smiles,note\nCCO,ok\nCCN,"unclosed\nCC(=O)Cl.NCc1ccccc1,ok\n')
    with pytest.raises(InputFileError, match="^malformed CSV: a quoted cell on line 3 is never closed"):
        read_queries(tmp_path / "open.csv")
    (tmp_path / "stray.csv").write_text('smiles;note\nCCO;a"b"c\nCCN;"x"y\n')  # stray quotes: read as Excel reads them
    table = read_queries(tmp_path / "stray.csv")
    assert table.queries == ["CCO", "CCN"] and table.cells == (('a"b"c',), ("xy",))


@pytest.mark.parametrize("text", [b"", b"\n", b"\r\n\r\n", b",,\n"])
def test_an_empty_csv_is_called_empty(tmp_path, text):
    """It was refused as a CSV without a SMILES column, "it has []" (session 65's audit)."""
    (tmp_path / "empty.csv").write_bytes(text)
    with pytest.raises(InputFileError, match="^the CSV is empty: its first line should name its columns, one of "
                                             "them 'smiles'"):
        read_queries(tmp_path / "empty.csv")
    with pytest.raises(InputFileError, match="one of them 'reactants'$"):
        read_queries(tmp_path / "empty.csv", column="reactants")


def test_a_file_that_is_not_utf8_is_refused_with_the_line_to_mend(tmp_path):
    """A Latin-1 CSV from Excel: the error gave a byte offset alone (session 65's audit)."""
    (tmp_path / "latin1.csv").write_bytes("smiles,name\nCCO,ethanol\nCCN,\u00e9thylamine\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=r"^latin1\.csv is not UTF-8 text: line 3 \(byte 28\) cannot be decoded; "
                                             r"save the file as UTF-8 \(in Excel: CSV UTF-8\)$"):
        read_queries(tmp_path / "latin1.csv")


def compressed(kind: str, text: bytes) -> bytes:
    """`text` zipped (as z.csv inside), bzip2- or gzip-compressed, or a workbook of one cell per line."""
    import bz2

    if kind == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("z.csv", text)
        return buffer.getvalue()
    if kind == "xlsx":
        buffer = io.BytesIO()
        pd.DataFrame({"smiles": text.decode().split()[1:]}).to_excel(buffer, index=False)
        return buffer.getvalue()
    return bz2.compress(text) if kind == "bz2" else gzip.compress(text)


@pytest.mark.parametrize("name, kind, told", [
    ("q.csv.zip", "zip", "q.csv.zip is a zip archive, not text: unzip it and give the file inside"),
    ("q.csv.bz2", "bz2", "q.csv.bz2 is bzip2-compressed, which is not read here: decompress it"),
    ("q.csv", "gzip", "q.csv is gzip-compressed: name it q.csv.gz"),
    ("stock.smi", "gzip", "stock.smi is gzip-compressed: name it stock.smi.gz"),
    ("q.csv", "xlsx", "q.csv is an Excel workbook under another name: name it q.xlsx")])
def test_a_compressed_or_archived_file_is_said_to_be_one_not_text_to_save_as_utf8(tmp_path, name, kind, told):
    """A zipped CSV (q.csv.zip), a bzip2 one, a gzipped file without .gz and a workbook named .csv were each refused as
    'not UTF-8 text: line 1 (byte 10) cannot be decoded; save the file as UTF-8 (in Excel: CSV UTF-8)', advice that
    mends none of them. They are named for what they are, with what to do."""
    (tmp_path / name).write_bytes(compressed(kind, b"smiles\nCCO\nCCN\n"))
    with pytest.raises(InputFileError) as refused:
        read_queries(tmp_path / name)
    assert str(refused.value).startswith(told) and "UTF-8" not in str(refused.value)
    if kind in ("gzip", "xlsx"):  # named as told, it is read
        renamed = (tmp_path / name).rename(tmp_path / told.rsplit(" ", 1)[1])
        assert read_queries(renamed).queries == ["CCO", "CCN"]


def test_an_opendocument_spreadsheet_under_another_name_is_told_as_one_not_a_zip_to_unzip(tmp_path):
    """LibreOffice's spreadsheet (a zip whose 'mimetype' member names it) saved or renamed q.csv was told 'a zip
    archive, not text: unzip it and give the file inside', which gives its XML, no table, and named q.xlsx 'cannot be
    read as an Excel workbook: KeyError: ...': it is named for what it is, with what an .ods is told."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # the member LibreOffice writes first, uncompressed
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr("content.xml", "<office:document-content/>")
    for name in ("q.csv", "q.txt", "q.xlsx"):  # named .xlsx: "cannot be read as an Excel workbook: KeyError: ..."
        (tmp_path / name).write_bytes(buffer.getvalue())
        with pytest.raises(InputFileError) as refused:
            read_queries(tmp_path / name)
        assert str(refused.value) == (
            f"{name} is an OpenDocument spreadsheet (.ods) under another name, which is not read here: in LibreOffice, "
            "save it as an Excel workbook (.xlsx) or as CSV (.csv, UTF-8)")


def test_an_sd_file_or_molfile_with_a_windows_1252_title_is_read(tmp_path):
    """ChemDraw writes a title in Windows' code page: a molfile titled Café was refused whole as 'not UTF-8 text'."""
    from rdkit import Chem

    block = Chem.MolToMolBlock(Chem.MolFromSmiles("CC(=O)O")).split("\n", 1)[1]  # without its (empty) title line
    (tmp_path / "cafe.mol").write_bytes(("Caf\u00e9\n" + block).encode("cp1252"))
    record = "Caf\u00e9 \u20ac\n" + block + "> <note>\nna\u00efve\n\n$$$$\n"
    (tmp_path / "cafe.sdf").write_bytes(record.encode("cp1252"))
    assert read_queries(tmp_path / "cafe.mol").queries == ["CC(=O)O"]
    table = read_queries(tmp_path / "cafe.sdf")
    assert table.queries == ["CC(=O)O"] and table.cells == (("Caf\u00e9 \u20ac", "na\u00efve"),)
    (tmp_path / "drawing.mol").write_bytes(b"\x89PNG\r\n\x1a\n\xff")  # bytes without a molblock: no text
    with pytest.raises(InputFileError, match=r"^drawing.mol is not UTF-8 text: .* save the file as UTF-8$"):
        read_queries(tmp_path / "drawing.mol")
    (tmp_path / "cafe.csv").write_bytes("smiles,name\nCC(=O)O,Caf\u00e9\n".encode("cp1252"))  # text files still say
    with pytest.raises(InputFileError, match="^cafe.csv is not UTF-8 text"):
        read_queries(tmp_path / "cafe.csv")


def test_a_reaction_file_saved_as_a_molfile_is_said_to_be_a_reaction(tmp_path):
    """An RXN block saved as .mol got 'RDKit cannot read its molblock'."""
    from rdkit.Chem import rdChemReactions

    rxn = rdChemReactions.ReactionFromSmarts("CC(=O)Cl.NC>>CC(=O)NC", useSmiles=True)
    (tmp_path / "amide.mol").write_text(rdChemReactions.ReactionToRxnBlock(rxn))
    table = read_queries(tmp_path / "amide.mol")
    assert table.problems[0].startswith("SD record 1 is a reaction (an RXN file's $RXN block), not a molecule")


def test_one_long_cell_leaves_the_rest_of_the_file_readable(tmp_path):
    """Issue 14 item 9: a cell over csv's 131,072 characters made the whole file unreadable; now it is
    a query of its own (the service rejects it as too long, on its row)."""
    long_cell = "C" * 200_000
    (tmp_path / "long.csv").write_text(f'smiles\nCCO\n"{long_cell}"\nCCN\n')
    assert read_queries(tmp_path / "long.csv").queries == ["CCO", long_cell, "CCN"]


@pytest.mark.parametrize("name, text", [
    ("excel-de.csv", 'Name;SMILES;Ausbeute\r\nAcetylierung;CC(=O)Cl.Nc1ccccc1;85,5\r\n"a; b";CCO;\r\n'),
    ("tabs.tsv", "Name\tSMILES\tAusbeute\nAcetylierung\tCC(=O)Cl.Nc1ccccc1\t85,5\na; b\tCCO\t\n"),
    ("tabs.TSV.gz", "Name\tSMILES\tAusbeute\nAcetylierung\tCC(=O)Cl.Nc1ccccc1\t85,5\na; b\tCCO\t\n"),
])
def test_a_csv_of_semicolons_or_tabs_is_read_by_its_header(tmp_path, name, text):
    """Excel saves "CSV" with semicolons where the decimal mark is a comma; it was refused, "it has
    ['Name;SMILES;Ausbeute']" (session 70). A .tsv file was read as TXT, each line one query."""
    data = text.encode()
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    table = read_queries(tmp_path / name)
    assert table.queries == ["CC(=O)Cl.Nc1ccccc1", "CCO"] and table.columns == ("Name", "Ausbeute")
    assert table.cells == (("Acetylierung", "85,5"), ("a; b", ""))


# A table without a query column was refused listing the names looked for, not that a column can be named (the
# command line's --column or --stock-column, the Batch page's column box) or renamed (the Routes page's stock).
ANOTHER = "; where the SMILES are under another name, give that column's name, or rename the column smiles"


def test_a_comma_wins_and_a_named_column_decides_the_split(tmp_path):
    (tmp_path / "q.csv").write_text("id,smiles;note\n1,CCO;x\n")  # commas name 'smiles;note' only: semicolons
    assert read_queries(tmp_path / "q.csv", column="smiles;note").queries == ["CCO;x"]
    assert read_queries(tmp_path / "q.csv", column="note").queries == ["x"]
    (tmp_path / "r.csv").write_text("Structure;x,name\nCCO;1,ethanol\n")  # no query column whatever the split
    refused = r"its first line has \['Structure;x', 'name'\] \(cells split at commas; semicolons and tabs were tried " \
              r"too\)"
    with pytest.raises(InputFileError, match=refused + re.escape(ANOTHER) + "$"):
        read_queries(tmp_path / "r.csv")
    with pytest.raises(InputFileError, match=r"tried too\)$"):  # a column named and missing: nothing more to name
        read_queries(tmp_path / "r.csv", column="mol")
    assert read_queries(tmp_path / "r.csv", column="Structure").queries == ["CCO"]


@pytest.mark.parametrize("delimiter, split, tried", [(";", "semicolons", "commas and tabs"),
                                                     ("\t", "tabs", "commas and semicolons")])
def test_a_header_without_a_query_column_is_shown_split_as_it_is_written(tmp_path, delimiter, split, tried):
    """A vendor's stock file, Catalog ID;Structure, was refused showing its first line as one cell,
    ['Catalog ID;Structure'], split at the commas it does not hold: it is shown split at what it holds."""
    (tmp_path / "s.csv").write_text(f"Catalog ID{delimiter}Structure\nA1{delimiter}CCO\n")
    shown = f"its first line has ['Catalog ID', 'Structure'] (cells split at {split}; {tried} were tried too)"
    with pytest.raises(InputFileError, match=re.escape(shown + ANOTHER) + "$"):
        read_queries(tmp_path / "s.csv")


NO_HEADER = "reads as a SMILES: where the file has no header line, add one above its first record, naming the query " \
            "column smiles"
ONE_A_LINE = ", or save the file with a .txt name (a query a line)"


@pytest.mark.parametrize("text, advice", [("CC(=O)Cl.NCc1ccccc1\nCCO\n", NO_HEADER + ONE_A_LINE),
                                          ("CCO,ethanol\nCCN,ethylamine\n", NO_HEADER),
                                          ("CCO.CC(=O)O>>CCOC(C)=O\n", NO_HEADER + ONE_A_LINE)])
def test_a_csv_of_queries_without_a_header_line_is_told_to_add_one(tmp_path, text, advice):
    """A list of SMILES saved as .csv was refused naming the columns it needs and its first line, and a chemist saw
    no header that could be missing; where the first cell reads as a SMILES, the refusal says what to do."""
    (tmp_path / "q.csv").write_text(text)
    with pytest.raises(InputFileError, match=re.escape(advice) + "$"):
        read_queries(tmp_path / "q.csv")
    (tmp_path / "t.csv").write_text("No.,name\n1,x\n")  # a header that names no query column: no such advice
    with pytest.raises(InputFileError, match=r"tried too\)" + re.escape(ANOTHER) + "$"):
        read_queries(tmp_path / "t.csv")


@pytest.mark.parametrize("header", ['"ChEMBL ID";"Name";"Smiles"', "id;Smiles", "id; SMILES ", "id;Query"])
def test_a_query_column_is_found_in_any_case_and_without_spaces_around_its_name(tmp_path, header):
    """A ChEMBL export names its column "Smiles": it was refused until the name was typed in."""
    fields = header.count(";") + 1
    (tmp_path / "c.csv").write_text(f"{header}\n" + ";" * (fields - 1) + "CCO\n")
    table = read_queries(tmp_path / "c.csv")
    assert table.queries == ["CCO"] and len(table.columns) == fields - 1


def test_a_header_wrapped_over_two_lines_is_named_with_a_space(tmp_path):
    """A header wrapped in Excel (Alt+Enter) holds a line break, which neither the page's one-line box nor a command
    line can type: such a workbook's or CSV's query column could not be named at all."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["ID", "SMILES\n(canonical)", "Product\n  SMILES"])
    book.active.append(["c1", "CCO", "CC=O"])
    book.save(tmp_path / "w.xlsx")
    table = read_queries(tmp_path / "w.xlsx", column="smiles (canonical)")
    assert table.queries == ["CCO"] and table.columns == ("ID", "Product\n  SMILES")
    assert read_queries(tmp_path / "w.xlsx", column="Product SMILES").queries == ["CC=O"]
    (tmp_path / "w.csv").write_text('ID,"SMILES\n(canonical)"\nc1,CCO\n')
    assert read_queries(tmp_path / "w.csv", column="SMILES (canonical)").queries == ["CCO"]


def test_a_retro_read_takes_the_product_column_where_a_table_names_reactants_too(tmp_path):
    """The Batch page's retrosynthesis read a reactants,product file's reactants as its queries, without a word."""
    (tmp_path / "rp.csv").write_text("reactants,product\nCC(=O)Cl.Nc1ccccc1,CC(=O)Nc1ccccc1\n")
    assert read_queries(tmp_path / "rp.csv", task="retro").queries == ["CC(=O)Nc1ccccc1"]
    assert read_queries(tmp_path / "rp.csv", task="forward").queries == ["CC(=O)Cl.Nc1ccccc1"]
    assert read_queries(tmp_path / "rp.csv").queries == ["CC(=O)Cl.Nc1ccccc1"]
    assert read_queries(tmp_path / "rp.csv", column="reactants", task="retro").queries == ["CC(=O)Cl.Nc1ccccc1"]
    with open(tmp_path / "rp.csv", "rb") as f:
        assert parse_upload("rp.csv", f.read(), task="retro").columns == ("reactants",)


def test_other_columns_are_read_beside_the_query(tmp_path):
    (tmp_path / "q.csv").write_text("id,smiles,note\n1,CCO,first\n2,CCN\n\n3,C,x,extra\n")
    table = read_queries(tmp_path / "q.csv")
    assert table.queries == ["CCO", "CCN", "", "C"]
    assert table.columns == ("id", "note")
    assert table.cells == (("1", "first"), ("2", ""), ("", ""), ("3", "x"))


@pytest.mark.parametrize("text, column, named", [
    ("smiles,smiles,id\nCCO,CC=O,1\n", None, "('smiles' in column 1, 'smiles' in column 2)"),
    ("id,SMILES,Smiles\n1,CCO,CC=O\n", None, "('SMILES' in column 2, 'Smiles' in column 3)"),
    ("id,Product,Product\n1,CCO,CC=O\n", "Product", "('Product' in column 2, 'Product' in column 3)"),
])
def test_a_header_naming_the_smiles_column_twice_is_refused_not_read_from_the_first_alone(tmp_path, text, column,
                                                                                           named):
    """A CSV headed smiles,smiles,id had its queries read from the first column, and the second's SMILES were not
    read, without a word (a stock's molecules too)."""
    (tmp_path / "q.csv").write_text(text)
    with pytest.raises(InputFileError, match=re.escape(f"names the SMILES column 2 times {named}: only the first")):
        read_queries(tmp_path / "q.csv", column)


def test_a_column_named_exactly_once_is_read_beside_one_named_so_in_another_case(tmp_path):
    (tmp_path / "q.csv").write_text("id,SMILES,Smiles\n1,CCO,CC=O\n")
    table = read_queries(tmp_path / "q.csv", "Smiles")
    assert table.queries == ["CC=O"] and table.cells == (("1", "CCO"),)


def test_empty_columns_under_no_name_are_no_columns(tmp_path):
    """Excel saves a CSV of a sheet once formatted further right with empty cells at the end of each line (";;"), and a
    sheet's table may start at column B: those columns went to the output as columns called "" and "input_". An
    unnamed column that holds a cell stays."""
    table = parse_upload("q.csv", b"smiles;id;;\r\nCCO;1;; \r\nCCN;2;;\r\n")
    assert (table.columns, table.cells, table.notes) == (("id",), (("1",), ("2",)), ())
    assert output_header(table.columns)[:2] == ["id", "row"]
    table = parse_upload("q.csv", b"smiles,id,,\nCCO,1,,x\n")
    assert (table.columns, table.cells) == (("id", ""), (("1", "x"),))
    workbook(tmp_path / "b.xlsx", {"q": [[None, "smiles", None, "id"], [None, "CCO", None, 7]]})
    assert read_queries(tmp_path / "b.xlsx").columns == ("id",)


def test_records_of_empty_cells_after_the_last_are_no_queries_and_those_before_it_stay(tmp_path):
    """Excel saves a sheet's formatted empty rows as lines of separators (';;' in Europe): after the last record
    they are not queries, and were each reported as an empty query; before it they keep the row numbers."""
    (tmp_path / "q.csv").write_text("id;smiles;note\n1;CCO;a\n;;\n2;CCN;b\n;;\n;;\n\n")
    table = read_queries(tmp_path / "q.csv")
    assert table.queries == ["CCO", "", "CCN"] and table.cells == (("1", "a"), ("", ""), ("2", "b"))


# ---- writing ------------------------------------------------------------------------------------------


def test_text_is_neutralized_and_numbers_are_not():
    """Issue 18: scores were written as '-4.6486 (text), because numbers were neutralized too."""
    assert csv_cell(-4.6486) == -4.6486 and csv_cell(-3) == -3 and csv_cell(True) is True and csv_cell(None) == ""
    assert neutralize("-4.6486") == "-4.6486" and neutralize("-1e-5") == "-1e-5"  # a plain number cannot run
    for formula in ("=1+1", "-1+cmd|' /C calc'!A0", "+44 20", "@SUM(A1)", "\t=x", "\r=cmd", "-", "-\u0663",
                    "-1\n=cmd"):
        assert neutralize(formula) == "'" + formula
    assert neutralize("CCO") == "CCO"


def test_a_formula_after_white_space_or_in_full_width_signs_is_neutralized_too(tmp_path):
    """A cell of " =1+1" (spreadsheets that trim a cell run it), "\n=cmd" or "＝1+1" (the full-width sign of an East
    Asian input, which Excel reads as =) went into the CSV as it was. A workbook types every such cell as text (no
    formula, shown as given); a plain number after white space stays a number."""
    import openpyxl

    formulas = [" =1+1", "\n=cmd|' /C calc'!A0", "\u3000=1+1", "\xa0@SUM(A1)", "\uff1d1+1", "\uff0bx", " \uff0d1",
                "\uff20x", "  -1+1", "\nCCO"]
    for formula in formulas:
        assert neutralize(formula) == "'" + formula, formula
    for text in (" -3", "a =b", "CC(=O)O", "1-2", "\uff41=b"):
        assert neutralize(text) == text, text
    molspec_io.write_results(tmp_path / "out.xlsx", ["smiles", "note"], [["CCO", text] for text in formulas])
    sheet = openpyxl.load_workbook(tmp_path / "out.xlsx").active
    assert [(cell.value, cell.data_type) for cell in sheet["B"][1:]] == [(molspec_io.workbook_text(text), "s")
                                                                         for text in formulas]


@pytest.mark.parametrize("name", ["q.csv", "q.txt", "q.smi"])
def test_lines_ending_in_two_carriage_returns_end_once(name):
    """Python's csv module writes \r\n, which a file opened without newline="" on Windows writes as \r\r\n: such a
    file read as a blank record after every record, each a row of the output."""
    text = "smiles,id\nCCO,1\nCCN,2\n" if name.endswith(".csv") else "CCO a\nCCN b\n"
    assert parse_upload(name, text.replace("\n", "\r\r\n").encode()) == parse_upload(name, text.encode())


def test_a_lone_carriage_return_cannot_start_a_record():
    """Issue 14 item 3: pandas left a cell of "\\r=cmd..." unquoted, so a record began with =cmd."""
    cells = ["\r=cmd|' /C calc'!A0", "a\r=b", "\r\n@x", "\n+y"]
    data = csv_bytes(["=header", "v"], [[cell, -1.5] for cell in cells])
    records = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    assert len(records) == 1 + len(cells)
    assert not any(cell.startswith(FORMULA_START) for record in records for cell in record if cell != "-1.5")
    assert [r[0] for r in records[1:]] == ["'" + cells[0], cells[1], "'" + cells[2], "'" + cells[3]]
    assert pd.read_csv(io.BytesIO(data))["v"].dtype.kind == "f"


def test_a_download_csv_opens_in_excel_as_utf8_and_reads_back():
    """Without a byte-order mark, Excel read a double-clicked CSV in its ANSI code page: ids outside ASCII garbled."""
    data = csv_bytes(["id", "query"], [["ünïcødé 化合物", "CCO"]])
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\xef\xbb\xbf") == 1
    assert pd.read_csv(io.BytesIO(data)).columns.tolist() == ["id", "query"]  # pandas drops the mark
    assert list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))[1] == ["ünïcødé 化合物", "CCO"]


def test_control_characters_are_written_out_alike_in_every_export():
    """A NUL went raw into the CSV and the SD file (many tools cut a line there) and as \\x00 into the workbook."""
    text = "CC\x00O\x1b.CC(=O)O"
    shown = "CC\\x00O\\x1b.CC(=O)O"
    data = csv_bytes(["query", "note"], [[text, "a\tb"]])
    assert b"\x00" not in data and list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))[1] == [shown, "a\tb"]
    assert workbook_text(text) == shown
    sdf = sd_bytes(["query", "rank", "smiles"], [[text, 1, "CCO"]])
    assert b"\x00" not in sdf and shown.encode() in sdf


def test_noncharacters_and_lone_surrogates_are_written_out_in_every_export():
    """A UTF-8 file may hold U+FFFE or U+FFFF, which XML cannot: the workbook did not open (not well-formed); a lone
    surrogate (the library's caller) stopped the CSV's and the SD file's write with UnicodeEncodeError."""
    import openpyxl

    text = "A\ufffe1\uffff\ud800"
    shown = "A\\ufffe1\\uffff\\ud800"
    data = csv_bytes(["id"], [[text]])
    assert list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))[1] == [shown]
    book = openpyxl.load_workbook(io.BytesIO(molspec_io.workbook_bytes(["id"], [[text]])))
    assert book.active["A2"].value == shown
    assert shown.encode() in sd_bytes(["id", "smiles"], [[text, "CCO"]])


def test_output_header_keeps_every_name_distinct():
    header = output_header(["id", "score", "row", "id", "smiles"])
    assert header[:5] == ["id", "input_score", "input_row", "input_id", "input_smiles"]
    assert header[5:] == list(molspec_io.RESULT_COLUMNS) and len(set(header)) == len(header)


def test_output_header_keeps_names_distinct_in_any_case_and_from_matches_known(tmp_path):
    """An input's Smiles beside our smiles was read back as the query column (the answers were not read), and an
    input's matches_known was written twice beside the one a run with known answers adds."""
    from molspec_core.known import MATCHES_KNOWN

    header = output_header(["Smiles", " ERROR ", "ID", "id", "matches_known", "name"])
    assert header[:6] == ["input_Smiles", "input_ ERROR ", "ID", "input_id", "input_matches_known", "name"]
    assert MATCHES_KNOWN in molspec_io.ADDED_COLUMNS and len({h.strip().casefold() for h in header}) == len(header)
    out = tmp_path / "out.csv"
    write_csv(out, header, [["not-this", "", "", "", "", "", 1, "CCO", "CCO", 1, "CC=O", *[None] * 17]])
    assert read_queries(out, "smiles").queries == ["CC=O"]  # our answers, not the input's Smiles


@pytest.mark.parametrize("task", [None, "retro"])
def test_our_results_read_again_name_their_query_column(tmp_path, task):
    """Our results uploaded again (the Predict or Batch page's download) had their smiles column, the answers, read as
    the queries, without a word: unless a column is named, such a table is refused with the choice to make."""
    header = output_header(["id"])
    rows = [["m1", 1, "CCO", "CCO", rank, answer, *[None] * 17] for rank, answer in ((1, "CC=O"), (2, "C=C"))]
    for name, data in (("out.csv", csv_bytes(header, rows)), ("out.xlsx", molspec_io.workbook_bytes(header, rows))):
        with pytest.raises(InputFileError, match="MolSpec's own results.*query, to predict its queries again"):
            parse_upload(name, data, task=task)
        assert parse_upload(name, data, "query", task=task).queries == ["CCO", "CCO"]
        assert parse_upload(name, data, "smiles", task=task).queries == ["CC=O", "C=C"]
    assert parse_upload("in.csv", b"id,query,smiles\nm1,x,CCO\n", task=task).queries == ["CCO"]  # not ours


def test_output_refuses_the_input_and_special_paths(tmp_path):
    """Issue 14 item 4: --output equal to --input overwrote the queries."""
    source = tmp_path / "in.csv"
    source.write_text("smiles\nCCO\n")
    (tmp_path / "soft.csv").symlink_to(source)
    os.link(source, tmp_path / "hard.csv")
    for output in (source, tmp_path / "soft.csv", tmp_path / "hard.csv", tmp_path / "." / "in.csv"):
        with pytest.raises(OutputFileError, match="is the input file"):
            check_output(output, source)
    for output, message in [(tmp_path, "is a folder"), ("/dev/null", "is a device"),
                            (tmp_path / "missing" / "o.csv", "does not exist")]:
        with pytest.raises(OutputFileError, match=message):
            check_output(output, source)
    assert source.read_text() == "smiles\nCCO\n"


def test_a_failed_write_leaves_the_earlier_file_and_no_partial_one(tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("earlier results\n")

    def rows():
        yield ["CCO", 1.0]
        raise RuntimeError("the run stopped")

    with pytest.raises(RuntimeError):
        write_csv(out, ["smiles", "score"], rows())
    assert out.read_text() == "earlier results\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
    write_csv(out, ["smiles", "score"], [["CCO", -1.25]])
    assert pd.read_csv(out).to_dict("list") == {"smiles": ["CCO"], "score": [-1.25]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


# 80 characters of three bytes each and its suffix: 244 bytes, a name the file system takes (at most 255)
LONG_NAME = "化合物の予測結果" * 10


@pytest.mark.parametrize("suffix", [".csv", ".sdf", ".xlsx"])
def test_an_output_whose_name_is_near_the_file_systems_limit_is_written_and_its_stop_kept(tmp_path, suffix):
    """An output named in 80 Japanese characters (244 bytes, where a name may take 255) could not be written: the
    hidden file it is first written to, and the .interrupted.csv a stopped predict keeps its rows in, had names past
    the limit, and predict refused to start with 'File name too long' naming a file its user never gave."""
    out = tmp_path / f"{LONG_NAME}{suffix}"
    out.write_bytes(b"earlier results\n")  # the name itself fits
    kept = molspec_io.interrupted_name(out)
    assert kept.parent == tmp_path and len(os.fsencode(kept.name)) <= 255
    assert kept.name.endswith(".interrupted.csv" if suffix == ".csv" else f".interrupted{suffix}.csv")
    assert kept != molspec_io.interrupted_name(tmp_path / f"{LONG_NAME}{suffix}x{suffix}")  # outputs keep apart

    def rows():
        yield molspec_io.LastRow(["CCO", 1, "CCOC(C)=O"])
        raise KeyboardInterrupt

    header = ["query", "row", "smiles"]
    with pytest.raises(KeyboardInterrupt):
        molspec_io.write_results(out, header, rows(), molspec_io.Kept(kept))
    assert out.read_bytes() == b"earlier results\n"
    assert next(csv.reader(io.StringIO(kept.read_text()))) == header
    molspec_io.write_results(out, header, [["CCO", 1, "CCOC(C)=O"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, kept.name])


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), RuntimeError("the run stopped")])
def test_an_interrupted_write_keeps_the_rows_of_whole_records_where_asked(tmp_path, stop):
    """A predict interrupted (Ctrl-C, SIGTERM) lost every row it had finished: the rows of its records up to the one
    it was writing are kept at keep.path, cut where that one's rows begin (not all of them may have come); so are a
    failed run's (a prediction that ran out of memory at record 9,000 lost the 8,999 before it)."""
    out = tmp_path / "out.csv"
    out.write_text("earlier results\n")
    keep = molspec_io.Kept(tmp_path / "out.interrupted.csv")

    def rows():
        yield from ([1, "CCO", 1], [1, "CCO", 2], [2, "CCN", 1], [2, "CCN", 2], [3, "CCCl", 1])
        raise stop

    with pytest.raises(type(stop)):
        write_csv(out, ["row", "query", "rank"], rows(), keep)
    assert out.read_text() == "earlier results\n"
    assert keep.last_row == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.interrupted.csv"]
    assert keep.path.read_bytes() == b"row,query,rank\r\n1,CCO,1\r\n1,CCO,2\r\n2,CCN,1\r\n2,CCN,2\r\n"
    held = keep.path.read_bytes()

    def resumed():  # a run resumed from those rows, interrupted before it finished a record of its own
        yield from ([1, "CCO", 1], [1, "CCO", 2], [2, "CCN", 1], [2, "CCN", 2])
        raise KeyboardInterrupt

    again = molspec_io.Kept(keep.path, held=2)
    with pytest.raises(KeyboardInterrupt):
        write_csv(out, ["row", "query", "rank"], resumed(), again)
    assert keep.path.read_bytes() == held and sorted(p.name for p in tmp_path.iterdir()) == [
        "out.csv", "out.interrupted.csv"]


def test_a_run_stopped_while_the_next_record_is_predicted_keeps_the_record_it_finished(tmp_path):
    """The record whose rows were all written when a run stopped (Ctrl-C while the next was predicted) was held back
    for the next record's first row, lost, and predicted again on --resume: result_rows marks a record's last row
    (LastRow), and the record is kept as that row passes."""
    from molspec_core.service import Prediction, QueryResult

    answers = tuple(Prediction(rank, smiles, -rank, True, (), ()) for rank, smiles in ((1, "CC=O"), (2, "CCO")))
    header = output_header([])
    first = molspec_io.result_rows(1, (), QueryResult("CCO", "CCO", predictions=answers, method="beam"))
    rejected = molspec_io.result_rows(2, (), QueryResult("x", error="no SMILES", method="beam"))
    assert [isinstance(row, molspec_io.LastRow) for row in first + rejected] == [False, True, True]

    def rows():
        yield from first + rejected
        raise KeyboardInterrupt  # while record 3 is predicted

    keep = molspec_io.Kept(tmp_path / "out.interrupted.csv")
    with pytest.raises(KeyboardInterrupt):
        write_csv(tmp_path / "out.csv", header, rows(), keep)
    assert keep.last_row == 2 and len(keep.path.read_text().splitlines()) == 1 + 3


def filling_disk(monkeypatch, room: int | None = None, writes: int | None = None) -> None:
    """Files that io opens binary and unbuffered (a kept CSV) fill up after `room` bytes, or in their `writes`-th
    write: a write takes what fits (half its bytes for `writes`) and the next fails with ENOSPC, as on a disk that
    filled up; every other open is left as it is."""
    import errno

    class Filling(io.FileIO):
        calls = 0

        def write(self, data):
            self.calls += 1
            left = room - self.tell() if room is not None else len(data) // 2 if self.calls == writes else len(data)
            if left <= 0 or (writes is not None and self.calls > writes):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(bytes(data)[:left])

    def opening(file, mode="r", buffering=-1, **kwargs):
        if "b" in mode and buffering == 0:
            return Filling(file, mode.replace("b", ""))
        return open(file, mode, buffering, **kwargs)

    monkeypatch.setattr(molspec_io, "open", opening, raising=False)


RECORDS = ([1, "CCO", 1], [1, "CCO", 2], [2, "CCN", 1], [2, "CCN", 2], [3, "CCCl", 1])


@pytest.mark.parametrize("room", [len("row,query,rank\r\n1,CCO,1\r\n1,CCO,2\r\n2,CC"), 10_000])
def test_a_disk_that_fills_keeps_the_whole_records_written_before_it(tmp_path, monkeypatch, room):
    """A write that failed on a full disk lost every finished row (only Ctrl-C and SIGTERM kept them): the rows of the
    records that reached the disk whole are kept, the file cut where the record that did not fit begins; a disk that
    fills at the very end (the rename) keeps them all."""
    out = tmp_path / "out.csv"
    out.write_text("earlier results\n")
    keep = molspec_io.Kept(tmp_path / "out.interrupted.csv")
    filling_disk(monkeypatch, room)
    if room == 10_000:  # every row fits; the rename into place fails (keep's rename does not)
        monkeypatch.setattr(molspec_io.os, "replace", lambda partial, target: (
            os.rename(partial, target) if Path(target) == keep.path else no_space()))
    with pytest.raises(OSError, match="No space left") as raised:
        write_csv(out, ["row", "query", "rank"], RECORDS, keep)
    assert raised.value.filename == str(out) and out.read_text() == "earlier results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.interrupted.csv"]
    whole = [b"row,query,rank", b"1,CCO,1", b"1,CCO,2", b"2,CCN,1", b"2,CCN,2", b"3,CCCl,1"]
    written = whole[:3] if room < 10_000 else whole
    assert keep.last_row == len(written) // 2 and keep.path.read_bytes() == b"\r\n".join(written) + b"\r\n"
    assert not keep.moved


def no_space():
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_rows_are_kept_in_a_temporary_folder_where_the_outputs_folder_is_removed_under_the_run(tmp_path, monkeypatch):
    """The output's folder removed while the run went on (a clean-up script): the rows lived only in the open partial
    file, and were lost with it. They are copied to a new folder in the temporary folder, and keep says where and
    why; a run that cannot keep them there either says so."""
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    keep = molspec_io.Kept(folder / "out.interrupted.csv")

    def rows():
        yield from RECORDS[:3]
        for name in os.listdir(folder):
            os.unlink(folder / name)
        folder.rmdir()
        yield from RECORDS[3:]

    with pytest.raises(FileNotFoundError):
        write_csv(folder / "out.csv", ["row", "query", "rank"], rows(), keep)
    assert keep.path.parent.parent == tmp_path / "tmp" and keep.path.name == "out.interrupted.csv"
    assert keep.moved == f"its folder, {folder}, could not be written: No such file or directory"
    assert pd.read_csv(keep.path)["row"].tolist() == [1, 1, 2, 2, 3] and keep.last_row == 3

    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "gone"))  # nor can the temporary folder be written
    keep = molspec_io.Kept(folder / "out.interrupted.csv")
    with pytest.raises(FileNotFoundError):
        write_csv(folder / "out.csv", ["row", "query", "rank"], rows(), keep)
    assert keep.last_row == 0 and keep.moved.endswith("nor the temporary folder: No such file or directory")


def result_row(header: list[str], **cells: object) -> list[object]:
    """A result row of `header`'s columns holding `cells` by name, None elsewhere."""
    values: list[object] = [None] * len(header)
    for column, value in cells.items():
        values[header.index(column)] = value
    return values


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # a generator failing as it closes
@pytest.mark.parametrize("name", ["out.xlsx", "out.sdf"])
def test_a_workbook_or_sd_file_that_stops_keeps_its_rows_and_a_resumed_one_is_the_whole_runs(tmp_path, monkeypatch,
                                                                                              name):
    """An SD file or workbook is written only at its end, and a run to one that stopped (Ctrl-C, a full disk) lost
    every row: its rows go to a kept CSV as they pass, which gives them back as they were given, text and numbers."""
    import openpyxl

    header = output_header(["id", "note"])
    row = functools.partial(result_row, header)

    rows = [row(id="007", note="=1+1", row=1, query="CCO", rank=1, smiles="CC=O", score=-0.25, valid=True),
            row(id="007", note="=1+1", row=1, query="CCO", rank=2, smiles="CCO", score=-1.5, valid=False),
            row(id="'=x", note="'quoted", row=2, query="CCN", rank=1, smiles="CC=N", score=-0.5, valid=True,
                time_ms=1.25),
            row(id="9", note="\x01", row=3, query="=1", error="the query is no SMILES")]

    def stopping():
        yield from rows[:3]
        raise KeyboardInterrupt

    out = tmp_path / name
    keep = molspec_io.Kept(molspec_io.interrupted_name(out), journal=True)
    assert keep.path.name == f"out.interrupted.{out.suffix[1:]}.csv"
    with pytest.raises(KeyboardInterrupt):
        molspec_io.write_results(out, header, stopping(), keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == [keep.path.name] and keep.last_row == 1
    again = molspec_io.Kept(keep.path, journal=True)
    molspec_io.check_kept(again, header, ["CCO", "CCN", "=1"], "")
    assert again.held == 1
    resumed = [*molspec_io.kept_rows(again, header, ["CCO", "CCN", "=1"], ""), *rows[2:]]
    molspec_io.write_results(out, header, resumed, again)
    molspec_io.write_results(tmp_path / f"whole{out.suffix}", header, rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, f"whole{out.suffix}", keep.path.name])
    if name.endswith(".sdf"):  # the kept file, which the command line deletes, is left to it
        assert out.read_text() == (tmp_path / "whole.sdf").read_text()
    else:
        def cells(path):
            return [[(c.value, c.data_type) for c in r] for r in openpyxl.load_workbook(path).active.iter_rows()]

        assert cells(out) == cells(tmp_path / "whole.xlsx")

    # the file's own write fails (a full disk as the workbook is saved): the rows that passed are kept as well
    def full(f, header, rows):
        list(itertools.islice(rows, 3))
        raise no_space()

    monkeypatch.setattr(molspec_io, "write_sd_rows" if name.endswith(".sdf") else "write_workbook_rows", full)
    keep.path.unlink()
    keep = molspec_io.Kept(keep.path, journal=True)
    with pytest.raises(OSError, match="No space left"):
        molspec_io.write_results(out, header, rows, keep)
    gc.collect()  # the rows' generator, closed now, wrote nothing more (it failed writing to its closed file)
    assert keep.last_row == 1 and list(molspec_io.kept_rows(keep, header, ["CCO"], "")) == rows[:2]


def test_kept_rows_are_read_back_as_written_and_refused_from_another_run(tmp_path, monkeypatch):
    header = output_header(["id"])
    keep = molspec_io.Kept(tmp_path / "out.interrupted.csv")
    first = ["7", 1, "CCO", "CCO", 1, "CC=O", -0.25, 0.7788, True, True, "", 1, None, 1, 1, 1, None, None, "beam",
             "float32", 1.5, 12, 0, ""]
    rows = [first, ["7", *first[1:4], 2, "CCO", -1.5, *first[7:]],
            ["8", 2, "=1", "", None, "", None, None, None, None, "", None, None, None, None, None, None, None, "beam",
             None, None, None, None, "the query is no SMILES"]]
    write_csv(keep.path, header, rows)
    monkeypatch.setattr(molspec_io, "MAX_INPUT_BYTES", 10)  # not an input: as large as the run made it
    molspec_io.check_kept(keep, header, ["CCO", "=1", "CCN"], "beam")
    back = list(molspec_io.kept_rows(keep, header, ["CCO", "=1", "CCN"], "beam"))
    given = [[None if cell == "" else cell for cell in row] for row in rows]  # an empty cell None
    assert keep.held == 2 and back[:2] == given[:2]  # numbers and TRUE/FALSE typed as they were given
    assert back[2] == ["8", 2, "'=1", *given[2][3:]]  # text as the CSV shows it, which a resumed CSV writes again
    write_csv(tmp_path / "again.csv", header, back)  # the resumed run writes them as they were
    assert (tmp_path / "again.csv").read_bytes() == keep.path.read_bytes()
    for queries, method, message in [(["CCO", "=2", "CCN"], "beam", "line 4: record 2 holds another query"),
                                     (["CCO"], "beam", "line 4: record 2 holds another query"),
                                     (["CCO", "=1"], "greedy", "line 2: predicted with --method beam, not greedy")]:
        with pytest.raises(InputFileError, match=message):
            molspec_io.check_kept(molspec_io.Kept(keep.path), header, queries, method)
    with pytest.raises(InputFileError, match="other columns"):
        molspec_io.check_kept(molspec_io.Kept(keep.path), output_header(["name"]), ["CCO", "=1"], "beam")
    write_csv(keep.path, header, [rows[0], rows[2]])
    keep.path.write_text(keep.path.read_text().replace("\n7,1,", "\n7,3,"))
    with pytest.raises(InputFileError, match="line 2: not the next record's row"):
        molspec_io.check_kept(molspec_io.Kept(keep.path), header, ["CCO", "=1"], "beam")
    write_csv(keep.path, header, [rows[0]])
    keep.path.write_text(keep.path.read_text().replace(",True,", ",yes,", 1))
    with pytest.raises(InputFileError, match="line 2: a number or TRUE/FALSE column holds other text"):
        molspec_io.check_kept(molspec_io.Kept(keep.path), header, ["CCO"], "beam")


def test_rows_kept_by_an_earlier_version_without_writings_read_are_refused_naming_that_cause(tmp_path):
    """A predict interrupted before writings_read was added, resumed after: its kept rows have other columns, and the
    refusal named only another input file or other options."""
    keep = molspec_io.Kept(tmp_path / "out.interrupted.csv")
    old = [c for c in output_header(["id"]) if c != "writings_read"]
    write_csv(keep.path, old, [])
    with pytest.raises(InputFileError, match="or an earlier MolSpec, whose results had other columns"):
        molspec_io.check_kept(keep, output_header(["id"]), ["CCO"], "beam")


def test_a_written_file_gets_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        write_csv(tmp_path / "out.csv", ["a"], [[1]])
    finally:
        os.umask(umask)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644


def test_a_symlinked_output_writes_the_file_it_points_to(tmp_path):
    (tmp_path / "real.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    write_csv(tmp_path / "link.csv", ["a"], [[1]])
    assert Path(tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_bytes() == b"a\r\n1\r\n"


# ---- time_ms ------------------------------------------------------------------------------------------


class Clock:
    """A stand-in for time.perf_counter that moves only when told to."""
    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_time_ms_is_each_querys_share_of_its_batch(monkeypatch):
    """Issue 18: time_ms was the batch's wall time, repeated on every row of the batch. Greedy and beam
    search decode a batch's rows together and give each the whole batch's time."""
    from molspec_core.decoding.result import DecodeStats
    from molspec_core.service import Prediction, QueryResult

    clock = Clock()
    monkeypatch.setattr(molspec_io, "time", clock)

    class EightInOneCall:  # decodes a batch in 0.8 s and reports the 0.8 s on each query, as greedy does
        def predict(self, queries, batch_size, **options):
            clock.now += 0.8
            answer = Prediction(1, "CO", -0.5, True, ("C", "O"), (-1, -1))
            return [QueryResult(q, q, predictions=(answer,), stats=DecodeStats(wall_time_s=0.8), method="greedy")
                    for q in queries]

    results, time_ms = molspec_io.predict_batch(EightInOneCall(), ["CCO"] * 8, method="greedy")
    assert len(results) == 8 and time_ms == pytest.approx(100.0)
    column = molspec_io.RESULT_COLUMNS.index("time_ms")
    assert molspec_io.result_rows(1, (), results[0], time_ms)[0][column] == 100.0
    assert molspec_io.result_rows(1, (), results[0])[0][column] == 800.0  # unset: the decoder's own time


def test_result_types_name_every_column_result_rows_writes_as_a_number_or_truth_value():
    """Kept rows are typed again by RESULT_TYPES (a resumed workbook holds numbers as numbers): a column result_rows
    writes as a number or bool that it left out would come back as text."""
    from molspec_core.decoding.result import DecodeStats
    from molspec_core.service import Prediction, QueryResult

    answer = Prediction(1, "CO", -0.5, True, ("C", "O"), (-1, -1), model_rank=1, round_trip=True, forward_prob=0.25,
                        confidence=0.75)
    result = QueryResult("CCO", "CCO", predictions=(answer,), stats=DecodeStats(wall_time_s=0.8), method="beam",
                         dtype="float32")
    row = molspec_io.result_rows(1, (), result, 12.5)[0]
    typed = {column for column, cell in zip(RESULT_COLUMNS, row) if isinstance(cell, (int, float))}
    assert None not in row[:-1] and typed == set(molspec_io.RESULT_TYPES)


def test_each_answer_row_says_how_many_writings_its_query_was_read_in():
    """The writings column counts the writings that gave an answer; asked for 5, CCO is read in 3 (and the time limit
    may stop a query's writings), so 'writings 3' read as 3 of the 5 asked for. writings_read is the query's own count
    (QueryResult.writings), on every answer row; empty on a rejected query's row."""
    from molspec_core.service import Prediction, QueryResult

    answers = (Prediction(1, "CC=O", -0.2, True, ("C",), (-1,), views=3),
               Prediction(2, "CC", -2.0, True, ("C",), (-1,), views=1))
    result = QueryResult("CCO", "CCO", predictions=answers, method="beam", writings=3)
    rows = molspec_io.result_rows(1, (), result, 5.0)
    gave, read = RESULT_COLUMNS.index("writings"), RESULT_COLUMNS.index("writings_read")
    assert [(row[gave], row[read]) for row in rows] == [(3, 3), (1, 3)]
    rejected = molspec_io.result_rows(2, (), QueryResult("C1", method="beam", error="not a SMILES"))[0]
    assert rejected[read] is None and len(rejected) == len(RESULT_COLUMNS)


# ---- SMILES files --------------------------------------------------------------------------------------


def test_a_smiles_file_keeps_each_name_beside_its_query(tmp_path):
    """A .smi line is a SMILES, then optionally whitespace and a name (which may hold spaces); the names
    come out in a column of their own, so results join back to them. Blank lines stay as empty queries."""
    (tmp_path / "targets.smi").write_text("CCO ethanol\nc1ccncc1\tpyridine, dry\n\n  CCN  \nCC(=O)O acetic acid \n")
    table = read_queries(tmp_path / "targets.smi")
    assert table.queries == ["CCO", "c1ccncc1", "", "CCN", "CC(=O)O"]
    assert table.columns == ("name",)
    assert table.cells == (("ethanol",), ("pyridine, dry",), ("",), ("",), ("acetic acid",))


def test_a_cxsmiles_line_of_a_smiles_file_keeps_its_extension_in_the_query(tmp_path):
    """ChemAxon writes a CXSMILES, a space, its |...| extension and the name on one line; the extension went to
    the name column (session 69's note), and the query lost its radicals or labels."""
    (tmp_path / "cx.smi").write_text("C[CH2] |^1:1| ethyl radical\n  CCO\tethanol\nCC(=O)Cl |$;;;_R1$|\n")
    table = read_queries(tmp_path / "cx.smi")
    assert table.queries == ["C[CH2] |^1:1|", "CCO", "CC(=O)Cl |$;;;_R1$|"]
    assert table.cells == (("ethyl radical",), ("ethanol",), ("",))


@pytest.mark.parametrize("name", ["lib.SMI", "lib.smiles", "lib.smi.gz"])
def test_a_smiles_file_header_names_its_column_and_is_no_query(tmp_path, name):
    text = b"SMILES Name\nCCO ethanol\nCCN\n"
    (tmp_path / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    table = read_queries(tmp_path / name)
    assert table.queries == ["CCO", "CCN"] and table.columns == ("Name",) and table.cells == (("ethanol",), ("",))


def test_a_smiles_file_headed_with_a_stock_or_query_columns_name_reads_it_as_a_header(tmp_path):
    """eMolecules' building blocks open "isosmiles version_id parent_id": only "smiles" opened a header, and that line
    was read as a query, refused as no SMILES."""
    (tmp_path / "version.smi").write_text("isosmiles\tversion_id\tparent_id\nCCO\t7\t7\nCCN\t8\t8\n")
    table = read_queries(tmp_path / "version.smi")
    assert table.queries == ["CCO", "CCN"] and table.cells == (("7\t7",), ("8\t8",))
    (tmp_path / "q.smi").write_text("Product id\nCCO a\n")
    assert read_queries(tmp_path / "q.smi").queries == ["CCO"]


def test_a_smiles_files_comment_lines_are_no_queries_and_are_counted(tmp_path):
    """A .smi line opening with # (a comment, which RDKit's SmilesMolSupplier skips; no SMILES begins so) was read as
    the query "#" and rejected. Comments are left out, before a header too, and a note counts them."""
    (tmp_path / "q.smi").write_text("# made by hand\nSMILES Name\nCCO ethanol\n  #CCN amine\nCCC propane\n")
    table = read_queries(tmp_path / "q.smi")
    assert table.queries == ["CCO", "CCC"] and table.cells == (("ethanol",), ("propane",))
    assert table.notes == ("2 comment lines (beginning with #) not read as queries",)
    (tmp_path / "q.smi").write_text("CCO\n# one\n")
    assert read_queries(tmp_path / "q.smi") == QueryFile(["CCO"], notes=("1 comment line (beginning with #) not read "
                                                                         "as queries",))
    (tmp_path / "q.txt").write_text("CCO\n#\n")  # a TXT file's lines are its queries, as given
    assert read_queries(tmp_path / "q.txt").queries == ["CCO", "#"]


def test_a_space_in_a_txt_query_stays_in_it_and_a_smiles_file_without_names_reads_as_txt(tmp_path):
    """Only .smi and .smiles files take text after a space as a name: in a TXT file "CCO . CCN" is one
    query, which the service then rejects, rather than CCO predicted under the name ". CCN"."""
    (tmp_path / "q.txt").write_text("CCO . CCN\nCCN\n")
    assert read_queries(tmp_path / "q.txt").queries == ["CCO . CCN", "CCN"]
    (tmp_path / "q.smi").write_text("CCO\nCCN\n")
    assert read_queries(tmp_path / "q.smi") == QueryFile(["CCO", "CCN"])


# ---- SD files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["drawn.sdf", "drawn.SD", "drawn.sdf.gz"])
def test_an_sd_file_gives_each_records_molecule_title_and_fields_and_each_unreadable_records_reason(tmp_path, name):
    text = sd_file_text().encode()
    (tmp_path / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    table = read_queries(tmp_path / name)
    assert table.queries == ["C[C@H](N)C(=O)O", "", "", "Clc1ccncc1"]  # stereo from the wedge bond
    assert table.columns == ("name", "ID", "note")
    assert table.cells == (("L-alanine", "A-1", ""), ("broken", "", ""), ("five bonds", "C-3", "drawn wrong"),
                           ("4-chloropyridine", "", ""))
    assert [table.problem_of(i) for i in range(4)] == [
        "", "SD record 2: RDKit cannot read its molblock",
        "SD record 3: RDKit cannot sanitize it: Explicit valence for atom # 1 C, 5, is greater than permitted", ""]


@pytest.mark.parametrize("name", ["drawn.sdf", "drawn.mol"])
@pytest.mark.parametrize("line_break", ["\r", "\r\n"])
def test_an_sd_file_or_molfile_with_carriage_returns_for_line_breaks_reads_as_one_with_line_feeds(name, line_break):
    """An SD file saved with a carriage return alone between lines (a classic Mac program's) read as one record that
    RDKit could not read: every molecule in it was lost."""
    text = sd_file_text() if name.endswith(".sdf") else molfile("C[C@H](N)C(=O)O", "L-alanine")
    assert parse_upload(name, text.replace("\n", line_break).encode()) == parse_upload(name, text.encode())


def test_an_sd_file_without_problems_carries_none_and_an_empty_one_no_record(tmp_path):
    records = sd_file_text().split("$$$$\n")
    (tmp_path / "good.sdf").write_text(records[0] + "$$$$\n" + records[3] + "$$$$\n")
    assert read_queries(tmp_path / "good.sdf").problems == ()
    (tmp_path / "empty.sdf").write_text("\n")
    assert read_queries(tmp_path / "empty.sdf") == QueryFile([], ("name",), ())


@pytest.mark.parametrize("name", ["alanine.mol", "alanine.MOL", "alanine.mol.gz"])
def test_a_molfile_is_read_as_an_sd_file_of_one_record(tmp_path, name):
    text = molfile("C[C@H](N)C(=O)O", "L-alanine").encode()  # no field, no $$$$
    (tmp_path / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    assert read_queries(tmp_path / name) == QueryFile(["C[C@H](N)C(=O)O"], ("name",), (("L-alanine",),))


def test_results_written_to_an_sd_name_hold_a_record_per_csv_row_and_read_back_from_the_field_named(tmp_path):
    """Read back, the file was read as queries: the records' molecules, our answers, predicted as the queries without
    a word (the SD file from the Batch page's Download SDF too). It is refused unless a field is named, as a results
    CSV is unless a column is."""
    header = output_header(["Name", "ID"])
    row = functools.partial(result_row, header)

    rows = [row(Name="ala", ID="=1+1", row=1, query="CC(N)C(=O)O", canonical_query="CC(N)C(=O)O", rank=1,
                smiles="C[C@H](N)C(=O)O", valid=True),
            row(Name="ala", ID="=1+1", row=1, query="CC(N)C(=O)O", canonical_query="CC(N)C(=O)O", rank=2,
                smiles="C1CC", valid=False),
            row(Name="", ID="B-2", row=2, query="xx", smiles="", error="RDKit cannot parse 'xx' as a molecule"),
            row(Name="", ID="C-3", row=3, query="CC=O.[H][H]", canonical_query="CC=O.[HH]", rank=1, smiles="CCO",
                valid=True)]
    molspec_io.write_results(tmp_path / "out.SDF", header, rows)
    assert molspec_io.is_sd_name(tmp_path / "out.SDF") and not molspec_io.is_sd_name(tmp_path / "out.sdf.csv")
    with pytest.raises(InputFileError, match="^out.SDF is MolSpec's own results.*query, to predict its queries again"):
        molspec_io.refuse_unnamed_results(read_queries(tmp_path / "out.SDF"), "out.SDF")
    molspec_io.refuse_unnamed_results(read_queries(tmp_path / "out.SDF", "query"), "out.SDF")  # named: read
    assert read_queries(tmp_path / "out.SDF", "query").queries == ["CC(N)C(=O)O", "CC(N)C(=O)O", "xx", "CC=O.[H][H]"]
    back = read_queries(tmp_path / "out.SDF", "smiles")
    assert back.queries == ["C[C@H](N)C(=O)O", "C1CC", "", "CCO"]  # the answers as written; none where none
    named = dict(zip(back.columns, zip(*back.cells)))
    # the title (the input's name, else the answer) repeats the fields: read back, the input's Name is its one column
    # (it was read beside a `name` column of the titles, which the next output called input_Name)
    assert back.columns[:2] == ("Name", "ID") and named["Name"] == ("ala", "ala", "", "")
    assert output_header(back.columns)[:2] == ["Name", "ID"]
    assert named["ID"] == ("=1+1", "=1+1", "B-2", "C-3")  # an SD field is data, not a spreadsheet cell: as written
    assert named["rank"] == ("1", "2", "", "1") and named["valid"] == ("True", "False", "", "True")
    assert named["error"] == ("", "", "RDKit cannot parse 'xx' as a molecule", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.SDF"]


def test_an_sd_files_titles_are_the_names_of_a_column_called_name_with_spaces_around_it():
    """A workbook's header "Name " (a space typed after it) gave the SD output the answers as titles."""
    header = output_header(["Name ", "id"])
    row = [None] * len(header)
    row[:2], row[header.index("smiles")] = ["aspirin", "A-1"], "CC(=O)Oc1ccccc1C(=O)O"
    assert sd_bytes(header, [row]).decode().splitlines()[0] == "aspirin"


def test_an_sd_file_whose_name_field_is_not_its_title_keeps_both_under_names_of_their_own():
    """A drawing program's file with a `name` field beside titles that say something else: both are kept, the titles
    as `title`, as neither may be lost nor two columns share a name."""
    text = (molfile("CCO", "ethanol, batch 7") + ">  <name>\nethanol\n\n$$$$\n"
            + molfile("CCN", "") + ">  <name>\nethylamine\n\n$$$$\n")
    back = parse_upload("drawn.sdf", text.encode())
    assert back.columns == ("title", "name") and back.cells == (("ethanol, batch 7", "ethanol"), ("", "ethylamine"))


def test_a_failed_sd_write_leaves_the_earlier_file_and_no_partial_one(tmp_path):
    out = tmp_path / "out.sdf"
    out.write_text("earlier results\n")

    def rows():
        yield [*[None] * 3, "CCO", *[None] * (len(RESULT_COLUMNS) - 4)]
        raise RuntimeError("the run stopped")

    with pytest.raises(RuntimeError):
        molspec_io.write_results(out, list(RESULT_COLUMNS), rows())
    assert out.read_text() == "earlier results\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.sdf"]


# ---- Excel workbooks ----------------------------------------------------------------------------


def workbook(path: Path, sheets: dict[str, list[list[object]]]) -> Path:
    """A workbook as a chemist's Excel file holds one: sheets of rows (openpyxl writes it, as Excel would)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    book.save(path)
    return path


def test_a_workbook_is_read_from_its_first_sheet_naming_the_column_as_a_csv_is(tmp_path):
    import datetime

    path = workbook(tmp_path / "Compounds.XLSX", {
        "notes": [["made by", "A. Chemist"], ["smiles in the next sheet"]],  # no query column: passed over
        "list": [["ID", "smiles", "yield", "made"],
                 [1001, "CCO.CC(=O)O", 0.5, datetime.date(2026, 12, 5)],
                 [1002.0, "C1CC1", None],  # a short row: its missing cells are empty
                 ["B-7", "Oc1ccncc1", True, None, "past the header"],  # under no name: dropped
                 ["B-8", "CCN", None, datetime.datetime(2026, 12, 5, 14, 30)],  # a time of day is kept
                 [None, None, None, None], [None]],  # blank rows after the last record
        "later": [["smiles"], ["CCN"]]})
    table = read_queries(path)
    assert table.queries == ["CCO.CC(=O)O", "C1CC1", "Oc1ccncc1", "CCN"]
    assert table.columns == ("ID", "yield", "made")
    # a date alone (it read as 2026-12-05T00:00:00, which a spreadsheet takes for text, not for a date)
    assert table.cells == (("1001", "0.5", "2026-12-05"), ("1002", "", ""), ("B-7", "TRUE", ""),
                           ("B-8", "", "2026-12-05T14:30:00"))
    assert read_queries(path, column="ID").queries == ["1001", "1002", "B-7", "B-8"]  # a named column decides
    gzipped = tmp_path / "compounds.xlsx.gz"
    gzipped.write_bytes(gzip.compress(path.read_bytes()))
    assert read_queries(gzipped) == table


def test_cells_past_the_headers_last_name_are_said_not_read():
    """A note with an unquoted comma split in two, and its second half was dropped without a word (an empty cell
    past the header, as Excel writes a ragged row, says nothing)."""
    text = "smiles,id,note\nCCO,A1,ok,\nCCN,A2,made, then washed\n" + "".join(f"C,B{i},x,y\n" for i in range(6))
    table = parse_upload("q.csv", text.encode())
    assert table.cells[1] == ("A2", "made") and len(table.notes) == 1
    assert table.notes[0] == ("7 records (rows 2, 3, 4, 5, 6, ...) hold cells past the header's 3 names, which are "
                              "not read: a cell that holds the delimiter (a comma, say) must be quoted, or the cells "
                              "after it move one column on")
    assert parse_upload("q.csv", b"smiles,id\nCCO,A1,,\n").notes == ()
    assert parse_upload("q.csv", b"smiles,id\nCCO,A1,x\n").notes[0].startswith("1 record (row 1) holds cells")


@pytest.mark.parametrize("delimiter", [",", ";"])
def test_a_csv_header_under_titles_is_found_and_the_titles_are_not_queries(tmp_path, delimiter):
    """An Excel report saved as CSV: a title, a date and a blank line above the header (HEADER_ROWS)."""
    lines = ["Amide couplings, batch 7", "2026-12-05", "", "id,smiles,mass", "A1,CCO,46", "A2,c1ccccc1,78"]
    (tmp_path / "report.csv").write_text("\n".join(line.replace(",", delimiter) for line in lines) + "\n")
    table = read_queries(tmp_path / "report.csv")
    assert table.queries == ["CCO", "c1ccccc1"] and table.columns == ("id", "mass")
    assert table.cells == (("A1", "46"), ("A2", "78"))
    deep = ["title"] * 10 + ["smiles", "CCO"]  # a header under 10 lines is past HEADER_ROWS: refused, not guessed
    (tmp_path / "deep.csv").write_text("\n".join(deep) + "\n")
    with pytest.raises(InputFileError, match=r"in a header line \(the first line, or one of the first 10 under "
                                             r"titles\); its first line has \['title'\]"):
        read_queries(tmp_path / "deep.csv")


def test_a_workbook_header_under_titles_is_found_and_rows_above_it_are_not_read(tmp_path):
    title = [["Compounds for the Suzuki screen"], [], ["made by", "A. Chemist"]]
    path = workbook(tmp_path / "t.xlsx", {"notes": [["no table here"]],
                                          "list": title + [["ID", "SMILES", "MW"], ["X-1", "CCO", 46.07],
                                                           [None, None, None], ["X-3", "CCN", 45.08]]})
    table = read_queries(path)
    assert table.queries == ["CCO", "", "CCN"] and table.columns == ("ID", "MW")
    assert table.cells == (("X-1", "46.07"), ("", ""), ("X-3", "45.08"))
    assert read_queries(path, column="MW").queries == ["46.07", "", "45.08"]
    deep = workbook(tmp_path / "deep.xlsx", {"s": [["t"]] * 10 + [["smiles"], ["CCO"]]})
    with pytest.raises(InputFileError, match=r"one of its first 10 under titles\); its sheets' first rows hold "
                                             r"'s': \['t'\]"):
        read_queries(deep)


def test_a_workbook_formula_gives_the_value_excel_saved_and_nothing_is_computed(tmp_path):
    """openpyxl saves no value with a formula (Excel would): such a query cell is empty, and its record says why,
    the last one too (it is no blank record); an empty cell says nothing."""
    path = workbook(tmp_path / "f.xlsx", {"s": [["id", "smiles"], ["a", '=CONCAT("CC","O")'], ["b", "CCO"], ["c"],
                                                ["d", "=B3"]]})
    table = read_queries(path)
    assert table.queries == ["", "CCO", "", ""]
    first, second, third, last = table.problems
    assert first.startswith('the cell holds a formula, =CONCAT("CC","O"), saved without its value')
    assert second == third == "" and last.startswith("the cell holds a formula, =B3, saved without its value")
    assert "open and save it in Excel, or paste the values" in table.problems[0]
    assert read_queries(workbook(tmp_path / "v.xlsx", {"s": [["smiles"], ["CCO"], []]})).problems == ()


def test_a_workbook_formatted_far_below_its_records_is_read_as_its_records(tmp_path):
    """A sheet of 3 queries with one formatted empty cell at row 200,000 (bold, a border: a sheet's rows reach it)
    was refused as 'more than 100,000 records'. Blank rows under the last record are none; blank rows between records
    stay, and a row under them holding only formulas saved without their values still says why it gave no query."""
    import openpyxl
    from openpyxl.styles import Font

    book = openpyxl.Workbook()
    sheet = book.active
    for row in (["smiles", "id"], ["CCO", "A1"], [None, None], ["CCN", "A3"], [None, None], ["=B4", None]):
        sheet.append(row)
    sheet["B200000"].font = Font(bold=True)
    book.save(tmp_path / "far.xlsx")
    table = read_queries(tmp_path / "far.xlsx")
    assert table.queries == ["CCO", "", "CCN", "", ""] and table.n_blank() == 2
    assert table.problems[4].startswith("the cell holds a formula, =B4, saved without its value")
    sheet["A6"] = None
    book.save(tmp_path / "far.xlsx")
    assert read_queries(tmp_path / "far.xlsx").queries == ["CCO", "", "CCN"]


def test_a_workbook_formula_saved_without_its_value_in_another_column_is_carried_as_text_never_as_a_formula(tmp_path):
    """An ID or note made by a formula that a program saved without its value was read as an empty cell: the output
    lost it without a word. It is carried as its formula's text, which the exports write as text."""
    import openpyxl

    path = workbook(tmp_path / "f.xlsx", {"s": [["id", "smiles", "note"], ['="CMP-"&"1"', "CCO", "=1+1"],
                                                ["CMP-2", "CCN", None]]})
    table = read_queries(path)
    assert table.queries == ["CCO", "CCN"] and table.problems == ()
    assert table.cells == (('="CMP-"&"1"', "=1+1"), ("CMP-2", ""))
    header = output_header(table.columns)
    rows = [[*table.cells[0], 1, "CCO", "CCO", 1, "CC=O", *[None] * 17]]
    assert list(csv.reader(io.StringIO(csv_bytes(header, rows).decode("utf-8-sig"))))[1][:2] == ["'=\"CMP-\"&\"1\"",
                                                                                          "'=1+1"]
    sheet = openpyxl.load_workbook(io.BytesIO(molspec_io.workbook_bytes(header, rows))).active
    assert [(c.value, c.data_type) for c in sheet[2][:2]] == [('="CMP-"&"1"', "s"), ("=1+1", "s")]
    # Excel saves a formula's empty text as such (t="str", an empty value): it stays empty, in every column
    data = path.read_bytes()
    saved = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(saved, "w") as target:
        for member in source.namelist():
            target.writestr(member, re.sub(rb'<c r="([AC]2)"><f>', rb'<c r="\1" t="str"><f>', source.read(member)))
    assert molspec_io.parse_workbook(saved.getvalue(), "f.xlsx").cells == (("", ""), ("CMP-2", ""))


def test_an_empty_text_cell_goes_into_a_workbook_as_no_cell():
    """openpyxl wrote "" as <c t="inlineStr"/>, a text cell without its text, which some readers refuse."""
    data = molspec_io.workbook_bytes(["id", "smiles", "concerns"], [["", "CCO", ""], ["a", "", None]])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        sheet = archive.read("xl/worksheets/sheet1.xml").decode()
    assert sheet.count("<c ") == 3 + 1 + 1  # the header, then CCO and a
    assert molspec_io.parse_workbook(data, "w.xlsx").queries == ["CCO", ""]


def test_a_workbook_number_reads_as_excel_shows_it():
    """Excel saves a formula's value to 17 digits: a MW of 46.069 computed in Excel read as 46.068999999999996."""
    data = molspec_io.workbook_bytes(["smiles", "MW", "ratio", "small", "n"], [["CCO", 46.069, 0.3, 1e-7, 12.0]])
    saved = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(saved, "w") as target:
        for member in source.namelist():  # the values as Excel writes them
            xml = source.read(member).replace(b"<v>46.069<", b"<v>46.068999999999996<")
            target.writestr(member, xml.replace(b"<v>0.3<", b"<v>0.30000000000000004<"))
    assert molspec_io.parse_workbook(saved.getvalue(), "w.xlsx").cells == (("46.069", "0.3", "1e-07", "12"),)


def test_a_workbook_id_shown_with_leading_zeros_reads_as_shown(tmp_path):
    """A compound ID 007, kept as the number 7 in a format of leading zeros (000), read as 7: it joined nothing in the
    chemist's other tables. A whole number in such a format reads as Excel shows it, literal text included; a
    fraction, whose rounding would lose digits, and other formats read as before."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["ID", "smiles", "code", "mass", "step"])
    sheet.append([7, "CCO", 42, 12.5, -3])
    sheet.append([1234567, "CCN", 42.0, 12, 5])
    for cell, shown in [("A2", "000"), ("A3", "00000"), ("C2", '"CPD-"0000'), ("C3", "\\A000;[Red]-000"),
                        ("D2", "000"), ("D3", "0.00"), ("E2", "00")]:
        sheet[cell].number_format = shown
    book.save(tmp_path / "ids.xlsx")
    table = read_queries(tmp_path / "ids.xlsx")
    assert table.cells == (("007", "CPD-0042", "12.5", "-03"), ("1234567", "A042", "12", "5"))


def test_a_workbooks_numbers_dates_and_truth_values_go_out_to_a_workbook_as_they_came_in(tmp_path):
    """A chemist's yield 87.5 or ID 7 went from an input workbook to the output workbook as text (a cell Excel flags
    as a number stored as text): each goes out as the value it was, in its number format; an ID shown with leading
    zeros stays the text it reads as, and the CSV writes every cell as the text it reads as, as before."""
    import datetime

    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["ID", "smiles", "yield", "made", "at", "pure", "code", "note"])
    sheet.append([7, "CCO", 87.5, datetime.datetime(2026, 12, 5), datetime.time(14, 30), True, 42, "x"])
    sheet["C2"].number_format = "0.0"
    sheet["G2"].number_format = "000"
    book.save(tmp_path / "in.xlsx")
    table = read_queries(tmp_path / "in.xlsx")
    assert table.cells == (("7", "87.5", "2026-12-05", "14:30:00", "TRUE", "042", "x"),)
    header = output_header(table.columns)
    rows = [result_row(header, **dict(zip(table.columns, table.cells_of(0))), row=1, query="CCO", rank=1)]
    molspec_io.write_results(tmp_path / "out.xlsx", header, rows)
    written = openpyxl.load_workbook(tmp_path / "out.xlsx").active
    assert [c.value for c in written[2]][:7] == [7, 87.5, datetime.datetime(2026, 12, 5), datetime.time(14, 30),
                                                 True, "042", "x"]
    assert [c.data_type for c in written[2]][:7] == ["n", "n", "d", "d", "b", "s", "s"]
    assert written["B2"].number_format == "0.0" and written["C2"].is_date
    assert [c.value for c in written[1]][:7] == list(table.columns)  # a header stays text
    molspec_io.write_results(tmp_path / "out.csv", header, rows)
    assert (tmp_path / "out.csv").read_text().splitlines()[1].startswith("7,87.5,2026-12-05,14:30:00,TRUE,042,x,1,")


def test_a_workbook_number_in_general_format_keeps_nothing_beside_its_text():
    """Every number cell kept its value and format beside its text, and a sheet of numbers took 7 times the memory
    of its text: only what the text does not give back is kept (a 17th digit, a date, a format other than General),
    and every value still comes back as it was, pickled too (Ray's workers)."""
    import datetime
    import pickle

    from molspec_core.io import TypedCell

    plain = [TypedCell("87.5", 87.5), TypedCell("7", 7), TypedCell("12", 12.0), TypedCell("FALSE", False)]
    assert [vars(cell) for cell in plain] == [{}] * 4
    kept = [TypedCell("46.069", 46.068999999999996), TypedCell("0.875", 0.875, "0.0%"),
            TypedCell("2026-12-05", datetime.datetime(2026, 12, 5), "yyyy-mm-dd"), TypedCell("1", True)]
    for cell, value, number_format in zip(plain + kept, [87.5, 7, 12, False, 46.068999999999996, 0.875,
                                                         datetime.datetime(2026, 12, 5), True],
                                          ["General"] * 5 + ["0.0%", "yyyy-mm-dd", "General"]):
        for copy in (cell, pickle.loads(pickle.dumps(cell))):
            assert (copy, copy.value, type(copy.value) is bool, copy.number_format) == (
                cell, value, type(value) is bool, number_format)


def test_a_workbook_duration_reads_in_hours_and_goes_out_as_a_duration(tmp_path):
    """A reaction time kept as a duration ([h]:mm, 26:30) read as "1 day, 2:30:00", and went out as that text."""
    import datetime

    import openpyxl

    time = datetime.timedelta(hours=26, minutes=30)
    workbook(tmp_path / "in.xlsx", {"q": [["smiles", "time"], ["CCO", time], ["CCN", -datetime.timedelta(seconds=5)]]})
    table = read_queries(tmp_path / "in.xlsx")
    assert table.cells == (("26:30:00",), ("-0:00:05",))
    header = output_header(table.columns)
    molspec_io.write_results(tmp_path / "out.xlsx", header, [
        result_row(header, time=table.cells_of(0)[0], row=1, query="CCO")])
    assert openpyxl.load_workbook(tmp_path / "out.xlsx").active["A2"].value == time


def test_a_resumed_workbook_run_writes_the_kept_records_numbers_as_numbers_too(tmp_path):
    """A workbook run resumed from its kept rows wrote the input's numbers of the kept records as text (read back from
    the kept CSV) and those of the records after as numbers."""
    import openpyxl

    workbook(tmp_path / "in.xlsx", {"q": [["ID", "smiles", "yield"], [7, "CCO", 87.5], [8, "CCN", 90]]})
    table = read_queries(tmp_path / "in.xlsx")
    header = output_header(table.columns)
    rows = [result_row(header, **dict(zip(table.columns, table.cells_of(i))), row=i + 1, query=query, rank=1)
            for i, query in enumerate(table.queries)]

    def stopping():
        yield from rows
        raise KeyboardInterrupt

    out = tmp_path / "out.xlsx"
    keep = molspec_io.Kept(molspec_io.interrupted_name(out), journal=True)
    with pytest.raises(KeyboardInterrupt):
        molspec_io.write_results(out, header, stopping(), keep)
    again = molspec_io.Kept(keep.path, journal=True)
    molspec_io.check_kept(again, header, table.queries, "")
    kept = list(molspec_io.kept_rows(again, header, table.queries, "", table.cells))
    molspec_io.write_results(out, header, [*kept, *rows[again.held:]], again)
    assert [[c.value for c in row][:2] for row in openpyxl.load_workbook(out).active.iter_rows(min_row=2)] == [
        [7, 87.5], [8, 90]]


@pytest.mark.parametrize("dimension", [b'<dimension ref="A1"/>', b'<dimension ref="A1:B2"/>', b""])
def test_a_workbook_whose_sheet_misstates_its_extent_is_read_to_its_last_row(tmp_path, dimension):
    """A sheet's <dimension> says how far its cells reach, and programs that export workbooks write "A1" there (or
    nothing): read as far as it claimed, such a file gave its header and no record, and its queries were lost
    without a word."""
    workbook(tmp_path / "in.xlsx", {"q": [["from the LIMS"], ["smiles", "id"], ["CCO", "A1"], ["CCN"], ["CCCl", 3]]})
    with zipfile.ZipFile(tmp_path / "in.xlsx") as source, zipfile.ZipFile(tmp_path / "out.xlsx", "w") as target:
        for member in source.namelist():
            xml = source.read(member)
            if member.startswith("xl/worksheets/"):
                xml, n = re.subn(rb'<dimension ref="A1:B5"\s*/>', dimension, xml)
                assert n == 1
            target.writestr(member, xml)
    table = read_queries(tmp_path / "out.xlsx")
    assert (table.queries, table.columns, table.cells) == (["CCO", "CCN", "CCCl"], ("id",), (("A1",), ("",), ("3",)))


def test_a_workbook_wider_than_a_sheet_is_refused(tmp_path):
    """An input of more columns than a sheet holds (16,384 with ours) gave cells past XFD, which Excel drops."""
    molspec_io.workbook_bytes([f"c{i}" for i in range(16_384)], [])
    out = tmp_path / "o.xlsx"
    with pytest.raises(OutputFileError, match=r"16,385 columns, more than the 16,384 an Excel sheet holds; write CSV"):
        molspec_io.write_results(out, [f"c{i}" for i in range(16_385)], [])
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_workbook_that_cannot_be_read_says_why(tmp_path):
    path = workbook(tmp_path / "w.xlsx", {"Sheet A": [["name", "structure"], ["x", "CCO"]], "B": []})
    with pytest.raises(InputFileError, match=r"w\.xlsx needs a sheet with a header row naming a column 'smiles' or "
                                             r".*one of its first 10 under titles\); its sheets' first rows hold "
                                             r"'Sheet A': \['name', 'structure'\]; 'B': \[\]" + re.escape(ANOTHER)):
        read_queries(path)
    assert read_queries(path, column="structure").queries == ["CCO"]
    (tmp_path / "text.xlsx").write_text("smiles\nCCO\n")
    with pytest.raises(InputFileError, match="text.xlsx is not an Excel workbook"):
        read_queries(tmp_path / "text.xlsx")


def test_a_wide_first_line_is_named_by_its_first_cells_not_whole(tmp_path):
    """A CSV whose first line held 2,000,000 cells and no query column was refused in a message of 10 MB (the line
    whole), which the Batch page drew; a sheet's header row was named whole too. Their first cells are named, each
    cut short, and the count of the rest."""
    (tmp_path / "wide.csv").write_text("a," * 2_000_000 + "\n")
    with pytest.raises(InputFileError) as refused:
        read_queries(tmp_path / "wide.csv")
    assert len(str(refused.value)) < 1_000
    assert "its first line has ['a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a'] and 1,999,989 more cells " \
           "(cells split at commas" in str(refused.value)
    (tmp_path / "long.csv").write_text("x" * 5_000 + ",name\n")
    with pytest.raises(InputFileError, match=re.escape(f"its first line has ['{'x' * 40}...', 'name'] (cells")):
        read_queries(tmp_path / "long.csv")
    path = workbook(tmp_path / "w.xlsx", {"Sheet": [[f"c{i}" for i in range(13)]]})
    with pytest.raises(InputFileError, match=re.escape(
            f"'Sheet': {[f'c{i}' for i in range(12)]} and 1 more cell{ANOTHER}") + "$"):
        read_queries(path)


def test_a_sheet_of_queries_without_a_header_row_is_told_to_add_one(tmp_path):
    """SMILES pasted into a sheet from its first row were refused naming the columns a header needs, and nothing
    said that the sheet had none (test_a_csv_of_queries_without_a_header_line_is_told_to_add_one)."""
    path = workbook(tmp_path / "w.xlsx", {"notes": [["made by"]], "Pasted": [["CCO", "ethanol"], ["CCN", "x"]]})
    with pytest.raises(InputFileError, match=re.escape(
            "'notes': ['made by']; 'Pasted': ['CCO', 'ethanol']. The first cell of the sheet 'Pasted', 'CCO', reads "
            "as a SMILES: where the sheet has no header row, add one above its first record, naming the query column "
            "smiles") + "$"):
        read_queries(path)
    (tmp_path / "Old.XLS").write_bytes(b"\xd0\xcf\x11\xe0" + bytes(100))
    with pytest.raises(InputFileError, match=r"old binary format \(\.xls\).*save it as an Excel workbook \(\.xlsx\)"):
        read_queries(tmp_path / "Old.XLS")
    (tmp_path / "locked.xlsx").write_bytes(b"\xd0\xcf\x11\xe0" + bytes(100))  # what Excel writes with a password
    with pytest.raises(InputFileError, match="locked.xlsx is protected by a password .* remove the password"):
        read_queries(tmp_path / "locked.xlsx")
    broken = io.BytesIO()
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("[Content_Types].xml", "<not a workbook")
    (tmp_path / "zip.xlsx").write_bytes(broken.getvalue())
    with pytest.raises(InputFileError, match="zip.xlsx cannot be read as an Excel workbook: "):
        read_queries(tmp_path / "zip.xlsx")


@pytest.mark.parametrize("text, kind", [("smiles,name\nCCO,x\n", "csv"), ("smiles\tname\nCCO\tx\n", "csv"),
                                         ("CCO\nCCN\n", "txt")])
def test_text_named_as_a_workbook_is_told_to_be_named_for_what_it_is(tmp_path, text, kind):
    """A CSV a web export named .xlsx was refused as 'not an Excel workbook (.xlsx): it is not the zip archive one is
    (File is not a zip file)', which said nothing of what it was, nor how to read it."""
    (tmp_path / "export.xlsx").write_text(text)
    with pytest.raises(InputFileError, match=re.escape(
            f"export.xlsx is not an Excel workbook (.xlsx) but text: name it export.{kind}, which is read as ")):
        read_queries(tmp_path / "export.xlsx")
    assert read_queries((tmp_path / "export.xlsx").rename(tmp_path / f"export.{kind}")).queries[0] == "CCO"


def test_a_macro_workbook_is_read_as_a_workbook_and_an_opendocument_sheet_is_refused_with_what_to_do(tmp_path):
    """A workbook with macros (.xlsm) and LibreOffice's spreadsheet (.ods) were read as TXT, and refused as text that
    is not UTF-8, to be saved "as UTF-8"."""
    path = workbook(tmp_path / "w.xlsx", {"s": [["smiles", "id"], ["CCO", 7]]})
    macros = tmp_path / "Macros.XLSM"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(macros, "w") as target:
        for member in source.namelist():  # the content type Excel gives a workbook with macros
            target.writestr(member, source.read(member).replace(
                b"openxmlformats-officedocument.spreadsheetml.sheet.main+xml", b"ms-excel.sheet.macroEnabled.main+xml"))
    table = read_queries(macros)
    assert (table.queries, table.columns, table.cells) == (["CCO"], ("id",), (("7",),))
    (tmp_path / "sheet.ods").write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(InputFileError, match=r"sheet\.ods is an OpenDocument spreadsheet .* save it as an Excel "):
        read_queries(tmp_path / "sheet.ods")


def test_a_workbook_is_bounded_by_what_its_zip_unpacks_to_and_by_its_rows(tmp_path, monkeypatch):
    path = workbook(tmp_path / "w.xlsx", {"s": [["smiles"], *[["CCO"]] * 5]})
    with zipfile.ZipFile(path) as archive:
        unpacked = sum(member.file_size for member in archive.infolist())
    monkeypatch.setattr(molspec_io, "WORKBOOK_MAX_XML_BYTES", unpacked - 1)
    with pytest.raises(InputFileError, match="w.xlsx holds more than 0 MB once decompressed"):
        read_queries(path)
    monkeypatch.setattr(molspec_io, "WORKBOOK_MAX_XML_BYTES", unpacked)
    assert len(read_queries(path).queries) == 5
    monkeypatch.setattr(molspec_io, "MAX_INPUT_ROWS", 4)
    with pytest.raises(InputFileError, match="^w.xlsx holds more than 4 records, the limit per file: split it into "
                       "files of at most 4 records$"):
        read_queries(path)


@pytest.mark.parametrize("name,text", [("q.txt", "CCO\n" * 5), ("q.smi", "CCO x\n" * 5),
                                       ("q.csv", "title\nsmiles\n" + "CCO\n" * 5)])
def test_a_file_past_the_row_limit_is_named_and_told_what_to_do(tmp_path, monkeypatch, name, text):
    """It said '5 rows; the limit is 4 per file': which file, and what then?"""
    monkeypatch.setattr(molspec_io, "MAX_INPUT_ROWS", 4)
    (tmp_path / name).write_text(text)
    with pytest.raises(InputFileError, match=f"^{name} holds more than 4 records, the limit per file: split it into "
                       "files of at most 4 records$"):
        read_queries(tmp_path / name)
    monkeypatch.setattr(molspec_io, "MAX_INPUT_ROWS", 5)
    assert len(read_queries(tmp_path / name).queries) == 5


def test_a_sparse_wide_sheet_is_read_to_its_headers_last_name_and_bounded_by_cells(tmp_path, monkeypatch):
    """One cell far to the right made every row 16,384 cells wide: 20,000 rows took 38 s and 5 GB."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["smiles", "id"])
    for i in range(3):
        book.active.append(["CCO", i])
    book.active.cell(row=3, column=16_384).value = "far away"  # under no name
    book.save(tmp_path / "w.xlsx")
    table = read_queries(tmp_path / "w.xlsx")
    assert table.columns == ("id",) and table.cells == (("0",), ("1",), ("2",))
    book.active.cell(row=1, column=16_384).value = "far"  # now named: every row is that wide
    book.save(tmp_path / "w.xlsx")
    monkeypatch.setattr(molspec_io, "WORKBOOK_MAX_CELLS", 2 * 16_384)
    with pytest.raises(InputFileError, match="w.xlsx: sheet 'Sheet' holds more than 32,768 cells under its header, "
                                             "which names 16,384 columns; delete the columns"):
        read_queries(tmp_path / "w.xlsx")


def test_results_written_to_a_workbook_keep_numbers_numbers_and_text_exactly_as_text(tmp_path):
    import openpyxl

    header = output_header(["ID"])
    rows = [["=HYPERLINK(\"http://x\")", 1, "CCO", "CCO", 1, "CC=O", -0.25, 0.78, True, True, "", 1, 0.9, 5, 5, 1,
             None, None, "beam", "int8", 12.5, 7, 3, ""],
            ["#N/A", 2, "x\x01y", "", None, "", None, None, None, None, "", None, None, None, None, None, None, None,
             "beam", None, None, None, None, "-unreadable"],
            ["long", 3, "C" * 40_000, "", 1, "CCO", float("-inf"), float("nan"), False, False, "", 1, None, 1, 1, 1,
             None, None, "greedy", "float32", 1.0, 1, 0, ""]]
    molspec_io.write_results(tmp_path / "out.XLSX", header, rows)
    assert molspec_io.is_workbook_name(tmp_path / "out.XLSX") and not molspec_io.is_workbook_name("o.xlsx.csv")
    book = openpyxl.load_workbook(tmp_path / "out.XLSX")
    sheet = book["predictions"]
    assert book.sheetnames == ["predictions"] and sheet.freeze_panes == "A2"
    back = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert back[0] == header
    # text as given (no quote in front: it is typed as text), numbers and booleans kept; "" an empty cell
    assert back[1] == [None if cell == "" else cell for cell in rows[0]]
    text = {"s", "inlineStr"}  # a formula would be "f", an error value "e"
    assert sheet["A2"].data_type in text and {cell.data_type for cell in sheet[2]} <= {*text, "n", "b"}
    assert sheet["A3"].data_type in text and back[2][0] == "#N/A"  # text, not Excel's error value
    assert back[2][2] == "x\\x01y" and back[2][-1] == "-unreadable"  # what XML cannot hold, written out
    assert back[3][6:8] == ["-inf", "nan"]  # a number a sheet cannot hold, as its text
    long = back[3][2]
    assert len(long) == 32_767 and long.endswith(" characters cut: an Excel cell holds 32,767]")
    assert long.startswith("C" * 32_000) and f"[... {40_000 - long.index(' ['):,} characters cut" in long
    assert read_queries(tmp_path / "out.XLSX", column="smiles").queries == ["CC=O", "", "CCO"]  # reads back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.XLSX"]


def test_a_workbook_run_that_may_pass_the_sheets_last_row_is_refused_before_it_starts(tmp_path, monkeypatch):
    molspec_io.check_results_name(tmp_path / "o.xlsx", 1_048_575)
    with pytest.raises(OutputFileError, match=r"up to 1,048,576 rows of answers, more than an Excel sheet holds "
                                              r"\(1,048,575 under its header\); write CSV"):
        molspec_io.check_results_name(tmp_path / "o.xlsx", 1_048_576)
    molspec_io.check_results_name(tmp_path / "o.csv", 10**8)  # CSV has no such limit
    with pytest.raises(OutputFileError, match=r"o\.xls: predict writes CSV \(\.csv\), an SD file .* or an Excel "
                                              r"workbook \(\.xlsx\)"):
        molspec_io.check_results_name(tmp_path / "o.xls")
    out = tmp_path / "o.xlsx"
    out.write_bytes(b"earlier results")
    monkeypatch.setattr(molspec_io, "WORKBOOK_MAX_ROWS", 3)  # the writer's own check, and a failed write
    with pytest.raises(OutputFileError, match="more than 3 rows, the most an Excel sheet holds"):
        molspec_io.write_results(out, ["smiles"], [["C"], ["CC"], ["CCC"]])
    assert out.read_bytes() == b"earlier results" and sorted(p.name for p in tmp_path.iterdir()) == ["o.xlsx"]
    molspec_io.write_results(out, ["smiles"], [["C"], ["CC"]])
    assert read_queries(out).queries == ["C", "CC"]


def test_write_results_refuses_a_name_it_would_not_honour_and_an_sd_file_without_answers(tmp_path):
    """A library caller's out.csv.gz came out as plain CSV under that name (check_results_name guarded the
    command line only), and an SD file of columns without `smiles` failed with "'smiles' is not in list"."""
    with pytest.raises(OutputFileError, match=r"out\.csv\.gz: predict writes CSV \(\.csv\)"):
        molspec_io.write_results(tmp_path / "out.csv.gz", ["smiles"], [["C"]])
    with pytest.raises(ValueError, match="the header needs a smiles column .* and it has a, b"):
        molspec_io.write_results(tmp_path / "out.sdf", ["a", "b"], [["C", "D"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_predict_batch_refuses_one_string_for_a_list():
    """predict_batch(p, "CCO") predicted three queries: C, C and O. Refused before the predictor is used."""
    with pytest.raises(ValueError, match=r"predict_batch takes a list of queries; for one SMILES pass \[smiles\]"):
        molspec_io.predict_batch(None, "CCO")


def test_a_query_stopped_at_its_time_limit_writes_the_answers_it_found_each_with_its_error():
    """A beam search past its time limit keeps the answers it found (Predictor.predict), yet its record was one
    error row with no answers: they were lost to every output file. Its rows hold them now, each with the error."""
    from molspec_core.service import TIMED_OUT, Prediction, QueryResult

    answers = (Prediction(1, "CC=O", -0.1, True, (), (), True), Prediction(2, "CC(", -0.5, False, (), (), False,
                                                                            (TIMED_OUT,)))
    error = "stopped after the 1 s time limit per query; try greedy or a smaller n_best"
    rows = molspec_io.result_rows(4, (), QueryResult("CCO", "CCO", predictions=answers, method="beam", error=error))
    header = output_header([])
    at = {column: header.index(column) for column in ("row", "rank", "smiles", "concerns", "error")}
    assert [[row[at[c]] for c in at] for row in rows] == [[4, 1, "CC=O", "", error], [4, 2, "CC(", TIMED_OUT, error]]
    assert isinstance(rows[-1], molspec_io.LastRow)
    refused = molspec_io.result_rows(5, (), QueryResult("x", method="beam", error=error))
    assert len(refused) == 1 and refused[0][at["rank"]] is None and refused[0][at["error"]] == error


def test_a_query_stopped_without_answers_writes_the_calls_it_made(tmp_path):
    """A greedy query stopped at its time limit keeps the calls it made (QueryResult.stats, dtype; over HTTP
    model_calls and accepted_tokens say so), yet its row left dtype, time_ms, model_calls and accepted_tokens empty,
    as if it had never been decoded. They are written; a query refused before decoding (no calls) leaves them empty,
    and the row reads back (predict --resume) with its counts as numbers."""
    from molspec_core.decoding.result import DecodeStats
    from molspec_core.service import QueryResult

    at = {column: RESULT_COLUMNS.index(column)
          for column in ("rank", "dtype", "time_ms", "model_calls", "accepted_tokens", "error")}
    error = "stopped after the 1 s time limit per query; try a longer time limit"
    stats = DecodeStats(model_calls=37, draft_tokens_accepted=12, wall_time_s=1.25)
    stopped = QueryResult("CCO", "CCO", stats=stats, method="spec-auto", error=error, dtype="int8")
    row = molspec_io.result_rows(1, (), stopped)[0]
    assert [row[i] for i in at.values()] == [None, "int8", 1250.0, 37, 12, error]
    assert molspec_io.result_rows(1, (), stopped, 400.0)[0][at["time_ms"]] == 400.0  # predict_batch's share
    refused = molspec_io.result_rows(2, (), QueryResult("C1", "", method="spec-auto", error="not a SMILES"))[0]
    assert [refused[i] for i in at.values()] == [None, None, None, None, None, "not a SMILES"]
    header = output_header([])
    kept = molspec_io.Kept(tmp_path / "out.interrupted.csv")
    molspec_io.write_csv(kept.path, header, [row, refused])
    back = list(molspec_io.kept_rows(kept, header, ["CCO", "C1"], "spec-auto"))
    assert back == [[None if cell == "" else cell for cell in written] for written in (row, refused)]


def test_a_retrosynthesis_files_lone_ion_and_inorganic_queries_get_the_predict_pages_note():
    """A file run noted only queries of several molecules: acetate alone (CC(=O)[O-]) or ammonium ([NH4+]) asked for
    retrosynthesis got their note on the Predict page and from `predict --smiles` (service.several_products_note),
    and not a word in a file run's summary. Each kind of note is counted with its records, in the page's words."""
    from molspec_core.service import Prediction, QueryResult, several_products_note

    def first_row(row: int, canonical: str, answered: bool = True) -> list[object]:
        answers = (Prediction(1, "CC(=O)Cl", -1.0, True, ("C",), (-1,)),) if answered else ()
        result = QueryResult(canonical, canonical, predictions=answers, method="greedy", task="retro",
                             error="" if answered else "refused")
        return molspec_io.result_rows(row, (), result)[0]

    outcomes = molspec_io.Outcomes()
    queries = ["CCO", "CC(=O)[O-]", "CCN.Cl", "[NH4+]", "C[N+](C)(C)C", "CC(=O)[O-]", "CCBr.Br"]
    for row, canonical in enumerate(queries, start=1):
        outcomes.count(first_row(row, canonical))
    outcomes.count(first_row(8, "[O-]C(C)=O", answered=False))  # no answers: nothing to note
    # ethanol has no note, nor a quaternary ammonium (no proton explains its charge)
    assert outcomes.several == [(2, "CC(=O)[O-]"), (3, "CCN.Cl"), (4, "[NH4+]"), (6, "CC(=O)[O-]"), (7, "CCBr.Br")]
    note = molspec_io.several_molecules_note(outcomes.several)
    assert note == (f"2 queries are written with charges a proton explains (rows 2 and 6). Row 2: "
                    f"{several_products_note('retro', 'CC(=O)[O-]')} "
                    f"2 queries hold several molecules (rows 3 and 7). Row 3: "
                    f"{several_products_note('retro', 'CCN.Cl')} "
                    f"1 query holds no carbon (row 4). Row 4: {several_products_note('retro', '[NH4+]')}")
    assert "predict CC(=O)O." in note
    # a salt alone keeps the words it had
    assert molspec_io.several_molecules_note([(2, "CCN.Cl")]).startswith("1 query holds several molecules (row 2). ")


def test_a_records_answer_rows_have_its_query_read_for_the_retrosynthesis_note_once(monkeypatch):
    """The Batch page asks io.several_molecules of every answer row, and each asked RDKit to read the query again for
    the note on an ion alone: a record's n_best rows read it once."""
    from molspec_core import service
    from molspec_core.service import Prediction, QueryResult

    asked: list[str] = []
    note = service.several_products_note
    monkeypatch.setattr(service, "several_products_note", lambda task, query: asked.append(query) or note(task, query))
    molspec_io._noted_alone.cache_clear()
    answers = tuple(Prediction(rank, "CC(=O)Cl", -1.0, True, ("C",), (-1,)) for rank in (1, 2, 3))
    rows = molspec_io.result_rows(4, (), QueryResult("CC(=O)[O-]", "CC(=O)[O-]", predictions=answers, method="beam"))
    assert [molspec_io.several_molecules(row) for row in rows] == [(4, "CC(=O)[O-]")] * 3
    assert asked == ["CC(=O)[O-]"]
    # a kept row edited by hand, its canonical query one RDKit cannot read: no note, where it stopped the run
    edited = molspec_io.result_rows(5, (), QueryResult("C1CC", "C1CC", predictions=answers, method="beam"))
    assert molspec_io.several_molecules(edited[0]) is None
    salt = "CCN.Cl"  # of several molecules: noted without RDKit, and left out of the note where RDKit cannot read it
    assert molspec_io.several_molecules_note([(6, "C1CN.Cl"), (7, salt)]) == \
        molspec_io.several_molecules_note([(7, salt)]) and molspec_io.several_molecules_note([(6, "C1CN.Cl")]) == ""


def test_model_cells_name_a_model_by_its_folder_s_own_name_wherever_it_lies(tmp_path, monkeypatch):
    """model_folder (io.MODEL_COLUMNS) is the folder's name, as the app's sidebar names a shipped model: predict wrote
    none, and the path it would have written said where the model lay on the sender's machine, which a colleague
    cannot open, and named one model two ways from two working folders; the weights' fingerprint comes as given."""
    folder = tmp_path / "models" / "forward"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    assert molspec_io.model_cells(folder, "ab12") == ("forward", "ab12")
    assert molspec_io.model_cells(".", "ab12") == molspec_io.model_cells("../forward/", "ab12") == ("forward", "ab12")
