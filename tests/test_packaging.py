"""What `pip install -e .[app]` installs is what the app imports: the README offers that route beside
requirements.txt, and the app extra once lacked streamlit-ketcher, which the Predict page (the app's default
page) imports at its top."""
import ast
import re
import sys
import tomllib

from conftest import ROOT

# Module name -> distribution name where they differ.
DISTRIBUTIONS = {"streamlit_ketcher": "streamlit-ketcher", "py3Dmol": "py3dmol"}


def third_party_imports(paths) -> set[str]:
    """Top-level modules imported anywhere in these files (lazy imports included), less the standard library
    and the project's own packages."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {name for name in found
            if name not in sys.stdlib_module_names and name not in ("molspec_core", "views", "__future__")}


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ;]", line, maxsplit=1)[0].lower() for line in requirements}


def test_the_app_extra_with_the_core_dependencies_installs_every_package_the_app_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = requirement_names(project["dependencies"]) | requirement_names(project["optional-dependencies"]["app"])
    app_files = [ROOT / "app.py", *sorted((ROOT / "views").glob("*.py"))]
    imported = third_party_imports(app_files)
    assert {"streamlit", "streamlit_ketcher"} <= imported  # the scan sees the app's imports
    missing = sorted(name for name in imported if DISTRIBUTIONS.get(name, name).lower() not in installed)
    assert not missing, f"the app imports {missing}, which neither the core dependencies nor .[app] install"


def test_the_package_says_its_version():
    """`molspec_core.__version__` did not exist: a pipeline logging what it ran with had to ask pip. It is the
    installed package's version, the one evaluate's reports record."""
    import importlib.metadata

    import molspec_core

    assert molspec_core.__version__ == importlib.metadata.version("molspec")
