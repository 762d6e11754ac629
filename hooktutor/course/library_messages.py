"""The library's user-facing messages, collected from its source for the catalogue of each language.

What a learner reads from the library is written in a few places, and those are read here with
Python's own parser (``ast``), never by running the code:

- an exercise's title (``Exercise(key, title, ...)``, ``Prediction(...)``), its task, hints and
  explanations (``task=``, ``hints=``, ``explain=``, ``errors={pattern: message}``);
- a case's description (``@exercise.case("...")``);
- what a check compares and says (``what=``, ``expected=``, ``got=``, ``nudge=``, ``note=``, a
  ``{"why": ...}`` detail, a ``Mismatch(what, expected, got, nudge)``);
- the toolkit's error messages (``raise ValueError("...")`` outside the course's authoring tools);
- the widgets' labels (``description=``, ``tooltip=``) and the texts marked for translation
  (``tr("...")``, ``fmt("...")``, ``N_("...")`` of :mod:`hooktutor.i18n`).

A written-out text is a message as it is. An f-string is a template: each ``{expression}`` becomes a
named placeholder (``{name!r}`` gives ``{name}``), flagged ``python-brace-format``, which
:func:`hooktutor.i18n.tr` matches against the finished English text. A text made by ``+`` of
strings and other values is one template too.

``python3 course.py translate`` brings ``hooktutor/locale/<lang>/LC_MESSAGES/hooktutor.po`` up to
date with these messages (:func:`updated_catalogue`, with polib); ``tests/test_translations.py``
fails while one is missing, obsolete, fuzzy or untranslated, or lost a placeholder or a code span.

Taught nowhere: how the course is made, for its translators (docs/translating.md).
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

from ..i18n import DOMAIN, TEMPLATE_FLAG, catalogue_path
from ..i18n import literal_text as _literal

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent

# the parts of the package a learner reads messages from: all but the course's authoring tools
_SKIP = {"i18n.py", "__main__.py"}
_COURSE_READ = {"doctor.py", "errors.py", "site_text.py", "site_source.py"}

KEYWORDS = {"task", "hints", "explain", "summary", "nudge", "what", "expected", "got", "note", "why",
            "description", "tooltip", "placeholder", "errors"}
# positional arguments that are messages, by the name of what is called
POSITIONAL = {"Exercise": (1,), "Prediction": (1,), "case": (0,), "Mismatch": (0, 1, 2, 3),
              "tr": (0,), "fmt": (0,), "N_": (0,), "_Text": (0,), "Finding": (0, 2, 3), "_fix": (0, 1)}
# detail dicts a case returns: {"why": ..., "expected": ...}
DETAIL_KEYS = {"why", "expected", "got", "checked", "error", "what", "nudge"}
_ENDINGS = ("_nudge", "_why", "_what", "_hint", "_hints", "_message", "_note", "_task", "_expected", "_got")


def _is_message_name(name: str | None) -> bool:
    return name is not None and (name in KEYWORDS or name in DETAIL_KEYS or name.endswith(_ENDINGS))


_ERRORS = re.compile(r"(Error|Exception|Warning|Mismatch|SolutionsOff)$")


def sources() -> list[Path]:
    """The modules whose messages a learner reads, in a fixed order."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.name in _SKIP and len(rel.parts) == 1:
            continue
        if rel.parts[0] == "course" and path.name not in _COURSE_READ:
            continue
        found.append(path)
    return found


@dataclass
class Message:
    msgid: str
    template: bool
    places: list[str] = field(default_factory=list)


def _name_for(expr: ast.expr) -> str:
    """A placeholder's name for ``expr``: what a translator can read (``{layer}``, ``{n_hooks}``)."""
    node = expr
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        if isinstance(node, ast.Attribute):
            return _ident(node.attr)
        if isinstance(node, ast.Call):
            inner = node.args[0] if node.args else None
            fname = _ident(ast.unparse(node.func).split(".")[-1])
            if fname in ("len", "str", "repr", "int", "float", "round", "abs", "_fmt", "fmt_value", "tuple",
                         "list", "sorted", "type") and inner is not None:
                return (("n_" if fname == "len" else "") + _name_for(inner))[:30]
            return fname or "value"
        node = node.value
    if isinstance(node, ast.Name):
        return _ident(node.id)
    return "value"


def _ident(text: str) -> str:
    name = re.sub(r"\W+", "_", text).strip("_").lower() or "value"
    return f"v_{name}" if name[0].isdigit() else name


class _Template:
    """Builds one message from a string expression: its written-out parts and a named placeholder
    for each value put in (an f-string's ``{expression}``, or a value joined with ``+``)."""

    def __init__(self) -> None:
        self.parts: list[tuple[bool, str]] = []   # (is a placeholder, its name or the literal text)
        self.names: dict[str, str] = {}   # expression source -> placeholder name
        self.is_template = False

    def placeholder(self, expr: ast.expr) -> None:
        source = ast.unparse(expr)
        if source not in self.names:
            base = _name_for(expr)
            name, i = base, 2
            while name in self.names.values():
                name, i = f"{base}_{i}", i + 1
            self.names[source] = name
        self.parts.append((True, self.names[source]))
        self.is_template = True

    def add(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.parts.append((False, node.value))
        elif isinstance(node, ast.JoinedStr):
            for value in node.values:
                if isinstance(value, ast.Constant):
                    self.parts.append((False, value.value))
                elif isinstance(value, ast.FormattedValue):
                    self.placeholder(value.value)
            self.is_template = True
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (_stringish(node.left)
                                                                               or _stringish(node.right)):
            self.add(node.left)
            self.add(node.right)
        else:
            self.placeholder(node)

    def text(self) -> str:
        """The message: a template's literal braces doubled, so that only its placeholders are fields."""
        if not self.is_template:
            return "".join(text for _, text in self.parts)
        return "".join("{" + text + "}" if field else text.replace("{", "{{").replace("}", "}}")
                       for field, text in self.parts)


def _stringish(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr) \
        or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (_stringish(node.left)
                                                                             or _stringish(node.right)))


def _messages_in(node: ast.expr, force: bool = False):
    """The messages a value holds: a string expression, or each in a list, tuple, dict's values
    or a conditional's branches."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for item in node.elts:
            yield from _messages_in(item, force)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            yield from _messages_in(value, force)
    elif isinstance(node, ast.IfExp):
        yield from _messages_in(node.body, force)
        yield from _messages_in(node.orelse, force)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _messages_in(value, force)
    elif _stringish(node):
        if isinstance(node, ast.Constant) and not node.value.strip():
            return
        t = _Template()
        t.add(node)
        text = t.text()
        if " · " in text:   # a widget's status line: each part is a message (hooktutor.i18n.tr_line)
            for part in text.split(" · "):
                if not _is_code(part, t.is_template) and len(re.findall(r"[A-Za-z]{2,}", _literal(part))) >= 2:
                    yield part, t.is_template and "{" in part
            return
        if not force and _is_code(text, t.is_template):
            return
        # a message has words: a lone name, a format like "{n}", a code token is not one
        if force or (len(re.findall(r"[A-Za-z]{2,}", _literal(text) if t.is_template else text)) >= 1
                     and " " in text.strip()):
            yield text, t.is_template


def _is_code(text: str, template: bool) -> bool:
    """Whether ``text`` is a Python expression (``count_calls(model, x, model.body[0])``,
    ``"{name}.grad"``): shown as code, the same in every language."""
    if template:
        try:
            text = "".join(lit + ("x" if f is not None else "") for lit, f, _, _ in string.Formatter().parse(text))
        except ValueError:
            return False
    try:
        ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return False
    return True


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


# what is never shown to a learner: the words a test looks for in a report, the instructors' guide,
# why a mutant is equivalent, the label of a registered wrong or right answer, a warnings filter
_NOT_SHOWN_KEYWORDS = {"mentions", "guide", "equivalent_mutants", "since", "message", "module", "category"}
_NOT_SHOWN_CALLS = {"wrong", "right", "filterwarnings", "simplefilter", "compile", "search", "match", "fullmatch",
                    "sub", "split", "getattr", "setattr", "hasattr", "get_submodule", "import_module",
                    "register_buffer"}


class _Collector(ast.NodeVisitor):
    """Walks one module. Keyword mode: only the places :data:`KEYWORDS` and :data:`POSITIONAL` name.
    Broad mode (the exercises' wing, where a report's sentences are also passed to helpers and
    returned from them): every string of three words or more, outside docstrings and the places a
    learner never sees."""

    def __init__(self, broad: bool) -> None:
        self.broad = broad
        self.found: list[tuple[str, bool, int]] = []
        self.parents: list[ast.AST] = []

    def take(self, node: ast.expr, force: bool = False, prose: bool = False, template: bool = False) -> None:
        for text, is_template in _messages_in(node, force):
            if prose and len(re.findall(r"[A-Za-z]{2,}", _literal(text) if is_template else text)) < 3:
                continue
            self.found.append((text, is_template or template, node.lineno))

    def generic_visit(self, node: ast.AST) -> None:
        self.parents.append(node)
        super().generic_visit(node)
        self.parents.pop()

    def visit_Call(self, node: ast.Call) -> None:
        name = _called(node)
        if name in _NOT_SHOWN_CALLS:
            return
        handled: set[int] = set()
        for kw in node.keywords:
            if kw.arg in _NOT_SHOWN_KEYWORDS:
                handled.add(id(kw.value))
            elif _is_message_name(kw.arg):
                self.take(kw.value)
                if _stringish(kw.value):   # a call inside (fmt(...), tr(...)) is visited below
                    handled.add(id(kw.value))
        for index in POSITIONAL.get(name, ()):
            if index < len(node.args):
                # fmt("... {n} ...", n=...): a template the library fills itself
                self.take(node.args[index], force=name in ("N_", "tr", "fmt"), template=name == "fmt")
                if _stringish(node.args[index]):
                    handled.add(id(node.args[index]))
        if isinstance(node.func, ast.Attribute) and node.func.attr == "format" and _stringish(node.func.value):
            handled.add(id(node.func.value))   # "...{}...".format(...): not a text as it is shown
        self.parents.append(node)
        for child in [node.func, *node.args, *(kw.value for kw in node.keywords)]:
            if id(child) not in handled:
                self.visit(child)
        self.parents.pop()

    def visit_Raise(self, node: ast.Raise) -> None:
        if isinstance(node.exc, ast.Call) and _ERRORS.search(_called(node.exc)) and node.exc.args:
            self.take(node.exc.args[0])
            for child in [*node.exc.args[1:], *(kw.value for kw in node.exc.keywords)]:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and _is_message_name(t.id) for t in node.targets):
            self.take(node.value)
            if not _stringish(node.value):   # a call inside (N_(...), fmt(...)) is visited too
                self.visit(node.value)
            return
        if any(isinstance(t, ast.Name) and t.id.endswith("KEYS") for t in node.targets):
            return   # a prediction's keys: the learner types them, in English, in every edition
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        self.parents.append(node)
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and key.value in DETAIL_KEYS:
                self.take(value)
                if not _stringish(value):   # {"error": N_("...")}: the call is visited too
                    self.visit(value)
            elif value is not None:
                self.visit(value)   # keys are names and patterns, never shown
        self.parents.pop()

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)   # an index (detail["why"]) is a key

    def visit_Compare(self, node: ast.Compare) -> None:
        return   # a string compared with is a value the code looks for, never shown

    def _string(self, node: ast.expr) -> None:
        # a bare string statement (a docstring) is never shown
        if self.broad and not (self.parents and isinstance(self.parents[-1], ast.Expr)):
            self.take(node, prose=True)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._string(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._string(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if _stringish(node):
            self._string(node)
        else:
            self.generic_visit(node)


def messages_of(path: Path, broad: bool | None = None) -> list[tuple[str, bool, int]]:
    """(msgid, is_template, line) for each message in one module, in source order (``broad``: every
    sentence, not only the named places; by default for the exercises' and the widgets' wings)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if broad is None:
        broad = path.relative_to(PACKAGE).parts[0] in ("exercises", "widgets")
    collector = _Collector(broad=broad)
    collector.visit(tree)
    return sorted(collector.found, key=lambda m: m[2])


def library_messages() -> dict[str, Message]:
    """Every message of the library, in order of first appearance, each with where it is."""
    out: dict[str, Message] = {}
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        for text, template, line in messages_of(path):
            msg = out.setdefault(text, Message(text, template))
            msg.template = msg.template or template
            place = f"{rel}:{line}"
            if place not in msg.places:
                msg.places.append(place)
    return out


# -- the catalogue ------------------------------------------------------------------------------------

def _header(lang: str) -> dict[str, str]:
    return {"Project-Id-Version": f"hooktutor {DOMAIN}", "Language": lang, "MIME-Version": "1.0",
            "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit"}


def read_catalogue(lang: str):
    import polib

    path = catalogue_path(lang)
    return polib.pofile(str(path), wrapwidth=0) if path.exists() else None


def updated_catalogue(lang: str):
    """The library's catalogue for ``lang`` brought up to date with the source (not saved):
    translations kept where the English is unchanged, new messages untranslated, gone ones dropped."""
    import polib

    old = read_catalogue(lang)
    kept = {e.msgid: e for e in old if not e.obsolete} if old is not None else {}
    po = polib.POFile(wrapwidth=0)
    po.metadata = _header(lang)
    for msg in library_messages().values():
        before = kept.get(msg.msgid)
        flags = [f for f in (before.flags if before else []) if f != TEMPLATE_FLAG]
        if msg.template:
            flags.append(TEMPLATE_FLAG)
        po.append(polib.POEntry(msgid=msg.msgid, msgstr=before.msgstr if before else "",
                                occurrences=[tuple(p.rsplit(":", 1)) for p in msg.places],
                                flags=flags, tcomment=before.tcomment if before else ""))
    return po


def save(lang: str):
    po = updated_catalogue(lang)
    path = catalogue_path(lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return po


_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def placeholders(text: str) -> list[str]:
    try:
        return sorted(f for _, f, _, _ in string.Formatter().parse(text) if f is not None)
    except ValueError:
        return ["<unbalanced braces>"]


def entry_problems(msgid: str, msgstr: str, template: bool) -> list[str]:
    """What is wrong with one translation: a template's placeholders and every code span of the
    English must be there, unchanged."""
    if not msgstr.strip():
        return ["not translated"]
    problems = []
    if template and placeholders(msgid) != placeholders(msgstr):
        problems.append(f"placeholders differ from the English: {placeholders(msgid)} vs {placeholders(msgstr)}")
    want = sorted(m.group(0) for m in _CODE_SPAN.finditer(msgid))
    got = sorted(m.group(0) for m in _CODE_SPAN.finditer(msgstr))
    if want != got:
        problems.append(f"code spans differ from the English: missing {[w for w in want if w not in got]}")
    return problems


@dataclass
class State:
    missing: list[str]
    obsolete: list[str]
    fuzzy: list[str]
    untranslated: list[str]
    problems: list[str]

    @property
    def complete(self) -> bool:
        return not (self.missing or self.obsolete or self.fuzzy or self.untranslated or self.problems)


def state(lang: str) -> State:
    want = library_messages()
    po = read_catalogue(lang)
    entries = [e for e in po] if po is not None else []
    have = {e.msgid for e in entries if not e.obsolete}
    live = [e for e in entries if not e.obsolete]
    return State(
        missing=[m for m in want if m not in have],
        obsolete=[e.msgid for e in entries if e.obsolete or e.msgid not in want],
        fuzzy=[e.msgid for e in live if "fuzzy" in e.flags],
        untranslated=[e.msgid for e in live if not e.msgstr and "fuzzy" not in e.flags],
        problems=[f"{e.msgid[:60]!r}: {p}" for e in live if e.msgstr
                  for p in entry_problems(e.msgid, e.msgstr, TEMPLATE_FLAG in e.flags)])
