"""Rules are objects: the code that reports a rule imports it by name from its family's module.

A misspelt rule then fails when the module is imported (ImportError), not when a report
reads its severity. These tests read the package's source (AST): no emit site passes a rule
id as a string literal, and every rule of the catalogue is reported somewhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dcpdissect
from dcpdissect.analysis.rules import FAMILIES, RULES, Rule
from dcpdissect.analysis.rules import model
from dcpdissect.protocol import DCP_OPCODES

PACKAGE = Path(dcpdissect.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE.parent)): ast.parse(p.read_text(), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _emitters() -> dict[str, set[int]]:
    """Callable name -> positions of its rule-id argument: ``Finding`` (its ``rule``) and
    every function of the package with a parameter ``rid`` (as called: without self)."""
    out: dict[str, set[int]] = {"Finding": {0}}
    for tree in MODULES.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                if "rid" in names:
                    at = names.index("rid") - (names[:1] in (["self"], ["cls"]))
                    out.setdefault(node.name, set()).add(at)
    return out


def _literals(node) -> list[ast.Constant]:
    """String constants that ``node`` evaluates to (directly or as a branch)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [c for v in node.values for c in _literals(v)]
    return []


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _literal_rule_ids(tree: ast.Module, emitters: dict[str, set[int]]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee(node)
            args = []
            if name in emitters:
                args = [node.args[i] for i in emitters[name] if i < len(node.args)]
                args += [k.value for k in node.keywords if k.arg in ("rid", "rule")]
            elif name == "add" and node.args and isinstance(node.args[0], ast.Tuple):
                args = node.args[0].elts[:1]    # check_message's (rule id, text, fields)
            found += [(c.lineno, c.value) for a in args for c in _literals(a)]
        elif isinstance(node, ast.Assign):          # rid = "..." / rid, text = "...", ...
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts))
                for t, v in pairs:
                    if isinstance(t, ast.Name) and t.id == "rid":
                        found += [(c.lineno, c.value) for c in _literals(v)]
    return found


def test_no_emit_site_names_a_rule_by_a_string():
    emitters = _emitters()
    assert {"Finding", "finding_for", "report_on_stream"} <= set(emitters)
    found = [f"{path}:{line}: {value!r}" for path, tree in MODULES.items()
             for line, value in _literal_rule_ids(tree, emitters)]
    assert found == [], ("report a rule through its object, imported by name from "
                         "dcpdissect/analysis/rules/ (e.g. DATA_BEFORE_MARKER.id):\n"
                         + "\n".join(found))


def test_the_scan_finds_the_old_style():
    """The scan above, fed the styles it forbids (and a misspelt id among them)."""
    old = ast.parse(
        'out.append(finding_for("data-befor-marker", text, pdu, msg))\n'
        'report_on_stream(st, out, "oso-unpaired" if a else "oso-contains-marker", t, p, m)\n'
        'self._report(rec, out, "flow-control-undecided", text, pdu, msg, {})\n'
        'f = Finding(rule="capture-gap", message="", frame=None)\n'
        'add(("key-presence", text, {}))\n'
        'rid, text = "snapshot-start-overlap", "..."\n')
    assert [value for _, value in sorted(_literal_rule_ids(old, _emitters()))] == [
        "data-befor-marker", "oso-contains-marker", "oso-unpaired", "flow-control-undecided",
        "capture-gap", "key-presence", "snapshot-start-overlap"]


def _table_rules() -> set[str]:
    """Rules the protocol tables declare (a Check or a rejected layout): check_message
    reports them from the table data (``check.rule``, ``lay.rule``)."""
    out = set()
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            out |= {c.rule for c in shape.checks}
            out |= {lay.rule for lay in shape.extras + shape.values if lay.rule}
    return out


def _constants() -> dict[str, tuple[str, str]]:
    """Rule id -> (module, name) of the module-level name each family gives it."""
    out = {}
    for path, tree in MODULES.items():
        if not path.startswith("dcpdissect/analysis/rules/"):
            continue
        module = path[:-3].replace("/", ".")
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.value.args and isinstance(node.value.args[0], ast.Constant)):
                rid = node.value.args[0].value
                if rid in RULES:
                    out[rid] = (module, node.targets[0].id)
    return out


def _reported(tree: ast.Module) -> set[tuple[str, str]]:
    """(family module suffix, name) of each rule whose ``NAME.id`` the module reads, the
    name imported from that family's module (or "" for a name the module defines)."""
    imported = {a.name: n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and ".rules." in f".{n.module}"
                for a in n.names if a.asname is None}
    return {(imported.get(n.value.id, ""), n.value.id) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "id" and isinstance(n.value, ast.Name)}


def test_every_rule_of_the_catalogue_is_reported_somewhere():
    table, constants = _table_rules(), _constants()
    assert set(RULES) == table | set(constants), "a rule is neither a table rule nor a name"
    reported = {path: _reported(tree) for path, tree in MODULES.items()}
    missing = []
    for rid, (module, name) in sorted(constants.items()):
        own, family = module.replace(".", "/") + ".py", module.rsplit(".", 1)[1]
        if not any((family, name) in got or path == own and ("", name) in got
                   for path, got in reported.items()):
            missing.append(f"{rid} ({module}.{name})")
    assert missing == [], "rules no code reports:\n" + "\n".join(missing)


def test_a_rule_knows_its_family():
    from dcpdissect.analysis.rules.flow import FLOW_CONTROL_WINDOW_EXCEEDED
    from dcpdissect.analysis.rules.stream import DATA_BEFORE_MARKER
    assert (DATA_BEFORE_MARKER.family, FLOW_CONTROL_WINDOW_EXCEEDED.family) == ("stream", "flow")
    assert RULES["data-before-marker"] is DATA_BEFORE_MARKER
    for family, rules in FAMILIES.items():
        assert rules and {r.family for r in rules} == {family}


def test_a_misspelt_rule_fails_at_import():
    with pytest.raises(ImportError, match="DATA_BEFORE_MAKER"):
        exec("from dcpdissect.analysis.rules.stream import DATA_BEFORE_MAKER", {})


def test_a_rule_left_out_of_its_family_list_is_refused():
    from dcpdissect.analysis import rules
    stray = model.family("flow")("flow-stray", model.INFO, "t", "r", "s")
    module = rules.flow
    module.STRAY = stray
    try:
        with pytest.raises(ValueError, match=r"flow-stray \(dcpdissect.analysis.rules.flow.STRAY\)"):
            rules._collect()
    finally:
        del module.STRAY
    assert isinstance(rules._collect()["flow-control-undecided"], Rule)
