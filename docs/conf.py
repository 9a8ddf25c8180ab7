"""Sphinx configuration of the maxent-grpo documentation.

Build (zero warnings, nitpicky cross-references; what `.ci/run` runs)::

    pip install -e ".[docs]"
    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the checkout's code, also where the package is not installed in editable mode

import maxent_grpo  # noqa: E402

project = "maxent-grpo"
author = "the maxent-grpo authors"
copyright = "2025, the maxent-grpo authors"
release = maxent_grpo.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax from the package, copied into _static: the equations render offline
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
templates_path: list[str] = []

# --- MyST (the Markdown pages) -----------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3  # `[text](#a-heading)` and `[text](page.md#a-heading)` links to headings up to ###

# --- autodoc + napoleon (the API reference, from the docstrings) ---------------------------------------------------
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = True  # "Return type:" on its own line, as in the helpers' specification
napoleon_attr_annotations = True
autodoc_typehints = "description"  # parameter and return types under "Parameters" / "Return type"
autodoc_typehints_description_target = "all"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = True

# --- nitpicky cross-references -------------------------------------------------------------------------------------
# Every reference to this package's own objects must resolve. The machines that build these docs have no internet
# access, so intersphinx cannot fetch the inventories of Python, torch, transformers, TRL and the other dependencies:
# references to *their* objects are ignored here, and only theirs: by package, and by the short names under which
# annotations imported only for type checking (`if TYPE_CHECKING:`) reach autodoc.
nitpicky = True
_EXTERNAL_PACKAGES = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "vllm", "requests")
_EXTERNAL_SHORT_NAMES = ("PreTrainedModel", "PreTrainedTokenizerBase", "GRPOConfig", "GRPOTrainer", "Path")
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(_EXTERNAL_PACKAGES)})(\..*)?"),
    (r"py:.*", rf"({'|'.join(_EXTERNAL_SHORT_NAMES)})"),
    # The standard library (no inventory of docs.python.org either).
    (r"py:.*", r"(abc|collections\.abc|pathlib|asyncio|logging|concurrent\.futures)\..*"),
    # Internal types of the generation step that are not on the API pages (its data flow is on the design page), and
    # the HTTP transport's answer type.
    (
        r"py:class",
        r"AnyProcess|maxent_grpo\.training\.generation\.rows\.GeneratedRows",
    ),
]
# Where an annotation is a string autodoc cannot evaluate, these short names still link to this package's objects.
autodoc_type_aliases = {
    "WeightSource": "maxent_grpo.training.generation.weights.server_sync.WeightSource",
}

# --- HTML ----------------------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"maxent-grpo {release}"
html_static_path: list[str] = []
#: What a page loads MathJax from: this site's own copy (sphinx-mathjax-offline sets it), never a CDN.
LOCAL_MATHJAX = "_static/mathjax/tex-chtml.js"


def _check_local_mathjax(app, exception):
    """Fail the build where a page would load MathJax from anywhere but this site's copy (a CDN needs the network),
    or where no page loads it (the equations would be raw TeX)."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    if not (out / LOCAL_MATHJAX).is_file():
        raise RuntimeError(f"{LOCAL_MATHJAX} is missing from the built site: is sphinx-mathjax-offline installed?")
    sources = {
        str(page.relative_to(out)): re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', page.read_text("utf-8"), re.I)
        for page in out.rglob("*.html")
    }
    loading = {page: found for page, found in sources.items() if found}
    # Sphinx may add a checksum query (``?v=...``) to a file it found in the output folder already.
    remote = {
        page: found
        for page, found in loading.items()
        if any(not src.split("?", 1)[0].endswith(LOCAL_MATHJAX) for src in found)
    }
    if not loading or remote:
        raise RuntimeError(
            f"every page must load MathJax from {LOCAL_MATHJAX}; these do not: {remote or 'none loads it'}"
        )


# --- MaxEntGRPOConfig's page ---------------------------------------------------------------------------------------
# Its constructor takes every field of transformers' TrainingArguments and TRL's GRPOConfig (about 250 keyword
# arguments): its API entry shows `(**fields)` without a parameter list, and the configuration reference lists, with
# their help texts, the fields this package adds.
_FIELDS_ONLY = {"maxent_grpo.config.MaxEntGRPOConfig"}


def _fields_signature(app, what, name, obj, options, signature, return_annotation):
    return ("(**fields)", return_annotation) if name in _FIELDS_ONLY else None


def _drop_field_typehints(app, domain, objtype, contentnode):
    signature = contentnode.parent[0]
    fullname = f"{signature.get('module')}.{signature.get('fullname')}"
    if fullname in _FIELDS_ONLY:
        app.env.current_document.autodoc_annotations.pop(fullname, None)


def setup(app):
    app.connect("build-finished", _check_local_mathjax, priority=900)  # after sphinx-mathjax-offline's copy (500)
    app.connect("autodoc-process-signature", _fields_signature)
    app.connect("object-description-transform", _drop_field_typehints, priority=400)  # before autodoc's merge (500)
