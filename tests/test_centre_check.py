"""tools/centre_check.py: the maps' conventions it counts apart from the estimate's differences."""
from __future__ import annotations

import json
import sys

import pytest
from conftest import load_tool

# USPTO-50K's map of methyl 4-bromobenzoate's saponification: the acid's OH is the ester's alkoxy oxygen
SAPONIFIED = ("[CH3:1][O:2][C:3](=[O:4])[c:5]1[cH:6][cH:7][c:8]([Br:9])[cH:10][cH:11]1.[Li+].[OH-]",
              "[OH:2][C:3](=[O:4])[c:5]1[cH:6][cH:7][c:8]([Br:9])[cH:10][cH:11]1")


@pytest.mark.parametrize("reactants, product, keeps", [
    (*SAPONIFIED, True),
    # the same, mapped as oxygen-18 has it: the acid's OH is the hydroxide's
    ("[CH3:1][O:2][C:3](=[O:4])[CH3:5].[OH-:6]", "[OH:6][C:3](=[O:4])[CH3:5]", False),
    # an ethyl ester to the acid's salt, the alkoxy oxygen kept as the carboxylate's
    ("[CH3:1][CH2:2][O:3][C:4](=[O:5])[CH3:6].[Na+].[OH-]", "[O-:3][C:4](=[O:5])[CH3:6]", True),
    # a tert-butyl ester removed by acid: the alkyl C-O bond breaks, so the map rightly keeps the oxygen
    ("[CH3:1][C:2]([CH3:3])([CH3:4])[O:5][C:6](=[O:7])[CH3:8].O=C(O)C(F)(F)F", "[OH:5][C:6](=[O:7])[CH3:8]", False),
    # a benzyl ester's hydrogenolysis likewise
    ("[cH:1]1[cH:2][cH:3][cH:4][cH:5][c:6]1[CH2:7][O:8][C:9](=[O:10])[CH3:11]", "[OH:8][C:9](=[O:10])[CH3:11]",
     False),
    # an aryl methyl ether cleaved to the phenol (BBr3): an SN2 demethylation, no ester
    ("[CH3:1][O:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1", "[OH:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1", False),
])
def test_the_check_counts_maps_that_hydrolyse_an_ester_keeping_its_alkoxy_oxygen(reactants, product, keeps):
    """The estimate traces a methyl or ethyl ester's hydrolysis as oxygen-18 shows (the acyl C-O bond breaks, the
    alkoxy leaves whole); USPTO-50K's maps keep the alkoxy oxygen as the acid's, and the check counts them apart."""
    assert load_tool("centre_check").map_keeps_alkoxy_oxygen(reactants, product) is keeps


def test_the_report_says_how_many_differences_are_the_maps_oxygen(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "uspto50k" / "gln_split" / "raw_test.csv"
    raw.parent.mkdir(parents=True)
    raw.write_text(f"id,reactants>reagents>production\n1,{SAPONIFIED[0]}>>{SAPONIFIED[1]}\n")
    monkeypatch.setattr(sys, "argv", ["centre_check.py", "--data", str(tmp_path)])
    load_tool("centre_check").main()
    report = json.loads(capsys.readouterr().out)
    assert report["same"] == 0 and report["map_keeps_alkoxy_oxygen"] == 1
    assert report["differ_where_map_keeps_oxygen"] == 1


@pytest.mark.parametrize("product, centre", [
    ("[CH3:1][C@@H:2]([OH:3])[CH2:4][CH3:5]", {1}),  # the other configuration: an epimerization
    ("[OH:3][C@@H:2]([CH3:1])[CH2:4][CH3:5]", set()),  # the same configuration, its neighbours in another order
])
def test_the_mapped_centre_holds_a_stereocentre_whose_configuration_turned(product, centre):
    """The estimate marks a stereocentre whose configuration turned (an epimerization, a Mitsunobu inversion); the
    map's centre read bonds, hydrogens and charges only, so such an atom counted against the estimate (USPTO-50K's
    test set: 18 reactions whose centres differed by that alone)."""
    assert load_tool("centre_check").mapped_centre("[CH3:1][C@H:2]([OH:3])[CH2:4][CH3:5]", product) == centre


def test_a_meso_ring_mapped_mirrored_has_no_turned_stereocentre():
    """cis-2,6-Dimethylmorpholine acetylated: a map may pair the ring's two halves either way round (USPTO-50K's
    maps do), and paired mirrored each stereocentre's configuration reads as turned though the ring is the same."""
    reactants = "[CH3:1][C@@H:2]1[CH2:3][NH:4][CH2:5][C@H:6]([CH3:7])[O:8]1.[CH3:9][C:10](=[O:11])[Cl:12]"
    mirrored = "[CH3:1][C@H:2]1[CH2:3][N:4]([C:10]([CH3:9])=[O:11])[CH2:5][C@@H:6]([CH3:7])[O:8]1"
    assert load_tool("centre_check").mapped_centre(reactants, mirrored) == {3, 4}  # the amide's N and C only
